package model_test

import (
	"math/rand/v2"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/model"
)

// TestPagedKVCache: the same cells written through a paged cache (blocks in
// shuffled order, one block shared by two sequences) and a contiguous one
// read back equal, give the same attention, and Run/KRows hand out only
// consecutive rows.
func TestPagedKVCache(t *testing.T) {
	h := &model.Hyper{NLayer: 2, NHead: 4, NHeadKV: 2, HeadDimK: 8, HeadDimV: 8}
	const bs, nCtx, nSeq = 4, 24, 2
	flat := model.NewKVCache(h, nCtx, nSeq)
	paged, err := model.NewPagedKVCache(h, bs, 16, nSeq, nCtx)
	if err != nil {
		t.Fatal(err)
	}
	// seq 0: blocks 9 10 11 3 4 5; seq 1 shares block 9, then 0 1 2 6 7.
	paged.Tables[0] = []int32{9, 10, 11, 3, 4, 5}
	paged.Tables[1] = []int32{9, 0, 1, 2, 6, 7}
	rng := rand.New(rand.NewPCG(1, 2))
	for l := range h.NLayer {
		for s := range nSeq {
			for p := range nCtx {
				if s == 1 && p < bs { // the shared block holds sequence 0's rows
					copy(flat.KRow(l, s, p), flat.KRow(l, 0, p))
					copy(flat.VRow(l, s, p), flat.VRow(l, 0, p))
					continue
				}
				for i := range flat.KRow(l, s, p) {
					flat.KRow(l, s, p)[i] = rng.Float32()*2 - 1
					flat.VRow(l, s, p)[i] = rng.Float32()*2 - 1
				}
				copy(paged.KRow(l, s, p), flat.KRow(l, s, p))
				copy(paged.VRow(l, s, p), flat.VRow(l, s, p))
			}
		}
	}
	for l := range h.NLayer {
		for s := range nSeq {
			for p := range nCtx {
				for i, v := range flat.KRow(l, s, p) {
					if paged.KRow(l, s, p)[i] != v || paged.VRow(l, s, p)[i] != flat.VRow(l, s, p)[i] {
						t.Fatalf("layer %d seq %d pos %d: paged and contiguous differ", l, s, p)
					}
				}
			}
		}
	}
	// Runs: seq 0 is blocks 9-11 (12 rows) then 3-5.
	for _, c := range []struct{ seq, pos, want int }{{0, 0, 12}, {0, 5, 7}, {0, 12, 12}, {1, 0, 4}, {1, 4, 12}, {1, 17, 7}} {
		if got := paged.Run(c.seq, c.pos); got != c.want {
			t.Errorf("Run(%d, %d) = %d, want %d", c.seq, c.pos, got, c.want)
		}
		rows := paged.KRows(1, c.seq, c.pos, c.want)
		for j := range c.want {
			if p := c.pos + j; p < nCtx && rows[j*paged.KDim] != flat.KRow(1, c.seq, p)[0] {
				t.Errorf("KRows(seq %d, pos %d) row %d is not position %d", c.seq, c.pos, j, p)
			}
		}
	}
	// Attention over both layouts.
	ref := cpu.NewRef()
	seq, pos := []int32{0, 1, 1}, []int32{23, 3, 20}
	q := make([]float32, len(seq)*h.NHead*h.HeadDimK)
	for i := range q {
		q[i] = rng.Float32()*2 - 1
	}
	a := make([]float32, len(seq)*h.NHead*h.HeadDimV)
	b := make([]float32, len(a))
	ref.Attention(a, q, flat, 1, seq, pos, h, 0.35)
	ref.Attention(b, q, paged, 1, seq, pos, h, 0.35)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("attention differs at %d: %v vs %v", i, a[i], b[i])
		}
	}
	// CopyRows copies a block prefix in every layer.
	paged.CopyRows(15, 10, 3)
	for l := range h.NLayer {
		for r := range 3 {
			if paged.K[l][(15*bs+r)*paged.KDim] != paged.K[l][(10*bs+r)*paged.KDim] || paged.V[l][(15*bs+r)*paged.VDim+1] != paged.V[l][(10*bs+r)*paged.VDim+1] {
				t.Errorf("CopyRows: layer %d row %d", l, r)
			}
		}
	}
}

// TestPagedKVNeedsBackend: a backend that does not declare PagedKV gets no
// context on a paged cache; Decode rejects positions without a block.
func TestPagedKVNeedsBackend(t *testing.T) {
	h := &model.Hyper{NLayer: 1, NHead: 2, NHeadKV: 2, HeadDimK: 4, HeadDimV: 4, NEmbd: 8, NVocab: 4}
	m := &model.Model{Hyper: *h}
	kv, err := model.NewPagedKVCache(h, 4, 4, 1, 16)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.NewContextKV(contiguousOnly{cpu.NewRef()}, kv, 4); err == nil {
		t.Error("a contiguous-only backend accepted a paged cache")
	}
	c, err := m.NewContextKV(cpu.NewRef(), kv, 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Decode(&model.Batch{Tokens: []int32{1}, Pos: []int32{0}, Seq: []int32{0}}); err == nil {
		t.Error("Decode ran a position without a KV block")
	}
	if _, err := model.NewPagedKVCache(h, 6, 4, 1, 16); err == nil {
		t.Error("block size 6 accepted")
	}
	if _, err := model.NewBlockKVCache(h, 16, 24, 1); err == nil {
		t.Error("block size 16 accepted for a context of 24")
	}
}

// contiguousOnly hides Ref's PagedKV.
type contiguousOnly struct{ model.Ops }
