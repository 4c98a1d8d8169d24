package stages

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/flowinfer/flowinfer/graph"
	"github.com/flowinfer/flowinfer/model"
)

// Slab is a buffer of one layer's weights on its way to compute: filled by
// the reader, placed on the device by the uploader, held by compute while
// the layer runs, then returned to the pool. With a mapped model the slab
// holds views of the mapping and nothing is copied.
type Slab struct {
	Layer int
	Bytes int64
	Views [][]byte
}

// weightPath is the reader -> uploader -> compute -> pool -> reader loop.
type weightPath struct {
	m     *model.Model
	slabs int
	rec   *graph.Recorder
}

// pool hands out nSlabs slabs and takes them back as compute releases them;
// an exhausted pool is what holds the reader back (double buffering with
// two slabs). It ends when compute stops releasing (end of input).
func (w *weightPath) pool(ctx context.Context, released *graph.In[*Slab], free *graph.Out[*Slab]) error {
	for range w.slabs {
		if err := free.Send(ctx, &Slab{}); err != nil {
			return err
		}
	}
	for {
		s, err := released.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := free.Send(ctx, s); err != nil {
			return err
		}
	}
}

// reader fills free slabs with the layers in compute order, cycling over
// the model: it prefetches the next layers while compute runs this one.
func (w *weightPath) reader(ctx context.Context, st *graph.Stage, free *graph.In[*Slab], out *graph.Out[*Slab]) error {
	data := make([][][]byte, w.m.NLayer)
	sizes := make([]int64, w.m.NLayer)
	for il := range data {
		data[il] = w.m.LayerData(il)
		for _, b := range data[il] {
			sizes[il] += int64(len(b))
		}
	}
	for il := 0; ; il = (il + 1) % w.m.NLayer {
		s, err := free.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		// Mapped weights: the read is a view; the page cache does the I/O.
		s.Layer, s.Views, s.Bytes = il, data[il], sizes[il]
		w.rec.Add(st, "bytes mapped", s.Bytes)
		if err := out.Send(ctx, s); err != nil {
			return err
		}
	}
}

// uploader places slabs on the compute device. The CPU backend computes
// from host memory, so it hands the slab over unchanged.
func (w *weightPath) uploader(ctx context.Context, in *graph.In[*Slab], out *graph.Out[*Slab]) error {
	for {
		s, err := in.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := out.Send(ctx, s); err != nil {
			return err
		}
	}
}

// layerGate connects compute's per-layer hooks to the weight path.
type layerGate struct {
	ctx      context.Context
	tickets  *graph.In[*Slab]
	released *graph.Out[*Slab]
	held     *Slab
}

func (g *layerGate) before(il int) error {
	s, err := g.tickets.Recv(g.ctx)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("stages: weight path ended before layer %d", il)
		}
		return err
	}
	if s.Layer != il {
		return fmt.Errorf("stages: weight ticket for layer %d, compute is at layer %d", s.Layer, il)
	}
	g.held = s
	return nil
}

func (g *layerGate) after(int) {
	s := g.held
	g.held = nil
	// A failed send means the pool has stopped (abort); the step's error
	// surfaces through the graph.
	_ = g.released.Send(g.ctx, s)
}
