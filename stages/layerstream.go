package stages

// layerstream.go: layer streaming, the compute side. When the budget cannot
// hold every layer's matrices (attention, dense FFN: everything but the
// norms, routers and routed experts), the first Plan.ResidentLayers layers
// stay resident and the others stream through Plan.LayerSlots slots, each
// the size of the largest streamed layer in compute's layout. Layers run
// in order, step after step, so the schedule is known: while layer L
// computes in one slot, the next layers are read into the others (two
// slots are double buffering; a larger budget buys more read-ahead), and
// after the last layer of a step the first streamed layers of the next
// step are read while the output head, the sampler and the scheduler run.
//
// A layer's matrices are separate reads (readReq.mat), each split by the
// reader into chunks read in parallel; the uploader packs each into the
// slot. Only compute's goroutine touches the slots' state.

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/flowinfer/flowinfer/graph"
	"github.com/flowinfer/flowinfer/model"
)

// layerMats returns pointers to L's streamable matrix fields (the first
// model.NStreamable of L.Matrices), in readReq.mat order.
func layerMats(L *model.Layer) []**model.Weight {
	ms := L.Matrices()
	return ms[:model.NStreamable]
}

// layerMat is one streamed matrix: where it is in the file and in a slot.
type layerMat struct {
	tmpl   model.Weight // Data nil
	off, n int64        // file range
	packed int          // packed size (0: kept in the file layout)
	at     int          // offset in the slot
}

type layerSlot struct {
	layer   int32 // the layer it holds or is being read into; -1 none
	pending int   // its matrices still being read
	err     error // the first failed read
	L       model.Layer
	ws      [model.NStreamable]model.Weight // L's streamed matrices (views of the slot)
}

type layerStream struct {
	wp      *WeightPath
	order   []int32 // streamed layers, in forward order
	pos     []int32 // layer -> index in order; -1: resident
	slots   []layerSlot
	inUse   int32 // the acquired slot, -1
	pending int   // matrix reads outstanding
	ctx     context.Context
	rec     *graph.Recorder
	stg     *graph.Stage

	// counters: layers found read when acquired, layers compute waited
	// for, and the time it waited
	ready, waited, waitNanos atomic.Int64
}

var _ model.LayerSource = (*layerStream)(nil)

func newLayerStream(wp *WeightPath, streamed []bool, nSlots int) *layerStream {
	ls := &layerStream{wp: wp, pos: make([]int32, len(streamed)), slots: make([]layerSlot, nSlots), inUse: -1}
	for il, s := range streamed {
		ls.pos[il] = -1
		if s {
			ls.pos[il] = int32(len(ls.order))
			ls.order = append(ls.order, int32(il))
		}
	}
	for i := range ls.slots {
		ls.slots[i].layer = -1
	}
	return ls
}

func (ls *layerStream) bind(ctx context.Context) { ls.ctx = ctx }

// slotBytes returns slot i's memory.
func (ls *layerStream) slotBytes(i int32) []byte {
	p := &ls.wp.plan
	base := p.Staging + int64(p.Slots)*p.SlotBytes + int64(i)*p.LayerSlotBytes
	return ls.wp.arena[base : base+p.LayerSlotBytes]
}

// find returns the slot holding or reading layer il, -1 if none.
func (ls *layerStream) find(il int32) int32 {
	for i := range ls.slots {
		if ls.slots[i].layer == il {
			return int32(i)
		}
	}
	return -1
}

// victim returns a slot that may be overwritten: not in use, not being
// read, and not holding one of the layers compute needs next (the window
// of len(slots) layers from order index k). With wait, it waits for reads
// to complete until one exists; otherwise it returns -1.
func (ls *layerStream) victim(k int, wait bool) (int32, error) {
	for {
		best := int32(-1)
		for i := range ls.slots {
			s := &ls.slots[i]
			if int32(i) == ls.inUse || s.pending > 0 {
				continue
			}
			if s.layer < 0 {
				return int32(i), nil
			}
			if !ls.inWindow(s.layer, k) {
				best = int32(i)
			}
		}
		if best >= 0 || !wait || ls.pending == 0 {
			return best, nil
		}
		if err := ls.wp.await(ls.ctx); err != nil {
			return -1, err
		}
	}
}

// inWindow reports whether layer il is among the len(slots) streamed
// layers from order index k on (wrapping into the next step).
func (ls *layerStream) inWindow(il int32, k int) bool {
	d := int(ls.pos[il]) - k
	if d < 0 {
		d += len(ls.order)
	}
	return d < len(ls.slots)
}

// issue asks the reader for layer il's matrices into slot s.
func (ls *layerStream) issue(il int32, s int32) error {
	st := &ls.slots[s]
	st.layer, st.err = il, nil
	st.L = ls.wp.m.Layers[il]
	mem := ls.slotBytes(s)
	mats := layerMats(&st.L)
	for i, lm := range ls.wp.lmats[il] {
		if lm.n == 0 {
			continue
		}
		w := &st.ws[i]
		*w = lm.tmpl
		if lm.packed > 0 {
			w.Data, w.Packed = mem[lm.at:lm.at+lm.packed], true
		} else {
			w.Data = mem[lm.at : lm.at+int(lm.n)]
		}
		*mats[i] = w
		if err := ls.wp.ports.reqs.Send(ls.ctx, readReq{slot: s, layer: il, expert: -1, mat: int8(i)}); err != nil {
			return err
		}
		st.pending++
		ls.pending++
	}
	return nil
}

// ahead starts reading the streamed layers of the window from order index
// k that are neither read nor being read, into slots that are free now.
func (ls *layerStream) ahead(k int) error {
	for j := range len(ls.slots) {
		il := ls.order[(k+j)%len(ls.order)]
		if ls.find(il) >= 0 {
			continue
		}
		s, err := ls.victim(k, false)
		if err != nil || s < 0 {
			return err
		}
		if err := ls.issue(il, s); err != nil {
			return err
		}
	}
	return nil
}

// Acquire implements model.LayerSource.
func (ls *layerStream) Acquire(il int) (*model.Layer, error) {
	k := int(ls.pos[il])
	if k < 0 {
		return &ls.wp.m.Layers[il], nil
	}
	s := ls.find(int32(il))
	if s < 0 {
		var err error
		if s, err = ls.victim(k, true); err != nil {
			return nil, err
		}
		if s < 0 { // cannot happen: the window has a layer no slot holds
			return nil, fmt.Errorf("stages: no layer slot free for layer %d", il)
		}
		if err := ls.issue(int32(il), s); err != nil {
			return nil, err
		}
	}
	if err := ls.ahead(k); err != nil {
		return nil, err
	}
	st := &ls.slots[s]
	if st.pending == 0 {
		ls.ready.Add(1)
		ls.rec.Add(ls.stg, "layers ready", 1)
	} else {
		ls.waited.Add(1)
		ls.rec.Add(ls.stg, "layers waited for", 1)
		t0 := nanotime()
		for st.pending > 0 {
			if err := ls.wp.await(ls.ctx); err != nil {
				return nil, err
			}
		}
		ls.waitNanos.Add(nanotime() - t0)
	}
	if err := st.err; err != nil {
		st.layer, st.err = -1, nil
		return nil, err
	}
	ls.inUse = s
	return &st.L, nil
}

// Release implements model.LayerSource: the slot may be overwritten, and
// the reads of the layers after the next start.
func (ls *layerStream) Release(il int) {
	k := int(ls.pos[il])
	if k < 0 {
		return
	}
	ls.inUse = -1
	// errors surface at the next Acquire (the context is cancelled)
	_ = ls.ahead((k + 1) % len(ls.order))
}

// complete records a finished matrix read.
func (ls *layerStream) complete(d readDone) {
	st := &ls.slots[d.slot]
	st.pending--
	ls.pending--
	if d.err != nil && st.err == nil {
		st.err = d.err
	}
}

// finish waits for the reads in flight when compute stops; if the run was
// aborted it forgets the slots they were for.
func (ls *layerStream) finish() {
	for ls.pending > 0 && ls.ctx.Err() == nil {
		if ls.wp.await(ls.ctx) != nil {
			break
		}
	}
	for i := range ls.slots {
		st := &ls.slots[i]
		if st.pending > 0 || st.err != nil {
			st.layer, st.pending, st.err = -1, 0, nil
		}
	}
	ls.pending, ls.inUse = 0, -1
}

// layout finds the streamable matrices of every layer in the file, and
// returns each layer's size in compute's layout.
func (w *WeightPath) layoutLayers() ([]int64, error) {
	m, f := w.m, w.m.File
	w.lmats = make([][model.NStreamable]layerMat, m.NLayer)
	sizes := make([]int64, m.NLayer)
	for il := range m.Layers {
		at := 0
		for i, pw := range layerMats(&m.Layers[il]) {
			wt := *pw
			if wt == nil {
				continue
			}
			t, ok := f.Tensor(wt.Name)
			if !ok {
				return nil, fmt.Errorf("stages: layer %d: no tensor %s in the file", il, wt.Name)
			}
			lm := &w.lmats[il][i]
			lm.tmpl = *wt
			lm.tmpl.Data = nil
			lm.n = int64(len(wt.Data))
			lm.off = int64(f.DataOffset + t.Offset)
			size := int(lm.n)
			if w.packer != nil {
				if n := w.packer.PackedSize(wt); n > 0 {
					lm.packed, size = n, n
				}
			}
			lm.at = at
			at += (size + 63) &^ 63
		}
		sizes[il] = int64(at)
	}
	return sizes, nil
}
