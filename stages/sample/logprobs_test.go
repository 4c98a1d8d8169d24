package sample

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// TestLogprobs against a plain computation: log-softmax in float64 and a
// full sort, on random rows of odd and round sizes, with ties.
func TestLogprobs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 7, 64, 1000, 32003} {
		logits := make([]float32, n)
		for i := range logits {
			logits[i] = float32(rng.NormFloat64() * 4)
			if i%17 == 3 {
				logits[i] = logits[i/2] // ties
			}
		}
		var sum float64
		for _, l := range logits {
			sum += math.Exp(float64(l))
		}
		ref := make([]Alt, n)
		for i, l := range logits {
			ref[i] = Alt{int32(i), float32(float64(l) - math.Log(sum))}
		}
		sort.SliceStable(ref, func(i, j int) bool { return ref[i].Logprob > ref[j].Logprob })
		tok := int32(rng.IntN(n))
		for _, top := range []int{0, 1, 5, 20} {
			got, alts := Logprobs(logits, tok, top, nil)
			want := float32(float64(logits[tok]) - math.Log(sum))
			if math.Abs(float64(got-want)) > 1e-5 {
				t.Errorf("n=%d: logprob %v, want %v", n, got, want)
			}
			if len(alts) != min(top, n) {
				t.Fatalf("n=%d top=%d: %d alternatives", n, top, len(alts))
			}
			var total float64
			for i, a := range alts {
				if a.Token != ref[i].Token || math.Abs(float64(a.Logprob-ref[i].Logprob)) > 1e-5 {
					t.Errorf("n=%d top=%d: alt %d = %+v, want %+v", n, top, i, a, ref[i])
				}
				total += math.Exp(float64(a.Logprob))
			}
			if total > 1+1e-5 {
				t.Errorf("probabilities sum to %v", total)
			}
		}
	}
}
