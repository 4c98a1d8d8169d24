// Package stages holds flowinfer's inference stages, each a graph stage:
//
//	reader -> pool -> uploader -> compute -> sampler -> streamer
//	                    (weights)    ^           |
//	                   scheduler ----+  <--------+ (sampled tokens fed back)
//
// The weight path (reader, pool, uploader) hands compute a ticket for each
// layer's weights before it runs that layer; with a memory-mapped model the
// reader's "read" is a view of the mapping and the uploader hands it over
// without copying, but the stages are real, so streaming weights from disk
// later changes what they do, not the shape of the graph. The request path
// (scheduler, compute, sampler, streamer) runs one forward step at a time
// for every running sequence together (continuous batching); sampled tokens
// go back to the scheduler and on to the streamer, which detokenizes,
// matches stop strings and delivers text.
//
// Engine builds and runs the graph. It does not parse requests or format
// output: cmd and serve translate their own inputs into Requests and Events
// into their own outputs.
package stages

import (
	"context"
	"time"

	"github.com/flowinfer/flowinfer/stages/sample"
)

// FinishReason says why a sequence ended.
type FinishReason string

const (
	FinishNone      FinishReason = ""
	FinishStop      FinishReason = "stop"      // end-of-generation token or stop string
	FinishLength    FinishReason = "length"    // max tokens or the context is full
	FinishCancelled FinishReason = "cancelled" // the request's context ended
	FinishError     FinishReason = "error"
)

// Request is one generation request: already tokenized, with its sampling
// settings and a sink for its events.
type Request struct {
	ID        uint64
	Ctx       context.Context // ends the request (client gone); nil = never
	Prompt    []int32
	Params    sample.Params
	MaxTokens int      // <= 0: until end of generation or a full context
	Stops     []string // stop strings, matched on text across tokens
	// CheckpointAt lists positions in Prompt, ascending, where a hybrid
	// model's recurrent state is worth checkpointing beside the planned
	// ones (statecache.go): where the chat template's messages start, so
	// that a later prompt sharing the messages before one reuses them
	// whatever follows. Other models ignore it.
	CheckpointAt []int
	// IgnoreEOG keeps generating past end-of-generation tokens (llama.cpp's
	// --ignore-eos), for benchmarks and golden comparisons.
	IgnoreEOG bool
	// RenderSpecial renders control tokens as text.
	RenderSpecial bool
	// Preserve lists control tokens rendered as text without
	// RenderSpecial (tool-call markers such as <|python_tag|>).
	Preserve []int32
	// AllLogits asks for the logits of every prompt position (not only the
	// last); each row is passed to OnLogits.
	AllLogits bool
	// OnLogits, when set, is called (from the sampler stage) with each logits
	// row used for this request: prompt rows (all with AllLogits, else the
	// last), then one per generated token. The slice is only valid during
	// the call.
	OnLogits func(row []float32)
	// Logprobs asks for each generated token's log probability (under the
	// model's raw distribution: sample.Logprobs) and, with TopLogprobs > 0,
	// the TopLogprobs most likely tokens at that step (Event.Logprob).
	Logprobs    bool
	TopLogprobs int
	// Pooling, when not PoolNone, makes this an embedding request: its
	// prompt is evaluated (prefill only, nothing is sampled or generated),
	// the final hidden states of its tokens (after the output norm) are
	// pooled and L2-normalised, and the one final event carries the vector
	// in Event.Embedding. The prompt may fill the whole context.
	Pooling Pooling
	// Emit receives the request's events, in order, from the streamer
	// stage. A slow Emit slows the whole pipeline (backpressure); an error
	// cancels the request.
	Emit func(Event) error
}

// Event is what the streamer delivers for a request: new text and the
// usage so far, and on the last event of a request the finish reason and
// timings.
type Event struct {
	ReqID  uint64
	Text   string // newly completed text (whole UTF-8 characters)
	Token  int32  // the token this event follows from, -1 for none
	Finish FinishReason
	// StopWord is the stop string that ended the request (Finish is
	// FinishStop), "" when it ended otherwise.
	StopWord string
	Err      error // with FinishError
	// Embedding is an embedding request's pooled, L2-normalised vector
	// (NEmbd values), on its final event.
	Embedding []float32
	Usage     Usage // so far; final on the last event
	Timing    Timing
	// Logprob is Token's log probability and the step's most likely
	// tokens, when the request asked for them (nil otherwise, and for an
	// end-of-generation token that ends the request: it adds no text).
	Logprob *TokenLogprob
}

// TokenLogprob is a generated token's log probability and the most likely
// tokens of its step, most likely first.
type TokenLogprob struct {
	Token   int32
	Logprob float32
	Top     []sample.Alt
}

// Usage counts a request's tokens.
type Usage struct {
	PromptTokens    int
	CachedTokens    int // prompt tokens reused from the KV cache
	GeneratedTokens int
}

// Timing is measured per request, llama.cpp style: prompt evaluation is the
// compute time of the steps that processed its prompt, generation the
// compute time of the steps that produced its tokens.
type Timing struct {
	Prompt   time.Duration
	Generate time.Duration
	Queued   time.Duration // admission to first step
	Total    time.Duration // admission to the last event
}
