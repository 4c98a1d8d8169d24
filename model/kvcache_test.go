package model_test

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/quant"
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
			var shared [2][bs][2][]float32 // [layer][pos]: sequence 0's K and V rows of the shared block
			for l := range h.NLayer {
				for s := range nSeq {
					for p := range nCtx {
						if s == 1 && p < bs { // the shared block holds sequence 0's rows
							flat.SetK(l, s, p, shared[l][p][0])
							flat.SetV(l, s, p, shared[l][p][1])
							continue
						}
						k, v := make([]float32, h.KDim()), make([]float32, h.VDim())
						for i := range k {
							k[i] = rng.Float32()*2 - 1
						}
						for i := range v {
							v[i] = rng.Float32()*2 - 1
						}
						if s == 0 && p < bs {
							shared[l][p] = [2][]float32{k, v}
						}
						flat.SetK(l, s, p, k)
						paged.SetK(l, s, p, k)
						flat.SetV(l, s, p, v)
						paged.SetV(l, s, p, v)
					}
				}
			}
			b1, b2 := make([]byte, paged.Layer(1).KHead), make([]byte, paged.Layer(1).KHead)
			for l := range h.NLayer {
				for s := range nSeq {
					for p := range nCtx {
						for kh := range h.NHeadKV {
							if !bytes.Equal(paged.KHeadRow(b1, l, s, p, kh), flat.KHeadRow(b2, l, s, p, kh)) || !bytes.Equal(paged.VHeadRows(l, kh, s, p, 1), flat.VHeadRows(l, kh, s, p, 1)) {
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
					lt := paged.Layer(1)
					tiles, r0 := paged.KHeadTiles(1, kh, c.seq, c.pos, c.want)
					ftiles, fr0 := flat.KHeadTiles(1, kh, c.seq, c.pos, nCtx-c.pos)
					if len(tiles) != (r0+c.want+15)/16*16*lt.KHead {
						t.Errorf("KHeadTiles(head %d, seq %d, pos %d): %d bytes for %d rows from row %d", kh, c.seq, c.pos, len(tiles), c.want, r0)
					}
					row := func(tiles []byte, r int) []byte {
						b := make([]byte, lt.KHead)
						quant.TileRow(b, tiles[r/16*16*lt.KHead:], r%16, lt.KUnit)
						return b
					}
					for j := range min(c.want, nCtx-c.pos) {
						p := c.pos + j
						want := flat.KHeadRow(b1, 1, c.seq, p, kh)
						if !bytes.Equal(row(tiles, r0+j), want) || !bytes.Equal(row(ftiles, fr0+j), want) {
							t.Errorf("KHeadTiles(head %d, seq %d, pos %d) row %d is not position %d", kh, c.seq, c.pos, j, p)
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
			ref.Attention(a, q, flat, 1, seq, pos, h, model.Attn{Scale: 0.35})
			ref.Attention(b, q, paged, 1, seq, pos, h, model.Attn{Scale: 0.35})
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
						same := bytes.Equal(paged.KHeadRow(b1, l, 0, r, kh), paged.KHeadRow(b2, l, 0, bs+r, kh)) && bytes.Equal(paged.VHeadRows(l, kh, 0, r, 1), paged.VHeadRows(l, kh, 0, bs+r, 1))
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

// TestKVTiles: K rows live in transposed tiles of quant.TileRows rows:
// every K type reads back (GetK) what SetK stored in a contiguous cache
// whose context is not a whole number of tiles (sequences must not share
// a tile), in a block-addressed one of blocks smaller than a tile, and
// after CopyRows of whole tiles (blocks of 16) or row by row (blocks of 4).
func TestKVTiles(t *testing.T) {
	h := &model.Hyper{NLayer: 2, NHead: 4, NHeadKV: 2, HeadDimK: 64, HeadDimV: 32}
	for kt := range model.KVTQ3 + 1 {
		types := model.KVTypes{K: kt, V: model.KVF32}
		t.Run(kt.String(), func(t *testing.T) {
			flat, err := model.NewKVCacheOf(h, types, 21, 3)
			if err != nil {
				t.Fatal(err)
			}
			blk, err := model.NewBlockKVCache(h, types, 4, 20, 3)
			if err != nil {
				t.Fatal(err)
			}
			p16, err := model.NewPagedKVCache(h, types, 16, 6, 1, 48)
			if err != nil {
				t.Fatal(err)
			}
			p16.Tables[0] = []int32{4, 1, 2}
			rng := rand.New(rand.NewPCG(3, 4))
			k := make([]float32, h.KDim())
			want, got, scratch := make([]float32, h.KDim()), make([]float32, h.KDim()), make([]float32, 512)
			type cell struct{ l, s, p int }
			stored := map[cell][]float32{}
			for _, c := range []*model.KVCache{flat, blk} {
				clear(stored)
				for l := range h.NLayer {
					for s := range 3 {
						for p := range 20 {
							for i := range k {
								k[i] = rng.Float32()*2 - 1
							}
							c.SetK(l, s, p, k)
							c.GetK(l, s, p, want, scratch)
							stored[cell{l, s, p}] = append([]float32(nil), want...)
						}
					}
				}
				for cl, w := range stored { // no later row overwrote an earlier one
					c.GetK(cl.l, cl.s, cl.p, got, scratch)
					if !slices.Equal(got, w) {
						t.Fatalf("layer %d seq %d pos %d: K changed after the other rows were stored", cl.l, cl.s, cl.p)
					}
				}
			}
			// CopyRows: blocks of 16 copy whole tiles
			for p := range 48 {
				for i := range k {
					k[i] = rng.Float32()*2 - 1
				}
				p16.SetK(1, 0, p, k)
			}
			p16.CopyRows(0, 1, 5) // block 1 holds positions 16..31
			b1, b2 := make([]byte, p16.Layer(1).KHead), make([]byte, p16.Layer(1).KHead)
			p16.Tables[0] = []int32{0, 1}
			for r := range 5 {
				for kh := range h.NHeadKV {
					if !bytes.Equal(p16.KHeadRow(b1, 1, 0, r, kh), p16.KHeadRow(b2, 1, 0, 16+r, kh)) {
						t.Errorf("CopyRows of whole tiles: row %d head %d not copied", r, kh)
					}
				}
			}
		})
	}
}
