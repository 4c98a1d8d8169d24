package stages

import (
	"sync/atomic"
	"time"

	"github.com/flowinfer/flowinfer/model/tokenizer"
	"github.com/flowinfer/flowinfer/stages/sample"
)

// slot is one KV cache sequence. It remembers the tokens its cells hold so
// that a later request sharing a prefix (the next turn of a chat, a
// repeated system prompt) starts after it instead of recomputing it.
type slot struct {
	id      int
	busy    bool
	history []int32 // tokens whose K/V are in the slot's cells, by position
}

// seq is a request running in a slot. Its fields are handed from stage to
// stage with the step (scheduler -> compute -> sampler -> scheduler), so
// each is written by one stage at a time; stopped is the exception, set by
// the streamer and read by the scheduler.
type seq struct {
	req  *Request
	slot *slot

	nDone  int   // prompt tokens whose K/V are in the slot (cached included)
	cached int   // prompt tokens reused from the slot's history
	last   int32 // last sampled token, fed at the next step
	fed    int   // tokens in the slot's cells (next position)
	nGen   int

	sampler *sample.Sampler
	primed  bool // prompt tokens accepted into the sampler's history
	finish  FinishReason
	stopped atomic.Bool // set by the streamer: stop string or consumer gone

	// Owned by the streamer.
	dec      *tokenizer.Decoder
	stops    *sample.StopMatcher
	streamed bool // final event sent

	// Timing, written by the sampler.
	admitted  time.Time
	firstStep time.Time
	tPrompt   time.Duration
	tGen      time.Duration
}

// prefilling reports whether the seq still has prompt tokens to process.
func (s *seq) prefilling() bool { return s.nDone < len(s.req.Prompt) }

// commonPrefix returns the length of the common prefix of a and b.
func commonPrefix(a, b []int32) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
