package gpu

import (
	"math"
	"sync"

	"github.com/flowinfer/flowinfer/quant"
)

// GELUTable is ggml's table of GELU values (ggml_table_gelu_f16, built by
// ggml_cpu_init), which GeGLU's shader looks its inputs up in, as ggml's
// CPU backend does with GGML_GELU_FP16: for every float16 bit pattern h,
// the float16 nearest to ggml_gelu_f32(h), as float32. It is package
// cpu's table (gelu.go), built the same way: 0.5·x·(1 + tanh(√(2/π)·x·(1
// + 0.044715·x²))) in float32 left to right, 1 + (0.044715·x)·x as one
// fused multiply-add (ggml's x86-64 build contracts it), tanhf as float64
// tanh rounded to float32. TestBackendGeGLU checks the device's results
// against cpu.Ref's bit for bit.
var GELUTable = sync.OnceValue(func() *[1 << 16]float32 {
	const coefA = float32(0.044715)
	const sqrt2OverPi = float32(0.79788456080286535587989211986876)
	var t [1 << 16]float32
	for i := range t {
		x := quant.FP16ToFP32(uint16(i))
		inner := float32(math.FMA(float64(coefA*x), float64(x), 1))
		u := sqrt2OverPi * x * inner
		g := 0.5 * x * (1 + float32(math.Tanh(float64(u))))
		t[i] = quant.FP16ToFP32(quant.FP32ToFP16(g))
	}
	return &t
})
