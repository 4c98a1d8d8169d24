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
	MulMatVecQ4_0 = "mul_mat_vec_q4_0"
	MulMatVecQ4_K = "mul_mat_vec_q4_k"
	MulMatVecQ5_K = "mul_mat_vec_q5_k"
	MulMatVecQ6_K = "mul_mat_vec_q6_k"
	MulMatVecBF16 = "mul_mat_vec_bf16"
	MMF32         = "mm_f32"
	MMF16         = "mm_f16"
	MMBF16        = "mm_bf16"
	MMQ8_0        = "mm_q8_0"
	MMQ4_0        = "mm_q4_0"
	MMQ4_K        = "mm_q4_k"
	MMQ5_K        = "mm_q5_k"
	MMQ6_K        = "mm_q6_k"
	RMSNorm       = "rms_norm"
	SwiGLU        = "swiglu"
	Add           = "add"
	AddRows       = "add_rows"
	Rope          = "rope"
	Softmax       = "softmax"
	AttnF32       = "attn_f32"
	AttnF16       = "attn_f16"
	AttnQ8_0      = "attn_q8_0"
	FlashAttnF32  = "flash_attn_f32"
	FlashAttnF16  = "flash_attn_f16"
	FlashAttnQ8_0 = "flash_attn_q8_0"
	KVStoreF16    = "kv_store_f16"
	KVStoreQ8_0   = "kv_store_q8_0"
	Hadamard      = "hadamard"
	Noop          = "noop"
	TopK          = "topk"
	MoEGather     = "moe_gather"
	MoEScatter    = "moe_scatter"
	MoESum        = "moe_sum"
)

// SPIRV returns the SPIR-V of the shader called name.
func SPIRV(name string) ([]byte, error) {
	b, err := spv.ReadFile(name + ".spv")
	if err != nil {
		return nil, fmt.Errorf("shaders: no shader %q", name)
	}
	return b, nil
}
