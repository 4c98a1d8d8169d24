package stages

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flowinfer/flowinfer/graph"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/model/tokenizer"
	"github.com/flowinfer/flowinfer/stages/sample/grammar"
)

// Config sizes the engine. Zero fields take the defaults in brackets.
type Config struct {
	NCtx     int // KV cells per sequence [model's training context]
	NSeq     int // parallel sequences (KV slots) [1]
	MaxBatch int // tokens per forward step [512]
	Queue    int // admission queue; Submit fails with ErrQueueFull beyond it [64]
	// Weights is the weight path (NewWeightPath), nil: every weight is
	// used from the file mapping.
	Weights *WeightPath
	EdgeCap int // capacity of the token-event edge [64]
	// BlockSize is the number of tokens per KV cache block, a power of
	// two [16]. Prefixes are shared between requests in whole blocks.
	BlockSize int
	// KVTokens sizes the KV cache's blocks, shared by all sequences, in tokens
	// [NSeq × NCtx: every sequence can always reach NCtx]. A smaller pool
	// (at least NCtx) preempts sequences when it runs out.
	KVTokens int
	// KVTypes are the K and V element types of the cache (zero: f32).
	KVTypes model.KVTypes
	// LongPrefill is the number of prompt tokens to compute above which a
	// prompt is long [1024]. A step carries decode tokens first, then
	// chunks of ordinary prompts, oldest first, filling the batch, then
	// chunks of long prompts, oldest first, paced by StepFactor while
	// anything decodes. Ordinary prompts go at full chunk speed: under
	// many concurrent requests they are most of the work, and pacing them
	// starves the batch. Negative: every prompt is long (paced).
	LongPrefill int
	// StepFactor paces long prompts' chunks while other sequences decode:
	// steps that carry decode tokens take on average at most StepFactor
	// times a decode-only step (measured), each carrying as many prompt
	// tokens as that allows (at least MinChunk, or none when a single
	// token costs more: the steps between decode alone), so a long prompt
	// does not freeze running streams; with nothing decoding a chunk fills
	// the batch [2]. More than 1; negative: no pacing (chunks always fill
	// the batch: most prompt throughput, for offline work).
	StepFactor float64
	// Observer, when set, receives per-step and per-admission figures
	// (for metrics), from the scheduler's goroutine.
	Observer Observer
	// StateCheckpoints is how many prefix checkpoints the engine keeps so
	// that a request can reuse a cached prompt prefix (statecache.go): of
	// a hybrid model's recurrent state (every recurrent layer's, one
	// sequence's each), and of the window of a sliding-window model's
	// rings (model.KVCache.ReserveCheckpoints); 0: as many as
	// StateCheckpointBytes holds; negative: none, and a hybrid model then
	// prefills every prompt whole, a sliding-window model every prompt
	// whose window its rings no longer hold. Counted in the KV cache's
	// bytes. Models with neither (or with KVTypes.SWAFull and no
	// recurrent layers) ignore it.
	StateCheckpoints int
	// StateCheckpointBytes sizes the pool in bytes when StateCheckpoints
	// is 0: as many checkpoints as fit, at most MaxStateCheckpoints
	// [DefaultStateCheckpointBytes]. Negative is an error.
	StateCheckpointBytes int64
}

// Checkpoints returns the prefix checkpoints an engine of config c keeps
// for a model of hyperparameters h: StateCheckpoints, or (0) as many as
// StateCheckpointBytes (default DefaultStateCheckpointBytes) holds, at
// most MaxStateCheckpoints; 0 for a model whose cached prefixes need none
// (CheckpointBytes 0), and for a sliding-window model whose checkpoints
// cannot be made (--kv-recent rows, which NewEngine refuses when asked for
// checkpoints explicitly).
func (c Config) Checkpoints(h *model.Hyper) int {
	per, err := c.CheckpointBytes(h)
	switch {
	case err != nil || per == 0 || c.StateCheckpoints < 0:
		return 0
	case c.StateCheckpoints > 0:
		return c.StateCheckpoints
	}
	budget := c.StateCheckpointBytes
	if budget == 0 {
		budget = DefaultStateCheckpointBytes
	}
	if budget < 0 {
		return 0
	}
	return int(min(budget/per, MaxStateCheckpoints))
}

// CheckpointBytes returns the bytes of one prefix checkpoint of an engine
// of config c (model.CheckpointBytes for its KV types, context and batch,
// NewEngine's defaults for those unset): 0 for a model whose cached
// prefixes are all in their blocks.
func (c Config) CheckpointBytes(h *model.Hyper) (int64, error) {
	nCtx, batch := c.NCtx, c.MaxBatch
	if nCtx <= 0 {
		nCtx = h.NCtxTrain
	}
	if batch <= 0 {
		batch = 512
	}
	return model.CheckpointBytes(h, c.KVTypes, nCtx, batch)
}

// Observer receives the scheduler's figures as they happen. Its methods
// run on the scheduler's goroutine, between steps: they must not block.
type Observer interface {
	// Step reports a finished forward step: the prompt tokens and the
	// decode tokens it carried, and its duration (compute's).
	Step(prompt, decode int, d time.Duration)
	// Admitted reports a request's wait from Submit until it was first
	// given a KV sequence and its blocks (queue and admission wait).
	Admitted(wait time.Duration)
}

// DefaultLongPrefill is Config.LongPrefill's default: above it a prompt
// is paced while other sequences decode. A prompt of 1024 tokens stalls
// running streams for two full steps of the default batch; the prompts
// of chat turns and ordinary completions are below it, a document or a
// long system prompt's first use above.
const DefaultLongPrefill = 1024

// MinChunk is the fewest prompt tokens a paced step carries: a prompt
// always progresses, however slow its tokens are at their depth. One: at
// 16K tokens of depth a single prompt token of llama-1b costs about as much
// as a whole decode step, so any larger floor would break the pacing there.
const MinChunk = 1

func (c *Config) defaults(m *model.Model) {
	if c.NCtx <= 0 {
		c.NCtx = m.NCtxTrain
	}
	if c.NSeq <= 0 {
		c.NSeq = 1
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = 512
	}
	if c.Queue <= 0 {
		c.Queue = 64
	}
	if c.EdgeCap <= 0 {
		c.EdgeCap = 64
	}
	if c.BlockSize <= 0 {
		c.BlockSize = defaultBlockSize
	}
	if c.KVTokens <= 0 {
		c.KVTokens = c.NSeq * roundUp(c.NCtx, c.BlockSize)
	}
	if c.StepFactor == 0 {
		c.StepFactor = 2
	}
	if c.LongPrefill == 0 {
		c.LongPrefill = DefaultLongPrefill
	}
}

// Errors from Submit.
var (
	ErrQueueFull    = errors.New("stages: request queue is full")
	ErrEngineClosed = errors.New("stages: engine is closed")
	ErrPrompt       = errors.New("stages: bad prompt")
)

// queued is a submitted request and when it was submitted.
type queued struct {
	r  *Request
	at time.Time
}

// Engine runs requests through the stage graph.
type Engine struct {
	cfg  Config
	m    *model.Model
	tok  *tokenizer.Tokenizer
	mctx *model.Context
	rec  *graph.Recorder

	blocks *kvBlocks

	mu     sync.Mutex
	queue  chan queued
	closed bool

	stats engineStats

	gvOnce sync.Once // the grammar vocabulary, built on first use
	gv     *grammar.Vocab
	gvErr  error
}

// Stats is a snapshot of the engine's state, for metrics.
type Stats struct {
	Queued         int   // requests waiting for admission
	Running        int   // sequences holding a KV slot
	BlockSize      int   // tokens per KV block
	KVBlocks       int   // blocks in the pool
	KVBlocksUsed   int   // blocks held by running sequences
	KVBlocksCached int   // free blocks still holding a reusable prefix
	PromptTokens   int64 // prompt tokens of admitted requests
	CachedTokens   int64 // of which reused from the cache
	Preemptions    int64 // sequences preempted to free blocks
	// StateCheckpoints is the recurrent-state checkpoints holding a state
	// (a hybrid model's, of Config.Checkpoints).
	StateCheckpoints int
}

// engineStats is what the scheduler publishes for Stats.
type engineStats struct {
	// queued counts requests submitted and not yet taken by the scheduler
	// (in the queue, held by the admit stage, or on its edge)
	queued                          atomic.Int64
	waiting, running                atomic.Int64
	blocksUsed, blocksCached        atomic.Int64
	checkpoints                     atomic.Int64
	promptTokens, cachedTokens, pre atomic.Int64
}

// Stats returns a snapshot of the engine's counters.
func (e *Engine) Stats() Stats {
	st := &e.stats
	return Stats{
		Queued: int(st.queued.Load() + st.waiting.Load()), Running: int(st.running.Load()),
		BlockSize: e.cfg.BlockSize, KVBlocks: e.cfg.KVTokens / e.cfg.BlockSize,
		KVBlocksUsed: int(st.blocksUsed.Load()), KVBlocksCached: int(st.blocksCached.Load()), StateCheckpoints: int(st.checkpoints.Load()),
		PromptTokens: st.promptTokens.Load(), CachedTokens: st.cachedTokens.Load(), Preemptions: st.pre.Load(),
	}
}

// NewEngine prepares an engine (allocating the KV cache and scratch) for
// model m on backend ops. rec may be nil (no recording).
//
// The KV cache is a pool of cfg.KVTokens / cfg.BlockSize blocks. On a
// backend that reads the cache through its row accessors (model.PagedKV)
// it is paged: blocks are shared between sequences by reference, and a
// pool smaller than NSeq × NCtx preempts sequences when it runs out.
// Otherwise each sequence owns NCtx contiguous positions and shared
// prefixes are copied (KVTokens must then be NSeq × NCtx).
func NewEngine(m *model.Model, tok *tokenizer.Tokenizer, ops model.Ops, cfg Config, rec *graph.Recorder) (*Engine, error) {
	cfg.defaults(m)
	bs := cfg.BlockSize
	if bs&(bs-1) != 0 {
		return nil, fmt.Errorf("stages: KV block size %d is not a power of two", bs)
	}
	if cfg.NCtx <= 0 || cfg.NSeq <= 0 || cfg.MaxBatch <= 0 {
		return nil, fmt.Errorf("stages: context %d, sequences %d and batch %d must be positive", cfg.NCtx, cfg.NSeq, cfg.MaxBatch)
	}
	if cfg.StateCheckpointBytes < 0 {
		return nil, fmt.Errorf("stages: state checkpoint budget %d bytes is negative (0: the default; no checkpoints: a negative count)", cfg.StateCheckpointBytes)
	}
	if cfg.StepFactor > 0 && cfg.StepFactor <= 1 {
		return nil, fmt.Errorf("stages: step factor %g leaves no time for prompt tokens while sequences decode: it must be more than 1 (or negative: no pacing)", cfg.StepFactor)
	}
	var kv *model.KVCache
	var err error
	paged := model.SupportsPagedKV(ops)
	if paged {
		if cfg.KVTokens < cfg.NCtx {
			return nil, fmt.Errorf("stages: a KV cache of %d tokens cannot hold one context of %d", cfg.KVTokens, cfg.NCtx)
		}
		kv, err = model.NewPagedKVCache(&m.Hyper, cfg.KVTypes, bs, roundUp(cfg.KVTokens, bs)/bs, cfg.NSeq, cfg.NCtx)
	} else {
		if cfg.KVTokens < cfg.NSeq*cfg.NCtx {
			return nil, fmt.Errorf("stages: this backend needs a contiguous KV cache of NSeq × NCtx = %d tokens; %d is too small", cfg.NSeq*cfg.NCtx, cfg.KVTokens)
		}
		kv, err = model.NewBlockKVCacheFor(ops, &m.Hyper, cfg.KVTypes, bs, roundUp(cfg.NCtx, bs), cfg.NSeq) // no host rows for a device's layers
	}
	if err != nil {
		return nil, err
	}
	cfg.KVTokens = kv.NBlocks * bs
	if _, err := cfg.CheckpointBytes(&m.Hyper); err != nil && (cfg.StateCheckpoints > 0 || cfg.StateCheckpointBytes > 0) {
		return nil, fmt.Errorf("stages: prefix checkpoints asked for (%d, %d bytes): %w", cfg.StateCheckpoints, cfg.StateCheckpointBytes, err)
	}
	mctx, err := m.NewContextKV(ops, kv, cfg.MaxBatch)
	if err != nil {
		return nil, err
	}
	if kp, ok := ops.(model.KVPreparer); ok {
		// a device's KV rows now: a cache it cannot hold is refused here,
		// when a server starts, not by the first step (every request failing)
		if err := kp.PrepareKV(kv); err != nil {
			return nil, err
		}
	}
	if n := cfg.Checkpoints(&m.Hyper); n > 0 { // once the rings are sized for the batch
		if err := kv.ReserveCheckpoints(n); err != nil {
			return nil, err
		}
	}
	return &Engine{cfg: cfg, m: m, tok: tok, mctx: mctx, rec: rec, queue: make(chan queued, cfg.Queue), blocks: newKVBlocks(kv, paged, cfg.NSeq)}, nil
}

// PagedKV reports whether the KV cache is paged (blocks shared by
// reference) rather than contiguous per sequence.
func (e *Engine) PagedKV() bool { return e.blocks.paged }

// Config returns the effective configuration.
func (e *Engine) Config() Config { return e.cfg }

// KVBytes returns the size of the KV cache in bytes (its pool of
// KVTokens cells in the types KVTypes).
func (e *Engine) KVBytes() int64 { return e.mctx.KV.Bytes() }

// Model returns the engine's model.
func (e *Engine) Model() *model.Model { return e.m }

// Tokenizer returns the engine's tokenizer.
func (e *Engine) Tokenizer() *tokenizer.Tokenizer { return e.tok }

// Submit validates r and queues it without blocking.
func (e *Engine) Submit(r *Request) error {
	switch {
	case len(r.Prompt) == 0:
		return fmt.Errorf("%w: empty prompt", ErrPrompt)
	case r.Pooling < PoolNone || r.Pooling > PoolLast:
		return fmt.Errorf("%w: %v is not a supported pooling (mean, cls, last)", ErrPrompt, r.Pooling)
	case r.Pooling != PoolNone && len(r.Prompt) > e.cfg.NCtx:
		return fmt.Errorf("%w: input of %d tokens does not fit in the context of %d", ErrPrompt, len(r.Prompt), e.cfg.NCtx)
	case r.Pooling == PoolNone && len(r.Prompt) >= e.cfg.NCtx:
		return fmt.Errorf("%w: prompt of %d tokens does not fit in the context of %d (leave room for at least one generated token)", ErrPrompt, len(r.Prompt), e.cfg.NCtx)
	}
	for i, p := range r.CheckpointAt {
		if p <= 0 || p >= len(r.Prompt) || i > 0 && p <= r.CheckpointAt[i-1] {
			return fmt.Errorf("%w: checkpoint position %d (CheckpointAt[%d]) is not inside the prompt of %d tokens, above the one before", ErrPrompt, p, i, len(r.Prompt))
		}
	}
	for i, t := range r.Prompt {
		if t < 0 || int(t) >= e.m.NVocab {
			return fmt.Errorf("%w: token %d at %d outside the vocabulary of %d", ErrPrompt, t, i, e.m.NVocab)
		}
	}
	if r.Pooling == PoolNone { // an embedding request samples nothing
		if err := r.Params.Validate(); err != nil {
			return err
		}
	}
	if r.Params.Grammar != nil {
		// builds the vocabulary trie on first use and checks the grammar
		// can start; the scheduler makes the request's own sampler later
		if err := e.checkGrammar(r.Params.Grammar); err != nil {
			return err
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrEngineClosed
	}
	e.stats.queued.Add(1) // before the scheduler can take it
	select {
	case e.queue <- queued{r, time.Now()}:
		return nil
	default:
		e.stats.queued.Add(-1)
		return ErrQueueFull
	}
}

// QueueLen returns the number of requests submitted and not yet taken by
// the scheduler.
func (e *Engine) QueueLen() int { return int(e.stats.queued.Load()) }

// Close stops admission: Run returns once every admitted request is done.
func (e *Engine) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.closed {
		e.closed = true
		close(e.queue)
	}
}

// Run builds the graph and runs it until Close has been called and every
// request is done (drain), or ctx ends (abort).
func (e *Engine) Run(ctx context.Context) error {
	g := graph.New(e.rec)
	admit := g.Stage("admit")
	sched, comp, samp, strm := g.Stage("scheduler"), g.Stage("compute"), g.Stage("sampler"), g.Stage("streamer")

	admitOut, admitIn := graph.Connect[queued](admit, sched, 1)
	stepOut, stepIn := graph.Connect[*step](sched, comp, 1)
	logitsOut, logitsIn := graph.Connect[*step](comp, samp, 1)
	backOut, backIn := graph.Connect[*step](samp, sched, 1)
	evOut, evIn := graph.Connect[tokenEvent](samp, strm, e.cfg.EdgeCap)

	resident, expert, output := stepBytes(e.m)
	sc := newScheduler(e.m, e.cfg, e.blocks, &e.stats)
	sc.newSampler = e.newSampler
	cp := &compute{mctx: e.mctx, rec: e.rec, streams: e.cfg.Weights.add(g, e.rec, comp),
		resident: resident, expertBytes: expert, outBytes: output, kvc: addKVCompress(g, comp, e.mctx.KV)}
	sp := &sampler{tok: e.tok, nCtx: e.cfg.NCtx, nVocab: e.m.NVocab, nEmbd: e.m.NEmbd}
	sr := &streamer{tok: e.tok}

	admit.Do(func(ctx context.Context) error {
		for {
			wait := e.rec.BeginWait(admit, "wait <- queue") // idle, not busy
			var r queued
			var ok bool
			select {
			case r, ok = <-e.queue:
				wait.End()
				if !ok {
					return nil
				}
				if err := admitOut.Send(ctx, r); err != nil {
					return err
				}
			case <-ctx.Done():
				wait.End()
				return ctx.Err()
			}
		}
	})
	sched.Do(func(ctx context.Context) error { return sc.run(ctx, admitIn, backIn, stepOut) })
	comp.Do(func(ctx context.Context) error { return cp.run(ctx, comp, stepIn, logitsOut) })
	samp.Do(func(ctx context.Context) error { return sp.run(ctx, logitsIn, backOut, evOut) })
	strm.Do(func(ctx context.Context) error { return sr.run(ctx, evIn) })
	return g.Run(ctx)
}
