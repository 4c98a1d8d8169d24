package bench

// roofline.go: the decode ceiling. A decode step reads every weight matrix
// once (MoE: the router, and the active experts), so tokens per second
// cannot exceed read bandwidth / bytes read per token. ReadBandwidth
// measures the first on this machine (a STREAM-style read: threads scan
// disjoint parts of a buffer much larger than the caches with SIMD
// instructions); DecodeBytes counts the second from the model.

import (
	"bytes"
	"sync"
	"time"

	"github.com/flowinfer/flowinfer/model"
)

// DecodeBytes returns the weight bytes one single-token decode step reads
// at position pos: every matrix of every layer (for MoE, the router plus
// NExpertUsed of NExpert experts' share), the output matrix, one embedding
// row, and the K and V cache rows of positions 0..pos, kvPerToken bytes
// each (model.KVBytesPerToken of the cache's types).
func DecodeBytes(m *model.Model, kvPerToken int, pos int) int64 {
	var n int64
	size := func(w *model.Weight) {
		if w != nil {
			n += int64(len(w.Data))
		}
	}
	size(m.Output)
	n += int64(m.TokEmbd.RowBytes)
	for i := range m.Layers {
		L := &m.Layers[i]
		for _, w := range []*model.Weight{L.Wq, L.Wk, L.Wv, L.Wo, L.Gate, L.Up, L.Down, L.Router} {
			size(w)
		}
		var exp int64
		for _, e := range [][]model.Weight{L.GateExps, L.UpExps, L.DownExps} {
			for j := range e {
				exp += int64(len(e[j].Data))
			}
		}
		if m.NExpert > 0 {
			n += exp * int64(m.NExpertUsed) / int64(m.NExpert)
		}
	}
	n += int64(pos+1) * int64(kvPerToken)
	return n
}

// ReadBandwidth returns the read bandwidth in bytes per second that
// threads goroutines reach scanning disjoint parts of a buffer of size
// bytes, the best of reps passes.
func ReadBandwidth(size, threads, reps int) float64 {
	threads = max(threads, 1)
	buf := make([]byte, size)
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = 0 // touch every page before timing
	}
	part := size / threads
	best := 0.0
	for range max(reps, 1) {
		var wg sync.WaitGroup
		t0 := time.Now()
		for w := range threads {
			wg.Add(1)
			go func(p []byte) {
				defer wg.Done()
				// IndexByte runs a SIMD loop over the whole slice when the
				// byte is absent: a pure read stream.
				if bytes.IndexByte(p, 1) >= 0 {
					panic("bench: buffer not zero")
				}
			}(buf[w*part : (w+1)*part])
		}
		wg.Wait()
		best = max(best, float64(part*threads)/time.Since(t0).Seconds())
	}
	return best
}
