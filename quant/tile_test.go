package quant_test

import (
	"testing"

	"github.com/flowinfer/flowinfer/quant"
)

// TestWholeTiles: rows round up to a multiple of TileRows, whole tiles
// stay as they are.
func TestWholeTiles(t *testing.T) {
	for _, c := range []struct{ n, want int }{{0, 0}, {1, 16}, {15, 16}, {16, 16}, {17, 32}, {128, 128}, {129, 144}} {
		if got := quant.WholeTiles(c.n); got != c.want {
			t.Errorf("WholeTiles(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}
