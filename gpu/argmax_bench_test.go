//go:build cgo

package gpu

import (
	"fmt"
	"testing"
)

// BenchmarkTopK times Backend.TopK on device-owned logits of one row of a
// 128256-token vocabulary (llama 3's), for the greedy k and the sampler's
// default top-k, against reading the whole row back (ToHost), which is
// what a step costs without the reduction.
func BenchmarkTopK(b *testing.B) {
	r := benchRig(b)
	be, err := newBackend(r.d, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	const vocab = 128256
	logits := make([]float32, vocab)
	for i := range logits {
		logits[i] = float32(i%1000) / 7
	}
	zero := make([]float32, vocab)
	ids, vals := make([]int32, MaxTopK), make([]float32, MaxTopK)
	for _, k := range []int{1, 40, 64} {
		b.Run(fmt.Sprintf("k=%d", k), func(b *testing.B) {
			for b.Loop() {
				be.Add(logits, zero) // device-owned, as after the output projection
				if err := be.TopK(logits, 1, vocab, k, ids, vals); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("readback", func(b *testing.B) {
		for b.Loop() {
			be.Add(logits, zero)
			if err := be.ToHost(logits); err != nil {
				b.Fatal(err)
			}
		}
	})
}
