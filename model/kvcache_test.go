package model_test

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/model"
)

// TestPagedKVCache: for every KV type, the same cells written through a
// paged cache (blocks in shuffled order, one block shared by two sequences)
// and a contiguous one hold the same bytes, give the same attention, and
// Run/KRows hand out only consecutive rows.
func TestPagedKVCache(t *testing.T) {
	h := &model.Hyper{NLayer: 2, NHead: 4, NHeadKV: 2, HeadDimK: 32, HeadDimV: 32}
	const bs, nCtx, nSeq = 4, 24, 2
	for kt := range model.KVTQ3 + 1 {
		types := model.KVTypes{K: kt, V: kt}
		t.Run(kt.String(), func(t *testing.T) {
			flat, err := model.NewKVCacheOf(h, types, nCtx, nSeq)
			if err != nil {
				t.Fatal(err)
			}
			paged, err := model.NewPagedKVCache(h, types, bs, 16, nSeq, nCtx)
			if err != nil {
				t.Fatal(err)
			}
			// seq 0: blocks 9 10 11 3 4 5; seq 1 shares block 9, then 0 1 2 6 7.
			paged.Tables[0] = []int32{9, 10, 11, 3, 4, 5}
			paged.Tables[1] = []int32{9, 0, 1, 2, 6, 7}
			rng := rand.New(rand.NewPCG(1, 2))
			row := make([]float32, h.KDim())
			for l := range h.NLayer {
				for s := range nSeq {
					for p := range nCtx {
						if s == 1 && p < bs { // the shared block holds sequence 0's rows
							for kh := range h.NHeadKV {
								copy(flat.KHeadRow(l, s, p, kh), flat.KHeadRow(l, 0, p, kh))
								copy(flat.VHeadRow(l, s, p, kh), flat.VHeadRow(l, 0, p, kh))
							}
							continue
						}
						for i := range row {
							row[i] = rng.Float32()*2 - 1
						}
						flat.SetK(l, s, p, row)
						paged.SetK(l, s, p, row)
						for i := range row {
							row[i] = rng.Float32()*2 - 1
						}
						flat.SetV(l, s, p, row)
						paged.SetV(l, s, p, row)
					}
				}
			}
			for l := range h.NLayer {
				for s := range nSeq {
					for p := range nCtx {
						for kh := range h.NHeadKV {
							if !bytes.Equal(paged.KHeadRow(l, s, p, kh), flat.KHeadRow(l, s, p, kh)) || !bytes.Equal(paged.VHeadRow(l, s, p, kh), flat.VHeadRow(l, s, p, kh)) {
								t.Fatalf("layer %d seq %d pos %d head %d: paged and contiguous differ", l, s, p, kh)
							}
						}
					}
				}
			}
			// Runs: seq 0 is blocks 9-11 (12 rows) then 3-5, all in one
			// layout block; a contiguous cache's run is the rest of the
			// sequence.
			for _, c := range []struct{ seq, pos, want int }{{0, 0, 12}, {0, 5, 7}, {0, 12, 12}, {1, 0, 4}, {1, 4, 12}, {1, 17, 7}} {
				if got := paged.Run(c.seq, c.pos); got != c.want {
					t.Errorf("Run(%d, %d) = %d, want %d", c.seq, c.pos, got, c.want)
				}
				if got := flat.Run(c.seq, c.pos); got != nCtx-c.pos {
					t.Errorf("contiguous Run(%d, %d) = %d, want %d", c.seq, c.pos, got, nCtx-c.pos)
				}
				for kh := range h.NHeadKV {
					rows := paged.KHeadRows(1, kh, c.seq, c.pos, c.want)
					frows := flat.KHeadRows(1, kh, c.seq, c.pos, nCtx-c.pos)
					for j := range min(c.want, nCtx-c.pos) {
						p := c.pos + j
						if !bytes.Equal(rows[j*paged.Layer(1).KHead:][:paged.Layer(1).KHead], flat.KHeadRow(1, c.seq, p, kh)) || !bytes.Equal(frows[j*flat.Layer(1).KHead:][:flat.Layer(1).KHead], flat.KHeadRow(1, c.seq, p, kh)) {
							t.Errorf("KHeadRows(head %d, seq %d, pos %d) row %d is not position %d", kh, c.seq, c.pos, j, p)
						}
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
			paged.Tables[0] = []int32{15, 10}
			for l := range h.NLayer {
				for r := range bs {
					for kh := range h.NHeadKV {
						same := bytes.Equal(paged.KHeadRow(l, 0, r, kh), paged.KHeadRow(l, 0, bs+r, kh)) && bytes.Equal(paged.VHeadRow(l, 0, r, kh), paged.VHeadRow(l, 0, bs+r, kh))
						if same != (r < 3) {
							t.Errorf("CopyRows: layer %d row %d head %d copied %v", l, r, kh, same)
						}
					}
				}
			}
		})
	}
}

// TestKVTypes: names parse as llama.cpp spells them, sizes per token are
// what each type promises (tq4 K + tq3 V at most a quarter of f16 for
// 128-value heads), and types that cannot store a model's heads are
// refused by name.
func TestKVTypes(t *testing.T) {
	for _, n := range []string{"f32", "F16", "bf16", "q8_0", "Q4_0", "tq4", "tq3"} {
		if _, err := model.ParseKVType(n); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	if _, err := model.ParseKVType("q4_1"); err == nil || !strings.Contains(err.Error(), "q4_1") {
		t.Errorf("q4_1: %v", err)
	}
	h := &model.Hyper{NLayer: 16, NHead: 32, NHeadKV: 8, HeadDimK: 128, HeadDimV: 128}
	per := func(k, v model.KVType) int {
		n, err := model.KVBytesPerToken(h, model.KVTypes{K: k, V: v})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	f16 := per(model.KVF16, model.KVF16)
	if f16 != 16*8*128*2*2 || per(model.KVF32, model.KVF32) != 2*f16 || per(model.KVQ8_0, model.KVQ8_0) != f16*34/64 {
		t.Errorf("bytes per token: f16 %d, f32 %d, q8_0 %d", f16, per(model.KVF32, model.KVF32), per(model.KVQ8_0, model.KVQ8_0))
	}
	if tq := per(model.KVTQ4, model.KVTQ3); float64(tq) > 0.25*float64(f16) {
		t.Errorf("tq4/tq3: %d bytes per token, over a quarter of f16's %d", tq, f16)
	} else {
		t.Logf("bytes per token: f16 %d, q8_0 %d, q4_0 %d, tq4/tq3 %d (%.3fx f16)", f16, per(model.KVQ8_0, model.KVQ8_0), per(model.KVQ4_0, model.KVQ4_0), tq, float64(tq)/float64(f16))
	}
	// Protect keeps f16 in the first and last layers of a quantized cache
	prot := model.KVTypes{K: model.KVTQ4, V: model.KVTQ3, Protect: 1}
	if got, tq := per(model.KVF16, model.KVF16)*2/16+per(model.KVTQ4, model.KVTQ3)*14/16, func() int {
		n, err := model.KVBytesPerToken(h, prot)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}(); got != tq {
		t.Errorf("protected tq4/tq3: %d bytes per token, want %d", tq, got)
	}
	for l, want := range map[int][2]model.KVType{0: {model.KVF16, model.KVF16}, 1: {model.KVTQ4, model.KVTQ3}, 14: {model.KVTQ4, model.KVTQ3}, 15: {model.KVF16, model.KVF16}} {
		if k, v := prot.ForLayer(l, 16); k != want[0] || v != want[1] {
			t.Errorf("layer %d: %s/%s, want %s/%s", l, k, v, want[0], want[1])
		}
	}
	if k, v := (model.KVTypes{K: model.KVBF16, V: model.KVQ8_0, Protect: 2}).ForLayer(0, 16); k != model.KVBF16 || v != model.KVF16 {
		t.Errorf("bf16/q8_0 protected layer 0: %s/%s", k, v)
	}
	kv, err := model.NewKVCacheOf(h, prot, 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	if kv.Layer(0).K != model.KVF16 || kv.TurboK(0, 0) != nil || kv.TurboK(1, 0) == nil || kv.Layer(1).KHead != 2+64 {
		t.Errorf("protected cache: layer 0 %+v, layer 1 %+v", kv.Layer(0), kv.Layer(1))
	}
	small := &model.Hyper{NLayer: 1, NHead: 8, NHeadKV: 4, HeadDimK: 8, HeadDimV: 8}
	if _, err := model.NewKVCacheOf(small, model.KVTypes{K: model.KVQ8_0, V: model.KVF16}, 16, 1); err == nil || !strings.Contains(err.Error(), "q8_0") {
		t.Errorf("q8_0 K on 8-value heads: %v", err)
	}
	// llama.cpp's rotation of block-quantized heads of a multiple of 64
	for _, c := range []struct {
		k, v       model.KVType
		dk, dv     int
		rotK, rotV int
	}{
		{model.KVQ8_0, model.KVQ4_0, 64, 64, 64, 64},
		{model.KVQ4_0, model.KVQ8_0, 128, 128, 128, 64},
		{model.KVQ8_0, model.KVQ8_0, 192, 96, 64, 0},
		{model.KVQ8_0, model.KVF16, 32, 32, 0, 0},
		{model.KVF16, model.KVBF16, 128, 128, 0, 0},
		{model.KVTQ4, model.KVTQ3, 128, 128, 0, 0},
	} {
		h := model.Hyper{NHead: 8, NHeadKV: 2, HeadDimK: c.dk, HeadDimV: c.dv, NLayer: 3}
		kv, err := model.NewKVCacheOf(&h, model.KVTypes{K: c.k, V: c.v, Protect: 1}, 8, 1)
		if err != nil {
			t.Fatal(err)
		}
		for l := range 3 {
			lt, rk, rv := kv.Layer(l), c.rotK, c.rotV
			if l != 1 { // --kv-protect 1: the first and last layers are f16
				rk, rv = 0, 0
			}
			if lt.RotK != rk || lt.RotV != rv {
				t.Errorf("%s/%s heads %d/%d layer %d: rotation %d/%d, want %d/%d", c.k, c.v, c.dk, c.dv, l, lt.RotK, lt.RotV, rk, rv)
			}
		}
	}
}

// TestPagedKVNeedsBackend: a backend that does not declare PagedKV gets no
// context on a paged cache; Decode rejects positions without a block.
func TestPagedKVNeedsBackend(t *testing.T) {
	h := &model.Hyper{NLayer: 1, NHead: 2, NHeadKV: 2, HeadDimK: 4, HeadDimV: 4, NEmbd: 8, NVocab: 4}
	m := &model.Model{Hyper: *h}
	kv, err := model.NewPagedKVCache(h, model.KVTypes{}, 4, 4, 1, 16)
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
	if _, err := model.NewPagedKVCache(h, model.KVTypes{}, 6, 4, 1, 16); err == nil {
		t.Error("block size 6 accepted")
	}
	if _, err := model.NewBlockKVCache(h, model.KVTypes{}, 16, 24, 1); err == nil {
		t.Error("block size 16 accepted for a context of 24")
	}
}

// contiguousOnly hides Ref's PagedKV.
type contiguousOnly struct{ model.Ops }
