package quant

// gelu.go: ggml's float16 GELU table, which the CPU backend and the GPU's
// GeGLU shader both look their inputs up in (one table, so the two
// backends agree bit for bit).

import (
	"math"
	"sync"
)

// GELUTable is ggml_table_gelu_f16 (ggml_cpu_init, GGML_GELU_FP16): for
// every float16 bit pattern h, the float16 nearest to GELUF32(h), as
// float32.
var GELUTable = sync.OnceValue(func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = FP16ToFP32(FP32ToFP16(GELUF32(FP16ToFP32(uint16(i)))))
	}
	return &t
})

// GELUF32 is ggml_gelu_f32: 0.5·x·(1 + tanh(√(2/π)·x·(1 + 0.044715·x²)))
// in float32, evaluated left to right as C does, with 1 + (0.044715·x)·x
// as one fused multiply-add: ggml built for x86-64 with FMA (-march=native)
// contracts it, and so does the build llama.cpp's goldens come from. With
// it all 65536 table entries equal ggml's; without it one differs
// (x = -1.999). tanhf is float64 tanh rounded to float32, which gives
// ggml's table for every entry.
func GELUF32(x float32) float32 {
	const coefA = float32(0.044715)
	const sqrt2OverPi = float32(0.79788456080286535587989211986876)
	inner := float32(math.FMA(float64(coefA*x), float64(x), 1))
	u := sqrt2OverPi * x * inner
	return 0.5 * x * (1 + float32(math.Tanh(float64(u))))
}
