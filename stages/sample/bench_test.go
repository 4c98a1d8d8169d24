package sample

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkSample measures one Sample at Qwen2/3's vocabulary size with
// normally distributed logits (std 3, like a real model's spread).
func BenchmarkSample(b *testing.B) {
	const nVocab = 151936
	rng := rand.New(rand.NewPCG(7, 8))
	logits := make([]float32, nVocab)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 3)
	}
	cases := []struct {
		name string
		edit func(*Params)
	}{
		{"chain=default", func(*Params) {}},
		{"chain=greedy", func(p *Params) { p.Temperature = 0 }},
		{"chain=default+penalties+bias", func(p *Params) {
			p.RepeatPenalty, p.PresencePenalty, p.FrequencyPenalty = 1.1, 0.5, 0.2
			p.LogitBias = map[int32]float32{0: -100, 1: 2, 151935: 1}
		}},
		{"chain=topk0-topp0.95", func(p *Params) { p.TopK = 0 }},
		{"chain=topk0-topp1-minp0", func(p *Params) { p.TopK, p.TopP, p.MinP = 0, 1, 0 }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			p := DefaultParams()
			p.Seed = 1
			c.edit(&p)
			s, err := New(p, nVocab)
			if err != nil {
				b.Fatal(err)
			}
			for i := range 64 {
				s.Accept(int32(i * 1000))
			}
			b.ReportAllocs()
			for b.Loop() {
				s.Sample(logits)
			}
		})
	}
}

func BenchmarkStopMatcher(b *testing.B) {
	pieces := []string{"The", " quick", " brown", " fox", " <", "/", "think", ">", " jumps", "\n", "\n"}
	for _, stops := range [][]string{nil, {"</s>", "<|im_end|>", "\n\nUser:"}} {
		b.Run("stops="+string(rune('0'+len(stops))), func(b *testing.B) {
			m := NewStopMatcher(stops)
			b.ReportAllocs()
			for b.Loop() {
				m.Reset()
				for _, p := range pieces {
					m.Push(p)
				}
				m.Flush()
			}
		})
	}
}
