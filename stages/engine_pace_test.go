package stages_test

// Tests of the pacing of prompt chunks while other sequences decode
// (Config.StepFactor), through the engine.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/stages"
)

// TestLongPromptPaced: a long prompt admitted while another sequence
// decodes is prefilled in paced chunks, so the running stream keeps
// producing tokens meanwhile; without pacing the prompt goes in whole
// batches and the stream waits. Steps are counted in the sampler stage
// (both requests' OnLogits run there, in step order), not at Emit, which
// lags behind by the event edge.
func TestLongPromptPaced(t *testing.T) {
	fx := load(t, "stories260K.gguf")
	long := fx.tok.Encode(strings.Repeat("Once upon a time there was a girl. ", 40), true, true)
	for _, factor := range []float64{2, -1} {
		e, err := stages.NewEngine(fx.m, fx.tok, cpu.NewRef(), stages.Config{NCtx: 512, NSeq: 2, MaxBatch: 512, StepFactor: factor, LongPrefill: 64}, nil)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- e.Run(context.Background()) }()
		var aRows, bRows, aAtFirst, aAtLast int // sampler stage only
		started := make(chan struct{})
		e.Submit(&stages.Request{ID: 1, Prompt: fx.tok.Encode("Once", true, true), Params: greedy(), IgnoreEOG: true, MaxTokens: 250,
			OnLogits: func([]float32) {
				if aRows++; aRows == 20 {
					close(started) // decode-only steps measured
				}
			}})
		<-started
		prefilled := make(chan struct{})
		e.Submit(&stages.Request{ID: 2, Prompt: long, Params: greedy(), MaxTokens: 1, AllLogits: true,
			OnLogits: func([]float32) {
				bRows++
				switch bRows {
				case 1:
					aAtFirst = aRows
				case len(long):
					aAtLast = aRows
					close(prefilled)
				}
			}})
		<-prefilled
		e.Close()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		during := aAtLast - aAtFirst
		t.Logf("step factor %v: %d-token prompt; the stream made %d tokens during its prefill", factor, len(long), during)
		if factor > 0 && during < 5 {
			t.Errorf("paced: the stream made %d tokens while a %d-token prompt was prefilled, want several", during, len(long))
		}
		if factor < 0 && during > 1 {
			t.Errorf("unpaced: the stream made %d tokens during the prefill, want the prompt in one batch", during)
		}
	}
}

// TestShortPromptNotQueued: a short prompt that arrives while a long one
// prefills in whole batches (nothing decoding) goes first, and the step
// that ends it is paced like a decode step: it carries only a small chunk
// of the long prompt, not the rest of the batch. B's rows between C's
// first and second token are the long prompt's rows in the step that
// ended C's prompt (rows are sampled in batch order, C's before B's).
func TestShortPromptNotQueued(t *testing.T) {
	fx := load(t, "stories260K.gguf")
	long := fx.tok.Encode(strings.Repeat("Once upon a time there was a girl. ", 40), true, true)
	e, err := stages.NewEngine(fx.m, fx.tok, cpu.NewRef(), stages.Config{NCtx: 512, NSeq: 3, MaxBatch: 128, StepFactor: 2, LongPrefill: 64}, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Run(context.Background()) }()
	defer func() {
		e.Close()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}()
	// A decodes alone first: the pacer measures decode-only steps.
	aDone := make(chan struct{})
	e.Submit(&stages.Request{ID: 1, Prompt: fx.tok.Encode("Once", true, true), Params: greedy(), IgnoreEOG: true, MaxTokens: 20,
		Emit: closeAtEnd(aDone)})
	<-aDone
	var bRows, cTok, atC1, atC2 int // sampler stage only
	bStarted, cDone, bDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	e.Submit(&stages.Request{ID: 2, Prompt: long, Params: greedy(), MaxTokens: 1, AllLogits: true,
		OnLogits: func([]float32) {
			if bRows++; bRows == 1 {
				close(bStarted)
			}
		},
		Emit: closeAtEnd(bDone)})
	<-bStarted
	e.Submit(&stages.Request{ID: 3, Prompt: fx.tok.Encode("Lily", true, true), Params: greedy(), IgnoreEOG: true, MaxTokens: 2,
		OnLogits: func([]float32) {
			switch cTok++; cTok {
			case 1:
				atC1 = bRows
			case 2:
				atC2 = bRows
			}
		},
		Emit: closeAtEnd(cDone)})
	<-cDone
	<-bDone
	t.Logf("%d-token prompt: %d of its rows before the short prompt's first token, %d in the step that ended the short prompt", len(long), atC1, atC2-atC1)
	if atC1 >= len(long) {
		t.Fatalf("the short prompt's first token came after the long prompt's %d rows", len(long))
	}
	if atC2-atC1 > 16 {
		t.Errorf("the step that ended the short prompt carried %d rows of the long one, want a paced chunk (<= 16)", atC2-atC1)
	}
}

// closeAtEnd is an Emit that closes ch at the request's last event.
func closeAtEnd(ch chan struct{}) func(stages.Event) error {
	return func(ev stages.Event) error {
		if ev.Finish != stages.FinishNone {
			close(ch)
		}
		return nil
	}
}

// TestStepFactorRefused: a step factor in (0, 1] leaves prompts no time
// while sequences decode; it is an error, not a silent stall.
func TestStepFactorRefused(t *testing.T) {
	fx := load(t, "stories260K.gguf")
	for _, f := range []float64{0.5, 1} {
		if _, err := stages.NewEngine(fx.m, fx.tok, cpu.NewRef(), stages.Config{NCtx: 64, NSeq: 1, MaxBatch: 64, StepFactor: f}, nil); err == nil || !strings.Contains(err.Error(), "step factor") {
			t.Errorf("step factor %v: err %v, want a refusal naming it", f, err)
		}
	}
}

// stepLog is a stages.Observer that keeps every step and admission.
type stepLog struct {
	mu     sync.Mutex
	steps  [][2]int // prompt, decode tokens
	admits int
}

func (l *stepLog) Step(prompt, decode int, _ time.Duration) {
	l.mu.Lock()
	l.steps = append(l.steps, [2]int{prompt, decode})
	l.mu.Unlock()
}

func (l *stepLog) Admitted(time.Duration) {
	l.mu.Lock()
	l.admits++
	l.mu.Unlock()
}

// TestOrdinaryPromptsUnpaced: prompts of at most LongPrefill tokens that
// arrive while a stream decodes fill the batch at once (the stream waits
// one step), oldest first; with LongPrefill negative the same prompts
// are long and paced (the stream keeps going while they prefill: here
// hundreds of its tokens). The
// Observer sees every step's prompt and decode tokens and every
// admission.
func TestOrdinaryPromptsUnpaced(t *testing.T) {
	fx := load(t, "stories260K.gguf")
	var prompts [][]int32
	for i := range 3 {
		prompts = append(prompts, fx.tok.Encode(strings.Repeat(fmt.Sprintf("Tom %d had a ball. ", i), 12), true, true))
	}
	for _, longPrefill := range []int{0, -1} {
		log := &stepLog{}
		e, err := stages.NewEngine(fx.m, fx.tok, cpu.NewRef(), stages.Config{NCtx: 512, NSeq: 4, MaxBatch: 512, StepFactor: 2, LongPrefill: longPrefill, Observer: log}, nil)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- e.Run(context.Background()) }()
		var mu sync.Mutex
		var aRows int
		firstRow := make([]int, len(prompts)) // the stream's rows when each prompt's first token came
		started, aDone := make(chan struct{}), make(chan struct{})
		e.Submit(&stages.Request{ID: 1, Prompt: fx.tok.Encode("Once", true, true), Params: greedy(), IgnoreEOG: true, MaxTokens: 300,
			OnLogits: func([]float32) {
				mu.Lock()
				defer mu.Unlock()
				if aRows++; aRows == 20 {
					close(started) // decode-only steps measured
				}
			}, Emit: closeAtEnd(aDone)})
		<-started
		mu.Lock()
		aAtSubmit := aRows
		var wg sync.WaitGroup
		for i, p := range prompts {
			wg.Add(1)
			ch := make(chan struct{})
			go func() { <-ch; wg.Done() }()
			if err := e.Submit(&stages.Request{ID: uint64(2 + i), Prompt: p, Params: greedy(), MaxTokens: 1,
				OnLogits: func([]float32) {
					mu.Lock()
					firstRow[i] = aRows
					mu.Unlock()
				}, Emit: closeAtEnd(ch)}); err != nil {
				t.Fatal(err)
			}
		}
		mu.Unlock()
		wg.Wait()
		cached := e.Stats().CachedTokens // prefix hits (BOS) are not computed
		e.Close()
		<-aDone
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		last := slices.Max(firstRow) - aAtSubmit
		t.Logf("long-prefill %d: prompts of %d tokens; the stream made %d tokens until the last one's first token (%v)", longPrefill, len(prompts[0]), last, firstRow)
		if longPrefill == 0 {
			// each prompt is prefilled whole in the step after its
			// admission (the admit edge may hand them over a step apart)
			if last > len(prompts)+1 {
				t.Errorf("ordinary prompts: the stream made %d tokens before they were all prefilled, want each in one step", last)
			}
			for i := 1; i < len(firstRow); i++ {
				if firstRow[i] < firstRow[i-1] {
					t.Errorf("prompt %d's first token before prompt %d's: not oldest first (%v)", i, i-1, firstRow)
				}
			}
		} else if last < 20 {
			t.Errorf("every prompt long: the stream made %d tokens while they prefilled, want several (paced)", last)
		}
		log.mu.Lock()
		prompt, decode := 0, 0
		for _, s := range log.steps {
			prompt, decode = prompt+s[0], decode+s[1]
		}
		want := len(fx.tok.Encode("Once", true, true)) + len(prompts[0]) + len(prompts[1]) + len(prompts[2]) - int(cached)
		if prompt != want || decode != 299 || log.admits != 4 {
			t.Errorf("observer: %d prompt and %d decode tokens in %d steps, %d admissions; want %d, 299, 4 admissions", prompt, decode, len(log.steps), log.admits, want)
		}
		log.mu.Unlock()
	}
}

// TestQueuedCount: Stats().Queued counts every request submitted and not
// yet admitted, including those the admit stage holds or has on its edge
// to the scheduler (which takes none while no KV sequence is free), and
// QueueLen says the same.
func TestQueuedCount(t *testing.T) {
	fx := load(t, "stories260K.gguf")
	e, err := stages.NewEngine(fx.m, fx.tok, cpu.NewRef(), stages.Config{NCtx: 512, NSeq: 1, MaxBatch: 64}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	started := make(chan struct{})
	var once sync.Once
	e.Submit(&stages.Request{ID: 1, Prompt: fx.tok.Encode("Once", true, true), Params: greedy(), IgnoreEOG: true, MaxTokens: 400,
		Emit: func(stages.Event) error { once.Do(func() { close(started) }); return nil }})
	<-started // the one KV sequence is taken
	const n = 5
	for i := range n {
		if err := e.Submit(&stages.Request{ID: uint64(2 + i), Prompt: fx.tok.Encode("Lily", true, true), Params: greedy(), MaxTokens: 1}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && e.Stats().Queued != n { // the admit stage hands them over
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // settled: nothing more can be admitted
	if q, l := e.Stats().Queued, e.QueueLen(); q != n || l != n {
		t.Errorf("Queued %d, QueueLen %d with %d requests waiting behind a running one; want %d", q, l, n, n)
	}
}
