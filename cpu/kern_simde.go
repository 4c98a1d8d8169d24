//go:build cgo && fi_simde

// Test build (go test -tags fi_simde ./cpu/): kern_avx512.c is compiled
// against SIMDe's portable intrinsics (kern_simde.h, Debian libsimde-dev)
// and ISAAVX512 is reported available on any AVX2 machine, so every test
// of the package also runs the AVX-512 kernels, which this project's
// machines cannot execute natively. Never for a real build: emulated, the
// kernels are many times slower than the AVX2 ones.

package cpu

// #cgo CFLAGS: -DFI_SIMDE -Wno-psabi
import "C"
