//go:build !cgo

// Without cgo the gated delta net runs its Go loops (kern_dn.go).

package cpu

func dnDeltaC(ISA, []float32, int, int, []float32, []float32, []float32, int, []float32, []float32, int,
	[]float32, int, float32) bool {
	return false
}

func dnConvC(ISA, []float32, []float32, []float32, []float32, int, int, int, int, int) bool {
	return false
}
