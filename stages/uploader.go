package stages

// uploader.go: the uploader stage, staging slab -> slot. It puts each read
// weight where compute reads it (a placer: on the CPU, packed into the
// kernels' layout in its RAM slot), gives the staging slab back to the
// pool and tells compute (readDone) that the slot is ready, or why not.
//
// The placer is the seam of a GPU backend: its uploader is this stage with
// a placer that copies the staging slab into a VRAM slot through the
// transfer queue.

import (
	"context"
	"fmt"
	"sync"

	"github.com/flowinfer/flowinfer/graph"
	"github.com/flowinfer/flowinfer/model"
)

// readDone tells compute an expert (or a layer's matrix, mat >= 0) is in
// its slot, or why not.
type readDone struct {
	slot int32
	mat  int8
	err  error
}

// A placer puts a read weight into its slot, in the layout compute reads:
// s.views are its matrices' bytes in the staging slab, s.req says which
// weight it is and which slot it goes to. place runs on several of the
// uploader's goroutines at once, for different slots.
type placer interface {
	place(s *staged) error
}

// ramPlacer is the CPU's placer: it packs each matrix into the kernels'
// layout (model.Packer) in its RAM slot, or copies it when the backend
// computes from the file's layout.
type ramPlacer struct {
	lay   *weightLayout
	slabs *slabs
	pk    model.Packer // nil: nothing is packed
}

func (p *ramPlacer) place(s *staged) error {
	q := s.req
	if q.mat >= 0 {
		m := &p.lay.mats[q.layer][q.mat]
		if err := p.put(m, p.slabs.layer(q.slot), s.views[0]); err != nil {
			return fmt.Errorf("stages: packing %s: %w", m.tmpl.Name, err)
		}
		return nil
	}
	slot := p.slabs.expert(q.slot)
	for i := range p.lay.experts[q.layer] {
		if err := p.put(&p.lay.experts[q.layer][i], slot, s.views[i]); err != nil {
			return fmt.Errorf("stages: packing expert %d of layer %d: %w", q.expert, q.layer, err)
		}
	}
	return nil
}

// put packs (or copies) matrix m, read into src, to its place in slot.
func (p *ramPlacer) put(m *slotMat, slot, src []byte) error {
	dst := m.in(slot)
	if m.packed == 0 {
		copy(dst, src)
		return nil
	}
	w := m.tmpl
	w.Data = src
	return p.pk.PackInto(dst, &w)
}

// packers is the uploader's goroutines placing read weights: one packer
// was the bounding stage of a 4 GiB run once the disk read 2.4 GB/s (busy
// 70% of the run).
const packers = 2

// uploader is the uploader stage of one run.
type uploader struct {
	placer placer
	rec    *graph.Recorder
	stg    *graph.Stage
}

// run places each read weight (packers at a time), then returns its slab
// to the pool (ret) and tells compute (done).
func (u *uploader) run(ctx context.Context, in *graph.In[staged], ret *graph.Out[int], done *graph.Out[readDone]) error {
	work := make(chan staged)
	errc := make(chan error, packers)
	var wg sync.WaitGroup
	for range packers {
		wg.Go(func() {
			for s := range work {
				if s.err == nil {
					span := u.rec.BeginWork(u.stg, "pack") // on a packer: the uploader works while its goroutine waits
					s.err = u.placer.place(&s)
					span.End()
				}
				if err := ret.Send(ctx, s.slab); err != nil {
					errc <- err
					return
				}
				if err := done.Send(ctx, readDone{slot: s.req.slot, mat: s.req.mat, err: s.err}); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	defer wg.Wait()
	defer close(work)
	return each(ctx, in, func(s staged) error {
		select {
		case work <- s:
			return nil
		case err := <-errc:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	})
}
