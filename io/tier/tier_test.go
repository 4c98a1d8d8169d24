package tier

import (
	"slices"
	"testing"
)

// fill takes every free slot and keeps it as a new entry (probation),
// returning them in the order they were taken.
func fill(t *testing.T, p *Policy) []int32 {
	t.Helper()
	var got []int32
	for {
		i, ok := p.Take()
		if !ok {
			return got
		}
		p.Keep(i, false)
		got = append(got, i)
	}
}

// TestTakeFromZero: a new policy hands out slots 0..n-1, then none; a
// released slot is free again and out of every list.
func TestTakeFromZero(t *testing.T) {
	p := New(4, true)
	if got := fill(t, p); !slices.Equal(got, []int32{0, 1, 2, 3}) {
		t.Fatalf("took %v", got)
	}
	if p.Free() != 0 || p.Len(Probation) != 4 {
		t.Fatalf("free %d, probation %d", p.Free(), p.Len(Probation))
	}
	p.Release(2)
	if p.Free() != 1 || p.In(2) != None || p.Len(Probation) != 3 {
		t.Fatalf("after release: free %d, slot 2 in %d, probation %d", p.Free(), p.In(2), p.Len(Probation))
	}
	if i, ok := p.Take(); !ok || i != 2 {
		t.Fatalf("take after release: %d %v", i, ok)
	}
}

// TestVictimOrder: LRU evicts the least recently kept slot; a pinned slot
// is never a victim; with every slot pinned there is none.
func TestVictimOrder(t *testing.T) {
	p := New(3, false)
	fill(t, p) // probation: 2 1 0
	p.Pin(0)
	p.Keep(0, true) // LRU: a hit goes to probation's front too: 0 2 1
	if p.Len(Protected) != 0 {
		t.Fatalf("LRU protected %d slots", p.Len(Protected))
	}
	p.Pin(1) // in use
	if v := p.Victim(); v != 2 {
		t.Fatalf("victim %d, want 2", v)
	}
	if v := p.Victim(); v != 0 {
		t.Fatalf("victim %d, want 0", v)
	}
	if v := p.Victim(); v != -1 {
		t.Fatalf("victim %d with every slot taken, want -1", v)
	}
}

// TestSLRUDemotion: hits go to protected, which holds 80% of the slots;
// past that its least recent slot goes back to probation's front, and
// victims come from probation's cold end first, then protected's.
func TestSLRUDemotion(t *testing.T) {
	p := New(5, true) // protected holds 4
	fill(t, p)        // probation: 4 3 2 1 0
	for i := range int32(5) {
		p.Pin(i)
		p.Keep(i, true)
	}
	// protected: 4 3 2 1, slot 0 demoted to probation
	if p.Len(Protected) != 4 || p.In(0) != Probation {
		t.Fatalf("protected %d, slot 0 in %d", p.Len(Protected), p.In(0))
	}
	want := []int32{0, 1, 2, 3, 4}
	for _, w := range want {
		if v := p.Victim(); v != w {
			t.Fatalf("victim %d, want %d", v, w)
		}
	}
	p.Enter(3)
	if p.In(3) != Probation || p.Len(Probation) != 1 {
		t.Fatalf("entered slot 3 in %d", p.In(3))
	}
}

// TestNoAllocs: the per-use calls allocate nothing.
func TestNoAllocs(t *testing.T) {
	p := New(8, true)
	fill(t, p)
	n := testing.AllocsPerRun(100, func() {
		v := p.Victim()
		p.Keep(v, false)
		p.Pin(v)
		p.Keep(v, true)
		p.Release(v)
		i, _ := p.Take()
		p.Keep(i, false)
	})
	if n != 0 {
		t.Errorf("%v allocations per use", n)
	}
}

// BenchmarkPolicy: one miss (the coldest slot evicted, filled, kept) and
// one hit (pinned, kept: promoted) on 512 full SLRU slots.
func BenchmarkPolicy(b *testing.B) {
	p := New(512, true)
	for {
		i, ok := p.Take()
		if !ok {
			break
		}
		p.Keep(i, false)
	}
	for b.Loop() {
		v := p.Victim()
		p.Keep(v, false)
		p.Pin(v)
		p.Keep(v, true)
	}
}
