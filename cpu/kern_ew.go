package cpu

// kern_ew.go: the row-wise kernels: SwiGLU, softmax's exp, softmax,
// RMSNorm and RoPE's rotation, each checking its shapes and then running
// the C path or its Go loop (backend_ew.go, backend_math.go), which the
// C paths match bit for bit or within the ulps each comment states. It
// does not split rows across workers (backend_ew.go does) and holds no
// matrix product (kern.go) or KV row kernel (kern_attn.go).

import "fmt"

// SwiGLU sets out[i] = gate[i]·sigmoid(gate[i])·up[i] for i < len(gate)
// (out and up at least as long). Every path gives the Go loop's result
// bit for bit, but for |gate[i]| ≥ 87 (then within one ulp).
func (k *Kernels) SwiGLU(out, gate, up []float32) {
	if len(out) < len(gate) || len(up) < len(gate) {
		panic(fmt.Sprintf("cpu: SwiGLU: %d gates, %d ups, %d outputs", len(gate), len(up), len(out)))
	}
	if len(gate) == 0 || k.isa != ISAScalarGo && swigluC(k.isa, out, gate, up) {
		return
	}
	swiglu(out, gate, up)
}

// ExpSub sets row[i] = exp(row[i]-mx) and returns the sum of the results,
// added in order in float64 (softmax's numerator and denominator). Every
// path gives the Go loop's result bit for bit, but where row[i]-mx ≤ -87
// (then within one ulp).
func (k *Kernels) ExpSub(row []float32, mx float32) float64 {
	if len(row) == 0 {
		return 0
	}
	if k.isa != ISAScalarGo {
		if s, ok := expSubC(k.isa, row, mx); ok {
			return s
		}
	}
	return expSub(row, mx)
}

// RMSNorm sets each of the len(x)/dim rows of out to x·scale·weight[i]
// (weight nil: x·scale), scale = 1/sqrt(mean of x² + eps) in float32, the
// squares added in float64 in four interleaved running sums (element i in
// sum i mod 4). Every path gives the Go loop's result bit for bit.
func (k *Kernels) RMSNorm(out, x, weight []float32, dim int, eps float32) {
	if dim <= 0 || len(x)%dim != 0 || len(out) < len(x) || weight != nil && len(weight) < dim {
		panic(fmt.Sprintf("cpu: RMSNorm: %d inputs, %d outputs, %d weights, rows of %d", len(x), len(out), len(weight), dim))
	}
	if len(x) == 0 || k.isa != ISAScalarGo && rmsNormC(k.isa, out, x, weight, len(x)/dim, dim, eps) {
		return
	}
	rmsNormRows(out, x, weight, dim, eps)
}

// Rope rotates, in each of rows rows of nHead heads of headDim floats, the
// first half pairs of every head by the angles in cs, 4·half floats per row
// as model.Rope.Table writes them (neox: pairs (v[i], v[i+half]); otherwise pairs
// (v[2i], v[2i+1])). Every path gives the Go loop's result bit for bit.
func (k *Kernels) Rope(x, cs []float32, rows, nHead, headDim, half int, neox bool) {
	if half < 0 || 2*half > headDim || len(x) < rows*nHead*headDim || len(cs) < rows*4*half {
		panic(fmt.Sprintf("cpu: Rope: %d values, %d angles, %d rows of %d heads of %d, %d pairs",
			len(x), len(cs), rows, nHead, headDim, half))
	}
	if rows == 0 || half == 0 || k.isa != ISAScalarGo && ropeC(k.isa, x, cs, rows, nHead, headDim, half, neox) {
		return
	}
	rotate(x, cs, rows, nHead, headDim, half, neox)
}

// Softmax sets row[i] = exp(s·row[i] - m) / Σ_j exp(s·row[j] - m), with
// s = scale and m the largest s·row[j]: attention's weights from its raw
// scores. The Go path sums in order in float64 (as Ref); the SIMD paths
// take a float32 exp (within 2 ulp, as prefill's flash tiles do: a third
// of the time of Go's float64 polynomial) and sum in sixteen float64
// lanes (AVX2: four chains of four; AVX-512: two of eight), so results
// differ from it by a few ulps.
func (k *Kernels) Softmax(row []float32, scale float32) {
	if len(row) == 0 || k.isa != ISAScalarGo && softmaxC(k.isa, row, scale) {
		return
	}
	for j := range row {
		row[j] *= scale
	}
	softmaxRow(k, row)
}
