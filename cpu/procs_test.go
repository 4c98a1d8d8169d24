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

func TestGuided(t *testing.T) {
	for _, c := range []struct{ n, workers, minSize, align int }{
		{8192, 2, 32, 8}, {512, 2, 32, 8}, {2048, 2, 16, 8}, {13, 2, 16, 8}, {8, 4, 16, 8},
		{128256, 16, 16, 8}, {1000, 3, 7, 8}, {1, 1, 1, 1},
	} {
		b := guided(nil, c.n, c.workers, c.minSize, c.align)
		minSize := (c.minSize + c.align - 1) / c.align * c.align
		if b[0] != 0 || int(b[len(b)-1]) != c.n || len(b) < 2 {
			t.Fatalf("%+v: bounds %v", c, b)
		}
		prev := c.n + 1
		for i := 1; i < len(b); i++ {
			size := int(b[i] - b[i-1])
			last := i == len(b)-1
			if size <= 0 || !last && (size%c.align != 0 || size < minSize || size > prev) {
				t.Fatalf("%+v: chunk %d is [%d, %d) in %v", c, i-1, b[i-1], b[i], b)
			}
			prev = size
		}
		// the first chunk gives each worker a long run, the last is short
		if first := int(b[1]); c.n >= 4*c.workers*minSize && first < c.n/(2*c.workers)-c.align {
			t.Errorf("%+v: first chunk %d rows", c, first)
		}
		if last := int(b[len(b)-1] - b[len(b)-2]); last > max(minSize, c.n/(2*c.workers)) {
			t.Errorf("%+v: last chunk %d rows", c, last)
		}
	}
	if b := guided(nil, 8192, 2, 32, 8); len(b)-1 > 32 {
		t.Errorf("8192 rows on 2 workers: %d chunks", len(b)-1)
	}
}
