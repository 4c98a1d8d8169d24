package cpu

// RepackMinActs is FI_RP_MIN_ACTS, for the tests of package cpu_test.
const RepackMinActs = repackMinActs

// GeluTable is ggml_table_gelu_f16 as float32 (gelu.go).
func GeluTable() *[1 << 16]float32 { return geluTable() }
