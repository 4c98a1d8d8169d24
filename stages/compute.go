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

// compute runs each step's forward pass on the backend. With a streaming
// weight path, MoE layers fetch their routed experts through the expert
// cache, and streamed layers come from the layer stream (streams), which
// wait on the uploader for the ones being read.
type compute struct {
	mctx    *model.Context
	rec     *graph.Recorder
	streams *Streams // nil: every weight is resident
	// resident is the bytes of the non-expert matrices a step reads in
	// its layers; expertBytes the file bytes of one routed expert.
	resident, expertBytes, outBytes int64
	kvc                             *kvCompress // the kv-compress stage (nil: none)
}

func (c *compute) run(ctx context.Context, stg *graph.Stage, steps *graph.In[*step], out *graph.Out[*step]) error {
	if c.streams != nil {
		c.streams.bind(ctx)
		defer c.streams.finish()
	}
	h := c.streams.Hooks(c.mctx.Hooks()) // the streamed weight sources, if any
	if c.kvc != nil {
		c.kvc.bind(ctx)
		h.KVDefer = c.kvc
	}
	if c.rec.Enabled() {
		if d := c.rec.Detail(); d >= graph.DetailLayers {
			ls := &layerSpans{rec: c.rec, stg: stg, ops: d >= graph.DetailOps, names: map[string][]string{}}
			if stop := timeDevice(c.rec, stg, c.mctx.Ops, ls); stop != nil {
				defer stop()
			}
			h.Span = ls.hook
			h.SplitProducts = ls.ops // a span for each product
		}
	}
	defer c.mctx.SetHooks(c.mctx.SetHooks(h))
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
		runs := c.mctx.ExpertRuns()
		dev, _ := c.mctx.Ops.(deviceSlots)
		var devHits, devMisses int64
		if dev != nil {
			devHits, devMisses = dev.ExpertLookups()
		}
		st.batch.TopK = logitsTopK(st)
		logits, err := c.mctx.Decode(&st.batch)
		st.dur = time.Since(t0)
		span.End()
		if errors.Is(err, ErrWeightRead) {
			// a read failed: the step's requests fail, the engine goes on
			st.err, st.logits = err, nil
			if err := out.Send(ctx, st); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		c.rec.Add(stg, "tokens", int64(len(st.batch.Tokens)))
		if c.rec.Enabled() {
			// weight bytes this step used: the layers' resident matrices,
			// the routed experts it ran, and the output if it made logits
			used := c.resident + (c.mctx.ExpertRuns()-runs)*c.expertBytes
			if len(logits) > 0 {
				used += c.outBytes
			}
			c.rec.Add(stg, "bytes weights", used)
			if n := c.mctx.ExpertRuns() - runs; n > 0 && (dev != nil || c.streams != nil && c.streams.experts != nil) {
				// a tier holds them: device slots, or the RAM expert cache
				// (which counts its hits and misses itself)
				c.rec.Add(stg, counterNeeded, n)
				if dev != nil {
					h, m := dev.ExpertLookups()
					c.rec.Add(stg, counterVRAMHits, h-devHits)
					c.rec.Add(stg, counterVRAMMisses, m-devMisses)
				}
			}
		}
		stg.SampleQueues() // edge depths for the trace (nothing when off)
		st.logits = logits
		st.embd = c.mctx.Embeddings()
		if err := out.Send(ctx, st); err != nil {
			return err
		}
	}
}

// stepBytes returns the bytes of the non-expert layer matrices, of one
// routed expert (the file's bytes, averaged over the layers that have
// routed experts) and of the output matrix.
func stepBytes(m *model.Model) (resident, expert, output int64) {
	var nMoE int64
	for i := range m.Layers {
		L := &m.Layers[i]
		for _, w := range L.Matrices() {
			if *w != nil {
				resident += int64(len((*w).Data))
			}
		}
		moe := false
		for _, e := range L.Experts() {
			if len(e) > 0 {
				expert += int64(len(e[0].Data))
				moe = true
			}
		}
		if moe {
			nMoE++
		}
	}
	if nMoE > 0 { // averaged over the layers that have routed experts
		expert /= nMoE
	}
	if m.Output != nil {
		output = int64(len(m.Output.Data))
	}
	return resident, expert, output
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
	// dev, when set, also marks each recorded span in the device's work
	// (timeDevice); marked is the stack of which open spans it marked.
	dev      model.DeviceTimer
	marked   []bool
	gpuNames map[string][]string // as names, with "gpu:" in front
}

func (l *layerSpans) hook(name string, layer int, begin bool) {
	if !begin {
		if n := len(l.open); n > 0 {
			l.open[n-1].End()
			l.open = l.open[:n-1]
			if l.dev != nil {
				if l.marked[n-1] {
					l.dev.MarkDevice("", false)
				}
				l.marked = l.marked[:n-1]
			}
		}
		return
	}
	if !l.ops && strings.IndexByte(name, '_') >= 0 {
		l.open = append(l.open, graph.Span{}) // keeps the stack paired; records nothing
		if l.dev != nil {
			l.marked = append(l.marked, false)
		}
		return
	}
	label := l.label(l.names, "", name, layer)
	l.open = append(l.open, l.rec.Begin(l.stg, label))
	if l.dev != nil {
		l.dev.MarkDevice(l.label(l.gpuNames, "gpu:", name, layer), true)
		l.marked = append(l.marked, true)
	}
}

// label returns prefix+name+"-"+layer (no layer suffix outside layers),
// built once per (name, layer) in names.
func (l *layerSpans) label(names map[string][]string, prefix, name string, layer int) string {
	byLayer := names[name]
	if layer+1 >= len(byLayer) {
		byLayer = append(byLayer, make([]string, layer+2-len(byLayer))...)
		names[name] = byLayer
	}
	if byLayer[layer+1] == "" {
		if layer < 0 {
			byLayer[layer+1] = prefix + name
		} else {
			byLayer[layer+1] = prefix + name + "-" + strconv.Itoa(layer)
		}
	}
	return byLayer[layer+1]
}
