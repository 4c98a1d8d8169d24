package stages

import (
	"fmt"

	"github.com/flowinfer/flowinfer/stages/sample"
	"github.com/flowinfer/flowinfer/stages/sample/grammar"
)

// grammarVocab returns the trie of the model's token texts for grammar
// masks, built on the first request with a grammar (once per engine).
func (e *Engine) grammarVocab() (*grammar.Vocab, error) {
	e.gvOnce.Do(func() {
		n := e.m.NVocab
		pieces := make([][]byte, n)
		var eog []int32
		for id := range min(n, e.tok.NVocab()) {
			pieces[id] = e.tok.Piece(int32(id), false)
			if e.tok.IsEOG(int32(id)) {
				eog = append(eog, int32(id))
			}
		}
		e.gv, e.gvErr = grammar.NewVocab(pieces, eog)
	})
	return e.gv, e.gvErr
}

// newSampler returns the sampler of a request: constrained when its
// Params carry a grammar.
func (e *Engine) newSampler(p sample.Params) (*sample.Sampler, error) {
	if p.Grammar == nil {
		return sample.New(p, e.m.NVocab)
	}
	v, err := e.grammarVocab()
	if err != nil {
		return nil, fmt.Errorf("stages: grammar vocabulary: %w", err)
	}
	return sample.NewConstrained(p, v)
}

// checkGrammar builds the vocabulary trie if needed and checks that g can
// start (its first state is within the grammar engine's limits).
func (e *Engine) checkGrammar(g *grammar.Grammar) error {
	v, err := e.grammarVocab()
	if err != nil {
		return fmt.Errorf("stages: grammar vocabulary: %w", err)
	}
	if _, err := grammar.NewMatcher(g, v); err != nil {
		return fmt.Errorf("stages: %w", err)
	}
	return nil
}
