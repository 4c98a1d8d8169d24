package cpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/quant"
)

func randomF32(n int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 7))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// randomWeights quantizes random rows to wt as llama-quantize would.
func randomWeights(wt quant.Type, rows, cols int) []byte {
	rb, err := quant.RowBytes(wt, cols)
	if err != nil {
		panic(err)
	}
	data := make([]byte, rows*rb)
	x := randomF32(rows*cols, uint64(wt)+99)
	for r := range rows {
		if err := quant.QuantizeRowRef(wt, x[r*cols:(r+1)*cols], data[r*rb:(r+1)*rb]); err != nil {
			panic(err)
		}
	}
	return data
}

// guarded returns a slice of n float32s inside a buffer whose guard values
// before and after check reports if touched.
func guarded(n int) (out []float32, check func(t *testing.T)) {
	const g = 16
	const sentinel = float32(-12345.5)
	buf := make([]float32, n+2*g)
	for i := range buf {
		buf[i] = sentinel
	}
	return buf[g : g+n], func(t *testing.T) {
		t.Helper()
		for i := range g {
			if buf[i] != sentinel || buf[g+n+i] != sentinel {
				t.Fatalf("guard value %d around the output was overwritten", i)
			}
		}
	}
}

// nmse is the normalized mean squared error Σ(a-b)²/Σb², with NaN/Inf in
// got reported as +Inf.
func nmse(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		if math.IsNaN(float64(got[i])) || math.IsInf(float64(got[i]), 0) {
			return math.Inf(1)
		}
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	if den == 0 {
		return num
	}
	return num / den
}

var testThreads = []int{1, 2, 3}

// TestBackendMatMul compares MatMul with Ref's over aligned and odd shapes
// (row counts that do not divide into the workers' blocks, one to many
// tokens) on every kernel path, with guard values around the output.
func TestBackendMatMul(t *testing.T) {
	types := []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q8_0, quant.Q4_0, quant.Q5_1, quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.IQ4_NL, quant.IQ4_XS, quant.MXFP4,
		quant.IQ3_XXS, quant.IQ3_S, quant.IQ2_XXS, quant.IQ2_XS, quant.IQ2_S, quant.IQ1_S, quant.IQ1_M}
	for _, isa := range cpu.Available() {
		for _, wt := range types {
			for _, sh := range []struct{ rows, cols, n int }{{1, 256, 1}, {7, 256, 3}, {13, 512, 1}, {130, 256, 65}, {1000, 256, 2}, {33, 768, 130}, {256, 512, 1}, {64, 256, 70}} {
				name := fmt.Sprintf("isa=%s/type=%s/rows=%d/cols=%d/n=%d", isa, wt, sh.rows, sh.cols, sh.n)
				t.Run(name, func(t *testing.T) {
					rb, _ := quant.RowBytes(wt, sh.cols)
					w := &model.Weight{Name: "w", Type: wt, Cols: sh.cols, Rows: sh.rows, RowBytes: rb, Data: randomWeights(wt, sh.rows, sh.cols)}
					x := randomF32(sh.n*sh.cols, 3)
					want := make([]float32, sh.n*sh.rows)
					cpu.NewRef().MatMul(want, w, x, sh.n)
					for _, threads := range testThreads {
						for _, noPack := range []bool{false, true} {
							be := cpu.NewBackend(threads, cpu.KernelsFor(isa))
							be.NoPack = noPack
							got, check := guarded(len(want))
							be.MatMul(got, w, x, sh.n)
							be.MatMul(got, w, x, sh.n) // again, with the packed copy made by the first
							be.Close()
							check(t)
							if e := nmse(got, want); e > 1e-10 {
								t.Errorf("threads=%d, no pack %v: NMSE %.3g > 1e-10", threads, noPack, e)
							}
						}
					}
				})
			}
		}
	}
}

// TestBackendElementwise compares RMSNorm, RoPE (both kinds, with
// frequency factors, with YaRN; bit for bit), SwiGLU, Add, AddRows and Softmax with Ref's on sizes
// below and above the parallel threshold.
func TestBackendElementwise(t *testing.T) {
	ref := cpu.NewRef()
	for _, threads := range testThreads {
		be := newBackend(t, threads)
		for _, sh := range []struct{ n, dim int }{{1, 64}, {3, 7}, {5, 2048}, {70, 256}} {
			name := fmt.Sprintf("threads=%d/n=%d/dim=%d", threads, sh.n, sh.dim)
			x := randomF32(sh.n*sh.dim, 5)
			w := randomF32(sh.dim, 6)
			cmp := func(op string, got, want []float32, tol float64) {
				t.Helper()
				if e := nmse(got, want); e > tol {
					t.Errorf("%s %s: NMSE %.3g > %.3g", name, op, e, tol)
				}
			}
			want, got := make([]float32, len(x)), make([]float32, len(x))
			ref.RMSNorm(want, x, w, sh.n, sh.dim, 1e-5)
			be.RMSNorm(got, x, w, sh.n, sh.dim, 1e-5)
			cmp("rmsnorm", got, want, 1e-12)

			copy(want, x)
			copy(got, x)
			ref.Softmax(want, sh.n, sh.dim)
			be.Softmax(got, sh.n, sh.dim)
			cmp("softmax", got, want, 1e-12)

			up := randomF32(len(x), 8)
			ref.SwiGLU(want, x, up)
			be.SwiGLU(got, x, up)
			cmp("swiglu", got, want, 1e-12)

			copy(want, x)
			copy(got, x)
			ref.Add(want, up)
			be.Add(got, up)
			cmp("add", got, want, 0)
			ref.AddRows(want, w)
			be.AddRows(got, w)
			cmp("addrows", got, want, 0)

			if sh.dim%2 == 0 {
				for _, rp := range []model.Rope{
					{Type: model.RopeNorm, Dim: 32, Base: 10000, Scale: 1},
					{Type: model.RopeNeox, Dim: 32, Base: 1e6, Scale: 0.5},
					{Type: model.RopeNorm, Dim: 32, Base: 500000, Scale: 1, Factors: randomPositive(16)},
					// YaRN (factor 4 over an original context of 64, so
					// these positions 100.. are beyond it), attn_factor 1.25.
					{Type: model.RopeNeox, Dim: 32, Base: 1e6, Scale: 0.25, ExtFactor: 1, AttnFactor: 1.25,
						Corr: model.YarnCorrDims(32, 64, 1e6, 32, 1)},
					{Type: model.RopeNorm, Dim: 32, Base: 10000, Scale: 0.125, ExtFactor: 1, AttnFactor: 0.9,
						Factors: randomPositive(16), Corr: model.YarnCorrDims(32, 64, 10000, 32, 1)},
				} {
					if sh.dim%32 != 0 {
						continue
					}
					nHead := sh.dim / 32
					pos := make([]int32, sh.n)
					for i := range pos {
						pos[i] = int32(3*i + 100)
					}
					copy(want, x)
					copy(got, x)
					ref.Rope(want, pos, sh.n, nHead, 32, &rp)
					be.Rope(got, pos, sh.n, nHead, 32, &rp)
					cmp(fmt.Sprintf("rope type %d", rp.Type), got, want, 0)
				}
			}
		}
	}
}

func randomPositive(n int) []float32 {
	x := randomF32(n, 11)
	for i := range x {
		x[i] = 1 + float32(math.Abs(float64(x[i])))
	}
	return x
}

// kvTol is the NMSE Attention may differ from Ref's by on a cache of each
// type: both work on the stored values converted to float32 (TurboQuant in
// the rotated domain, which preserves inner products), so only float
// rounding separates them, as for f32. Except for K rows of q4_0 and
// 4-bit TurboQuant, which decode scores in integers against the query
// rounded to int16 steps of max|q|/32767 (kern_qint.go; the kernels are
// checked bit for bit against its Go arithmetic by TestAttnScoresTiles):
// that moves each query value by up to 2^-16 of the head's largest, and
// the outputs by an NMSE of 6.5e-10 to 7.8e-10 on these random heads
// (measured, AVX2 and Go). 1e-8 leaves room for that; pairing each code
// with the other value of its query pair gave 0.2 to 1.7 (measured).
// V rows of q4_0, q8_0 and 3- and 4-bit TurboQuant
// move more: decode sums them in integers, with the softmax weights times
// the rows' scales rounded to int16 steps of their largest/32767
// (kern_wint.go, checked bit for bit by TestAttnSumQ). These random heads
// spread their weights over up to
// 300 rows of random norms, so most weights are far below the largest and
// keep fewer bits: the decode rows' NMSE against Ref is 2.2e-9 to 9.3e-9
// (measured, AVX2 and Go, K and V rounding together), where the tq3
// cache's own error against f16 KV is 7.8e-3. 1e-7 leaves room for that
// and still catches the two rows of a pair meeting each other's weights
// (0.40 to 2.3, measured).
var kvTol = map[model.KVType]float64{
	model.KVF32: 1e-11, model.KVF16: 1e-11, model.KVBF16: 1e-11, model.KVQ8_0: 1e-7, model.KVQ4_0: 1e-7,
	model.KVTQ4: 1e-7, model.KVTQ3: 1e-7,
}

// twoRuns returns batch rows: sequence 0 at positions 0..4 (decode-like
// rows), then sequence 1 at [p0, p1) (a prefill chunk).
func twoRuns(p0, p1 int) (seq, pos []int32) {
	for p := range 5 {
		seq, pos = append(seq, 0), append(pos, int32(p))
	}
	for p := p0; p < p1; p++ {
		seq, pos = append(seq, 1), append(pos, int32(p))
	}
	return seq, pos
}

// TestBackendAttention compares Attention with Ref's for grouped-query
// heads, two sequences and several batch rows, on a cache of every KV type
// that can hold the heads.
func TestBackendAttention(t *testing.T) {
	for _, isa := range cpu.Available() {
		for _, hp := range []model.Hyper{
			{NHead: 8, NHeadKV: 2, HeadDimK: 64, HeadDimV: 64, NLayer: 1},
			{NHead: 4, NHeadKV: 4, HeadDimK: 8, HeadDimV: 8, NLayer: 1},
			{NHead: 6, NHeadKV: 3, HeadDimK: 128, HeadDimV: 128, NLayer: 1},
		} {
			for kt := range model.KVTQ3 + 1 {
				types := model.KVTypes{K: kt, V: kt}
				if kt == model.KVTQ4 {
					types.V = model.KVTQ3 // the asymmetric pair
				}
				h := hp
				const nCtx = 300
				kv, err := model.NewKVCacheOf(&h, types, nCtx, 2)
				if err != nil {
					continue // q8_0 and q4_0 cannot hold heads of 8
				}
				t.Run(fmt.Sprintf("isa=%s/heads=%d/kv=%d/dim=%d/%s", isa, hp.NHead, hp.NHeadKV, hp.HeadDimK, types), func(t *testing.T) {
					for s := range 2 {
						for p := range nCtx {
							kv.SetK(0, s, p, randomF32(kv.KDim, uint64(1000*s+p)))
							kv.SetV(0, s, p, randomF32(kv.VDim, uint64(1000*s+p+500000)))
						}
					}
					// rows: seq 0 at 0..4, seq 1 at 250..299 (a prefill chunk)
					seq, pos := twoRuns(250, 300)
					n := len(seq)
					q := randomF32(n*h.NHead*h.HeadDimK, 17)
					want := make([]float32, n*h.NHead*h.HeadDimV)
					scale := float32(1 / math.Sqrt(float64(h.HeadDimK)))
					cpu.NewRef().Attention(want, q, kv, 0, seq, pos, &h, model.Attn{Scale: scale})
					tol := kvTol[kt]
					for _, threads := range testThreads {
						be := cpu.NewBackend(threads, cpu.KernelsFor(isa))
						got, check := guarded(len(want))
						be.Attention(got, q, kv, 0, seq, pos, &h, model.Attn{Scale: scale})
						be.Close()
						check(t)
						if e := nmse(got, want); e > tol {
							t.Errorf("threads=%d: NMSE %.3g > %.0g", threads, e, tol)
						} else if threads == 1 {
							t.Logf("batch: NMSE %.3g", e)
						}
						// one row alone (the decode path)
						got1, check1 := guarded(h.NHead * h.HeadDimV)
						be = cpu.NewBackend(threads, cpu.KernelsFor(isa))
						be.Attention(got1, q[(n-1)*h.NHead*h.HeadDimK:], kv, 0, seq[n-1:], pos[n-1:], &h, model.Attn{Scale: scale})
						be.Close()
						check1(t)
						if e := nmse(got1, want[(n-1)*h.NHead*h.HeadDimV:]); e > tol {
							t.Errorf("threads=%d, one row: NMSE %.3g > %.0g", threads, e, tol)
						} else if threads == 1 {
							t.Logf("one row: NMSE %.3g", e)
						}
					}
				})
			}
		}
	}
}

// TestBackendAttentionFloatHeads: a decode row whose query group for a
// KV head has a head QInt.Round refuses (all zeros) is scored in float32
// for that group and in integers for the others, on every path; the
// outputs are Ref's within kvTol, and the zero head's attention is the
// uniform mean of the V rows (its scores all 0), as Ref's, but for the
// rounding of its weights in the integer V sums.
func TestBackendAttentionFloatHeads(t *testing.T) {
	h := model.Hyper{NHead: 8, NHeadKV: 2, HeadDimK: 64, HeadDimV: 64, NLayer: 1}
	const nCtx = 200
	for _, types := range []model.KVTypes{{K: model.KVQ4_0, V: model.KVQ4_0}, {K: model.KVTQ4, V: model.KVTQ3}} {
		kv, err := model.NewKVCacheOf(&h, types, nCtx, 1)
		if err != nil {
			t.Fatal(err)
		}
		for p := range nCtx {
			kv.SetK(0, 0, p, randomF32(kv.KDim, uint64(p)))
			kv.SetV(0, 0, p, randomF32(kv.VDim, uint64(p+500000)))
		}
		q := randomF32(h.NHead*h.HeadDimK, 17)
		clear(q[h.HeadDimK : 2*h.HeadDimK]) // head 1, in KV head 0's group
		seq, pos := []int32{0}, []int32{nCtx - 1}
		scale := float32(0.125)
		want := make([]float32, h.NHead*h.HeadDimV)
		cpu.NewRef().Attention(want, q, kv, 0, seq, pos, &h, model.Attn{Scale: scale})
		for _, isa := range cpu.Available() {
			be := cpu.NewBackend(1, cpu.KernelsFor(isa))
			got := make([]float32, len(want))
			be.Attention(got, q, kv, 0, seq, pos, &h, model.Attn{Scale: scale})
			be.Close()
			if e := nmse(got, want); e > kvTol[types.K] {
				t.Errorf("%s %s: NMSE %.3g > %.0g", isa, types, e, kvTol[types.K])
			}
			// its scores are exact (0), its V sum rounds its weights (2e-10
			// measured); scoring the group's other heads only gives 0.93
			if e := nmse(got[h.HeadDimV:2*h.HeadDimV], want[h.HeadDimV:2*h.HeadDimV]); e > 1e-9 {
				t.Errorf("%s %s: the zero head's output: NMSE %.3g against Ref's > 1e-9", isa, types, e)
			}
		}
	}
}

// TestBackendAttentionPaged runs Attention on a paged cache whose blocks
// are scattered (some adjacent, so runs span blocks) and compares with Ref
// on a contiguous cache holding the same rows.
func TestBackendAttentionPaged(t *testing.T) {
	h := model.Hyper{NHead: 8, NHeadKV: 2, HeadDimK: 64, HeadDimV: 64, NLayer: 1}
	const nCtx, bs = 320, 16
	flat := model.NewKVCache(&h, nCtx, 1)
	paged, err := model.NewPagedKVCache(&h, model.KVTypes{}, bs, 64, 1, nCtx)
	if err != nil {
		t.Fatal(err)
	}
	// blocks in a scrambled order with adjacent pairs
	for i := range nCtx / bs {
		b := int32((i*7)%20*3 + i%2)
		paged.Tables[0] = append(paged.Tables[0], b)
	}
	for p := range nCtx {
		k, v := randomF32(flat.KDim, uint64(p)), randomF32(flat.VDim, uint64(p+9999))
		flat.SetK(0, 0, p, k)
		flat.SetV(0, 0, p, v)
		paged.SetK(0, 0, p, k)
		paged.SetV(0, 0, p, v)
	}
	var seq, pos []int32
	for p := 270; p < 320; p++ { // a prefill chunk
		seq, pos = append(seq, 0), append(pos, int32(p))
	}
	q := randomF32(len(seq)*h.NHead*h.HeadDimK, 3)
	scale := float32(0.125)
	for _, rows := range []int{len(seq), 1} {
		want := make([]float32, rows*h.NHead*h.HeadDimV)
		cpu.NewRef().Attention(want, q, flat, 0, seq[:rows], pos[:rows], &h, model.Attn{Scale: scale})
		for _, threads := range testThreads {
			be := newBackend(t, threads)
			got, check := guarded(len(want))
			be.Attention(got, q, paged, 0, seq[:rows], pos[:rows], &h, model.Attn{Scale: scale})
			check(t)
			if e := nmse(got, want); e > 1e-11 {
				t.Errorf("rows=%d threads=%d: NMSE %.3g > 1e-11", rows, threads, e)
			}
		}
	}
	if !model.SupportsPagedKV(newBackend(t, 1)) {
		t.Error("Backend does not declare PagedKV")
	}
}

// TestBackendAttentionProtected: a cache whose first and last layers keep
// f16 (KVTypes.Protect) and whose middle layer is TurboQuant gives Ref's
// attention in every layer, decode row and prefill chunk alike.
func TestBackendAttentionProtected(t *testing.T) {
	h := model.Hyper{NHead: 8, NHeadKV: 2, HeadDimK: 64, HeadDimV: 64, NLayer: 3}
	const nCtx = 120
	kv, err := model.NewKVCacheOf(&h, model.KVTypes{K: model.KVTQ4, V: model.KVTQ3, Protect: 1}, nCtx, 1)
	if err != nil {
		t.Fatal(err)
	}
	for l := range h.NLayer {
		for p := range nCtx {
			kv.SetK(l, 0, p, randomF32(kv.KDim, uint64(1000*l+p)))
			kv.SetV(l, 0, p, randomF32(kv.VDim, uint64(1000*l+p+500000)))
		}
	}
	var seq, pos []int32
	for p := 100; p < nCtx; p++ {
		seq, pos = append(seq, 0), append(pos, int32(p))
	}
	q := randomF32(len(seq)*h.NHead*h.HeadDimK, 5)
	be := newBackend(t, 2)
	for l, kt := range []model.KVType{model.KVF16, model.KVTQ4, model.KVF16} {
		if got := kv.Layer(l).K; got != kt {
			t.Fatalf("layer %d: K type %s, want %s", l, got, kt)
		}
		for _, rows := range []int{len(seq), 1} {
			want := make([]float32, rows*h.NHead*h.HeadDimV)
			cpu.NewRef().Attention(want, q, kv, l, seq[:rows], pos[:rows], &h, model.Attn{Scale: 0.125})
			got, check := guarded(len(want))
			be.Attention(got, q, kv, l, seq[:rows], pos[:rows], &h, model.Attn{Scale: 0.125})
			check(t)
			if e := nmse(got, want); e > kvTol[kt] {
				t.Errorf("layer %d (%s), %d rows: NMSE %.3g > %.0g", l, kt, rows, e, kvTol[kt])
			}
		}
	}
}

// TestBackendAttentionRecent: with --kv-recent (KVTypes.Recent), Attention
// reads each query's rows from KVCache.RecentFrom on as their f16 copies, as
// Ref does, decode row and prefill chunk alike, on every ISA, for
// quantized halves of every kind (block, TurboQuant, one half only), and
// windows from one position to more than the context. With a window
// covering the whole context, a quantized cache's attention is exactly an
// f16 cache's (Ref, bit for bit).
func TestBackendAttentionRecent(t *testing.T) {
	h := model.Hyper{NHead: 8, NHeadKV: 2, HeadDimK: 64, HeadDimV: 64, NLayer: 1}
	const nCtx = 300
	for _, isa := range cpu.Available() {
		for _, types := range []model.KVTypes{{K: model.KVTQ4, V: model.KVTQ3}, {K: model.KVQ8_0, V: model.KVQ4_0},
			{K: model.KVTQ4, V: model.KVF16}, {K: model.KVF16, V: model.KVTQ3}, {K: model.KVQ4_0, V: model.KVTQ3}} {
			for _, recent := range []int{1, 5, 64, 100, 400} {
				types.Recent = recent
				t.Run(fmt.Sprintf("isa=%s/%s", isa, types), func(t *testing.T) {
					kv, err := model.NewKVCacheOf(&h, types, nCtx, 2)
					if err != nil {
						t.Fatal(err)
					}
					kv.ReserveRecent(2 * nCtx)
					f16, err := model.NewKVCacheOf(&h, model.KVTypes{K: model.KVF16, V: model.KVF16}, nCtx, 2)
					if err != nil {
						t.Fatal(err)
					}
					var ss, ps []int32
					for s := range 2 {
						for p := range nCtx {
							ss, ps = append(ss, int32(s)), append(ps, int32(p))
						}
					}
					if err := kv.PrepareRecent(ss, ps); err != nil {
						t.Fatal(err)
					}
					for i := range ss {
						s, p := int(ss[i]), int(ps[i])
						k, v := randomF32(kv.KDim, uint64(1000*s+p)), randomF32(kv.VDim, uint64(1000*s+p+500000))
						kv.SetK(0, s, p, k)
						kv.SetV(0, s, p, v)
						kv.StoreRecent(0, ss[i:i+1], ps[i:i+1], k, v)
						f16.SetK(0, s, p, k)
						f16.SetV(0, s, p, v)
					}
					// rows: seq 0 at 0..4, seq 1 at 180..299 (a prefill chunk
					// over two boundary steps)
					seq, pos := twoRuns(180, 300)
					n := len(seq)
					q := randomF32(n*h.NHead*h.HeadDimK, 17)
					want := make([]float32, n*h.NHead*h.HeadDimV)
					scale := float32(0.125)
					cpu.NewRef().Attention(want, q, kv, 0, seq, pos, &h, model.Attn{Scale: scale})
					if recent >= nCtx+model.RecentAlign {
						all := make([]float32, len(want))
						cpu.NewRef().Attention(all, q, f16, 0, seq, pos, &h, model.Attn{Scale: scale})
						if !slices.Equal(all, want) {
							t.Errorf("a window over the whole context differs from an f16 cache: NMSE %.3g", nmse(want, all))
						}
					}
					tol := max(kvTol[types.K], kvTol[types.V])
					for _, threads := range []int{1, 2} {
						be := cpu.NewBackend(threads, cpu.KernelsFor(isa))
						got, check := guarded(len(want))
						be.Attention(got, q, kv, 0, seq, pos, &h, model.Attn{Scale: scale})
						check(t)
						if e := nmse(got, want); e > tol {
							t.Errorf("threads=%d: NMSE %.3g > %.0g", threads, e, tol)
						}
						for _, r := range []int{0, 4, n - 40, n - 1} { // decode rows
							got1, check1 := guarded(h.NHead * h.HeadDimV)
							be.Attention(got1, q[r*h.NHead*h.HeadDimK:], kv, 0, seq[r:r+1], pos[r:r+1], &h, model.Attn{Scale: scale})
							check1(t)
							if e := nmse(got1, want[r*h.NHead*h.HeadDimV:][:h.NHead*h.HeadDimV]); e > tol {
								t.Errorf("threads=%d, row at %d: NMSE %.3g > %.0g", threads, pos[r], e, tol)
							}
						}
						be.Close()
					}
				})
			}
		}
	}
}

// TestMatMulBatchInvariant: the Backend's product of a weight by n rows
// gives each row the bits of its product alone, for every weight type,
// packed or not (a sequence batched with others decodes as it does alone),
// but for unpacked matrices of repackedTypes from cpu.RepackMinActs rows.
func TestMatMulBatchInvariant(t *testing.T) {
	const cols = 512
	for _, wt := range []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q4_K, quant.Q6_K, quant.Q8_0, quant.Q4_0, quant.Q5_K, quant.IQ4_NL, quant.IQ4_XS, quant.MXFP4, quant.IQ2_XXS, quant.IQ3_XXS, quant.IQ3_S, quant.IQ2_XS, quant.IQ2_S, quant.IQ1_S, quant.IQ1_M} {
		for _, c := range []struct {
			rows int
			pack bool
		}{{40, true}, {40, false}, {45, true}, {5, true}} { // packed, 45 and 5 rows leave a tail
			rows, pack := c.rows, c.pack
			t.Run(fmt.Sprintf("type=%s/rows=%d/pack=%v", wt, rows, pack), func(t *testing.T) {
				rb, _ := quant.RowBytes(wt, cols)
				w := &model.Weight{Name: "w", Type: wt, Cols: cols, Rows: rows, RowBytes: rb, Data: randomWeights(wt, rows, cols)}
				be := cpu.NewBackend(2, nil)
				defer be.Close()
				be.NoPack = !pack
				const most = 37
				x := randomF32(most*cols, 3)
				solo := make([]float32, most*rows)
				for i := range most {
					be.MatMul(solo[i*rows:(i+1)*rows], w, x[i*cols:(i+1)*cols], 1)
				}
				for _, n := range []int{2, 3, 4, 5, 8, 9, 16, 37} {
					if !pack && n >= cpu.RepackMinActs && repackedTypes[wt] {
						continue
					}
					out := make([]float32, n*rows)
					be.MatMul(out, w, x, n)
					for i := range n * rows {
						if g, s := math.Float32bits(out[i]), math.Float32bits(solo[i]); g != s {
							t.Fatalf("%d rows: row %d, output %d: %#x (%g), alone %#x (%g)", n, i/rows, i%rows, g, out[i], s, solo[i])
						}
					}
				}
			})
		}
	}
}
