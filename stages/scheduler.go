package stages

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/flowinfer/flowinfer/graph"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/stages/sample"
)

// step is one forward step: a batch of tokens from one or more sequences.
// It goes scheduler -> compute -> sampler -> scheduler; only one step is in
// flight, since a decode step needs the tokens sampled from the previous one.
type step struct {
	batch  model.Batch
	seqs   []*seq // running seqs with a token in this step
	prompt []bool // per seqs[i]: the step carried prompt tokens of it
	// Per logits row: its seq, and whether a token is sampled from it.
	rowSeq    []*seq
	rowSample []bool
	logits    []float32 // set by compute: rows × NVocab, valid until the next step
	dur       time.Duration
}

func (st *step) reset() {
	st.batch.Tokens = st.batch.Tokens[:0]
	st.batch.Pos = st.batch.Pos[:0]
	st.batch.Seq = st.batch.Seq[:0]
	st.batch.Logits = st.batch.Logits[:0]
	st.seqs, st.prompt = st.seqs[:0], st.prompt[:0]
	st.rowSeq, st.rowSample = st.rowSeq[:0], st.rowSample[:0]
	st.logits = nil
}

func (st *step) add(s *seq, tok int32, pos int, logits, sampleRow bool) {
	st.batch.Tokens = append(st.batch.Tokens, tok)
	st.batch.Pos = append(st.batch.Pos, int32(pos))
	st.batch.Seq = append(st.batch.Seq, int32(s.slot.id))
	st.batch.Logits = append(st.batch.Logits, logits)
	if logits {
		st.rowSeq = append(st.rowSeq, s)
		st.rowSample = append(st.rowSample, sampleRow)
	}
}

// scheduler admits requests into free KV slots, builds one step at a time
// from every running sequence (decode tokens first, then prompt chunks with
// the rest of the batch: chunked prefill keeps running streams moving), and
// retires sequences when the sampler or the streamer has finished them.
type scheduler struct {
	m        *model.Model
	nCtx     int
	maxBatch int
	slots    []*slot
	running  []*seq
	st       step
	stats    *engineStats
}

func (s *scheduler) run(ctx context.Context, admit *graph.In[*Request], back *graph.In[*step], steps *graph.Out[*step]) error {
	admitOpen := true
	for {
		// Admit while there are free slots: block only when idle.
		for admitOpen && s.freeSlot() != nil {
			var r *Request
			var err error
			if len(s.running) == 0 {
				r, err = admit.Recv(ctx)
			} else {
				var ok bool
				r, ok, err = admit.TryRecv(ctx)
				if err == nil && !ok {
					break
				}
			}
			if errors.Is(err, io.EOF) {
				admitOpen = false
				break
			}
			if err != nil {
				return err
			}
			s.start(r)
		}
		s.retire()
		if len(s.running) == 0 {
			if !admitOpen {
				return nil // drained
			}
			continue
		}
		s.build()
		if len(s.st.batch.Tokens) == 0 {
			continue
		}
		if err := steps.Send(ctx, &s.st); err != nil {
			return err
		}
		if _, err := back.Recv(ctx); err != nil {
			if errors.Is(err, io.EOF) {
				return errors.New("stages: sampler ended with a step in flight")
			}
			return err
		}
	}
}

func (s *scheduler) freeSlot() *slot {
	for _, sl := range s.slots {
		if !sl.busy {
			return sl
		}
	}
	return nil
}

// start binds a request to the free slot whose history shares the longest
// prefix with its prompt, and reuses that prefix (at least the last prompt
// token is recomputed, for its logits).
func (s *scheduler) start(r *Request) {
	var best *slot
	bestN := -1
	for _, sl := range s.slots {
		if sl.busy {
			continue
		}
		if n := commonPrefix(sl.history, r.Prompt); n > bestN {
			best, bestN = sl, n
		}
	}
	cached := min(bestN, len(r.Prompt)-1)
	if r.AllLogits {
		cached = 0
	}
	best.busy = true
	best.history = best.history[:cached]
	sm, err := sample.New(r.Params, s.m.NVocab)
	if err != nil { // validated by Submit; keep the engine alive regardless
		sm, _ = sample.New(sample.Params{}, s.m.NVocab)
	}
	q := &seq{req: r, slot: best, nDone: cached, cached: cached, fed: cached, sampler: sm, admitted: time.Now()}
	s.running = append(s.running, q)
	s.stats.promptTokens.Add(int64(len(r.Prompt)))
	s.stats.cachedTokens.Add(int64(cached))
	s.stats.running.Store(int64(len(s.running)))
	s.stats.blocksUsed.Store(int64(len(s.running)))
}

// retire frees the slots of finished, stopped or cancelled sequences.
func (s *scheduler) retire() {
	kept := s.running[:0]
	for _, q := range s.running {
		if q.req.Ctx != nil && q.req.Ctx.Err() != nil && q.finish == FinishNone {
			q.finish = FinishCancelled
		}
		if q.finish != FinishNone || q.stopped.Load() {
			q.slot.busy = false
			continue
		}
		kept = append(kept, q)
	}
	clear(s.running[len(kept):])
	s.running = kept
	s.stats.running.Store(int64(len(s.running)))
	s.stats.blocksUsed.Store(int64(len(s.running)))
}

// build fills s.st with the next step.
func (s *scheduler) build() {
	st := &s.st
	st.reset()
	budget := s.maxBatch
	// Decode tokens first: one per generating sequence.
	for _, q := range s.running {
		if q.prefilling() || budget == 0 {
			continue
		}
		st.seqs, st.prompt = append(st.seqs, q), append(st.prompt, false)
		st.add(q, q.last, q.fed, true, true)
		q.slot.history = append(q.slot.history, q.last)
		q.fed++
		budget--
	}
	// Then prompt chunks.
	for _, q := range s.running {
		if !q.prefilling() || budget == 0 {
			continue
		}
		p := q.req.Prompt
		n := min(len(p)-q.nDone, budget)
		st.seqs, st.prompt = append(st.seqs, q), append(st.prompt, true)
		for i := q.nDone; i < q.nDone+n; i++ {
			last := i == len(p)-1
			st.add(q, p[i], i, last || q.req.AllLogits, last)
		}
		q.slot.history = append(q.slot.history, p[q.nDone:q.nDone+n]...)
		q.nDone += n
		q.fed = q.nDone
		budget -= n
	}
}
