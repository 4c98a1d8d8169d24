package bench

import "testing"

// TestFileTypeName: the model type names llama-bench prints (llama.cpp's
// llama_model_ftype_name) for the file types gen writes.
func TestFileTypeName(t *testing.T) {
	for ft, want := range map[uint64]string{
		15: "Q4_K - Medium", 7: "Q8_0", 25: "IQ4_NL - 4.5 bpw", 30: "IQ4_XS - 4.25 bpw", 38: "MXFP4 MoE",
		19: "IQ2_XXS - 2.0625 bpw", 24: "IQ1_S - 1.5625 bpw", 31: "IQ1_M - 1.75 bpw", 26: "IQ3_S - 3.4375 bpw",
		99: "unknown, may not work",
	} {
		if got := fileTypeName(ft); got != want {
			t.Errorf("file type %d: %q, want %q", ft, got, want)
		}
	}
}
