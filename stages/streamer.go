package stages

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/flowinfer/flowinfer/graph"
	"github.com/flowinfer/flowinfer/model/tokenizer"
	"github.com/flowinfer/flowinfer/stages/sample"
)

// streamer detokenizes each sequence's tokens (never splitting a UTF-8
// character), holds back text that may begin a stop string, and delivers
// events to the request's Emit. A stop string or a failing Emit stops the
// sequence (the scheduler sees it before the next step).
type streamer struct {
	tok *tokenizer.Tokenizer
}

func (s *streamer) run(ctx context.Context, in *graph.In[tokenEvent]) error {
	for {
		ev, err := in.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		q := ev.s
		if q.streamed {
			continue // tokens of a step already in flight when it stopped
		}
		if q.dec == nil {
			q.dec = s.tok.NewDecoder(q.req.RenderSpecial)
			q.dec.Preserve(q.req.Preserve)
			q.stops = sample.NewStopMatcher(q.req.Stops)
		}
		text := ""
		if ev.tok >= 0 && !(ev.finish == FinishStop && s.tok.IsEOG(ev.tok) && !q.req.RenderSpecial) {
			text = q.dec.Add(ev.tok)
		}
		emit, stopped := q.stops.Push(text)
		out := Event{ReqID: q.req.ID, Text: emit, Token: ev.tok}
		if ev.lp != nil && !(ev.finish == FinishStop && s.tok.IsEOG(ev.tok)) {
			out.Logprob = ev.lp
		}
		switch {
		case stopped:
			out.Finish = FinishStop
		case ev.finish != FinishNone:
			rest, stop2 := q.stops.Push(q.dec.Flush())
			out.Text += rest
			if !stop2 {
				out.Text += q.stops.Flush()
			}
			out.Finish = ev.finish
			out.Err = ev.err
			out.Embedding = ev.embedding
		}
		out.Usage = Usage{PromptTokens: len(q.req.Prompt), CachedTokens: q.cached, GeneratedTokens: ev.nGen}
		if out.Finish != FinishNone {
			q.streamed = true
			q.stopped.Store(true)
			out.StopWord = q.stops.Matched()
			out.Timing = Timing{Prompt: ev.tPrompt, Generate: ev.tGen, Queued: ev.queued, Total: time.Since(q.admitted)}
		}
		if q.req.Emit != nil {
			if err := q.req.Emit(out); err != nil {
				q.streamed = true
				q.stopped.Store(true) // consumer gone: stop generating
			}
		}
	}
}
