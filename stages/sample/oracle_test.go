package sample

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// refSample is the plain oracle for Sampler.Sample: it copies and adjusts
// the whole row, sorts the whole candidate list where the chain sorts, and
// follows llama.cpp's stages literally. r is the uniform draw.
func refSample(p Params, logits []float32, history []int32, r float64) int32 {
	l := slices.Clone(logits)
	for id, b := range p.LogitBias {
		l[id] += b
	}
	if p.RepeatLastN > 0 && !(p.RepeatPenalty == 1 && p.FrequencyPenalty == 0 && p.PresencePenalty == 0) {
		win := history[max(0, len(history)-p.RepeatLastN):]
		count := map[int32]int32{}
		for _, t := range win {
			count[t]++
		}
		for id, c := range count {
			if l[id] <= 0 {
				l[id] *= p.RepeatPenalty
			} else {
				l[id] /= p.RepeatPenalty
			}
			l[id] -= float32(c)*p.FrequencyPenalty + p.PresencePenalty
		}
	}
	var c []cand
	for i, v := range l {
		if v > negInf { // drops -Inf and NaN
			c = append(c, cand{id: int32(i), logit: v})
		}
	}
	if len(c) == 0 {
		return -1
	}
	if p.Temperature <= 0 {
		best := c[0]
		for _, x := range c[1:] {
			if x.logit > best.logit {
				best = x
			}
		}
		return best.id
	}
	sorted := false
	if p.TopK > 0 {
		slices.SortStableFunc(c, func(a, b cand) int { return cmp.Compare(b.logit, a.logit) })
		c = c[:min(p.TopK, len(c))]
		sorted = true
	}
	maxOf := func() float32 {
		m := c[0].logit
		for _, x := range c {
			m = max(m, x.logit)
		}
		return m
	}
	if p.TopP < 1 {
		m := maxOf()
		var sum float32
		for i := range c {
			c[i].p = expf(c[i].logit - m)
			sum += c[i].p
		}
		for i := range c {
			c[i].p /= sum
		}
		slices.SortStableFunc(c, func(a, b cand) int { return cmp.Compare(b.logit, a.logit) })
		var cum float32
		for i := range c {
			cum += c[i].p
			if cum >= p.TopP {
				c = c[:i+1]
				break
			}
		}
		sorted = true
	}
	if p.MinP > 0 {
		minL := maxOf() + float32(math.Log(float64(p.MinP)))
		var keep []cand
		for i, x := range c {
			if x.logit >= minL || (sorted && i == 0) {
				keep = append(keep, x)
			}
		}
		c = keep
	}
	for i := range c {
		c[i].logit /= p.Temperature
	}
	if len(c) == 1 {
		return c[0].id
	}
	m := maxOf()
	var sum float64
	for i := range c {
		c[i].p = expf(c[i].logit - m)
		sum += float64(c[i].p)
	}
	var run float64
	for _, x := range c {
		run += float64(x.p)
		if run >= sum*r {
			return x.id
		}
	}
	return c[len(c)-1].id
}

// TestMatchesOracle runs Sampler and refSample side by side over random
// settings and logits (with ties, banned tokens and penalties), drawing the
// same uniform numbers, and requires the same token every step.
func TestMatchesOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	pick := func(xs ...float64) float64 { return xs[rng.IntN(len(xs))] }
	for trial := range 300 {
		nVocab := []int{1, 7, 300, 3000}[rng.IntN(4)]
		p := Params{
			Temperature:      float32(pick(0, 0.3, 0.8, 1, 1.7)),
			TopK:             []int{0, 1, 5, 40, nVocab, nVocab + 3}[rng.IntN(6)],
			TopP:             float32(pick(1, 0.5, 0.95, 0.999)),
			MinP:             float32(pick(0, 0.05, 0.3)),
			RepeatPenalty:    float32(pick(1, 1.1, 1.5, 0.8)),
			RepeatLastN:      []int{0, 4, 64}[rng.IntN(3)],
			PresencePenalty:  float32(pick(0, 0.5, -0.3)),
			FrequencyPenalty: float32(pick(0, 0.2)),
			Seed:             rng.Uint64N(1 << 33),
		}
		if rng.IntN(2) == 0 {
			p.LogitBias = map[int32]float32{}
			for range rng.IntN(6) {
				p.LogitBias[int32(rng.IntN(nVocab))] = float32(pick(-1, 2.5, math.Inf(-1)))
			}
		}
		spread := pick(0.05, 1, 4)
		logits := make([]float32, nVocab)
		for i := range logits {
			// quantized to make exact ties common
			logits[i] = float32(math.Round(rng.NormFloat64()*spread*4) / 4)
			if rng.IntN(50) == 0 {
				logits[i] = negInf
			}
		}
		name := fmt.Sprintf("%d/n=%d/%+v", trial, nVocab, p)
		s, err := New(p, nVocab)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var ref mt19937
		if s.Seed() <= math.MaxUint32 {
			ref.seed(uint32(s.Seed()))
		} else {
			ref.seedArray([]uint32{uint32(s.Seed()), uint32(s.Seed() >> 32)})
		}
		var history []int32
		for range rng.IntN(10) {
			tok := int32(rng.IntN(nVocab))
			history = append(history, tok)
			s.Accept(tok)
		}
		for step := range 20 {
			r := 0.0
			if p.Temperature > 0 {
				r = ref.float64()
			}
			want := refSample(p, logits, history, r)
			got := s.Sample(logits)
			if got != want {
				t.Fatalf("%s step %d: Sample = %d, oracle = %d", name, step, got, want)
			}
			if got < 0 {
				break
			}
			history = append(history, got)
			s.Accept(got)
		}
	}
}
