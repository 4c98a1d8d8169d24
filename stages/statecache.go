package stages

// statecache.go: prefix reuse for the state a sequence's K/V blocks do
// not hold: a hybrid model's recurrent layers (their state at the end of
// a prefix cannot be rebuilt from cached K/V rows) and a sliding-window
// model's rings (model/kvswa.go: a window layer keeps only its last
// rows, so once a sequence has gone a batch past a prefix, the rows a
// later request sharing it would read are overwritten). The scheduler
// keeps checkpoints of that state (model.KVCache's checkpoint pool:
// recurrent state and ring windows, model/kvswackpt.go) and a request
// reuses the longest prefix of its prompt for which both exist: a
// checkpoint of exactly those tokens, and their K/V blocks in the block
// cache (the attention layers' rows, shared as for any model). It
// restores the checkpoint into its sequence and computes only the rest.
// A sliding-window model also reuses a prefix whose window a sequence's
// live rings still hold (scheduler.swaSource), whichever is longer; a
// prefix with neither is computed again from the longest shorter prefix
// that has one (or from the start), as llama-server does.
//
// Where checkpoints are taken (planCheckpoints, withMessages): while a
// prompt is computed, where its chat messages start (Request.CheckpointAt,
// from serve's template rendering: a shared system prompt is reused
// whatever follows it), at block boundaries a geometric distance back from
// its end (1, 2, 4, 8 ... blocks before the last boundary inside it), at
// its end,
// and when a sequence leaves the cache (finished, cancelled or preempted)
// at the position it reached. A prompt's chunks are cut at those positions
// (so the state is there after a step); the checkpoints are dense where
// later prompts tend to leave an earlier one (the user turn after a shared
// system prompt, a regenerated answer: a few tokens before the end) and
// cover a conversation's next turn (the previous prompt and answer). A
// prompt that leaves a cached one d tokens before its end recomputes fewer
// than d + one block of the shared tokens (while d is at most 16 blocks, within the planned
// checkpoints' reach). Only copies are made: a restore copies a
// checkpoint into the sequence at admission and a save copies the state
// out after a step, so no request holds a checkpoint and none waits for
// one; when the pool is full the least recently used one is overwritten,
// sparing message starts while they hold at most half the pool (save).

import (
	"slices"

	"github.com/flowinfer/flowinfer/model"
)

// DefaultStateCheckpointBytes is the checkpoint pool's default size
// (Config.StateCheckpointBytes): 512 MiB, ten of Qwen3.5-9B's 50.25 MiB
// states (a system prompt and a user turn plan eight: the user message's
// start, five near the end, the end and the release), while a small model's state of a few
// hundred KiB gets MaxStateCheckpoints. See docs/decisions.md, "Hybrid
// models reuse cached prefixes" (and, for sliding-window models' windows,
// "Sliding-window models reuse cached prefixes").
const DefaultStateCheckpointBytes = 512 << 20

// MaxStateCheckpoints caps the pool a byte budget sizes: the index is
// searched linearly at each admission, and a request saves at most a
// dozen, so more would only keep states nobody is likely to ask for.
const MaxStateCheckpoints = 64

// maxPlanned is the most checkpoints planned inside one prompt (its end
// and the release checkpoint come on top).
const maxPlanned = 5

// stateCkpts indexes a cache's checkpoint pool (a hybrid model's
// recurrent state, a sliding-window model's ring windows) by the tokens
// each checkpoint is the state of.
type stateCkpts struct {
	kv    *model.KVCache
	toks  [][]int32 // per checkpoint: its tokens (nil: empty)
	used  []uint64  // per checkpoint: when last saved or restored
	msg   []bool    // per checkpoint: at a message start (Request.CheckpointAt)
	clock uint64
}

// newStateCkpts returns the index of kv's checkpoint pool (nil when the
// cache has none).
func newStateCkpts(kv *model.KVCache) *stateCkpts {
	n := kv.Checkpoints()
	if n == 0 {
		return nil
	}
	return &stateCkpts{kv: kv, toks: make([][]int32, n), used: make([]uint64, n), msg: make([]bool, n)}
}

// best returns the checkpoint of the longest prefix of toks, of at most
// limit tokens, for which ok holds (its K/V rows are cached), and that
// prefix's length; -1 and 0 if none.
func (c *stateCkpts) best(toks []int32, limit int, ok func(n int) bool) (int, int) {
	bestCk, bestN := -1, 0
	for i, t := range c.toks {
		n := len(t)
		if n == 0 || n <= bestN || n > limit || !slices.Equal(t, toks[:n]) || !ok(n) {
			continue
		}
		bestCk, bestN = i, n
	}
	return bestCk, bestN
}

// restore gives KV sequence slot the state of checkpoint ck (its
// recurrent state, its rings' window).
func (c *stateCkpts) restore(slot, ck int) {
	c.clock++
	c.used[ck] = c.clock
	c.kv.RestoreCheckpoint(slot, ck)
}

// save checkpoints KV sequence slot's state, which is that of toks (its
// fed tokens), unless its state is elsewhere (not at len(toks)). msg marks
// a message start (Request.CheckpointAt). A checkpoint of the same tokens
// is refreshed instead. The one overwritten is an empty one, else the
// least recently used that is not a message start while those hold at
// most half the pool, else the least recently used: a prompt's own
// near-end checkpoints, more than a small pool holds, do not push out the
// message start it saved first (the one a chat sharing its system prompt
// needs), while message starts beyond half the pool are not spared.
func (c *stateCkpts) save(slot int, toks []int32, msg bool) {
	if len(toks) == 0 || c.kv.CheckpointPos(slot) != len(toks) {
		return
	}
	c.clock++
	nMsg := 0
	for i, t := range c.toks {
		if slices.Equal(t, toks) {
			c.used[i] = c.clock // the same state: keep it, fresher
			c.msg[i] = c.msg[i] || msg
			return
		}
		if c.msg[i] {
			nMsg++
		}
	}
	keepMsg := 2*nMsg <= len(c.toks) && nMsg < len(c.toks)
	ck := -1
	for i, t := range c.toks {
		if len(t) > 0 && keepMsg && c.msg[i] {
			continue
		}
		if ck < 0 || c.used[i] < c.used[ck] {
			ck = i // empty (used 0) or least recently used
		}
	}
	c.kv.SaveCheckpoint(ck, slot)
	c.toks[ck] = append(c.toks[ck][:0], toks...)
	c.used[ck], c.msg[ck] = c.clock, msg
}

// held returns how many checkpoints hold a state.
func (c *stateCkpts) held() int {
	if c == nil {
		return 0
	}
	n := 0
	for _, t := range c.toks {
		if len(t) > 0 {
			n++
		}
	}
	return n
}

// planCheckpoints returns the positions, ascending and above from, at
// which a sequence of n tokens computed from position from checkpoints its
// state: n, the last block boundary below n (a few tokens short of the
// end: a repeated prompt still computes its last row), and boundaries 1,
// 3, 7, 15... blocks before that one, at most maxPlanned below n.
func planCheckpoints(n, from, bs int) []int {
	var at []int
	if n > from {
		at = append(at, n)
	}
	last := (n - 1) / bs * bs
	for d := 0; len(at) <= maxPlanned; d = 2*d + bs {
		p := last - d
		if p <= from || p <= 0 {
			break
		}
		at = append(at, p)
	}
	slices.Reverse(at)
	return at
}

// withMessages adds to the planned positions at those of msgs (a
// request's message starts) above from, keeping them ascending and
// distinct.
func withMessages(at, msgs []int, from int) []int {
	for _, p := range msgs {
		if p > from {
			at = append(at, p)
		}
	}
	slices.Sort(at)
	return slices.Compact(at)
}
