package stages

// slabs.go: the slab pool ("pool" in the graph and the trace: the RAM
// pool of DESIGN.md), the one owner of the weight path's memory. One
// arena, allocated once at load (aligned, optionally mlocked), holds the
// plan's staging slabs, which reads land in, then its expert slots, then
// its layer slots, each slot in compute's layout. Where a slab or a slot
// is in the arena is known here only; where a matrix is in a slot is its
// slotMat's (the plan's).
//
// The pool stage hands the staging slabs out to the reader and takes them
// back from the uploader: an exhausted pool is what holds the reader back.
// Which expert or layer a slot holds is the expert cache's and the layer
// stream's business, not the pool's.

import (
	"context"

	"github.com/flowinfer/flowinfer/graph"
	"github.com/flowinfer/flowinfer/io/nvme"
)

// slabs is the weight path's arena and its layout.
type slabs struct {
	arena   []byte
	staging [][]byte // Plan.Slabs slabs of Plan.SlabBytes
	experts []byte   // Plan.Slots slots of expertSize
	layers  []byte   // Plan.LayerSlots slots of layerSize

	expertSize, layerSize int64
}

// arenaBytes is the size of the arena of plan p.
func arenaBytes(p Plan) int64 {
	return p.Staging + int64(p.Slots)*p.SlotBytes + int64(p.LayerSlots)*p.LayerSlotBytes
}

// newSlabs lays out p's slabs and slots in arena (arenaBytes(p) long).
// The staging slabs come first: their size is a multiple of nvme.Align, so
// each starts aligned for O_DIRECT when the arena does.
func newSlabs(p Plan, arena []byte) *slabs {
	s := &slabs{arena: arena, expertSize: p.SlotBytes, layerSize: p.LayerSlotBytes}
	for i := range int64(p.Slabs) {
		o := i * p.SlabBytes
		s.staging = append(s.staging, arena[o:o+p.SlabBytes:o+p.SlabBytes])
	}
	e := p.Staging + int64(p.Slots)*p.SlotBytes
	s.experts, s.layers = arena[p.Staging:e:e], arena[e:arenaBytes(p)]
	return s
}

// slab returns staging slab i.
func (s *slabs) slab(i int) []byte { return s.staging[i] }

// expert returns expert slot i.
func (s *slabs) expert(i int32) []byte {
	o := int64(i) * s.expertSize
	return s.experts[o : o+s.expertSize]
}

// layer returns layer slot i.
func (s *slabs) layer(i int32) []byte {
	o := int64(i) * s.layerSize
	return s.layers[o : o+s.layerSize]
}

// free releases an arena from nvme.AlignedAlloc; the slabs are unusable
// afterwards.
func (s *slabs) free() error {
	err := nvme.AlignedFree(s.arena)
	*s = slabs{}
	return err
}

// run is the pool stage: it hands every staging slab to the reader (free),
// then each one the uploader gives back (ret), until the uploader is done.
func (s *slabs) run(ctx context.Context, ret *graph.In[int], free *graph.Out[int]) error {
	for i := range s.staging {
		if err := free.Send(ctx, i); err != nil {
			return err
		}
	}
	return each(ctx, ret, func(i int) error { return free.Send(ctx, i) })
}
