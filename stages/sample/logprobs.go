package sample

import (
	"math"
	"slices"
)

// Alt is a token and its log probability.
type Alt struct {
	Token   int32
	Logprob float32
}

// Logprobs returns the log probability of tok under the softmax of the raw
// logits (before penalties, bias, temperature and truncation: the model's
// own distribution, as llama-server reports by default and OpenAI
// documents), and the top most likely tokens with theirs, most likely
// first (ties: lower id first), appended to dst[:0]. Computed in float64.
func Logprobs(logits []float32, tok int32, top int, dst []Alt) (float32, []Alt) {
	mx := float32(math.Inf(-1))
	for _, l := range logits {
		mx = max(mx, l)
	}
	var sum float64
	for _, l := range logits {
		sum += math.Exp(float64(l - mx))
	}
	lse := float64(mx) + math.Log(sum)
	lp := func(l float32) float32 { return float32(float64(l) - lse) }
	dst = dst[:0]
	if top > 0 {
		// keep the best top in dst, sorted; a new token enters only if it
		// beats the last (top is at most 20: insertion is cheapest)
		for id, l := range logits {
			if len(dst) == top && l <= dst[len(dst)-1].Logprob {
				continue
			}
			a := Alt{Token: int32(id), Logprob: l}
			i, _ := slices.BinarySearchFunc(dst, a, func(x, y Alt) int {
				switch {
				case x.Logprob > y.Logprob:
					return -1
				case x.Logprob < y.Logprob:
					return 1
				}
				return int(x.Token - y.Token)
			})
			if len(dst) < top {
				dst = slices.Insert(dst, i, a)
			} else {
				copy(dst[i+1:], dst[i:len(dst)-1])
				dst[i] = a
			}
		}
		for i := range dst {
			dst[i].Logprob = lp(dst[i].Logprob)
		}
	}
	return lp(logits[tok]), dst
}
