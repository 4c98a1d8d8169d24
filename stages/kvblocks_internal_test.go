package stages

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/flowinfer/flowinfer/model"
)

func testBlocks(t *testing.T, paged bool, nBlocks, nSeq int) *kvBlocks {
	t.Helper()
	h := &model.Hyper{NLayer: 1, NHead: 1, NHeadKV: 1, HeadDimK: 2, HeadDimV: 2}
	var kv *model.KVCache
	var err error
	if paged {
		kv, err = model.NewPagedKVCache(h, model.KVTypes{}, 4, nBlocks, nSeq, 64)
	} else {
		kv, err = model.NewBlockKVCache(h, model.KVTypes{}, 4, nBlocks*4/nSeq, nSeq)
	}
	if err != nil {
		t.Fatal(err)
	}
	return newKVBlocks(kv, paged, nSeq)
}

// fill runs q's tokens "through the model": allocate, mark fed, publish.
func fill(t *testing.T, p *kvBlocks, q *seq, slot int) int {
	t.Helper()
	q.slot = slot
	m := p.match(q.toks)
	q.fed = p.attach(q, m, len(q.toks)-1)
	cached := q.fed
	if p.grow(q, len(q.toks)) != len(q.toks) {
		t.Fatalf("no room for %d tokens", len(q.toks))
	}
	// Write a recognisable value into each new row (position + token).
	for pos := q.fed; pos < len(q.toks); pos++ {
		p.kv.SetK(0, slot, pos, []float32{math.Float32frombits(uint32(q.toks[pos])), 0})
	}
	q.fed = len(q.toks)
	p.publish(q)
	return cached
}

func toks(ids ...int32) []int32 { return ids }

// TestKVBlocks: sharing by hash chain, partial-block copies, the
// last-token rule, collisions, LRU eviction and release accounting.
func TestKVBlocks(t *testing.T) {
	for _, paged := range []bool{true, false} {
		name := map[bool]string{true: "paged", false: "fixed"}[paged]
		t.Run(name, func(t *testing.T) {
			p := testBlocks(t, paged, 8, 2)
			a := &seq{toks: toks(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)}
			if c := fill(t, p, a, 0); c != 0 {
				t.Fatalf("cold start reused %d", c)
			}
			// While a runs, its full blocks are shared, its partial last
			// block is not.
			b := &seq{toks: toks(1, 2, 3, 4, 5, 6, 7, 8, 9, 77, 78)}
			if c := fill(t, p, b, 1); c != 8 {
				t.Errorf("shared prefix while running: reused %d, want 8", c)
			}
			if paged && p.kv.Tables[1][0] != p.kv.Tables[0][0] {
				t.Errorf("paged: full blocks not shared: tables %v %v", p.kv.Tables[0], p.kv.Tables[1])
			}
			p.release(b)
			want := make([]uint32, 9)
			for pos := range want {
				want[pos] = binary.LittleEndian.Uint32(p.kv.KHeadRow(make([]byte, 8), 0, 0, pos, 0))
			}
			aBlocks := append([]int32(nil), a.blocks...)
			p.release(a)
			// Once a is done, its partial block counts too: 2 blocks + 1 row.
			b = &seq{toks: toks(1, 2, 3, 4, 5, 6, 7, 8, 9, 55, 56)}
			if c := fill(t, p, b, 1); c != 9 {
				t.Errorf("shared prefix: reused %d, want 9", c)
			}
			for pos := range want { // the reused rows hold a's values
				if got := binary.LittleEndian.Uint32(p.kv.KHeadRow(make([]byte, 8), 0, 1, pos, 0)); got != want[pos] {
					t.Errorf("pos %d: reused row %v, want %v", pos, got, want[pos])
				}
			}
			if paged && (p.kv.Tables[1][1] != aBlocks[1] || p.kv.Tables[1][2] == aBlocks[2]) {
				t.Errorf("paged: full blocks shared, partial one copied: %v and %v", aBlocks, p.kv.Tables[1])
			}
			p.release(b)
			if p.used != 0 {
				t.Errorf("%d blocks held after release", p.used)
			}
			// A prompt equal to a cached one recomputes its last token.
			c := &seq{toks: toks(1, 2, 3, 4, 5, 6, 7, 8)}
			if got := fill(t, p, c, 0); got != 7 {
				t.Errorf("identical prompt: reused %d, want 7", got)
			}
			p.release(c)
			// A forged index entry (a hash collision) is not trusted.
			k := chainHash(hashSeed, toks(9, 9, 9, 9))
			p.byKey[k] = p.byKey[chainHash(hashSeed, toks(1, 2, 3, 4))]
			if m := p.match(toks(9, 9, 9, 9, 9)); len(m.full) != 0 {
				t.Errorf("matched a block whose tokens differ")
			}
			delete(p.byKey, k)
		})
	}
}

// TestKVBlocksEviction: with every block in use, the least recently freed
// content goes first, and held blocks never.
func TestKVBlocksEviction(t *testing.T) {
	p := testBlocks(t, true, 4, 2)
	old := &seq{toks: toks(1, 2, 3, 4, 5)} // 2 blocks
	fill(t, p, old, 0)
	p.release(old)
	recent := &seq{toks: toks(6, 7, 8, 9, 10)} // 2 blocks
	fill(t, p, recent, 0)
	p.release(recent)
	if p.available() != 4 || p.cachedBlocks() != 4 {
		t.Fatalf("available %d, cached %d", p.available(), p.cachedBlocks())
	}
	// Two fresh blocks evict old's two.
	n := &seq{toks: toks(20, 21, 22, 23, 24, 25, 26, 27)}
	fill(t, p, n, 1)
	if m := p.match(toks(1, 2, 3, 4, 5)); m.tokens(4) != 0 {
		t.Errorf("old content survived: %d tokens", m.tokens(4))
	}
	if m := p.match(toks(6, 7, 8, 9, 10)); m.tokens(4) != 5 {
		t.Errorf("recent content evicted: %d tokens", m.tokens(4))
	}
	if p.available() != 2 || p.used != 2 {
		t.Errorf("available %d, used %d", p.available(), p.used)
	}
	// Nothing left to take: grow stops short, held blocks stay.
	x := &seq{toks: toks(30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41), slot: 0}
	if got := p.grow(x, 12); got != 8 {
		t.Errorf("grow covered %d positions, want 8", got)
	}
	if p.used != 4 || p.available() != 0 {
		t.Errorf("used %d available %d", p.used, p.available())
	}
}

// TestKVBlocksContiguity: sequences growing in turn (as decode steps do)
// still get consecutive blocks, so attention reads long runs of rows.
func TestKVBlocksContiguity(t *testing.T) {
	p := testBlocks(t, true, 64, 4)
	seqs := make([]*seq, 4)
	for i := range seqs {
		seqs[i] = &seq{slot: i}
	}
	for step := 1; step <= 12; step++ {
		for _, q := range seqs {
			if got := p.grow(q, step*p.size); got != step*p.size {
				t.Fatalf("grow: %d", got)
			}
		}
	}
	for i, q := range seqs {
		runs := 1
		for j := 1; j < len(q.blocks); j++ {
			if q.blocks[j] != q.blocks[j-1]+1 {
				runs++
			}
		}
		if runs > 2 {
			t.Errorf("sequence %d: blocks %v in %d runs", i, q.blocks, runs)
		}
		if n := p.kv.Run(i, 0); n < 6*p.size {
			t.Errorf("sequence %d: first run of %d rows", i, n)
		}
	}
}
