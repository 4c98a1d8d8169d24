package stages

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/flowinfer/flowinfer/graph"
	"github.com/flowinfer/flowinfer/model"
)

// compute runs each step's forward pass on the backend, waiting before
// every layer for its weight ticket and returning the slab after it.
type compute struct {
	mctx *model.Context
	rec  *graph.Recorder
}

func (c *compute) run(ctx context.Context, stg *graph.Stage, steps *graph.In[*step], tickets *graph.In[*Slab], released *graph.Out[*Slab], out *graph.Out[*step]) error {
	gate := &layerGate{ctx: ctx, tickets: tickets, released: released}
	c.mctx.BeforeLayer = gate.before
	c.mctx.AfterLayer = gate.after
	// With recording on: per-layer spans, and the weight bytes each step
	// reads (its layers' slabs and the output matrix), one counter per step.
	var outBytes, stepBytes int64
	if c.rec.Enabled() {
		if d := c.rec.Detail(); d >= graph.DetailLayers {
			ls := &layerSpans{rec: c.rec, stg: stg, ops: d >= graph.DetailOps, names: map[string][]string{}}
			c.mctx.Span = ls.hook
			c.mctx.SplitProducts = ls.ops // a span for each product
		}
		c.mctx.BeforeLayer = func(il int) error {
			if err := gate.before(il); err != nil {
				return err
			}
			stepBytes += gate.held.Bytes
			return nil
		}
		if w := c.mctx.M.Output; w != nil {
			outBytes = int64(len(w.Data))
		}
	}
	for {
		st, err := steps.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		span := c.rec.Begin(stg, "forward")
		t0 := time.Now()
		logits, err := c.mctx.Decode(&st.batch)
		st.dur = time.Since(t0)
		span.End()
		if err != nil {
			return err
		}
		c.rec.Add(stg, "tokens", int64(len(st.batch.Tokens)))
		if len(logits) > 0 {
			stepBytes += outBytes
		}
		if stepBytes > 0 {
			c.rec.Add(stg, "bytes weights", stepBytes)
			stepBytes = 0
		}
		stg.SampleQueues() // edge depths for the trace (nothing when off)
		st.logits = logits
		if err := out.Send(ctx, st); err != nil {
			return err
		}
	}
}

// layerSpans records model.Context's spans (attention, FFN, experts and,
// with ops, each matrix product, per layer) as sub-spans of the compute
// stage, named as llama.cpp names tensors ("attn-3", "ffn_up-3",
// "output"). Names are built once per (name, layer), so recording
// allocates nothing per step; below graph.DetailLayers the hook is not
// installed at all.
type layerSpans struct {
	rec   *graph.Recorder
	stg   *graph.Stage
	ops   bool                // also the op-level spans (names with '_')
	names map[string][]string // name -> per layer+1 (index 0: outside layers)
	open  []graph.Span        // spans nest: a stack
}

func (l *layerSpans) hook(name string, layer int, begin bool) {
	if !begin {
		if n := len(l.open); n > 0 {
			l.open[n-1].End()
			l.open = l.open[:n-1]
		}
		return
	}
	if !l.ops && strings.IndexByte(name, '_') >= 0 {
		l.open = append(l.open, graph.Span{}) // keeps the stack paired; records nothing
		return
	}
	byLayer := l.names[name]
	if layer+1 >= len(byLayer) {
		byLayer = append(byLayer, make([]string, layer+2-len(byLayer))...)
		l.names[name] = byLayer
	}
	if byLayer[layer+1] == "" {
		if layer < 0 {
			byLayer[layer+1] = name
		} else {
			byLayer[layer+1] = name + "-" + strconv.Itoa(layer)
		}
	}
	l.open = append(l.open, l.rec.Begin(l.stg, byLayer[layer+1]))
}
