package vk

import (
	"math/rand/v2"
	"testing"
)

func TestSubAllocAlignAndCoalesce(t *testing.T) {
	a := newSubAlloc(1024)
	o1, h1, ok := a.alloc(10, 1)
	if !ok || o1 != 0 || h1 != 10 {
		t.Fatalf("first alloc = %d,%d,%v", o1, h1, ok)
	}
	o2, h2, ok := a.alloc(100, 256)
	if !ok || o2 != 256 || h2 != 246+100 {
		t.Fatalf("aligned alloc = %d,%d,%v; want 256,346,true", o2, h2, ok)
	}
	if _, _, ok := a.alloc(1024, 1); ok {
		t.Fatal("alloc larger than the free space succeeded")
	}
	a.release(o1, h1)
	a.release(o2+100-h2, h2)
	if !a.empty() || len(a.free) != 1 || a.free[0] != (span{0, 1024}) {
		t.Fatalf("after releasing everything: used %d free %v", a.used, a.free)
	}
}

// TestSubAllocRandom allocates and frees at random and checks that live
// ranges never overlap, stay aligned and in bounds, and that everything
// coalesces back into one range.
func TestSubAllocRandom(t *testing.T) {
	const size = 1 << 16
	a := newSubAlloc(size)
	type live struct{ off, size, start, held uint64 }
	var ls []live
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		if len(ls) > 0 && rng.IntN(3) == 0 {
			i := rng.IntN(len(ls))
			a.release(ls[i].start, ls[i].held)
			ls = append(ls[:i], ls[i+1:]...)
			continue
		}
		n := uint64(1 + rng.IntN(3000))
		align := uint64(1) << rng.IntN(9)
		off, held, ok := a.alloc(n, align)
		if !ok {
			continue
		}
		if off%align != 0 || off+n > size || held < n {
			t.Fatalf("alloc(%d,%d) = %d held %d", n, align, off, held)
		}
		for _, l := range ls {
			if off < l.off+l.size && l.off < off+n {
				t.Fatalf("[%d,%d) overlaps live [%d,%d)", off, off+n, l.off, l.off+l.size)
			}
		}
		ls = append(ls, live{off, n, off + n - held, held})
	}
	for _, l := range ls {
		a.release(l.start, l.held)
	}
	if !a.empty() || len(a.free) != 1 || a.free[0] != (span{0, size}) {
		t.Fatalf("after releasing everything: used %d free %v", a.used, a.free)
	}
}
