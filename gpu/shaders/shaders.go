// Package shaders holds flowinfer's GLSL compute shaders (*.comp) and their
// SPIR-V (*.spv), compiled by glslc through `go generate` and committed, so
// a plain `go build` needs no shader compiler. TestRegenerate checks that
// the committed SPIR-V is what the sources compile to.
package shaders

import (
	"embed"
	"fmt"
)

//go:generate sh gen.sh

//go:embed *.spv
var spv embed.FS

// Names of the shaders.
const (
	MulMatVecF32  = "mul_mat_vec_f32"
	MulMatVecF16  = "mul_mat_vec_f16"
	MulMatVecQ8_0 = "mul_mat_vec_q8_0"
	MulMatVecQ4_K = "mul_mat_vec_q4_k"
	RMSNorm       = "rms_norm"
	SwiGLU        = "swiglu"
	Add           = "add"
	Noop          = "noop"
)

// SPIRV returns the SPIR-V of the shader called name.
func SPIRV(name string) ([]byte, error) {
	b, err := spv.ReadFile(name + ".spv")
	if err != nil {
		return nil, fmt.Errorf("shaders: no shader %q", name)
	}
	return b, nil
}
