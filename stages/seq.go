package stages

import (
	"sync/atomic"
	"time"

	"github.com/flowinfer/flowinfer/model/tokenizer"
	"github.com/flowinfer/flowinfer/stages/sample"
)

// seq is a request admitted to the scheduler. Its fields are handed from
// stage to stage with the step (scheduler -> compute -> sampler ->
// scheduler), so each is written by one stage at a time; stopped is the
// exception, set by the streamer and read by the scheduler.
type seq struct {
	req   *Request
	order uint64 // admission order: preemption takes the youngest

	// KV state, owned by the scheduler. A preempted seq has no slot and no
	// blocks; it resumes by recomputing (or re-matching) toks.
	slot   int      // KV sequence (block table) index, -1 when not resident
	toks   []int32  // tokens whose K/V are or will be cached, by position: the prompt, then each generated token as it is fed
	fed    int      // tokens of toks in the cache once the step in flight is done
	blocks []int32  // KV blocks by position / block size
	keys   []uint64 // chain hashes of the full blocks published
	// ckptAt is the positions, ascending, at which a hybrid model's
	// recurrent state is checkpointed once fed reaches them (statecache.go).
	ckptAt []int
	rows   int // positions whose logits row has been delivered (not again after a preemption)

	cached int   // prompt tokens reused at admission
	long   bool  // more than Config.LongPrefill tokens to compute when made resident: paced
	last   int32 // last sampled token, fed at the next step
	nGen   int

	pool *pooler // an embedding request's pooled rows, owned by the sampler

	sampler *sample.Sampler // nil for an embedding request
	primed  bool            // prompt tokens accepted into the sampler's history
	finish  FinishReason
	stopped atomic.Bool // set by the streamer: stop string or consumer gone

	// Owned by the streamer.
	dec      *tokenizer.Decoder
	stops    *sample.StopMatcher
	streamed bool // final event sent

	// Timing, written by the sampler (submitted by Submit).
	submitted time.Time
	admitted  time.Time
	firstStep time.Time
	tPrompt   time.Duration
	tGen      time.Duration
}

// prefilling reports whether the seq has tokens to feed before its next
// decode token: its prompt, or after a preemption everything it had.
func (s *seq) prefilling() bool { return s.fed < len(s.toks) }

// limit is how many of its tokens the seq may take from the prefix cache:
// the row it samples next (an embedding request: its last row) must be
// computed, and rows whose logits a caller wants, or whose hidden states
// it pools, must be computed once.
func (s *seq) limit() int {
	n := len(s.toks)
	if s.nGen == 0 {
		n-- // the last prompt row gives the first token
	}
	if s.req.AllLogits || s.req.Pooling == PoolMean || s.req.Pooling == PoolCLS {
		n = min(n, s.rows) // rows still to pool must be computed
	}
	return max(n, 0)
}
