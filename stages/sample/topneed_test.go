package sample

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/flowinfer/flowinfer/stages/sample/grammar"
)

// sparse returns row with only its k largest logits (larger first, lower
// id among equals, NaN as -Inf: the device ranking) kept, -Inf elsewhere.
func sparse(row []float32, k int) []float32 {
	ids := make([]int, len(row))
	for i := range ids {
		ids[i] = i
	}
	v := func(i int) float32 {
		if math.IsNaN(float64(row[i])) {
			return float32(math.Inf(-1))
		}
		return row[i]
	}
	slices.SortFunc(ids, func(a, b int) int {
		if c := cmp.Compare(v(b), v(a)); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	out := make([]float32, len(row))
	for i := range out {
		out[i] = float32(math.Inf(-1))
	}
	for _, i := range ids[:k] {
		out[i] = v(i)
	}
	return out
}

// TestTopNeedSparseRow: for each setting where TopNeed is not 0, two
// samplers with the same seed, one given whole rows and one given the
// rows cut to their TopNeed largest logits, pick the same token at every
// step (the same tokens are accepted into both), over rows with many
// exact ties and some NaN and -Inf. The settings where lowering-only
// penalties and bans move tokens into and out of the top k are the point;
// the ones that need the whole row must say 0.
func TestTopNeedSparseRow(t *testing.T) {
	const V = 300
	ban := float32(math.Inf(-1))
	cases := []struct {
		name string
		p    Params
		want int // TopNeed
	}{
		{"greedy", Params{Temperature: 0, RepeatPenalty: 1}, 1},
		{"default chain", Params{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05, RepeatPenalty: 1, RepeatLastN: 64, Seed: 7}, 40},
		{"top-k 3, hot", Params{Temperature: 3, TopK: 3, TopP: 1, RepeatPenalty: 1, Seed: 9}, 3},
		{"greedy, penalties", Params{Temperature: 0, RepeatPenalty: 1.5, RepeatLastN: 6, PresencePenalty: 0.5, FrequencyPenalty: 0.25}, 7},
		{"top-k, penalties, bans", Params{Temperature: 1, TopK: 5, TopP: 0.9, RepeatPenalty: 1.3, RepeatLastN: 8, Seed: 3,
			LogitBias: map[int32]float32{0: ban, 1: ban, 2: -3, 17: -0.5}}, 17},
		{"no top-k", Params{Temperature: 1, TopP: 0.9, RepeatPenalty: 1, Seed: 1}, 0},
		{"positive bias", Params{Temperature: 0, RepeatPenalty: 1, LogitBias: map[int32]float32{5: 2}}, 0},
		{"repeat penalty below 1", Params{Temperature: 0, RepeatPenalty: 0.9, RepeatLastN: 4}, 0},
		{"negative presence", Params{Temperature: 0, RepeatPenalty: 1, RepeatLastN: 4, PresencePenalty: -1}, 0},
		{"top-k past the vocabulary", Params{Temperature: 1, TopK: 1000, RepeatPenalty: 1, Seed: 2}, V},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			whole, err := New(c.p, V)
			if err != nil {
				t.Fatal(err)
			}
			cut, _ := New(c.p, V)
			k := whole.TopNeed()
			if k != c.want {
				t.Fatalf("TopNeed %d, want %d", k, c.want)
			}
			if k == 0 {
				return
			}
			rng := rand.New(rand.NewPCG(1, uint64(len(c.name))))
			row := make([]float32, V)
			for step := range 300 {
				for i := range row {
					row[i] = float32(math.Round(rng.NormFloat64()*6)) / 2 // ties
				}
				row[rng.IntN(V)] = float32(math.NaN())
				row[rng.IntN(V)] = ban
				a, b := whole.Sample(row), cut.Sample(sparse(row, k))
				if a != b {
					t.Fatalf("step %d: whole row gives %d, top %d gives %d", step, a, k, b)
				}
				whole.Accept(a)
				cut.Accept(a)
			}
		})
	}
}

// TestTopNeedGrammar: a constrained sampler needs the whole row (the
// mask can ban every token of any top k), greedy or not.
func TestTopNeedGrammar(t *testing.T) {
	v, err := grammar.NewVocab([][]byte{[]byte(""), []byte("a"), []byte("b")}, []int32{0})
	if err != nil {
		t.Fatal(err)
	}
	for _, temp := range []float32{0, 1} {
		p := Params{Temperature: temp, TopK: 2, TopP: 1, RepeatPenalty: 1, Grammar: grammar.MustParse(`root ::= "a"+`)}
		s, err := NewConstrained(p, v)
		if err != nil {
			t.Fatal(err)
		}
		if k := s.TopNeed(); k != 0 {
			t.Errorf("temperature %v: TopNeed %d with a grammar, want 0", temp, k)
		}
	}
}
