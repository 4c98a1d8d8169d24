package model

// topk.go: logits that stay on the device. A sampler that needs only the
// largest logits of a row (a greedy token, top-k sampling) says so in
// Batch.TopK; Ops that rank logits where they computed them (TopKer,
// package gpu) then move k (value, id) pairs per row instead of the
// vocabulary, and Decode returns rows that hold those values at their ids
// and -Inf everywhere else. Other Ops return whole rows.

import "math"

// TopKer is implemented by Ops that keep the logits in device memory and
// can rank them there.
type TopKer interface {
	// MaxTopK is the largest k TopK takes; 0 means the backend reads whole
	// rows back (cheaper there, e.g. on a CPU-type device).
	MaxTopK() int
	// TopK writes the k largest of each of rows rows of nVocab logits, best
	// first (larger value first, lower id among equal values, NaN as
	// -Inf), to vals and ids at row·k, with id -1 past a row's length.
	TopK(logits []float32, rows, nVocab, k int, ids []int32, vals []float32) error
}

// topKRows replaces the output rows by their k largest logits, -Inf
// elsewhere, ranked on the device by tk.
func (c *Context) topKRows(tk TopKer, out []float32, rows, k int) error {
	V := c.M.NVocab
	if n := rows * k; len(c.topIDs) < n {
		c.topIDs, c.topVals = make([]int32, n), make([]float32, n)
	}
	if err := tk.TopK(out, rows, V, k, c.topIDs, c.topVals); err != nil {
		return err
	}
	ninf := float32(math.Inf(-1))
	for r := range rows {
		row := out[r*V : (r+1)*V]
		for i := range row {
			row[i] = ninf
		}
		for j := r * k; j < (r+1)*k; j++ {
			if id := c.topIDs[j]; id >= 0 && int(id) < V {
				row[id] = c.topVals[j]
			}
		}
	}
	return nil
}
