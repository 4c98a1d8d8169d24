package cpu

// gelu.go: GELU (tanh approximation) as ggml's CPU backend computes it with
// GGML_GELU_FP16 defined (ggml-cpu/vec.h, always on): inputs at or below
// -10 give 0, at or above 10 themselves; others are rounded to float16 and
// looked up in a table of 65536 float16 results of ggml_gelu_f32, built
// from float32 arithmetic and tanhf. ggml_vec_geglu_f32 multiplies the
// looked-up value, back in float32, by the up projection.

import (
	"math"
	"sync"

	"github.com/flowinfer/flowinfer/quant"
)

// geluTable is ggml_table_gelu_f16 (ggml_cpu_init): for every float16 bit
// pattern h, the float16 nearest to gelu(h), as float32.
var geluTable = sync.OnceValue(func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = quant.FP16ToFP32(quant.FP32ToFP16(geluF32(quant.FP16ToFP32(uint16(i)))))
	}
	return &t
})

// geluF32 is ggml_gelu_f32: 0.5·x·(1 + tanh(√(2/π)·x·(1 + 0.044715·x²)))
// in float32, evaluated left to right as C does, with 1 + (0.044715·x)·x
// as one fused multiply-add: ggml built for x86-64 with FMA (-march=native)
// contracts it, and so does the build llama.cpp's goldens come from. With
// it all 65536 table entries equal ggml's; without it one differs
// (x = -1.999). tanhf is float64 tanh rounded to float32, which gives
// ggml's table for every entry.
func geluF32(x float32) float32 {
	const coefA = float32(0.044715)
	const sqrt2OverPi = float32(0.79788456080286535587989211986876)
	inner := float32(math.FMA(float64(coefA*x), float64(x), 1))
	u := sqrt2OverPi * x * inner
	return 0.5 * x * (1 + float32(math.Tanh(float64(u))))
}

// gelu is ggml_vec_gelu_f32's value for one input.
func gelu(t *[1 << 16]float32, x float32) float32 {
	switch {
	case x <= -10:
		return 0
	case x >= 10:
		return x
	}
	return t[quant.FP32ToFP16(x)]
}

// geglu sets out[i] = gelu(gate[i])·up[i] (ggml_vec_geglu_f32).
func geglu(t *[1 << 16]float32, out, gate, up []float32) {
	up = up[:len(gate)]
	out = out[:len(gate)]
	for i, g := range gate {
		switch {
		case g <= -10:
			out[i] = 0
		case g >= 10:
			out[i] = g * up[i]
		default:
			out[i] = t[quant.FP32ToFP16(g)] * up[i]
		}
	}
}
