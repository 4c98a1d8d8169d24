package cpu_test

// attn_window_test.go: attention with a sliding window and sinks
// (model.Attn.Window, Sinks): Ref against a float64 computation written out
// here, with llama.cpp's semantics (the row at p sees p-W < j ≤ p, as
// llama_hparams::is_masked_swa masks LLAMA_SWA_TYPE_STANDARD; a sink joins
// the softmax's max and sum with no value, as ggml_soft_max_ext and
// ggml_compute_forward_flash_attn_ext do), and every path of the Backend
// (prefill tiles, lone rows, every KV type, --kv-recent, a paged cache)
// against Ref.

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/model"
)

// bruteAttention is attention in float64 on the values the cache holds
// (GetK, GetV), with the window and sinks of a, written from the
// definition: row t sees positions j with pos-W < j ≤ pos.
func bruteAttention(kv *model.KVCache, h *model.Hyper, q []float32, seq, pos []int32, a model.Attn) []float64 {
	dk, dv, group := h.HeadDimK, h.HeadDimV, h.NHead/h.NHeadKV
	out := make([]float64, len(seq)*h.NHead*dv)
	krow, vrow := make([]float32, kv.KDim), make([]float32, kv.VDim)
	for t := range seq {
		p := int(pos[t])
		var js []int
		for j := 0; j <= p; j++ {
			if a.Window <= 0 || p-j < a.Window {
				js = append(js, j)
			}
		}
		for hd := range h.NHead {
			kh := hd / group
			sc := make([]float64, len(js))
			mx := math.Inf(-1)
			for i, j := range js {
				kv.GetK(0, int(seq[t]), j, krow, nil)
				var d float64
				for e := range dk {
					d += float64(krow[kh*dk+e]) * float64(q[(t*h.NHead+hd)*dk+e])
				}
				sc[i] = d * float64(a.Scale)
				mx = max(mx, sc[i])
			}
			if a.Sinks != nil {
				mx = max(mx, float64(a.Sinks[hd]))
			}
			var sum float64
			for i := range sc {
				sc[i] = math.Exp(sc[i] - mx)
				sum += sc[i]
			}
			if a.Sinks != nil {
				sum += math.Exp(float64(a.Sinks[hd]) - mx)
			}
			o := out[(t*h.NHead+hd)*dv : (t*h.NHead+hd+1)*dv]
			for i, j := range js {
				kv.GetV(0, int(seq[t]), j, vrow, nil)
				for e := range dv {
					o[e] += sc[i] / sum * float64(vrow[kh*dv+e])
				}
			}
		}
	}
	return out
}

// nmse64 is nmse against a float64 reference.
func nmse64(got []float32, want []float64) float64 {
	var num, den float64
	for i := range want {
		if math.IsNaN(float64(got[i])) || math.IsInf(float64(got[i]), 0) {
			return math.Inf(1)
		}
		d := float64(got[i]) - want[i]
		num += d * d
		den += want[i] * want[i]
	}
	if den == 0 {
		return num
	}
	return num / den
}

// windowRows is a batch of rows of two sequences at different positions:
// sequence 0 at 0..4 and 97, sequence 1 at [p0, p1) (a prefill chunk).
func windowRows(p0, p1 int) (seq, pos []int32) {
	for _, p := range []int32{0, 1, 2, 3, 4} {
		seq, pos = append(seq, 0), append(pos, p)
	}
	for p := p0; p < p1; p++ {
		seq, pos = append(seq, 1), append(pos, int32(p))
	}
	return seq, pos
}

// randomSinks returns one sink logit per head, of about ±3·scale.
func randomSinks(n int, seed uint64) []float32 {
	s := randomF32(n, seed)
	for i := range s {
		s[i] *= 3
	}
	return s
}

// TestRefAttentionWindowSinks holds Ref to the float64 definition (within
// flashTol: a sink far above the scores leaves float32 exponents of
// arguments near -40, whose rounding shows at ~1e-12) for
// windows smaller than, equal to and larger than the context, on a batch
// of two sequences at different positions, with and without sinks
// (moderate, -Inf, huge and very negative), and checks the limits exactly:
// a window reaching position 0 and a -Inf sink change nothing (bit for
// bit), a window of 1 returns the row's own V, a huge sink gives 0.
func TestRefAttentionWindowSinks(t *testing.T) {
	h := model.Hyper{NHead: 6, NHeadKV: 2, HeadDimK: 16, HeadDimV: 8, NLayer: 1}
	const nCtx = 200
	kv := model.NewKVCache(&h, nCtx, 2)
	for s := range 2 {
		for p := range nCtx {
			kv.SetK(0, s, p, randomF32(kv.KDim, uint64(1000*s+p)))
			kv.SetV(0, s, p, randomF32(kv.VDim, uint64(1000*s+p+500000)))
		}
	}
	seq, pos := windowRows(120, nCtx)
	n := len(seq)
	q := randomF32(n*h.NHead*h.HeadDimK, 17)
	scale := float32(0.3)
	ninf := float32(math.Inf(-1))
	fill := func(v float32) []float32 {
		s := make([]float32, h.NHead)
		for i := range s {
			s[i] = v
		}
		return s
	}
	run := func(a model.Attn) []float32 {
		out := make([]float32, n*h.NHead*h.HeadDimV)
		cpu.NewRef().Attention(out, q, kv, 0, seq, pos, &h, a)
		return out
	}
	plain := run(model.Attn{Scale: scale})
	for _, w := range []int{0, 1, 2, 7, 64, 100, nCtx - 1, nCtx, nCtx + 1, 5000} {
		for si, sinks := range [][]float32{nil, randomSinks(h.NHead, 3), fill(ninf), fill(-1e4), fill(40)} {
			a := model.Attn{Scale: scale, Window: w, Sinks: sinks}
			got := run(a)
			if e := nmse64(got, bruteAttention(kv, &h, q, seq, pos, a)); !(e <= flashTol) {
				t.Errorf("window %d, sinks #%d: NMSE %.3g against float64 > %g", w, si, e, flashTol)
			}
		}
		// -Inf sinks are no sinks, to the bit
		a := model.Attn{Scale: scale, Window: w}
		without := run(a)
		a.Sinks = fill(ninf)
		if !slices.Equal(run(a), without) {
			t.Errorf("window %d: -Inf sinks change the result", w)
		}
		// a window reaching position 0 for every row is no window
		if w > nCtx-1 && !slices.Equal(without, plain) {
			t.Errorf("window %d ≥ the context: differs from full attention", w)
		}
	}
	// a window of 1: each row's own V
	got := run(model.Attn{Scale: scale, Window: 1})
	vrow := make([]float32, kv.VDim)
	for t0 := range seq {
		kv.GetV(0, int(seq[t0]), int(pos[t0]), vrow, nil)
		for hd := range h.NHead {
			kh := hd / (h.NHead / h.NHeadKV)
			o := got[(t0*h.NHead+hd)*h.HeadDimV:][:h.HeadDimV]
			if !slices.Equal(o, vrow[kh*h.HeadDimV:][:h.HeadDimV]) {
				t.Fatalf("window 1, row %d head %d: %v, want its own V %v", t0, hd, o, vrow[kh*h.HeadDimV:][:h.HeadDimV])
			}
		}
	}
	// a huge sink takes all the weight: the output is 0
	for _, w := range []int{0, 10} {
		for i, v := range run(model.Attn{Scale: scale, Window: w, Sinks: fill(1e4)}) {
			if v != 0 {
				t.Fatalf("window %d, sink 1e4: output %d is %g, want 0", w, i, v)
			}
		}
	}
}

// fillWindowKV writes random K and V rows for two sequences of nCtx
// positions (and their --kv-recent copies).
func fillWindowKV(t *testing.T, kv *model.KVCache, nCtx int) {
	t.Helper()
	var ss, ps []int32
	for s := range 2 {
		for p := range nCtx {
			ss, ps = append(ss, int32(s)), append(ps, int32(p))
		}
	}
	if kv.HasRecent() {
		kv.ReserveRecent(2 * nCtx)
		if err := kv.PrepareRecent(ss, ps); err != nil {
			t.Fatal(err)
		}
	}
	for i := range ss {
		s, p := int(ss[i]), int(ps[i])
		k, v := randomF32(kv.KDim, uint64(1000*s+p)), randomF32(kv.VDim, uint64(1000*s+p+500000))
		kv.SetK(0, s, p, k)
		kv.SetV(0, s, p, v)
		kv.StoreRecent(0, ss[i:i+1], ps[i:i+1], k, v)
	}
}

// TestBackendAttentionWindow compares every path of Backend.Attention with
// Ref's under sliding windows (of one position, inside a tile, across tile
// and block edges, equal to and beyond the context) and sinks: a batch of
// two sequences at different positions (lone rows and a prefill chunk whose
// rows' windows start at different positions), then some of its rows alone
// (decode), on every ISA, for every KV type, --kv-recent and a paged cache,
// for aligned and odd head widths, with the tolerances of
// TestBackendAttention.
func TestBackendAttentionWindow(t *testing.T) {
	const nCtx = 300
	type kvCase struct {
		types model.KVTypes
		paged bool
	}
	cases := []kvCase{
		{types: model.KVTypes{K: model.KVF32, V: model.KVF32}},
		{types: model.KVTypes{K: model.KVF32, V: model.KVF32}, paged: true},
		{types: model.KVTypes{K: model.KVF16, V: model.KVF16}},
		{types: model.KVTypes{K: model.KVQ8_0, V: model.KVQ8_0}},
		{types: model.KVTypes{K: model.KVQ4_0, V: model.KVQ4_0}},
		{types: model.KVTypes{K: model.KVTQ4, V: model.KVTQ3}},
		{types: model.KVTypes{K: model.KVTQ4, V: model.KVTQ3, Recent: 64}},
		{types: model.KVTypes{K: model.KVQ8_0, V: model.KVQ4_0, Recent: 5}},
	}
	seq, pos := windowRows(171, nCtx)
	n := len(seq)
	// aligned heads, and odd ones (V narrower than a column block of 16;
	// 20 wide, which the SIMD tiles leave to Go) on float caches
	for _, h := range []model.Hyper{
		{NHead: 8, NHeadKV: 2, HeadDimK: 64, HeadDimV: 64, NLayer: 1},
		{NHead: 6, NHeadKV: 3, HeadDimK: 40, HeadDimV: 40, NLayer: 1},
		{NHead: 5, NHeadKV: 5, HeadDimK: 20, HeadDimV: 20, NLayer: 1},
	} {
		q := randomF32(n*h.NHead*h.HeadDimK, 17)
		scale := float32(0.125)
		for _, c := range cases {
			if h.HeadDimK%32 != 0 && c.types.K != model.KVF32 && c.types.K != model.KVF16 {
				continue // block and TurboQuant rows need whole blocks of 32
			}
			var kv *model.KVCache
			var err error
			if c.paged {
				kv, err = model.NewPagedKVCache(&h, c.types, 16, 2*nCtx/16+2, 2, nCtx)
				for s := range 2 {
					for i := range nCtx / 16 { // scattered pairs of blocks
						kv.Tables[s] = append(kv.Tables[s], int32(s*(nCtx/16+1)+(i/2*7)%9*2+i%2))
					}
					kv.Tables[s] = append(kv.Tables[s], int32(s*(nCtx/16+1)+18))
				}
			} else {
				kv, err = model.NewKVCacheOf(&h, c.types, nCtx, 2)
			}
			if err != nil {
				t.Fatal(err)
			}
			fillWindowKV(t, kv, nCtx)
			tol := max(kvTol[c.types.K], kvTol[c.types.V])
			for _, w := range []int{1, 5, 40, 96, 129, nCtx, 1000} {
				for _, sinks := range [][]float32{nil, randomSinks(h.NHead, uint64(w))} {
					a := model.Attn{Scale: scale, Window: w, Sinks: sinks}
					want := make([]float32, n*h.NHead*h.HeadDimV)
					cpu.NewRef().Attention(want, q, kv, 0, seq, pos, &h, a)
					for _, isa := range cpu.Available() {
						name := fmt.Sprintf("heads=%d/%d/dim=%d/%s/paged=%v/window=%d/sinks=%v/isa=%s", h.NHead, h.NHeadKV, h.HeadDimK, c.types, c.paged, w, sinks != nil, isa)
						for _, threads := range []int{1, 2} {
							be := cpu.NewBackend(threads, cpu.KernelsFor(isa))
							got, check := guarded(len(want))
							be.Attention(got, q, kv, 0, seq, pos, &h, a)
							check(t)
							if e := nmse(got, want); !(e <= tol) {
								t.Errorf("%s/threads=%d: batch NMSE %.3g > %.0g", name, threads, e, tol)
							}
							for _, r := range []int{2, 5, 40, n - 1} { // lone rows (decode)
								d := h.NHead * h.HeadDimV
								got1, check1 := guarded(d)
								be.Attention(got1, q[r*h.NHead*h.HeadDimK:], kv, 0, seq[r:r+1], pos[r:r+1], &h, a)
								check1(t)
								if e := nmse(got1, want[r*d:(r+1)*d]); !(e <= tol) {
									t.Errorf("%s/threads=%d: row at %d alone: NMSE %.3g > %.0g", name, threads, pos[r], e, tol)
								}
							}
							be.Close()
						}
					}
				}
			}
		}
	}
}
