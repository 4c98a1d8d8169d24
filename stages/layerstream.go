package stages

// layerstream.go: layer streaming, the compute side. When the budget cannot
// hold every layer's matrices (attention, dense FFN: the first
// model.NStreamable of model.Layer.Matrices), some layers stay resident
// and the others stream through Plan.LayerSlots slots, each the size of
// the largest streamed layer in compute's layout. Layers run in order,
// step after step, so the schedule is known: while layer L computes in one
// slot, the next streamed layers are read into the others (two slots are
// double buffering; a larger budget buys more read-ahead), and after the
// last layer of a step the first streamed layers of the next step are read
// while the output head, the sampler and the scheduler run.
//
// In a run, compute uses it through a layerSource (model.LayerSource). A
// layer's matrices are separate reads (readReq.mat) on a readPort, each
// split by the reader into chunks read in parallel; the uploader packs
// each into the slot. Only compute's goroutine touches the slots' state.

import (
	"fmt"
	"sync/atomic"

	"github.com/flowinfer/flowinfer/graph"
	"github.com/flowinfer/flowinfer/model"
)

type layerSlot struct {
	layer   int32 // the layer it holds or is being read into; -1 none
	pending int   // its matrices still being read
	err     error // the first failed read
	L       model.Layer
	ws      [model.NStreamable]model.Weight // L's streamed matrices (views of the slot)
}

// layerStream is the stream's state, kept across runs.
type layerStream struct {
	layers  []model.Layer                // the model's: resident layers, and the rest of a streamed one
	mats    [][model.NStreamable]slotMat // where each layer's matrices go in a slot
	mem     *slabs                       // the slots
	order   []int32                      // streamed layers, in forward order
	pos     []int32                      // layer -> index in order; -1: resident
	slots   []layerSlot
	inUse   int32 // the acquired slot, -1
	pending int   // matrix reads outstanding

	// counters: layers found read when acquired, layers compute waited
	// for, and the time it waited
	ready, waited, waitNanos atomic.Int64
}

// newLayerStream streams the layers marked in streamed through nSlots
// slots of mem.
func newLayerStream(layers []model.Layer, mats [][model.NStreamable]slotMat, streamed []bool, nSlots int, mem *slabs) *layerStream {
	ls := &layerStream{layers: layers, mats: mats, mem: mem, pos: make([]int32, len(streamed)), slots: make([]layerSlot, nSlots), inUse: -1}
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

// layerSource is the stream as compute uses it in one run: reads are
// requests on port, and it waits on port for them.
type layerSource struct {
	*layerStream
	port readPort
	rec  *graph.Recorder
	stg  *graph.Stage
}

var _ model.LayerSource = (*layerSource)(nil)

// find returns the slot holding or reading layer il, -1 if none.
func (ls *layerStream) find(il int32) int32 {
	for i := range ls.slots {
		if ls.slots[i].layer == il {
			return int32(i)
		}
	}
	return -1
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

// victim returns a slot that may be overwritten: not in use, not being
// read, and not holding one of the layers compute needs next (the window
// of len(slots) layers from order index k); a free slot first, else the
// last such slot. With wait, it waits for reads to complete until one
// exists; otherwise it returns -1.
func (ls *layerSource) victim(k int, wait bool) (int32, error) {
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
		if err := ls.port.await(); err != nil {
			return -1, err
		}
	}
}

// issue asks for layer il's matrices to be read into slot s; the slot's
// layer points at views of its memory from now on.
func (ls *layerSource) issue(il int32, s int32) error {
	st := &ls.slots[s]
	st.layer, st.err = il, nil
	st.L = ls.layers[il]
	mem := ls.mem.layer(s)
	mats := st.L.Matrices()
	for i := range model.NStreamable {
		m := &ls.mats[il][i]
		if m.n == 0 {
			continue
		}
		st.ws[i] = m.weight(mem)
		*mats[i] = &st.ws[i]
		if err := ls.port.request(readReq{slot: s, layer: il, expert: -1, mat: int8(i)}); err != nil {
			return err
		}
		st.pending++
		ls.pending++
	}
	return nil
}

// ahead starts reading the streamed layers of the window from order index
// k that are neither read nor being read, into slots that are free now.
func (ls *layerSource) ahead(k int) error {
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
func (ls *layerSource) Acquire(il int) (*model.Layer, error) {
	k := int(ls.pos[il])
	if k < 0 {
		return &ls.layers[il], nil
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
			if err := ls.port.await(); err != nil {
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
func (ls *layerSource) Release(il int) {
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
// aborted (the port fails) it forgets the slots they were for.
func (ls *layerSource) finish() {
	for ls.pending > 0 {
		if ls.port.await() != nil {
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

// resetStats zeroes the counters.
func (ls *layerStream) resetStats() {
	ls.ready.Store(0)
	ls.waited.Store(0)
	ls.waitNanos.Store(0)
}

// stats adds the counters to s.
func (ls *layerStream) stats(s *WeightStats) {
	s.LayersReady, s.LayersWaited, s.LayerWaitNanos = ls.ready.Load(), ls.waited.Load(), ls.waitNanos.Load()
}
