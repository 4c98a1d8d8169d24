package model

// kvswackpt.go: prefix checkpoints of a cache's per-sequence state, the
// part of a sequence that its K/V blocks do not hold: a hybrid model's
// recurrent state (recurrent.go) and the window of each sliding-window
// layer's ring (kvswa.go). A ring keeps only the last rows of its
// sequence, so once the sequence has gone a batch past a prefix the rows
// a later request sharing that prefix would read are overwritten; a
// window checkpoint is a copy of them taken when the sequence stood at
// the prefix's end, and restoring it into any sequence's rings (with the
// prefix's blocks for the other layers) resumes the prefix there, as
// llama-server's context checkpoints do (llama_state_seq_get_data with
// LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY for its SWA cache).
//
// A window checkpoint at position n keeps, per ring layer and head, the
// whole tiles (quant.TileRows rows; K is stored transposed by tile) that
// hold positions [n-W+1, n), the rows the queries from n on read: at most
// (W-2)/TileRows + 2 tiles, not the whole ring (whose batch rows beside
// the window it does not need). A position's ring row depends on the
// position alone (p mod Ring), so the tiles go back to the same ring rows
// of whichever sequence restores them. The pool (ReserveCheckpoints) is
// allocated once; Save and Restore only copy.
//
// It does not decide where checkpoints are taken or which one a request
// uses (stages' statecache.go), and it does not save --kv-recent's f16
// rows: a cache with them and rings has no window checkpoints
// (CheckpointBytes refuses).

import (
	"fmt"

	"github.com/flowinfer/flowinfer/quant"
)

// swaCkptTiles returns the tiles per head a window checkpoint keeps of a
// layer of window w: enough for any w-1 consecutive positions.
func swaCkptTiles(w int) int {
	if w <= 1 {
		return 0 // the query reads its own row alone
	}
	return (w-2)/quant.TileRows + 2
}

// windowCkpts is a cache's pool of window checkpoints.
type windowCkpts struct {
	buf [][]byte // per checkpoint: each ring layer's tiles, K then V per head
	pos []int32  // per checkpoint: the position it was saved at
}

// bytes is the pool's storage.
func (w *windowCkpts) bytes() int64 {
	if w == nil {
		return 0
	}
	var n int64
	for _, b := range w.buf {
		n += int64(len(b))
	}
	return n
}

// WindowCheckpointBytes returns the bytes of one window checkpoint of a
// cache of types t for h, nCtx positions and steps of up to maxBatch rows
// (0 when no layer keeps a ring). It is an error when t keeps --kv-recent
// f16 rows in a cache with rings (a checkpoint does not save them).
func WindowCheckpointBytes(h *Hyper, t KVTypes, nCtx, maxBatch int) (int64, error) {
	ls, err := KVLayers(h, t)
	if err != nil {
		return 0, err
	}
	var n int64
	recent := false
	for l, lt := range ls {
		recent = recent || lt.RecentK || lt.RecentV
		if lt.NoRows || h.KVSource(l) != l || SWARingRows(t, h.LayerWindow(l), maxBatch, nCtx) == 0 {
			continue
		}
		n += int64(swaCkptTiles(h.LayerWindow(l))) * quant.TileRows * int64(lt.RowBytes())
	}
	if n > 0 && recent {
		return 0, fmt.Errorf("KV cache: sliding-window checkpoints do not save --kv-recent's f16 rows: set --kv-recent 0, or --swa-full, or no checkpoints (--ctx-checkpoints -1)")
	}
	return n, nil
}

// CheckpointBytes returns the bytes of one prefix checkpoint of a cache
// of types t for h (nCtx positions, steps of up to maxBatch rows): one
// sequence's recurrent state and its window checkpoint; 0 for a model
// with neither (a cached prefix is all in its blocks).
func CheckpointBytes(h *Hyper, t KVTypes, nCtx, maxBatch int) (int64, error) {
	w, err := WindowCheckpointBytes(h, t, nCtx, maxBatch)
	if err != nil {
		return 0, err
	}
	return RecurrentStateBytes(h, 1) + w, nil
}

// windowBytes is the bytes of one of c's window checkpoints.
func (c *KVCache) windowBytes() int {
	r := c.swa
	if r == nil {
		return 0
	}
	n := 0
	for l, rows := range r.rows {
		if rows > 0 {
			n += swaCkptTiles(r.win[l]) * quant.TileRows * c.layers[l].RowBytes()
		}
	}
	return n
}

// ReserveCheckpoints makes the cache's checkpoint pool n checkpoints, all
// empty: n recurrent states (a hybrid model) and n windows (a cache with
// rings). It is an error when the cache has rings and --kv-recent rows.
func (c *KVCache) ReserveCheckpoints(n int) error {
	if wb := c.windowBytes(); wb > 0 {
		if c.recent != nil {
			return fmt.Errorf("KV cache: sliding-window checkpoints do not save --kv-recent's f16 rows: set --kv-recent 0, or --swa-full, or no checkpoints (--ctx-checkpoints -1)")
		}
		w := &windowCkpts{buf: make([][]byte, n), pos: make([]int32, n)}
		for i := range w.buf {
			w.buf[i] = make([]byte, wb)
		}
		c.swaCkpt = w
	}
	if c.State != nil {
		c.State.ReserveCheckpoints(n)
	}
	return nil
}

// Checkpoints returns the checkpoint pool's size.
func (c *KVCache) Checkpoints() int {
	if c.swaCkpt != nil {
		return len(c.swaCkpt.buf)
	}
	return c.State.Checkpoints()
}

// CheckpointPos returns the position sequence seq's state stands at, the
// one Save would checkpoint: a hybrid model's recurrent state's next
// position, and the position the rings hold the window before; -1 when
// they disagree or the rings do not hold that window (a sequence rewound).
func (c *KVCache) CheckpointPos(seq int) int {
	n := -1
	if c.State != nil {
		n = int(c.State.Next[seq])
	}
	if r := c.swa; r != nil {
		hi := int(r.hi[seq])
		if n >= 0 && hi != n || !c.SWAHolds(seq, hi) {
			return -1
		}
		n = hi
	}
	return n
}

// SaveCheckpoint copies sequence seq's state at CheckpointPos(seq) into
// checkpoint ck (overwriting it): its recurrent state and its rings'
// window.
func (c *KVCache) SaveCheckpoint(ck, seq int) {
	if c.State != nil {
		c.State.Save(ck, seq)
	}
	w, r := c.swaCkpt, c.swa
	if w == nil {
		return
	}
	n := int(r.hi[seq])
	w.pos[ck] = int32(n)
	c.windowTiles(seq, n, w.buf[ck], true)
}

// RestoreCheckpoint gives sequence seq the state saved in checkpoint ck:
// its next position is the one ck was saved at, and its rings hold the
// window before it.
func (c *KVCache) RestoreCheckpoint(seq, ck int) {
	if c.State != nil {
		c.State.Restore(seq, ck)
	}
	w, r := c.swaCkpt, c.swa
	if w == nil {
		return
	}
	n := int(w.pos[ck])
	c.windowTiles(seq, n, w.buf[ck], false)
	for l, rows := range r.rows {
		if rows > 0 {
			r.lo[l][seq] = int32(max(0, n-r.win[l]+1))
		}
	}
	r.hi[seq] = int32(n)
}

// windowTiles copies between seq's rings and buf (save: into buf) the
// tiles holding positions [n-W+1, n) of each ring layer, per head K's
// tiles then V's rows of the same tiles.
func (c *KVCache) windowTiles(seq, n int, buf []byte, save bool) {
	r := c.swa
	const tr = quant.TileRows
	for l, rows := range r.rows {
		if rows == 0 {
			continue
		}
		nt := swaCkptTiles(r.win[l])
		lt := c.layers[l]
		if n == 0 || nt == 0 {
			buf = buf[nt*tr*lt.RowBytes():]
			continue
		}
		first, last := max(0, n-r.win[l]+1)/tr, (n-1)/tr // linear tiles
		for kh := range lt.NHead {
			for _, half := range [2]struct {
				data []byte
				hb   int
			}{{c.K[l], lt.KHead}, {c.V[l], lt.VHead}} {
				tb := tr * half.hb
				for i := range nt {
					if t := first + i; t <= last {
						row := seq*rows + t*tr%rows
						ring := half.data[c.off(l, row, kh, half.hb):][:tb]
						if save {
							copy(buf[i*tb:], ring)
						} else {
							copy(ring, buf[i*tb:(i+1)*tb])
						}
					}
				}
				buf = buf[nt*tb:]
			}
		}
	}
}
