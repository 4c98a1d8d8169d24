package sample

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/stages/sample/grammar"
)

// plain returns parameters with every stage off: temperature 1, no top-k,
// top-p, min-p, penalties or bias, a fixed seed.
func plain() Params {
	return Params{Temperature: 1, TopP: 1, RepeatPenalty: 1, Seed: 1}
}

func logOf(probs ...float64) []float32 {
	l := make([]float32, len(probs))
	for i, p := range probs {
		l[i] = float32(math.Log(p))
	}
	return l
}

// softmax64 is the reference softmax of logits/temp in float64.
func softmax64(logits []float32, temp float64) []float64 {
	m := math.Inf(-1)
	for _, l := range logits {
		m = max(m, float64(l)/temp)
	}
	p := make([]float64, len(logits))
	var sum float64
	for i, l := range logits {
		p[i] = math.Exp(float64(l)/temp - m)
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

func mustNew(t testing.TB, p Params, n int) *Sampler {
	t.Helper()
	s, err := New(p, n)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// draws samples n times and returns how often each id came up.
func draws(s *Sampler, logits []float32, n int) []int {
	freq := make([]int, len(logits))
	for range n {
		id := s.Sample(logits)
		if id < 0 {
			panic("no token")
		}
		freq[id]++
	}
	return freq
}

// checkFreq asserts each frequency is within 5 sigma of its expected
// probability (binomial), and that zero-probability ids never came up.
func checkFreq(t *testing.T, freq []int, want []float64, n int) {
	t.Helper()
	for i, p := range want {
		got := float64(freq[i])
		exp := p * float64(n)
		sigma := math.Sqrt(float64(n) * p * (1 - p))
		if p == 0 {
			if freq[i] != 0 {
				t.Errorf("id %d: drawn %d times, want never", i, freq[i])
			}
			continue
		}
		if math.Abs(got-exp) > 5*sigma+1 {
			t.Errorf("id %d: drawn %d times, want %.0f ± %.0f (p=%.4f)", i, freq[i], exp, 5*sigma, p)
		}
	}
}

func TestValidate(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	cases := []struct {
		name string
		edit func(*Params)
		ok   bool
	}{
		{"defaults", func(*Params) {}, true},
		{"greedy", func(p *Params) { p.Temperature = 0 }, true},
		{"negative temperature is greedy", func(p *Params) { p.Temperature = -1 }, true},
		{"nan temperature", func(p *Params) { p.Temperature = nan }, false},
		{"inf temperature", func(p *Params) { p.Temperature = inf }, false},
		{"top_p above 1", func(p *Params) { p.TopP = 1.5 }, false},
		{"top_p negative", func(p *Params) { p.TopP = -0.1 }, false},
		{"min_p above 1", func(p *Params) { p.MinP = 2 }, false},
		{"min_p nan", func(p *Params) { p.MinP = nan }, false},
		{"repeat penalty zero", func(p *Params) { p.RepeatPenalty = 0 }, false},
		{"repeat_last_n -1", func(p *Params) { p.RepeatLastN = -1 }, false},
		{"presence inf", func(p *Params) { p.PresencePenalty = inf }, false},
		{"frequency nan", func(p *Params) { p.FrequencyPenalty = nan }, false},
		{"bias ban", func(p *Params) { p.LogitBias = map[int32]float32{3: float32(math.Inf(-1))} }, true},
		{"bias +inf", func(p *Params) { p.LogitBias = map[int32]float32{3: inf} }, false},
		{"bias negative id", func(p *Params) { p.LogitBias = map[int32]float32{-1: 1} }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := DefaultParams()
			c.edit(&p)
			err := p.Validate()
			if (err == nil) != c.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, c.ok)
			}
			if err != nil && !errors.Is(err, ErrParams) {
				t.Fatalf("error %v does not wrap ErrParams", err)
			}
		})
	}
	if _, err := New(Params{Temperature: 1, TopP: 1, RepeatPenalty: 1, LogitBias: map[int32]float32{10: 1}}, 10); !errors.Is(err, ErrParams) {
		t.Errorf("bias id beyond vocabulary: err = %v", err)
	}
	if _, err := New(plain(), 0); err == nil {
		t.Error("empty vocabulary accepted")
	}
}

func TestDefaultParams(t *testing.T) {
	p := DefaultParams()
	if p.Temperature != 0.8 || p.TopK != 40 || p.TopP != 0.95 || p.MinP != 0.05 ||
		p.RepeatPenalty != 1 || p.RepeatLastN != 64 || p.Seed != RandomSeed {
		t.Fatalf("DefaultParams() = %+v", p)
	}
	s := mustNew(t, p, 100)
	if s.Seed() == RandomSeed || s.Seed() > math.MaxUint32 {
		t.Errorf("random seed resolved to %#x", s.Seed())
	}
}

func TestTopK(t *testing.T) {
	logits := logOf(0.05, 0.3, 0.1, 0.25, 0.2, 0.1)
	for _, k := range []int{1, 2, 3, 6, 100} {
		p := plain()
		p.TopK = k
		s := mustNew(t, p, len(logits))
		c := s.candidates(logits)
		if got, want := len(c), min(k, len(logits)); got != want {
			t.Fatalf("k=%d: %d candidates, want %d", k, got, want)
		}
		if !slices.IsSortedFunc(c, cmpCand) {
			t.Errorf("k=%d: candidates not sorted: %v", k, c)
		}
		order := []int32{1, 3, 4, 2, 5, 0} // ties (2, 5) broken by id
		for i, x := range c {
			if x.id != order[i] {
				t.Errorf("k=%d: candidate %d is id %d, want %d", k, i, x.id, order[i])
			}
		}
	}
	t.Run("draws", func(t *testing.T) {
		p := plain()
		p.TopK = 3
		s := mustNew(t, p, len(logits))
		const n = 100000
		want := []float64{0, 0.3 / 0.75, 0, 0.25 / 0.75, 0.2 / 0.75, 0}
		checkFreq(t, draws(s, logits, n), want, n)
	})
}

func TestTopP(t *testing.T) {
	// probabilities 0.5, 0.25, 0.125, 0.0625, 0.0625 (ids shuffled)
	logits := logOf(0.0625, 0.25, 0.5, 0.0625, 0.125)
	cases := []struct {
		p    float32
		keep []int32
	}{
		{0, []int32{2}},
		{0.49, []int32{2}},
		{0.51, []int32{2, 1}},
		{0.74, []int32{2, 1}},
		{0.76, []int32{2, 1, 4}},
		{0.87, []int32{2, 1, 4}},
		{0.88, []int32{2, 1, 4, 0}},
		{0.999, []int32{2, 1, 4, 0, 3}},
	}
	for _, c := range cases {
		for _, sorted := range []bool{true, false} {
			p := plain()
			p.TopP = c.p
			if sorted {
				p.TopK = 100
			}
			s := mustNew(t, p, len(logits))
			cs := topP(s.candidates(logits), c.p, sorted, &s.nucleus)
			var ids []int32
			for _, x := range cs {
				ids = append(ids, x.id)
			}
			if !slices.Equal(ids, c.keep) {
				t.Errorf("top_p=%v sorted=%v: kept %v, want %v", c.p, sorted, ids, c.keep)
			}
		}
	}
	t.Run("beyond the probe", func(t *testing.T) {
		// 1000 equal tokens: top-p 0.9 needs 900 of them, more than the
		// first partial sort of topPProbe
		logits := make([]float32, 1000)
		p := plain()
		p.TopP = 0.9
		s := mustNew(t, p, len(logits))
		cs := topP(s.candidates(logits), 0.9, false, &s.nucleus)
		if len(cs) < 899 || len(cs) > 901 {
			t.Fatalf("kept %d, want about 900", len(cs))
		}
		for i, x := range cs {
			if x.id != int32(i) {
				t.Fatalf("candidate %d is id %d (ties must keep id order)", i, x.id)
			}
		}
	})
	t.Run("draws", func(t *testing.T) {
		p := plain()
		p.TopP = 0.8
		s := mustNew(t, p, len(logits))
		const n = 100000
		want := []float64{0, 0.25 / 0.875, 0.5 / 0.875, 0, 0.125 / 0.875}
		checkFreq(t, draws(s, logits, n), want, n)
	})
}

func TestMinP(t *testing.T) {
	probs := []float64{0.06, 0.5, 0.04, 0.3, 0.1}
	cases := []struct {
		minP float32
		keep []int32 // in id order when unsorted
	}{
		{0.01, []int32{0, 1, 2, 3, 4}},
		{0.1, []int32{0, 1, 3, 4}}, // threshold 0.05
		{0.19, []int32{1, 3, 4}},   // threshold 0.095
		{0.21, []int32{1, 3}},      // threshold 0.105
		{0.61, []int32{1}},         // threshold 0.305
		{1, []int32{1}},            // only the max
	}
	for _, c := range cases {
		// min-p is relative to the max: shifting all logits changes nothing
		for _, shift := range []float32{0, 7.5, -30} {
			logits := logOf(probs...)
			for i := range logits {
				logits[i] += shift
			}
			p := plain()
			p.MinP = c.minP
			s := mustNew(t, p, len(logits))
			cs := minP(s.candidates(logits), c.minP, false)
			var ids []int32
			for _, x := range cs {
				ids = append(ids, x.id)
			}
			if !slices.Equal(ids, c.keep) {
				t.Errorf("min_p=%v shift=%v: kept %v, want %v", c.minP, shift, ids, c.keep)
			}
			// the sorted path keeps the same set
			p.TopK = 10
			s = mustNew(t, p, len(logits))
			cs = minP(s.candidates(logits), c.minP, true)
			ids = ids[:0]
			for _, x := range cs {
				ids = append(ids, x.id)
			}
			slices.Sort(ids)
			if !slices.Equal(ids, c.keep) {
				t.Errorf("min_p=%v shift=%v sorted: kept %v, want %v", c.minP, shift, ids, c.keep)
			}
		}
	}
}

func TestPenalties(t *testing.T) {
	logits := []float32{2, -2, 1, 0.5, 0}
	p := plain()
	p.RepeatPenalty = 2
	p.FrequencyPenalty = 0.5
	p.PresencePenalty = 0.25
	p.RepeatLastN = 4
	s := mustNew(t, p, len(logits))
	for _, tok := range []int32{0, 1, 0, 4, 99, -1} { // 99 and -1 are ignored
		s.Accept(tok)
	}
	s.applyBiasPenalties(logits)
	got := map[int32]float32{}
	for _, a := range s.adj {
		got[a.id] = a.logit
	}
	s.clearTouched()
	want := map[int32]float32{
		0: 2/2.0 - (2*0.5 + 0.25),  // positive: divided; seen twice
		1: -2*2.0 - (1*0.5 + 0.25), // negative: multiplied
		4: 0*2.0 - (1*0.5 + 0.25),  // zero counts as non-positive
	}
	if len(got) != len(want) {
		t.Fatalf("adjusted %v, want %v", got, want)
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("token %d: logit %v, want %v", id, got[id], w)
		}
	}
	for i, l := range s.touched {
		if l != 0 {
			t.Fatalf("touched word %d not cleared", i)
		}
	}

	// the window slides: after two more tokens, the first 0 and the 1 drop out
	s.Accept(3)
	s.Accept(3)
	s.applyBiasPenalties(logits)
	got = map[int32]float32{}
	for _, a := range s.adj {
		got[a.id] = a.logit
	}
	s.clearTouched()
	want = map[int32]float32{
		0: 2/2.0 - (0.5 + 0.25),
		4: 0 - (0.5 + 0.25),
		3: 0.5/2.0 - (2*0.5 + 0.25),
	}
	if len(got) != len(want) {
		t.Fatalf("after sliding: adjusted %v, want %v", got, want)
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("after sliding: token %d: logit %v, want %v", id, got[id], w)
		}
	}

	t.Run("greedy sees penalties", func(t *testing.T) {
		p := plain()
		p.Temperature = 0
		p.RepeatPenalty = 4
		p.RepeatLastN = 64
		s := mustNew(t, p, len(logits))
		if got := s.Sample(logits); got != 0 {
			t.Fatalf("before: %d, want 0", got)
		}
		s.Accept(0) // 2 -> 0.5, below token 2's 1.0
		if got := s.Sample(logits); got != 2 {
			t.Fatalf("after accepting 0: %d, want 2", got)
		}
		s.Reset()
		if got := s.Sample(logits); got != 0 {
			t.Fatalf("after Reset: %d, want 0", got)
		}
	})
	t.Run("disabled", func(t *testing.T) {
		p := plain()
		p.RepeatLastN = 64 // repeat 1, no presence/frequency: llama.cpp disables the stage
		s := mustNew(t, p, len(logits))
		s.Accept(0)
		s.applyBiasPenalties(logits)
		if len(s.adj) != 0 {
			t.Fatalf("disabled penalties changed %v", s.adj)
		}
	})
}

func TestLogitBias(t *testing.T) {
	ninf := float32(math.Inf(-1))
	logits := []float32{1, 3, 2, 0.5}
	t.Run("ban the best", func(t *testing.T) {
		for _, temp := range []float32{0, 1} {
			p := plain()
			p.Temperature = temp
			p.LogitBias = map[int32]float32{1: ninf}
			s := mustNew(t, p, len(logits))
			freq := draws(s, logits, 5000)
			if freq[1] != 0 {
				t.Fatalf("temp %v: banned token drawn %d times", temp, freq[1])
			}
			if temp == 0 && freq[2] != 5000 {
				t.Fatalf("greedy with ban: %v, want always 2", freq)
			}
		}
	})
	t.Run("bias then penalty", func(t *testing.T) {
		p := plain()
		p.Temperature = 0
		p.LogitBias = map[int32]float32{3: 10, 0: -1}
		p.RepeatPenalty = 2
		p.RepeatLastN = 8
		s := mustNew(t, p, len(logits))
		s.Accept(3)
		s.applyBiasPenalties(logits)
		got := map[int32]float32{}
		for _, a := range s.adj {
			got[a.id] = a.logit
		}
		s.clearTouched()
		if got[3] != (0.5+10)/2 || got[0] != 0 || len(got) != 2 {
			t.Fatalf("adjusted %v, want 3: 5.25, 0: 0", got)
		}
		if id := s.Sample(logits); id != 3 {
			t.Fatalf("greedy = %d, want 3", id)
		}
	})
	t.Run("all banned", func(t *testing.T) {
		bias := map[int32]float32{}
		for i := range logits {
			bias[int32(i)] = ninf
		}
		for _, topK := range []int{0, 2} {
			for _, temp := range []float32{0, 1} {
				p := plain()
				p.TopK, p.Temperature, p.LogitBias = topK, temp, bias
				s := mustNew(t, p, len(logits))
				if id := s.Sample(logits); id != -1 {
					t.Errorf("top_k=%d temp=%v: %d, want -1", topK, temp, id)
				}
			}
		}
	})
	t.Run("bias lifts a token", func(t *testing.T) {
		p := plain()
		p.TopK = 1
		p.LogitBias = map[int32]float32{3: 2.6}
		s := mustNew(t, p, len(logits))
		if id := s.Sample(logits); id != 3 {
			t.Fatalf("got %d, want 3", id)
		}
	})
}

func TestTemperature(t *testing.T) {
	logits := []float32{0.2, 1.5, -1, 1.4, 0.9}
	t.Run("greedy", func(t *testing.T) {
		p := plain()
		p.Temperature = 0
		if got := mustNew(t, p, len(logits)).Sample(logits); got != 1 {
			t.Fatalf("greedy = %d, want 1", got)
		}
		tie := []float32{0, 2, 1, 2}
		if got := mustNew(t, p, len(tie)).Sample(tie); got != 1 {
			t.Fatalf("greedy on a tie = %d, want the lower id 1", got)
		}
		nan := []float32{float32(math.NaN()), 0, float32(math.NaN())}
		if got := mustNew(t, p, len(nan)).Sample(nan); got != 1 {
			t.Fatalf("greedy with NaNs = %d, want 1", got)
		}
	})
	t.Run("low temperature tends to greedy", func(t *testing.T) {
		p := plain()
		p.Temperature = 0.005 // 0.1 logit gap / 0.005 = e^-20
		freq := draws(mustNew(t, p, len(logits)), logits, 10000)
		if freq[1] != 10000 {
			t.Fatalf("temperature 0.005: %v, want always 1", freq)
		}
	})
	for _, temp := range []float32{0.5, 1, 2} {
		t.Run("softmax", func(t *testing.T) {
			p := plain()
			p.Temperature = temp
			const n = 200000
			checkFreq(t, draws(mustNew(t, p, len(logits)), logits, n), softmax64(logits, float64(temp)), n)
		})
	}
}

// TestChainStatistics draws with the full default chain and compares against
// the distribution the chain should produce, computed here from scratch.
func TestChainStatistics(t *testing.T) {
	// ten tokens: top-k 6 drops 4, top-p 0.9 and min-p 0.1 trim the tail
	probs := []float64{0.02, 0.25, 0.01, 0.2, 0.15, 0.12, 0.1, 0.08, 0.04, 0.03}
	logits := logOf(probs...)
	p := DefaultParams()
	p.TopK, p.TopP, p.MinP, p.Temperature, p.Seed = 6, 0.9, 0.5, 0.7, 7
	// top-k 6: ids 1,3,4,5,6,7 (sum 0.9); renormalised cum: .278 .5 .667 .8 .911 -> top-p keeps 1,3,4,5,6;
	// min-p 0.5 of 0.25 = 0.125: keeps 1,3,4 (0.15 >= 0.125), drops 5 (0.12)
	keep := []int{1, 3, 4}
	want := make([]float64, len(probs))
	var sum float64
	for _, i := range keep {
		want[i] = math.Pow(probs[i], 1/0.7)
		sum += want[i]
	}
	for i := range want {
		want[i] /= sum
	}
	const n = 200000
	checkFreq(t, draws(mustNew(t, p, len(logits)), logits, n), want, n)
}

func TestSeeds(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	logits := make([]float32, 1000)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 2)
	}
	seq := func(seed uint64, reset bool) []int32 {
		p := DefaultParams()
		p.Seed = seed
		p.RepeatPenalty = 1.1
		s := mustNew(t, p, len(logits))
		if reset {
			for range 17 {
				s.Accept(s.Sample(logits))
			}
			s.Reset()
		}
		out := make([]int32, 200)
		for i := range out {
			out[i] = s.Sample(logits)
			s.Accept(out[i])
		}
		return out
	}
	a, b := seq(42, false), seq(42, false)
	if !slices.Equal(a, b) {
		t.Fatal("same seed, different sequences")
	}
	if c := seq(42, true); !slices.Equal(a, c) {
		t.Fatal("Reset does not restart the sequence")
	}
	for _, other := range []uint64{43, 0, 42 | 1<<32, 1 << 40} {
		if c := seq(other, false); slices.Equal(a, c) {
			t.Errorf("seeds 42 and %#x give the same sequence", other)
		}
	}
	if slices.Equal(seq(1<<40, false), seq(1<<41, false)) {
		t.Error("large seeds 2^40 and 2^41 give the same sequence")
	}
}

func TestSampleDoesNotModifyLogits(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	logits := make([]float32, 5000)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64())
	}
	orig := slices.Clone(logits)
	for _, topK := range []int{0, 40} {
		p := DefaultParams()
		p.TopK = topK
		p.Seed = 1
		p.RepeatPenalty = 1.3
		p.LogitBias = map[int32]float32{5: -2, 17: float32(math.Inf(-1))}
		s := mustNew(t, p, len(logits))
		for range 20 {
			s.Accept(s.Sample(logits))
		}
		if !slices.Equal(logits, orig) {
			t.Fatalf("top_k=%d: logits modified", topK)
		}
	}
	if got := mustNew(t, plain(), 10).Sample(make([]float32, 9)); got != -1 {
		t.Fatalf("wrong length: %d, want -1", got)
	}
}

func TestZeroAllocs(t *testing.T) {
	const nVocab = 20000
	rng := rand.New(rand.NewPCG(5, 6))
	logits := make([]float32, nVocab)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 3)
	}
	cases := map[string]func(*Params){
		"default":             func(*Params) {},
		"greedy":              func(p *Params) { p.Temperature = 0 },
		"full vocab":          func(p *Params) { p.TopK = 0; p.TopP = 0.99 },
		"full vocab no top-p": func(p *Params) { p.TopK = 0; p.TopP = 1 },
		"penalties and bias": func(p *Params) {
			p.RepeatPenalty, p.FrequencyPenalty, p.PresencePenalty = 1.1, 0.2, 0.3
			p.LogitBias = map[int32]float32{1: 2, 2: float32(math.Inf(-1)), 3000: -1}
		},
	}
	for name, edit := range cases {
		t.Run(name, func(t *testing.T) {
			p := DefaultParams()
			p.Seed = 9
			edit(&p)
			s := mustNew(t, p, nVocab)
			for i := range 100 {
				s.Accept(int32(i * 7))
			}
			tok := int32(0)
			if a := testing.AllocsPerRun(50, func() {
				tok = s.Sample(logits)
				s.Accept(tok)
			}); a != 0 {
				t.Fatalf("%v allocations per Sample+Accept", a)
			}
		})
	}
}

// TestGrammarConstrained: with a grammar, only allowed tokens come out,
// greedy (both the shortcut and the masked path) and sampled, and end of
// generation only where the grammar can end.
func TestGrammarConstrained(t *testing.T) {
	words := []string{"", "a", "b", "ab", "c", "ba", "x"} // id 0: EOS
	pieces := make([][]byte, len(words))
	for i, w := range words {
		pieces[i] = []byte(w)
	}
	v, err := grammar.NewVocab(pieces, []int32{0})
	if err != nil {
		t.Fatal(err)
	}
	g := grammar.MustParse(`root ::= ("a" | "b")+ "c"`)
	if _, err := New(Params{Grammar: g, RepeatPenalty: 1}, len(words)); err == nil {
		t.Error("New accepted a grammar without a vocabulary")
	}
	for _, temp := range []float32{0, 1} {
		for seed := range uint64(20) {
			p := DefaultParams()
			p.Temperature, p.Seed, p.Grammar = temp, seed, g
			s, err := NewConstrained(p, v)
			if err != nil {
				t.Fatal(err)
			}
			// x is always the most likely token, then EOS: both banned
			// until the end, where only EOS remains
			logits := []float32{5, 1, 1.5, 0.5, 0.2, 1.2, 9}
			var out string
			for range 50 {
				tok := s.Sample(logits)
				if tok < 0 {
					t.Fatalf("temp %v seed %d: no token after %q: %v", temp, seed, out, s.GrammarErr())
				}
				if tok == 0 {
					break
				}
				out += words[tok]
				if len(out) > 4 { // push towards the end: make c likely
					logits[4] = 20
				}
			}
			if len(out) < 2 || out[len(out)-1] != 'c' || strings.Trim(out[:len(out)-1], "ab") != "" {
				t.Errorf("temp %v seed %d: output %q is not in the grammar", temp, seed, out)
			}
			if tok := s.Sample(logits); tok != -1 || s.GrammarErr() == nil {
				t.Errorf("after EOS: token %d, error %v", tok, s.GrammarErr())
			}
		}
	}
}
