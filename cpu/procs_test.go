package cpu

import (
	"os"
	"runtime"
	"testing"
)

func TestReserveProcs(t *testing.T) {
	if !cgoKernels || os.Getenv("GOMAXPROCS") != "" {
		t.Skip("no C kernels, or GOMAXPROCS set by the environment")
	}
	old := runtime.GOMAXPROCS(2)
	defer runtime.GOMAXPROCS(old)
	reserveProcs(2)
	if got := runtime.GOMAXPROCS(0); got != 3 {
		t.Errorf("GOMAXPROCS after reserveProcs(2) = %d, want 3", got)
	}
	runtime.GOMAXPROCS(8)
	reserveProcs(2)
	if got := runtime.GOMAXPROCS(0); got != 8 {
		t.Errorf("reserveProcs lowered GOMAXPROCS to %d", got)
	}
	reserveProcs(1) // one thread: nothing to reserve
	if got := runtime.GOMAXPROCS(0); got != 8 {
		t.Errorf("GOMAXPROCS = %d after reserveProcs(1)", got)
	}
}
