package stages

import (
	"context"
	"errors"
	"io"
	"slices"
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
	nDecode   int       // decode tokens (the first nDecode of batch)
	// Per embedding row (Batch.Embd): its seq; embd is set by compute:
	// rows × NEmbd final hidden states, valid until the next step.
	embdSeq []*seq
	embd    []float32
	dur     time.Duration
	// err is set by compute when the step failed for its own requests
	// (a weight read failed): they end with FinishError, others go on.
	err error
}

func (st *step) reset() {
	st.batch.Tokens = st.batch.Tokens[:0]
	st.batch.Pos = st.batch.Pos[:0]
	st.batch.Seq = st.batch.Seq[:0]
	st.batch.Logits = st.batch.Logits[:0]
	st.batch.Embd = st.batch.Embd[:0]
	st.seqs, st.prompt = st.seqs[:0], st.prompt[:0]
	st.rowSeq, st.rowSample = st.rowSeq[:0], st.rowSample[:0]
	st.embdSeq = st.embdSeq[:0]
	st.logits, st.embd = nil, nil
	st.nDecode = 0
}

func (st *step) add(s *seq, tok int32, pos int, logits, sampleRow, embd bool) {
	st.batch.Tokens = append(st.batch.Tokens, tok)
	st.batch.Pos = append(st.batch.Pos, int32(pos))
	st.batch.Seq = append(st.batch.Seq, int32(s.slot))
	st.batch.Logits = append(st.batch.Logits, logits)
	st.batch.Embd = append(st.batch.Embd, embd)
	if logits {
		st.rowSeq = append(st.rowSeq, s)
		st.rowSample = append(st.rowSample, sampleRow)
	}
	if embd {
		st.embdSeq = append(st.embdSeq, s)
	}
}

// scheduler admits requests into free KV sequences, builds one step at a
// time from every running sequence (decode tokens first, then prompt
// chunks with the rest of the batch: chunked prefill keeps running streams
// moving; long prompts paced, see build), and retires sequences when the sampler or the streamer has
// finished them. KV blocks come from kvBlocks: a request starts from the
// longest cached prefix of its prompt; when a decode token needs a block
// and none is free, the youngest sequence is preempted (its blocks go back
// to kvBlocks, still indexed) and later resumes by re-matching or
// recomputing its tokens.
type scheduler struct {
	m        *model.Model
	nCtx     int
	maxBatch int
	blocks   *kvBlocks
	free     []bool // per KV sequence (block table)
	lastUsed []uint64
	running  []*seq // in admission order
	waiting  []*seq // preempted, in admission order
	pending  *seq   // taken from the queue, waiting for blocks
	order    uint64
	st       step
	stats    *engineStats
	pace     pacer
	long     int // Config.LongPrefill
	obs      Observer
	pre      []*seq // build's prefilling sequences (reused)
	// newSampler makes a request's sampler (constrained by its grammar).
	newSampler func(sample.Params) (*sample.Sampler, error)
}

// pacer sizes long prompts' chunks in steps that also decode
// (Config.StepFactor):
// the running streams' steps may take factor times a decode-only step (an
// EMA of measured ones) on average. Every such step earns the prompts
// (factor-1) decode steps of time; a paced step spends what its prompt
// tokens measurably added (the step less a decode-only step). A step may
// carry prompt tokens while the credit is not negative, so when a single
// prompt token costs more than a step earns (deep in a long prompt) some
// steps decode alone and the average still holds. The credit never
// exceeds one step's earning: no burst after a quiet spell.
//
// The chunk is as many tokens as one step's earning pays for at the cost
// per prompt token measured on the last paced step, between half and twice
// the last chunk (a noisy step moves it little, tokens that cost more with
// depth shrink it), never below MinChunk.
type pacer struct {
	factor     float64
	decodeStep float64 // seconds, EMA of decode-only steps; 0 = not measured
	chunk      int     // prompt tokens of the next paced step; 0 = MinChunk
	credit     float64 // seconds of prompt work the streams can absorb now
	nDecode    int     // of the step in flight
	nPrompt    int     // long prompts' tokens of the step in flight
	// unpaced: the step in flight carried ordinary prompt tokens beside
	// decode tokens; it measures neither a decode-only step nor the cost
	// of paced tokens, and earns no credit (it already held the streams)
	unpaced bool
}

// paceEMA weighs the newest decode-only step.
const paceEMA = 0.3

// observe updates the estimates with a finished step's duration.
func (p *pacer) observe(d time.Duration) {
	if p.unpaced {
		return
	}
	sec := d.Seconds()
	switch {
	case p.nPrompt == 0 && p.nDecode > 0:
		if p.decodeStep == 0 {
			p.decodeStep = sec
		} else {
			p.decodeStep += paceEMA * (sec - p.decodeStep)
		}
		p.earn(0)
	case p.nPrompt > 0 && p.nDecode > 0 && p.decodeStep > 0:
		n := float64(p.nPrompt)
		extra := sec - p.decodeStep
		next := 2 * n // the prompt tokens cost nothing measurable
		if extra > 0 {
			next = (p.factor - 1) * p.decodeStep / (extra / n)
		}
		p.chunk = max(int(min(max(next, n/2), 2*n)), MinChunk)
		p.earn(max(extra, 0))
	}
}

// earn adds one step's earning to the credit, less spent seconds.
func (p *pacer) earn(spent float64) {
	e := (p.factor - 1) * p.decodeStep
	p.credit = min(p.credit+e-spent, e)
}

// budget returns how many prompt tokens a step with nDecode decode tokens
// may carry, given free tokens left in the batch.
func (p *pacer) budget(nDecode, free int) int {
	if p.factor < 0 || nDecode == 0 || p.decodeStep == 0 {
		return free // nothing to protect, or nothing measured yet
	}
	if p.credit < 0 {
		return 0 // this step decodes alone; the credit recovers
	}
	return min(max(p.chunk, MinChunk), free)
}

func newScheduler(m *model.Model, cfg Config, blocks *kvBlocks, stats *engineStats) *scheduler {
	s := &scheduler{m: m, nCtx: cfg.NCtx, maxBatch: cfg.MaxBatch, blocks: blocks, stats: stats,
		free: make([]bool, cfg.NSeq), lastUsed: make([]uint64, cfg.NSeq), pace: pacer{factor: cfg.StepFactor},
		long: cfg.LongPrefill, obs: cfg.Observer}
	for i := range s.free {
		s.free[i] = true
	}
	return s
}

func (s *scheduler) run(ctx context.Context, admit *graph.In[queued], back *graph.In[*step], steps *graph.Out[*step]) error {
	admitOpen := true
	for {
		s.retire()
		s.resume()
		s.publishStats() // before waiting for requests
		// Admit new requests while there is room: block only when idle.
		for admitOpen && s.pending == nil && len(s.waiting) == 0 && s.freeSlot() >= 0 {
			var r queued
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
			s.stats.queued.Add(-1)
			if c := r.r.Ctx; c != nil && c.Err() != nil {
				continue // cancelled while queued: never admitted, as retire drops it
			}
			s.pending = s.newSeq(r)
			s.resume()
		}
		s.publishStats()
		if len(s.running) == 0 {
			if !admitOpen && s.pending == nil && len(s.waiting) == 0 {
				return nil // drained
			}
			if s.pending != nil || len(s.waiting) > 0 {
				// Nothing runs, so every block is free: this cannot happen
				// for a request that passed Submit.
				return errors.New("stages: a request does not fit in the empty KV cache")
			}
			continue
		}
		if !s.build() {
			continue // preempted to make room; build again
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
		s.pace.observe(s.st.dur)
		if s.obs != nil {
			s.obs.Step(len(s.st.batch.Tokens)-s.st.nDecode, s.st.nDecode, s.st.dur)
		}
		for _, q := range s.st.seqs {
			if q.slot >= 0 {
				s.blocks.publish(q)
				s.checkpoint(q)
			}
		}
	}
}

func (s *scheduler) freeSlot() int {
	best := -1
	for i, f := range s.free {
		if f && (best < 0 || s.lastUsed[i] < s.lastUsed[best]) {
			best = i
		}
	}
	return best
}

// newSeq makes a seq of a queued request.
func (s *scheduler) newSeq(qr queued) *seq {
	r := qr.r
	var sm *sample.Sampler // none for an embedding request: it samples nothing
	if r.Pooling == PoolNone {
		var err error
		sm, err = s.newSampler(r.Params)
		if err != nil { // validated by Submit; keep the engine alive regardless
			sm, _ = sample.New(sample.Params{}, s.m.NVocab)
		}
	}
	s.order++
	toks := make([]int32, len(r.Prompt), len(r.Prompt)+64)
	copy(toks, r.Prompt)
	return &seq{req: r, order: s.order, slot: -1, toks: toks, sampler: sm, submitted: qr.at, admitted: time.Now(), cached: -1}
}

// resume makes preempted seqs, then the pending request, resident while
// a KV sequence and enough blocks for their tokens are free.
func (s *scheduler) resume() {
	for {
		var q *seq
		switch {
		case len(s.waiting) > 0:
			q = s.waiting[0]
		case s.pending != nil:
			q = s.pending
		default:
			return
		}
		slot := s.freeSlot()
		if slot < 0 {
			return
		}
		m := s.blocks.match(q.toks)
		if slot2 := s.slotFor(m); slot2 >= 0 {
			slot = slot2
		}
		blocksHit := min(m.tokens(s.blocks.size), q.limit())
		cached := blocksHit
		src := -1 // the sequence whose sliding-window rings the cached prefix needs
		if s.blocks.swaRings() {
			slot, src, cached = s.swaSource(slot, q, cached, s.slotFor(m) >= 0)
		}
		// --kv-recent's copies may cut the prefix shorter, and the rings
		// may not hold the window of a shorter one
		cached = s.blocks.recentHit(slot, m, cached)
		if src >= 0 && !s.blocks.kv.SWAHolds(src, cached) {
			cached = 0
		}
		// a hybrid model reuses only a prefix whose recurrent state is
		// checkpointed: the longest within the cached blocks; a
		// sliding-window model also one whose window is checkpointed,
		// when longer than what the live rings hold (statecache.go)
		ck := -1
		if ckpt := s.blocks.ckpt; ckpt != nil {
			c, n := ckpt.best(q.toks, blocksHit, func(n int) bool { return s.blocks.recentHit(slot, m, n) == n })
			if s.blocks.kv.State != nil || n > cached {
				ck, cached, src = c, n, -1
			}
		}
		need := (len(q.toks)+s.blocks.size-1)/s.blocks.size - cached/s.blocks.size
		if s.blocks.available() < need+1 && len(s.running) > 0 {
			return // wait for blocks (alone, it always fits)
		}
		q.slot = slot
		s.free[slot] = false
		s.lastUsed[slot] = q.order
		got := s.blocks.attach(q, m, cached)
		if src >= 0 && got < cached && !s.blocks.kv.SWAHolds(src, got) {
			// fewer blocks than planned (none free for the partial one),
			// and the rings do not hold the shorter prefix: compute it all
			s.blocks.release(q)
			got = s.blocks.attach(q, prefix{part: -1}, 0)
		}
		if ck >= 0 && got < cached {
			// fewer blocks than planned: the checkpoint is not of this
			// prefix, so compute it all
			s.blocks.release(q)
			got = s.blocks.attach(q, prefix{part: -1}, 0)
		}
		if ck >= 0 && got > 0 {
			s.blocks.ckpt.restore(q.slot, ck)
		}
		if s.blocks.ckpt != nil {
			q.ckptAt = withMessages(planCheckpoints(len(q.toks), got, s.blocks.size), q.req.CheckpointAt, got)
		}
		if src >= 0 && got > 0 {
			s.blocks.kv.CopySWA(q.slot, src)
		}
		s.blocks.kv.SWAAttach(q.slot, got)
		s.blocks.kv.RecentAttach(q.slot, got)
		q.fed = got
		q.long = s.long < 0 || len(q.toks)-got > s.long
		if q.cached < 0 { // first admission
			q.cached = got
			s.stats.promptTokens.Add(int64(len(q.req.Prompt)))
			s.stats.cachedTokens.Add(int64(got))
			if s.obs != nil {
				s.obs.Admitted(time.Since(q.submitted))
			}
		}
		if len(s.waiting) > 0 && q == s.waiting[0] {
			s.waiting = s.waiting[1:]
		} else {
			s.pending = nil
		}
		s.running = append(s.running, q)
		slices.SortFunc(s.running, func(a, b *seq) int { return cmpOrder(a.order, b.order) })
	}
}

func cmpOrder(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// swaSource limits a cached prefix of q (cached tokens, for slot) to what
// some sequence's sliding-window rings still hold: the rows of the window
// before the prefix's end (model.KVCache.SWAHolds), computed from the same
// tokens. Candidates are the rings of the free slots (what the sequence
// released from each computed) and of the running sequences (a fork, n > 1,
// from a request still running). It returns the slot to use (a free slot
// whose rings hold the longest prefix, unless keep: the fixed layout's
// slot already holding the prefix's blocks), the slot whose rings to copy
// (-1: none, the prefix is empty; slot itself: nothing to copy), and the
// prefix it can reuse: the whole prefix, or nothing when no ring holds
// its window (llama-server then reprocesses the prompt too, short of a
// context checkpoint).
func (s *scheduler) swaSource(slot int, q *seq, cached int, keep bool) (int, int, int) {
	kv := s.blocks.kv
	best, src := 0, -1
	try := func(from int, toks []int32) {
		c := min(cached, commonPrefix(toks, q.toks))
		if c > best && kv.SWAHolds(from, c) {
			best, src = c, from
		}
	}
	try(slot, s.blocks.swaToks[slot]) // the chosen slot first: no copy on a tie
	for i, f := range s.free {
		if f && i != slot {
			try(i, s.blocks.swaToks[i])
		}
	}
	for _, r := range s.running {
		try(r.slot, r.toks[:r.fed])
	}
	if src >= 0 && src != slot && !keep && s.free[src] && (s.blocks.paged || !kv.HasRecent()) {
		slot = src // its own rings: nothing to copy
	}
	return slot, src, best
}

// slotFor prefers, in the fixed layout, the free KV sequence that already
// holds the matched prefix in place (no copy); -1 if none.
func (s *scheduler) slotFor(m prefix) int {
	if s.blocks.paged {
		return -1
	}
	var b int32 = -1
	switch {
	case len(m.full) > 0:
		b = m.full[0]
	case m.part >= 0:
		b = m.part
	}
	if b < 0 {
		return -1
	}
	if slot := int(b) / s.blocks.perSeq; s.free[slot] {
		return slot
	}
	return -1
}

// retire frees the KV state of finished, stopped or cancelled sequences.
func (s *scheduler) retire() {
	ended := func(q *seq) bool {
		if q.req.Ctx != nil && q.req.Ctx.Err() != nil && q.finish == FinishNone {
			q.finish = FinishCancelled
		}
		return q.finish != FinishNone || q.stopped.Load()
	}
	kept := s.running[:0]
	for _, q := range s.running {
		if ended(q) {
			s.evict(q)
			continue
		}
		kept = append(kept, q)
	}
	clear(s.running[len(kept):])
	s.running = kept
	s.waiting = slices.DeleteFunc(s.waiting, ended)
	if s.pending != nil && ended(s.pending) {
		s.pending = nil
	}
}

// checkpoint saves q's recurrent state if q has reached the next position
// planned for a checkpoint (a hybrid model's; statecache.go).
func (s *scheduler) checkpoint(q *seq) {
	for len(q.ckptAt) > 0 && q.ckptAt[0] <= q.fed {
		if q.ckptAt[0] == q.fed {
			s.blocks.ckpt.save(q.slot, q.toks[:q.fed], slices.Contains(q.req.CheckpointAt, q.fed))
		}
		q.ckptAt = q.ckptAt[1:]
	}
}

// evict takes q out of the cache: its blocks go back to kvBlocks, and a
// hybrid model's recurrent state is checkpointed where q left it (the
// next turn of a conversation, or q itself after a preemption, continue
// from there). It runs between steps, when q's state is at q.fed.
func (s *scheduler) evict(q *seq) {
	if s.blocks.ckpt != nil {
		s.blocks.ckpt.save(q.slot, q.toks[:q.fed], false)
		q.ckptAt = nil
	}
	s.blocks.release(q)
	s.free[q.slot] = true
	q.slot, q.fed = -1, 0
}

// preempt evicts a running q to free its blocks; it resumes later.
func (s *scheduler) preempt(q *seq) {
	s.evict(q)
	s.running = slices.DeleteFunc(s.running, func(r *seq) bool { return r == q })
	i, _ := slices.BinarySearchFunc(s.waiting, q.order, func(w *seq, o uint64) int { return cmpOrder(w.order, o) })
	s.waiting = slices.Insert(s.waiting, i, q)
	s.stats.pre.Add(1)
}

// publishStats updates what Engine.Stats reports.
func (s *scheduler) publishStats() {
	waiting := len(s.waiting)
	if s.pending != nil {
		waiting++
	}
	s.stats.waiting.Store(int64(waiting))
	s.stats.running.Store(int64(len(s.running)))
	s.stats.blocksUsed.Store(int64(s.blocks.used))
	s.stats.blocksCached.Store(int64(s.blocks.cachedBlocks()))
	s.stats.checkpoints.Store(int64(s.blocks.ckpt.held()))
}

// build fills s.st with the next step. It returns false when it had to
// preempt a sequence instead (nothing could run).
func (s *scheduler) build() bool {
	st := &s.st
	st.reset()
	budget := s.maxBatch
	// Decode tokens first: one per generating sequence, oldest first; a
	// sequence that needs a block and finds none preempts the youngest.
	for i := 0; i < len(s.running) && budget > 0; i++ {
		q := s.running[i]
		if q.prefilling() {
			continue
		}
		if s.blocks.grow(q, q.fed+1) <= q.fed {
			s.preempt(s.running[len(s.running)-1]) // possibly q itself
			i--
			continue
		}
		st.seqs, st.prompt = append(st.seqs, q), append(st.prompt, false)
		st.add(q, q.last, q.fed, true, true, false)
		q.toks = append(q.toks, q.last)
		q.fed++
		q.rows = q.fed
		budget--
	}
	// Then prompt chunks, oldest first. Ordinary prompts fill the rest of
	// the batch. Long prompts (more than Config.LongPrefill tokens to
	// compute) come after them and are paced while the step has streams
	// to protect: sequences that decode in it, or ordinary prompts that end
	// in it (they decode next). A step that holds the streams for ordinary
	// prompts carries no long tokens then, so a new turn is not queued
	// behind a document's chunk and the pacer measures only its own steps.
	nDecode := s.maxBatch - budget
	st.nDecode = nDecode
	pre := s.pre[:0]
	for _, q := range s.running { // admission order
		if q.prefilling() && !q.long {
			pre = append(pre, q)
		}
	}
	nOrd := len(pre)
	for _, q := range s.running {
		if q.prefilling() && q.long {
			pre = append(pre, q)
		}
	}
	s.pre = pre
	defer clear(pre) // no finished sequence kept alive by the scratch
	protect, ordTokens, longTokens := nDecode, 0, 0
	for i, q := range pre {
		if i == nOrd { // the long prompts' budget
			switch {
			case protect == 0:
			case nDecode == 0:
				// only ordinary prompts that end here: a paced chunk,
				// as if they already decoded
				budget = s.pace.budget(1, budget)
			case ordTokens > 0:
				budget = 0
			default:
				budget = s.pace.budget(nDecode, budget)
			}
		}
		if budget == 0 {
			break
		}
		end := s.fill(q, budget)
		if end <= q.fed {
			continue
		}
		n := end - q.fed
		budget -= n
		q.fed = end
		if i < nOrd {
			ordTokens += n
			if end == len(q.toks) {
				protect++
			}
		} else {
			longTokens += n
		}
	}
	if len(st.batch.Tokens) > 0 {
		s.pace.nDecode, s.pace.nPrompt = nDecode, longTokens
		s.pace.unpaced = ordTokens > 0 && protect > 0
		return true
	}
	// Every running sequence is prefilling and no block is free: the
	// youngest makes room for the others.
	if len(s.running) > 0 {
		s.preempt(s.running[len(s.running)-1])
	}
	return false
}

// fill adds q's next prompt tokens to the step, at most n and as far as
// free blocks allow, and returns the end of the chunk (q.fed: none).
func (s *scheduler) fill(q *seq, n int) int {
	st := &s.st
	want := q.fed + min(len(q.toks)-q.fed, n)
	if len(q.ckptAt) > 0 && q.ckptAt[0] > q.fed {
		want = min(want, q.ckptAt[0]) // the state is checkpointed there
	}
	end := s.blocks.grow(q, want)
	if end <= q.fed {
		return end
	}
	pool := q.req.Pooling
	sampleLast := q.nGen == 0 && end == len(q.toks) && pool == PoolNone
	st.seqs, st.prompt = append(st.seqs, q), append(st.prompt, true)
	for i := q.fed; i < end; i++ {
		last := i == len(q.toks)-1
		logits := i >= q.rows && (q.req.AllLogits || last && sampleLast)
		// an embedding request pools each row it needs once; rows it
		// does not need count as done
		embd := pool != PoolNone && i >= q.rows && pool.needs(i, len(q.toks))
		st.add(q, q.toks[i], i, logits, last && sampleLast, embd)
		if logits || pool != PoolNone && i >= q.rows {
			q.rows = i + 1
		}
	}
	return end
}
