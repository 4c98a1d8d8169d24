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
	SwiGLUOAI     = "swiglu_oai"
	GeGLU         = "geglu"
	Scale         = "scale"
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
	MoERoute      = "moe_route"
	// ByID is the suffix of a mat-vec shader's variant that takes its
	// matrix from a buffer of expert ids (mul_mat_vec_q4_k_id).
	ByID = "_id"
)

// Names of the shaders of the 16-level table types (MXFP4, IQ4_NL,
// IQ4_XS) and the other legacy and K-quant types.
const (
	MulMatVecMXFP4  = "mul_mat_vec_mxfp4"
	MulMatVecIQ4_NL = "mul_mat_vec_iq4_nl"
	MulMatVecIQ4_XS = "mul_mat_vec_iq4_xs"
	MulMatVecQ4_1   = "mul_mat_vec_q4_1"
	MulMatVecQ5_0   = "mul_mat_vec_q5_0"
	MulMatVecQ5_1   = "mul_mat_vec_q5_1"
	MulMatVecQ2_K   = "mul_mat_vec_q2_k"
	MulMatVecQ3_K   = "mul_mat_vec_q3_k"
	MMMXFP4         = "mm_mxfp4"
	MMIQ4_NL        = "mm_iq4_nl"
	MMIQ4_XS        = "mm_iq4_xs"
	MMQ4_1          = "mm_q4_1"
	MMQ5_0          = "mm_q5_0"
	MMQ5_1          = "mm_q5_1"
	MMQ2_K          = "mm_q2_k"
	MMQ3_K          = "mm_q3_k"
)

// Names of the lattice types' shaders (iq_dequant.glsl).
const (
	MulMatVecIQ2_XXS = "mul_mat_vec_iq2_xxs"
	MulMatVecIQ2_XS  = "mul_mat_vec_iq2_xs"
	MulMatVecIQ2_S   = "mul_mat_vec_iq2_s"
	MulMatVecIQ3_XXS = "mul_mat_vec_iq3_xxs"
	MulMatVecIQ3_S   = "mul_mat_vec_iq3_s"
	MulMatVecIQ1_S   = "mul_mat_vec_iq1_s"
	MulMatVecIQ1_M   = "mul_mat_vec_iq1_m"
	MMIQ2_XXS        = "mm_iq2_xxs"
	MMIQ2_XS         = "mm_iq2_xs"
	MMIQ2_S          = "mm_iq2_s"
	MMIQ3_XXS        = "mm_iq3_xxs"
	MMIQ3_S          = "mm_iq3_s"
	MMIQ1_S          = "mm_iq1_s"
	MMIQ1_M          = "mm_iq1_m"
)

// SPIRV returns the SPIR-V of the shader called name.
func SPIRV(name string) ([]byte, error) {
	b, err := spv.ReadFile(name + ".spv")
	if err != nil {
		return nil, fmt.Errorf("shaders: no shader %q", name)
	}
	return b, nil
}
