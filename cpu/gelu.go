package cpu

// gelu.go: GELU (tanh approximation) as ggml's CPU backend computes it with
// GGML_GELU_FP16 defined (ggml-cpu/vec.h, always on): inputs at or below
// -10 give 0, at or above 10 themselves; others are rounded to float16 and
// looked up in a table of 65536 float16 results of ggml_gelu_f32, built
// from float32 arithmetic and tanhf. ggml_vec_geglu_f32 multiplies the
// looked-up value, back in float32, by the up projection.

import "github.com/flowinfer/flowinfer/quant"

// geluTable is quant.GELUTable, shared with the GPU's GeGLU.
var geluTable = quant.GELUTable

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
