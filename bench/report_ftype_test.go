package bench

import "testing"

// TestFileTypeName: the model type names llama-bench prints (llama.cpp's
// llama_model_ftype_name) for the file types gen writes.
func TestFileTypeName(t *testing.T) {
	for ft, want := range map[uint64]string{
		15: "Q4_K - Medium", 7: "Q8_0", 25: "IQ4_NL - 4.5 bpw", 30: "IQ4_XS - 4.25 bpw", 38: "MXFP4 MoE",
		99: "unknown, may not work",
	} {
		if got := fileTypeName(ft); got != want {
			t.Errorf("file type %d: %q, want %q", ft, got, want)
		}
	}
}
