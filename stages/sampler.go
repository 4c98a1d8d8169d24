package stages

import (
	"context"
	"errors"
	"github.com/flowinfer/flowinfer/stages/sample"
	"io"
	"time"

	"github.com/flowinfer/flowinfer/graph"
	"github.com/flowinfer/flowinfer/model/tokenizer"
)

// tokenEvent is a sampled token on its way to the streamer, with the
// sequence's counts and timings as of this token (the sampler keeps
// writing the seq's own fields while the streamer works).
type tokenEvent struct {
	s             *seq
	tok           int32 // -1: no token (finish only)
	finish        FinishReason
	nGen          int
	tPrompt, tGen time.Duration
	queued        time.Duration // admission to the first step
	err           error         // with FinishError
	lp            *TokenLogprob // when the request asked for logprobs
	embedding     []float32     // an embedding request's vector, with its finish
}

// sampler turns each logits row into a token with the row's sequence's own
// sampling settings, decides end of generation (end-of-generation token,
// max tokens, full context), sends tokens on to the streamer and the step
// back to the scheduler. For embedding requests it pools the final hidden
// states instead, and ends each one once its whole prompt is evaluated.
type sampler struct {
	tok    *tokenizer.Tokenizer
	nCtx   int
	nVocab int
	nEmbd  int
}

func (sp *sampler) run(ctx context.Context, in *graph.In[*step], back *graph.Out[*step], events *graph.Out[tokenEvent]) error {
	for {
		st, err := in.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		now := time.Now()
		for i, q := range st.seqs {
			if q.firstStep.IsZero() {
				q.firstStep = now.Add(-st.dur)
			}
			if st.prompt[i] {
				q.tPrompt += st.dur
			} else {
				q.tGen += st.dur
			}
		}
		if st.err != nil {
			// the step failed: its sequences end with the error
			for _, q := range st.seqs {
				if q.finish != FinishNone || q.stopped.Load() {
					continue
				}
				q.finish = FinishError
				ev := tokenEvent{s: q, tok: -1, finish: FinishError, err: st.err, nGen: q.nGen, tPrompt: q.tPrompt, tGen: q.tGen, queued: q.firstStep.Sub(q.admitted)}
				if err := events.Send(ctx, ev); err != nil {
					return err
				}
			}
			st.err = nil
			if err := back.Send(ctx, st); err != nil {
				return err
			}
			continue
		}
		V := sp.nVocab
		for r, q := range st.rowSeq {
			row := st.logits[r*V : (r+1)*V]
			if q.req.OnLogits != nil {
				q.req.OnLogits(row)
			}
			if !st.rowSample[r] || q.finish != FinishNone || q.stopped.Load() {
				continue
			}
			if !q.primed {
				for _, t := range q.req.Prompt {
					q.sampler.Accept(t)
				}
				q.primed = true
			}
			t := q.sampler.Sample(row)
			if t < 0 { // every token banned (by the grammar or the logit bias)
				err := q.sampler.GrammarErr()
				if err == nil {
					err = errors.New("stages: no token can be sampled (every token is banned)")
				}
				q.finish = FinishError
				ev := tokenEvent{s: q, tok: -1, finish: FinishError, err: err, nGen: q.nGen, tPrompt: q.tPrompt, tGen: q.tGen, queued: q.firstStep.Sub(q.admitted)}
				if err := events.Send(ctx, ev); err != nil {
					return err
				}
				continue
			}
			q.sampler.Accept(t)
			q.last = t
			q.nGen++
			ev := tokenEvent{s: q, tok: t, nGen: q.nGen, tPrompt: q.tPrompt, tGen: q.tGen, queued: q.firstStep.Sub(q.admitted)}
			if q.req.Logprobs {
				lp := &TokenLogprob{Token: t}
				lp.Logprob, lp.Top = sample.Logprobs(row, t, q.req.TopLogprobs, nil)
				ev.lp = lp
			}
			switch {
			case !q.req.IgnoreEOG && sp.tok.IsEOG(t):
				ev.finish = FinishStop
			case q.req.MaxTokens > 0 && q.nGen >= q.req.MaxTokens:
				ev.finish = FinishLength
			case q.fed >= sp.nCtx:
				ev.finish = FinishLength // no cell left to feed it
			}
			q.finish = ev.finish
			if err := events.Send(ctx, ev); err != nil {
				return err
			}
		}
		if err := sp.pool(ctx, st, events); err != nil {
			return err
		}
		if err := back.Send(ctx, st); err != nil {
			return err
		}
	}
}

// pool adds the step's embedding rows to their requests' pooled vectors
// and ends the embedding requests whose prompt is now all evaluated.
func (sp *sampler) pool(ctx context.Context, st *step, events *graph.Out[tokenEvent]) error {
	E := sp.nEmbd
	for r, q := range st.embdSeq {
		if q.pool == nil {
			q.pool = &pooler{}
		}
		q.pool.add(st.embd[r*E : (r+1)*E])
	}
	for _, q := range st.seqs {
		if q.req.Pooling == PoolNone || q.fed < len(q.toks) || q.finish != FinishNone || q.stopped.Load() {
			continue
		}
		q.finish = FinishStop
		if q.pool == nil { // cannot happen: the last row is always computed
			q.pool = &pooler{sum: make([]float64, E)}
		}
		ev := tokenEvent{s: q, tok: -1, finish: FinishStop, tPrompt: q.tPrompt, queued: q.firstStep.Sub(q.admitted), embedding: q.pool.vector()}
		if err := events.Send(ctx, ev); err != nil {
			return err
		}
	}
	return nil
}
