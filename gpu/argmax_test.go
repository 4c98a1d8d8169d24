//go:build cgo

package gpu

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"testing"
	"unsafe"
)

// refTopK is the plain reference of Backend.TopK: the ids of row sorted
// by the CPU sampler's order (larger logit first, lower id among equals,
// NaN as -Inf), the first k, and -1 with -Inf past the row's length.
func refTopK(row []float32, k int) ([]int32, []float32) {
	ids := make([]int32, len(row))
	v := make([]float32, len(row))
	for i, x := range row {
		ids[i] = int32(i)
		if math.IsNaN(float64(x)) {
			x = float32(math.Inf(-1))
		}
		v[i] = x
	}
	slices.SortFunc(ids, func(a, b int32) int {
		if c := cmp.Compare(v[b], v[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	outI := make([]int32, k)
	outV := make([]float32, k)
	for j := range k {
		outI[j], outV[j] = -1, float32(math.Inf(-1))
		if j < len(ids) {
			outI[j], outV[j] = ids[j], v[ids[j]]
		}
	}
	return outI, outV
}

// TestBackendTopK runs TopK over rows of logits with many exact ties
// (values on a grid of quarters), NaN and -Inf entries and a row with no
// finite value, over one chunk, just past one, and vocabularies that take
// two and three rounds, against refTopK: ids exactly, values bit for bit.
// The logits are device-owned first (as the output projection leaves
// them) and must still be afterwards: TopK reads nothing else back.
func TestBackendTopK(t *testing.T) {
	r, be := newOpsBackend(t)
	for _, c := range []struct{ rows, vocab, k int }{
		{1, 5, 1}, {1, 5, 8}, {2, 13, 3}, {3, 2048, 40}, {2, 2049, 64},
		{1, 32000, 1}, {4, 151936, 40}, {1, 300000, 64},
	} {
		t.Run(fmt.Sprintf("rows=%d/vocab=%d/k=%d", c.rows, c.vocab, c.k), func(t *testing.T) {
			logits := r.floats(c.rows * c.vocab)
			for i := range logits {
				logits[i] = float32(math.Round(float64(logits[i])*8)) / 4 // ties
			}
			for i := 3; i < len(logits); i += 97 {
				logits[i] = float32(math.NaN())
			}
			for i := 5; i < len(logits); i += 89 {
				logits[i] = float32(math.Inf(-1))
			}
			if c.rows > 2 { // the last row has nothing finite
				last := logits[(c.rows-1)*c.vocab:]
				for i := range last {
					last[i] = float32(math.Inf(-1))
					if i%3 == 0 {
						last[i] = float32(math.NaN())
					}
				}
			}
			be.Add(logits, make([]float32, len(logits))) // device-owned, as after the output projection
			want := make([]float32, len(logits))
			for i, x := range logits {
				want[i] = x + 0 // the device's copy: -0 + 0 is +0
			}
			sentinel := logits[0]
			logits[0] = 12345 // host only: a read-back would overwrite it
			ids := make([]int32, c.rows*c.k)
			vals := make([]float32, c.rows*c.k)
			if err := be.TopK(logits, c.rows, c.vocab, c.k, ids, vals); err != nil {
				t.Fatal(err)
			}
			for row := range c.rows {
				wi, wv := refTopK(want[row*c.vocab:(row+1)*c.vocab], c.k)
				gi, gv := ids[row*c.k:(row+1)*c.k], vals[row*c.k:(row+1)*c.k]
				if !slices.Equal(gi, wi) {
					t.Fatalf("row %d: ids %v, want %v", row, gi, wi)
				}
				for j := range gv {
					if math.Float32bits(gv[j]) != math.Float32bits(wv[j]) {
						t.Fatalf("row %d: value %d is %v, want %v", row, j, gv[j], wv[j])
					}
				}
			}
			all := logits[:cap(logits)]
			m := be.mirrors[uintptr(unsafe.Pointer(&all[0]))+uintptr(4*len(all))]
			if m == nil || !m.dev {
				t.Fatalf("the logits' device copy was read back (mirror %+v)", m)
			}
			if logits[0] != 12345 {
				t.Fatal("the host logits were overwritten by a read-back")
			}
			logits[0] = sentinel
		})
	}
	t.Run("host-owned", func(t *testing.T) {
		// logits the host wrote last are uploaded first
		logits := r.floats(3 * 5000)
		ids, vals := make([]int32, 3*2), make([]float32, 3*2)
		if err := be.TopK(logits, 3, 5000, 2, ids, vals); err != nil {
			t.Fatal(err)
		}
		for row := range 3 {
			wi, _ := refTopK(logits[row*5000:(row+1)*5000], 2)
			if !slices.Equal(ids[row*2:row*2+2], wi) {
				t.Fatalf("row %d: ids %v, want %v", row, ids[row*2:row*2+2], wi)
			}
		}
	})
}

// TestBackendTopKBadArgs: out-of-range k, short slices and bad shapes are
// errors naming them, never a panic, and the backend works afterwards.
func TestBackendTopKBadArgs(t *testing.T) {
	r, be := newOpsBackend(t)
	logits := r.floats(2 * 100)
	ids, vals := make([]int32, 2*MaxTopK+2), make([]float32, 2*MaxTopK+2)
	for _, c := range []struct {
		name              string
		rows, vocab, k    int
		nIDs, nVals, nLog int
	}{
		{"k=0", 2, 100, 0, len(ids), len(vals), len(logits)},
		{"k>max", 2, 100, MaxTopK + 1, len(ids), len(vals), len(logits)},
		{"rows=0", 0, 100, 1, len(ids), len(vals), len(logits)},
		{"short ids", 2, 100, 4, 7, len(vals), len(logits)},
		{"short vals", 2, 100, 4, len(ids), 7, len(logits)},
		{"short logits", 2, 100, 4, len(ids), len(vals), 199},
	} {
		if err := be.TopK(logits[:c.nLog], c.rows, c.vocab, c.k, ids[:c.nIDs], vals[:c.nVals]); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
	if err := be.TopK(logits, 2, 100, 1, ids, vals); err != nil {
		t.Fatalf("after the bad calls: %v", err)
	}
	if want, _ := refTopK(logits[100:], 1); ids[1] != want[0] {
		t.Fatalf("row 1 argmax %d, want %d", ids[1], want[0])
	}
}
