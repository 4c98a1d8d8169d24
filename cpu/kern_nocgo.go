//go:build !cgo

// Without cgo only ISAScalarGo exists: these stand-ins report no SIMD
// features, so kern.go never calls into C.

package cpu

import "github.com/flowinfer/flowinfer/quant"

const (
	featAVX2   = 1
	featAVX512 = 2
	featAMD    = 8
)

const cgoKernels = false

// repackMinActs: the Go kernels never repack.
const repackMinActs = 1 << 30

func cpuFeatures() int { return 0 }

func quantizeRowsC(ISA, quant.Type, []float32, int, int, []byte) bool { return false }

func gemmC(ISA, quant.Type, []byte, int, int, int, int, []byte, int, int, []float32, int) bool {
	return false
}

func packedSizeC(ISA, quant.Type, int, int) int { return -1 }

func packC(ISA, quant.Type, []byte, int, int, int, []byte) {}

func gemmPackedC(ISA, quant.Type, []byte, int, int, int, []byte, int, int, []float32, int) {}

func wsumC(ISA, []float32, int, int, []float32, int, []float32, int, int) bool { return false }

func swigluC(ISA, []float32, []float32, []float32) bool { return false }

func expSubC(ISA, []float32, float32) (float64, bool) { return 0, false }

func rmsNormC(ISA, []float32, []float32, []float32, int, int, float32) bool { return false }

func ropeC(ISA, []float32, []float32, int, int, int, int, bool) bool { return false }

func flashTileC(ISA, []float32, int, int, int, int, []float32, []float32, int, int, int, []int32, bool, int,
	[]float32, []float64, []float32, []float32) bool {
	return false
}

func fmaPeakC(ISA, int) float64 { return 0 }

func maddPeakC(ISA, int, bool) float64 { return 0 }

func dequantC(ISA, quant.Type, []byte, int, int, int, []float32, int) bool { return false }

func turboDecodeC(ISA, int, []float32, []byte, int, int, int, []float32, int) bool { return false }

func softmaxC(ISA, []float32, float32) bool { return false }

func attnScoresC(ISA, quant.Type, *quant.Turbo, []byte, int, int, int, []float32, int, []float32, int) bool {
	return false
}

func attnSumC(ISA, quant.Type, *quant.Turbo, []byte, int, int, int, []float32, int, int, []float32) bool {
	return false
}

func attnScoresTilesC(ISA, quant.Type, *quant.Turbo, []byte, int, int, int, int, int, []float32, int, []float32, int) bool {
	return false
}

func untileC([]byte, int, int, int, int, []byte) bool { return false }

func attnScoresTilesQC(ISA, quant.Type, *quant.Turbo, []byte, int, int, int, *QInt, []float32, int) bool {
	return false
}

func kvScalesC(*WInt, []byte, int, int, int, []float32, int) bool { return false }

func wintRoundC(*WInt, []float32, int) (ok, done bool) { return false, false }

func wintChunkC(*WInt, []byte, int, int, []float32, int, []byte) (ok, done bool) { return false, false }

func attnSumQC(*WInt, []byte, int, int, int) bool { return false }

func hadamardC([]float32, int) bool { return false }

// The Mamba-2 kernels (kern_ssm.go): none without cgo.

func ssmScanC(ISA, []float32, []float32, []float32, []float32, []float32, []float32, int, int, int, int, int, int, int) bool {
	return false
}

func ssmConvC(ISA, []float32, []float32, []float32, []float32, []float32, int, int, int, int, int) bool {
	return false
}
