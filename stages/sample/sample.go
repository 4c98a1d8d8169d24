// Package sample turns a row of logits into a token id, and holds back
// streamed text that may be the start of a stop sequence.
//
// A Sampler runs llama.cpp's default sampler chain (common/sampling.cpp with
// default settings): logit bias -> penalties (repeat, presence, frequency
// over the last RepeatLastN accepted tokens) -> top-k -> top-p -> min-p ->
// temperature -> a draw from the softmax distribution. With Temperature <= 0
// it is greedy: the argmax after bias and penalties (ties go to the lowest
// token id). Each stage follows llama.cpp's arithmetic (float32 logits,
// float32 softmax for top-p, float64 sums for the draw), and the draw uses a
// std::mt19937-compatible generator with libstdc++'s uniform double, so with
// the same 32-bit seed and the same logits a Sampler picks the same token as
// llama.cpp, except where logits tie exactly (llama.cpp's sort order among
// equal logits is unspecified; here the lower id comes first).
//
// Sample allocates nothing: all scratch is sized in New. A Sampler is not
// safe for concurrent use; give each sequence its own.
//
// With Params.Grammar (and NewConstrained), a grammar comes first in the
// chain, as llama.cpp's grammar sampler: tokens the grammar does not allow
// next get -Inf before everything else, and each token sampled advances
// the grammar. Sampling then allocates only when the grammar reaches a
// state it has not seen before (see package grammar).
//
// Not implemented (llama.cpp samplers off by default): DRY, typical-p, XTC,
// top-n-sigma, dynamic temperature, mirostat.
package sample

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/flowinfer/flowinfer/stages/sample/grammar"
)

// RandomSeed asks New for a random seed, like llama.cpp's LLAMA_DEFAULT_SEED
// (0xFFFFFFFF, what `--seed -1` becomes). Sampler.Seed reports the seed chosen.
const RandomSeed uint64 = 0xFFFFFFFF

// Params are the sampling settings of one sequence. The zero value of a
// field disables its stage except where noted; start from DefaultParams.
type Params struct {
	// Temperature divides the logits before the draw; <= 0 means greedy.
	Temperature float32
	// TopK keeps the K most likely tokens; <= 0 keeps all.
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probability
	// sums to at least TopP (probabilities before temperature, as in
	// llama.cpp); 1 keeps all. Must be in [0, 1].
	TopP float32
	// MinP drops tokens whose probability is below MinP times the most
	// likely token's; 0 keeps all. Must be in [0, 1].
	MinP float32

	// RepeatPenalty divides positive logits and multiplies non-positive ones
	// of tokens seen in the last RepeatLastN accepted tokens; 1 disables.
	// Must be > 0.
	RepeatPenalty float32
	// RepeatLastN is the penalty window; 0 disables all penalties.
	// llama.cpp's -1 ("the context size") must be resolved by the caller.
	RepeatLastN int
	// PresencePenalty is subtracted once from the logit of every token in
	// the window; FrequencyPenalty is subtracted once per occurrence.
	PresencePenalty, FrequencyPenalty float32

	// LogitBias is added to the logit of a token id; -Inf bans the token.
	LogitBias map[int32]float32

	// Seed fixes the random draws: the same seed, logits and accepted
	// tokens give the same tokens. Seeds below 2^32 seed the generator as
	// std::mt19937(seed) does (llama.cpp-compatible); larger seeds use
	// mt19937's init_by_array with the low and high 32-bit words.
	// RandomSeed picks a random seed in New.
	Seed uint64

	// Grammar, when set, constrains the output to the grammar's sentences
	// (end-of-generation tokens only where a sentence is complete). Use
	// NewConstrained, which needs the vocabulary's trie.
	Grammar *grammar.Grammar
}

// DefaultParams returns llama.cpp's defaults (common_params_sampling):
// temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, repeat penalty 1 over
// the last 64 tokens, no presence/frequency penalty, random seed.
func DefaultParams() Params {
	return Params{
		Temperature:   0.8,
		TopK:          40,
		TopP:          0.95,
		MinP:          0.05,
		RepeatPenalty: 1,
		RepeatLastN:   64,
		Seed:          RandomSeed,
	}
}

// ErrParams is wrapped by every error Validate returns.
var ErrParams = errors.New("invalid sampling parameters")

// maxRepeatLastN caps the penalty window (its ring buffer is allocated in New).
const maxRepeatLastN = 1 << 20

func finite(f float32) bool { return !math.IsNaN(float64(f)) && !math.IsInf(float64(f), 0) }

// Validate reports the first setting that is out of range.
func (p Params) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("sample: %w: %s", ErrParams, fmt.Sprintf(format, args...))
	}
	switch {
	case !finite(p.Temperature):
		return bad("temperature %v is not finite", p.Temperature)
	case math.IsNaN(float64(p.TopP)) || p.TopP < 0 || p.TopP > 1:
		return bad("top_p %v is not in [0, 1]", p.TopP)
	case math.IsNaN(float64(p.MinP)) || p.MinP < 0 || p.MinP > 1:
		return bad("min_p %v is not in [0, 1]", p.MinP)
	case !finite(p.RepeatPenalty) || p.RepeatPenalty <= 0:
		return bad("repeat_penalty %v must be finite and > 0", p.RepeatPenalty)
	case p.RepeatLastN < 0 || p.RepeatLastN > maxRepeatLastN:
		return bad("repeat_last_n %d is not in [0, %d] (resolve -1 to the context size first)", p.RepeatLastN, maxRepeatLastN)
	case !finite(p.PresencePenalty):
		return bad("presence_penalty %v is not finite", p.PresencePenalty)
	case !finite(p.FrequencyPenalty):
		return bad("frequency_penalty %v is not finite", p.FrequencyPenalty)
	}
	for id, b := range p.LogitBias {
		if id < 0 {
			return bad("logit_bias token id %d is negative", id)
		}
		if math.IsNaN(float64(b)) || math.IsInf(float64(b), 1) {
			return bad("logit_bias for token %d is %v (only finite values and -Inf are allowed)", id, b)
		}
	}
	return nil
}

// cand is one candidate token.
type cand struct {
	id    int32
	logit float32
	p     float32 // probability, valid only right after a softmax
}

// histEntry counts one distinct token in the penalty window.
type histEntry struct {
	id    int32
	count int32
}

// Sampler picks tokens from logits for one sequence.
type Sampler struct {
	p       Params
	nVocab  int
	seed    uint64 // the seed in use (Params.Seed, or the random one chosen)
	rng     mt19937
	greedy  bool
	penalty bool // penalties enabled (llama.cpp's is_disabled negated)

	bias []cand // logit bias sorted by id; .logit holds the bias

	// Penalty window: ring of the last RepeatLastN accepted tokens and the
	// distinct tokens in it with their counts.
	ring     []int32
	ringHead int
	ringLen  int
	hist     []histEntry

	// Scratch, sized in New.
	touched []uint64 // bitset over the vocabulary: tokens whose logit bias/penalties change
	adj     []cand   // the changed logits of touched tokens
	cands   []cand   // candidate list
	nucleus [nucleusBuckets]float64

	// Grammar constraint (NewConstrained): the matcher and a copy of the
	// logits row with the disallowed tokens at -Inf.
	gm     *grammar.Matcher
	masked []float32
}

// New validates p and returns a Sampler for a vocabulary of nVocab tokens,
// with every buffer Sample needs already allocated.
func New(p Params, nVocab int) (*Sampler, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if p.Grammar != nil {
		return nil, fmt.Errorf("sample: %w: a grammar needs the vocabulary's trie (use NewConstrained)", ErrParams)
	}
	return newSampler(p, nVocab)
}

// NewConstrained is New for Params with a Grammar: v is the trie of the
// model's vocabulary (build it once per model with grammar.NewVocab).
func NewConstrained(p Params, v *grammar.Vocab) (*Sampler, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if p.Grammar == nil {
		return nil, fmt.Errorf("sample: %w: NewConstrained without a grammar", ErrParams)
	}
	s, err := newSampler(p, v.Size())
	if err != nil {
		return nil, err
	}
	if s.gm, err = grammar.NewMatcher(p.Grammar, v); err != nil {
		return nil, fmt.Errorf("sample: %w", err)
	}
	s.masked = make([]float32, v.Size())
	return s, nil
}

func newSampler(p Params, nVocab int) (*Sampler, error) {
	if nVocab <= 0 || nVocab > math.MaxInt32 {
		return nil, fmt.Errorf("sample: vocabulary size %d out of range", nVocab)
	}
	s := &Sampler{p: p, nVocab: nVocab, greedy: p.Temperature <= 0}
	s.p.LogitBias = nil // the map stays the caller's; s.bias is our copy
	for id, b := range p.LogitBias {
		if int(id) >= nVocab {
			return nil, fmt.Errorf("sample: %w: logit_bias token id %d >= vocabulary size %d", ErrParams, id, nVocab)
		}
		s.bias = append(s.bias, cand{id: id, logit: b})
	}
	slices.SortFunc(s.bias, func(a, b cand) int { return int(a.id) - int(b.id) })

	s.penalty = p.RepeatLastN > 0 && !(p.RepeatPenalty == 1 && p.FrequencyPenalty == 0 && p.PresencePenalty == 0)
	if s.penalty {
		s.ring = make([]int32, p.RepeatLastN)
		s.hist = make([]histEntry, 0, p.RepeatLastN)
	}
	s.touched = make([]uint64, (nVocab+63)/64)
	s.adj = make([]cand, 0, len(s.bias)+len(s.ring))
	if !s.greedy {
		n := nVocab
		if p.TopK > 0 {
			n = min(p.TopK, nVocab)
		}
		s.cands = make([]cand, 0, n)
	}
	s.seed = p.Seed
	s.reseed()
	return s, nil
}

// Seed returns the seed in use (the random one chosen when Params.Seed was
// RandomSeed).
func (s *Sampler) Seed() uint64 { return s.seed }

// reseed resolves a random seed and restarts the generator.
func (s *Sampler) reseed() {
	if s.p.Seed == RandomSeed {
		s.seed = uint64(rand.Uint32N(uint32(RandomSeed))) // any 32-bit value but the sentinel
	}
	if s.seed <= math.MaxUint32 {
		s.rng.seed(uint32(s.seed))
	} else {
		s.rng.seedArray([]uint32{uint32(s.seed), uint32(s.seed >> 32)})
	}
}

// Accept records a token in the penalty window. Feed it the prompt tokens
// too, like llama.cpp's common_sampler_accept. Ids outside the vocabulary
// are ignored.
func (s *Sampler) Accept(tok int32) {
	if !s.penalty || tok < 0 || int(tok) >= s.nVocab {
		return
	}
	if s.ringLen == len(s.ring) {
		s.histAdd(s.ring[s.ringHead], -1)
	} else {
		s.ringLen++
	}
	s.ring[s.ringHead] = tok
	s.ringHead++
	if s.ringHead == len(s.ring) {
		s.ringHead = 0
	}
	s.histAdd(tok, 1)
}

// histAdd changes the window count of tok by d, dropping it at zero.
func (s *Sampler) histAdd(tok int32, d int32) {
	for i := range s.hist {
		if s.hist[i].id == tok {
			s.hist[i].count += d
			if s.hist[i].count <= 0 {
				last := len(s.hist) - 1
				s.hist[i] = s.hist[last]
				s.hist = s.hist[:last]
			}
			return
		}
	}
	if d > 0 {
		s.hist = append(s.hist, histEntry{id: tok, count: d})
	}
}

// Reset forgets the penalty window and restarts the random generator from
// the seed (a new random seed when Params.Seed is RandomSeed, as llama.cpp).
func (s *Sampler) Reset() {
	if s.gm != nil {
		s.gm.Reset()
	}
	s.ringHead, s.ringLen = 0, 0
	s.hist = s.hist[:0]
	s.reseed()
}

// Sample returns the token chosen from logits (one value per vocabulary
// entry; not modified). It returns -1 when len(logits) is not the
// vocabulary size or when every token's logit is -Inf or NaN after the
// grammar and the logit bias (all tokens banned). With a grammar, the
// token returned has been accepted by it.
func (s *Sampler) Sample(logits []float32) int32 {
	if len(logits) != s.nVocab {
		return -1
	}
	if s.gm == nil {
		return s.sample(logits)
	}
	mask := s.gm.Mask()
	if s.greedy {
		// the argmax of all tokens, when allowed, is the argmax of the
		// allowed ones (ties go to the lowest id either way)
		if t := s.sample(logits); t >= 0 && grammar.Allowed(mask, t) {
			if s.gm.Accept(t) != nil {
				return -1
			}
			return t
		}
	}
	grammar.ApplyTo(s.masked, logits, mask)
	t := s.sample(s.masked)
	if t >= 0 && s.gm.Accept(t) != nil {
		return -1 // the mask allowed it, so this is a limit reached (GrammarErr says which)
	}
	return t
}

// GrammarErr reports why a constrained Sampler returned -1 when the
// grammar is to blame: a limit of the grammar engine, or the grammar
// allowing no token (a dead end, or the output already ended). It is nil
// without a grammar or while tokens are allowed.
func (s *Sampler) GrammarErr() error {
	if s.gm == nil {
		return nil
	}
	if err := s.gm.Err(); err != nil {
		return err
	}
	if !s.gm.Live() {
		return errors.New("sample: the grammar allows no further token")
	}
	return nil
}

func (s *Sampler) sample(logits []float32) int32 {
	s.applyBiasPenalties(logits)
	defer s.clearTouched()
	if s.greedy {
		return s.argmax(logits)
	}
	c := s.candidates(logits)
	if len(c) == 0 {
		return -1
	}
	sorted := s.p.TopK > 0
	if s.p.TopP < 1 {
		c = topP(c, s.p.TopP, sorted, &s.nucleus)
		sorted = true
	}
	if s.p.MinP > 0 {
		c = minP(c, s.p.MinP, sorted)
	}
	if t := s.p.Temperature; t != 1 {
		for i := range c {
			c[i].logit /= t
		}
	}
	return c[dist(c, sorted, s.rng.float64())].id
}
