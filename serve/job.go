// This file holds job, one request on its way through the engine, and its
// mailbox: the engine's streamer stage hands events to Emit, which only
// appends to the mailbox and never blocks, so a slow client cannot stall
// the shared pipeline; the HTTP side takes whatever has accumulated (text
// of one or more tokens) whenever it is ready to write.

package serve

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/flowinfer/flowinfer/model/toolcall"
	"github.com/flowinfer/flowinfer/stages"
)

// errClientGone is returned from Emit once the client has left: the engine
// stops the sequence.
var errClientGone = errors.New("serve: client gone")

// job is one generation request in flight.
type job struct {
	id       string // API-visible id (chatcmpl-..., msg_..., ...)
	created  time.Time
	model    string
	endpoint string
	nPrompt  int
	req      *stages.Request
	ctx      context.Context
	cancel   context.CancelFunc

	mu      sync.Mutex
	text    strings.Builder // not yet taken
	pieces  []int           // the lengths of the texts of its events
	usage   stages.Usage    // latest
	events  int             // events received
	final   *stages.Event
	gone    bool
	lastTok time.Time
	wake    chan struct{} // capacity 1: "something new"
	started chan struct{} // closed by the first event

	onToken func(first bool, since time.Duration) // metrics hook, from Emit
	// logprobs of the tokens not yet taken, when the request asked for them
	lps []stages.TokenLogprob

	// tools holds the calls when the request offered tools (tools.go);
	// parse splits the reply into reasoning, content and calls when it
	// has reasoning or tools (reasoning.go); reasoning is the reasoning of
	// a reply that is not streamed. Nil otherwise. HTTP side only.
	tools     *toolState
	parse     *toolcall.Output
	reasoning strings.Builder
	// taken: the piece lengths of the text take (or wait) returned last;
	// thinking: the tokens generated inside the reasoning so far (those
	// after whose text the reply is inside it), HTTP side only.
	taken    []int
	thinking int
}

// push passes text (with the piece lengths of its tokens, j.taken) to the
// job's parser a token at a time, counting the reasoning tokens; the
// events of consecutive tokens are joined (one delta per kind, as when
// the text is parsed at once).
func (j *job) push(text string) []toolcall.Event {
	var evs []toolcall.Event
	add := func(new []toolcall.Event) {
		for _, e := range new {
			if n := len(evs); n > 0 && e.Call == nil && evs[n-1].Call == nil {
				last := &evs[n-1]
				switch {
				case e.Reasoning != "" && last.Reasoning != "":
					last.Reasoning += e.Reasoning
					continue
				case e.Content != "" && last.Content != "":
					last.Content += e.Content
					continue
				}
			}
			evs = append(evs, e)
		}
	}
	for _, n := range j.taken {
		n = min(n, len(text))
		add(j.parse.Push(text[:n]))
		if j.parse.InReasoning() {
			j.thinking++
		}
		text = text[n:]
	}
	if text != "" {
		add(j.parse.Push(text))
	}
	j.taken = j.taken[:0]
	return evs
}

func newJob(parent context.Context, id, model, endpoint string, prompt []int32) *job {
	ctx, cancel := context.WithCancel(parent)
	j := &job{id: id, created: time.Now(), model: model, endpoint: endpoint, nPrompt: len(prompt), ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1), started: make(chan struct{})}
	j.req = &stages.Request{Ctx: ctx, Prompt: prompt, Emit: j.emit}
	return j
}

// emit is the request's stages.Request.Emit, called from the streamer stage.
func (j *job) emit(ev stages.Event) error {
	now := time.Now()
	j.mu.Lock()
	if j.gone {
		j.mu.Unlock()
		return errClientGone
	}
	j.text.WriteString(ev.Text)
	if ev.Text != "" {
		j.pieces = append(j.pieces, len(ev.Text))
	}
	if ev.Logprob != nil {
		j.lps = append(j.lps, *ev.Logprob)
	}
	j.usage = ev.Usage
	j.events++
	if j.events == 1 {
		close(j.started)
	}
	first := j.lastTok.IsZero()
	var since time.Duration
	if first {
		since = now.Sub(j.created)
	} else {
		since = now.Sub(j.lastTok)
	}
	if ev.Token >= 0 {
		j.lastTok = now
	}
	if ev.Finish != stages.FinishNone {
		e := ev
		j.final = &e
	}
	j.mu.Unlock()
	if ev.Token >= 0 && j.onToken != nil {
		j.onToken(first, since)
	}
	select {
	case j.wake <- struct{}{}:
	default:
	}
	return nil
}

// take returns the text accumulated since the last take (and the lengths
// of its events' pieces, one per token, in j.taken), the usage so far,
// whether any event has arrived, and the final event once there is one.
func (j *job) take() (text string, usage stages.Usage, started bool, final *stages.Event) {
	j.mu.Lock()
	defer j.mu.Unlock()
	text = j.text.String()
	j.text.Reset()
	j.taken = append(j.taken[:0], j.pieces...)
	j.pieces = j.pieces[:0]
	return text, j.usage, j.events > 0, j.final
}

// takeLogprobs returns the logprobs of the tokens generated since the last
// call (nil when the request asked for none).
func (j *job) takeLogprobs() []stages.TokenLogprob {
	j.mu.Lock()
	defer j.mu.Unlock()
	lps := j.lps
	j.lps = nil
	return lps
}

// hasLogprobs reports whether logprobs are waiting to be taken.
func (j *job) hasLogprobs() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.lps) > 0
}

// abandon marks the client gone and cancels the request: the scheduler
// frees its sequence before the next step.
func (j *job) abandon() {
	j.mu.Lock()
	j.gone = true
	j.mu.Unlock()
	j.cancel()
}

// wait blocks until the final event, the job's context ends, or engineDone
// or stop is closed, and returns the whole text with the final event (nil
// if none).
func (j *job) wait(engineDone, stop <-chan struct{}) (string, *stages.Event) {
	var all strings.Builder
	var pieces []int
	defer func() { j.taken = pieces }()
	for {
		text, _, _, final := j.take()
		all.WriteString(text)
		pieces = append(pieces, j.taken...)
		if final != nil {
			return all.String(), final
		}
		select {
		case <-j.wake:
		case <-j.ctx.Done():
			return all.String(), nil
		case <-engineDone:
			return all.String(), nil
		case <-stop:
			return all.String(), nil
		}
	}
}
