// This file answers OpenAI requests with n > 1 choices: n sequences of one
// prompt, each its own job with its own encoder (oaiEncoder.index). The
// first is submitted at once, the others when it has produced its first
// event: its prompt's full KV blocks are then in the prefix cache, so they
// compute only the tail. Choice i samples with seed+i when the request set
// a seed, so each choice is reproducible.

package serve

import (
	"errors"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/flowinfer/flowinfer/stages"
	"github.com/flowinfer/flowinfer/stages/sample"
)

// choices is the jobs of one request with n > 1.
type choices struct {
	jobs []*job
	encs []*oaiEncoder
	wake chan struct{} // shared by the jobs: something new in any
}

func (c *choices) abandon() {
	for _, j := range c.jobs {
		j.abandon()
	}
}

// generateN runs gr's n choices and answers with one response or stream.
func (s *Server) generateN(ctx *fasthttp.RequestCtx, b *Backend, gr *genRequest, idPrefix, endpoint, param string, enc *oaiEncoder) {
	prompt, e := s.tokenize(b, gr, param)
	if e == nil {
		e = s.constrain(b, gr)
	}
	if e != nil {
		e.write(ctx, dialectOpenAI)
		return
	}
	id := newID(idPrefix)
	c := &choices{wake: make(chan struct{}, 1)}
	for i := range gr.n {
		g := *gr
		if gr.params.Seed != sample.RandomSeed {
			g.params.Seed = gr.params.Seed + uint64(i)
		}
		j := s.newJob(b, &g, id, endpoint, prompt)
		j.wake = c.wake
		if i > 0 {
			j.created = c.jobs[0].created
		}
		e := *enc
		e.index, e.multi = i, true
		c.jobs, c.encs = append(c.jobs, j), append(c.encs, &e)
	}
	if e := s.submit(b, c.jobs[0]); e != nil {
		c.abandon()
		e.write(ctx, dialectOpenAI)
		return
	}
	go s.submitRest(b, c)
	if gr.stream {
		s.streamN(ctx, b, c)
		return
	}
	defer c.abandon()
	watch := watchClient(ctx.Conn(), c.abandon)
	texts := make([]string, len(c.jobs))
	finals := make([]*stages.Event, len(c.jobs))
	for i, j := range c.jobs {
		texts[i], finals[i] = j.wait(b.Done, s.stop)
	}
	watch.stop()
	var resp oaiResponse
	for i, f := range finals {
		switch {
		case f == nil && watch.left():
			ctx.SetStatusCode(statusClientClosed)
			ctx.SetConnectionClose()
			return
		case f == nil:
			errEngineDown.write(ctx, dialectOpenAI)
			return
		case f.Finish == stages.FinishError && errors.Is(f.Err, stages.ErrQueueFull):
			errQueueFull.write(ctx, dialectOpenAI)
			return
		case f.Finish == stages.FinishError:
			s.cfg.Log.Error("generation failed", zap.String("id", c.jobs[i].id), zap.Error(f.Err))
			s.failedError(b, "generation", f.Err).write(ctx, dialectOpenAI)
			return
		}
		s.metrics.finished(f)
		r := c.encs[i].result(c.jobs[i], splitCalls(c.jobs[i], texts[i], f), f).(oaiResponse)
		if i == 0 {
			resp = r
			continue
		}
		resp.Choices = append(resp.Choices, r.Choices...)
		resp.Usage.CompletionTokens += r.Usage.CompletionTokens
		resp.Usage.TotalTokens += r.Usage.CompletionTokens
	}
	writeJSON(ctx, resp)
}

// submitRest submits every choice but the first once the first has
// started (or gives them up with it); a choice the engine refuses ends
// with that error.
func (s *Server) submitRest(b *Backend, c *choices) {
	j0 := c.jobs[0]
	select {
	case <-j0.started:
	case <-j0.ctx.Done():
		for _, j := range c.jobs[1:] {
			j.cancel()
		}
		return
	}
	for _, j := range c.jobs[1:] {
		if s.script != nil {
			go runScript(j, s.script(j.req.Prompt))
			continue
		}
		if err := b.Engine.Submit(j.req); err != nil {
			j.emit(stages.Event{ReqID: j.req.ID, Token: -1, Finish: stages.FinishError, Err: err})
		}
	}
}

// streamN streams every choice's chunks as they come (each with its
// index), then the usage of all (stream_options.include_usage) and [DONE].
func (s *Server) streamN(ctx *fasthttp.RequestCtx, b *Backend, c *choices) {
	enc0 := c.encs[0]
	s.openStream(ctx, b, c.jobs[0], enc0, c.abandon, func(sw *streamWriter) {
		begun := make([]bool, len(c.jobs))
		done := make([]*stages.Event, len(c.jobs))
		for left := len(c.jobs); left > 0; {
			if !sw.wait(c.wake) {
				return
			}
			for i, j := range c.jobs {
				if done[i] != nil {
					continue
				}
				final, failed := sw.step(j, c.encs[i], &begun[i])
				if failed {
					sw.w.Flush()
					return
				}
				if final != nil {
					done[i] = final
					left--
				}
			}
			if !sw.flush() {
				return
			}
		}
		// every choice has finished: the usage of all, then [DONE]
		w := sw.w
		if enc0.usage {
			r := enc0.frame(c.jobs[0])
			r.Choices = []oaiChoice{}
			u := newOAIUsage(done[0].Usage)
			for _, f := range done[1:] {
				u.CompletionTokens += f.Usage.GeneratedTokens
				u.TotalTokens += f.Usage.GeneratedTokens
			}
			r.Usage = u
			r.Timings = newTimings(done[0])
			sse(w, "", r)
		}
		w.WriteString("data: [DONE]\n\n")
		w.Flush()
	})
}
