package stages

// weights.go: the weight path, for models whose weights do not all stay
// in RAM: reader -> pool -> uploader -> compute, wired into the graph of
// each run.
//
//   - plan.go: what stays resident, what is cached, what streams, and
//     where each tensor is in the file and in a slot (no I/O).
//   - slabs.go, the pool: the arena of staging slabs and slots, and the
//     stage recycling the staging slabs; an exhausted pool is what holds
//     the reader back.
//   - reader.go: requests -> reads (io/nvme: pread or io_uring, O_DIRECT)
//     into staging slabs, QueueDepth in flight.
//   - uploader.go: staging slab -> slot in compute's layout (on the CPU,
//     packed into RAM: what a GPU backend's transfer queue would do with
//     device memory), then the slab back to the pool and a word to
//     compute.
//   - expertcache.go and layerstream.go, in compute's goroutine: the
//     router's choices become requests the moment they are known
//     (model.Experts), cached experts compute while the others are read;
//     streamed layers are read ahead of compute (model.LayerSource).
//
// Everything that is not a routed expert (embeddings, attention, norms,
// routers, dense FFNs, the output) is resident when the budget holds it: a
// packed copy replaces the mapped pages (cpu.Backend.DropPacked), so it
// costs its size once; what compute reads in the file's layout is copied
// into memory the process owns (OwnResident), so that after load compute
// never reads the file's mapping: a file truncated or rewritten under a
// running model costs the reads that meet it an error (nvme.ErrChanged),
// never a fault of the process. When it does not fit, the layers' matrices stream
// too: some layers stay resident, the others are read through a few layer
// slots, ahead of compute.
//
// WeightPath is what lasts from load to Close: the plan, the file reader,
// the slabs, the cache's and the stream's contents, the counters. Each
// graph run gets its own Streams: compute's ends of that run's edges, the
// dispatch of completed reads, and the sources compute reads through.

import (
	"context"
	"errors"
	"unsafe"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/graph"
	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/io/nvme"
	"github.com/flowinfer/flowinfer/model"
)

// ErrWeightRead is matched (errors.Is) by the error of a failed weight
// read (an expert, or a streamed layer's matrix): it fails the requests of
// the step that needed the weight, not the engine.
var ErrWeightRead = errors.New("stages: reading weights")

// WeightPath is the weight path of one model. It is made once at load
// (NewWeightPath) and runs as stages of a graph (Engine.Run, or Run).
type WeightPath struct {
	m     *model.Model
	cfg   WeightConfig
	plan  Plan
	lay   *weightLayout
	rd    *nvme.Reader
	slabs *slabs
	place placer
	cache *expertCache // nil: no routed experts stream
	ls    *layerStream // nil: no layer streams
	reads readStats
}

// NewWeightPath plans the weights of m (loaded from the GGUF at path) for
// ops and allocates the path's memory. With engine mmap, or when nothing
// streams, it allocates nothing and opens no reader: every weight is
// resident (packed, or owned by OwnResident).
func NewWeightPath(m *model.Model, path string, ops model.Ops, cfg WeightConfig) (*WeightPath, error) {
	cfg = cfg.withDefaults()
	pk, _ := ops.(model.Packer)
	plan, lay, err := planWeights(m, pk, cfg)
	if err != nil {
		return nil, err
	}
	w := &WeightPath{m: m, cfg: cfg, plan: plan, lay: lay}
	if plan.Slabs == 0 || cfg.PlanOnly {
		return w, nil
	}
	// pread: each worker reads its expert's three ranges one after another
	// (QueueDepth 1 per ReadBatch); io_uring: one ring for all workers, room
	// for each one's three ranges in flight at once
	qd := 1
	if cfg.Engine == configs.EngineIOUring {
		qd = 3 * cfg.QueueDepth
	}
	// the reads must come from the file the model was loaded from: the
	// identity the mapping was made with, not the one found now
	o := nvme.Options{Engine: cfg.Engine, Direct: !cfg.NoDirect, QueueDepth: qd}
	if id, ok := m.File.ID(); ok {
		o.Expect = &id
	}
	rd, err := nvme.Open(path, o)
	if err != nil {
		return nil, err
	}
	arena, err := nvme.AlignedAlloc(arenaBytes(plan), cfg.Lock)
	if err != nil {
		rd.Close()
		return nil, err
	}
	w.rd, w.plan.Direct = rd, rd.Direct()
	w.slabs = newSlabs(plan, arena)
	w.place = &ramPlacer{lay: lay, slabs: w.slabs, pk: pk}
	if m.NExpert > 0 {
		w.cache = newExpertCache(plan.Slots, cfg.Policy, lay.experts, w.slabs, m.NExpert)
	}
	if plan.Layers > 0 {
		w.ls = newLayerStream(m.Layers, lay.mats, lay.streamed, plan.LayerSlots, w.slabs)
	}
	return w, nil
}

// OwnResident makes every weight compute may read from the file's mapping
// after load memory the process owns (gguf.File.Own): all the model's
// tensors but those the weight path reads (routed experts that stream,
// streamed layers' matrices), those the model skips (model.Model.Skipped:
// a multi-token-prediction block) and those packed reports compute reads a
// packed copy of (their mapped pages are not touched again). The token
// embeddings are always owned: they are read by row in the file's layout,
// also when the output (tied to them) is packed. Call it after packing,
// before the model runs; it returns the bytes owned. A file that changed
// since the model was mapped fails it (fileid.ErrChanged): the model holds
// bytes of two files and must be closed.
func (w *WeightPath) OwnResident(packed func(*model.Weight) bool) (int64, error) {
	f := w.m.File
	if _, ok := f.ID(); !ok {
		return 0, nil // not mapped from a file (tests' parsed models)
	}
	return f.Own(w.ownRanges(packed))
}

// ownRanges returns the file ranges OwnResident owns (before they are
// widened to pages).
func (w *WeightPath) ownRanges(packed func(*model.Weight) bool) []gguf.Range {
	f := w.m.File
	data := f.Bytes()
	base := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
	// rangeOf is where b lies in the file, if it is a view of the mapping
	rangeOf := func(b []byte) (gguf.Range, bool) {
		if len(b) == 0 {
			return gguf.Range{}, false
		}
		p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		if p < base || p-base+uintptr(len(b)) > uintptr(len(data)) {
			return gguf.Range{}, false
		}
		return gguf.Range{Off: int64(p - base), N: int64(len(b))}, true
	}
	var skip []gguf.Range
	add := func(r gguf.Range, ok bool) {
		if ok {
			skip = append(skip, r)
		}
	}
	for il := range w.m.Layers {
		L := &w.m.Layers[il]
		for j, pw := range L.Matrices() {
			wt := *pw
			switch {
			case wt == nil:
			case j < model.NStreamable && w.StreamsLayer(il):
				add(rangeOf(wt.Data))
			case packed != nil && packed(wt):
				add(rangeOf(wt.Data))
			}
		}
		for _, ws := range L.Experts() {
			for e := range ws {
				if w.cache != nil || packed != nil && packed(&ws[e]) {
					add(rangeOf(ws[e].Data))
				}
			}
		}
	}
	if out := w.m.Output; out != nil && out != w.m.TokEmbd && packed != nil && packed(out) {
		add(rangeOf(out.Data))
	}
	for _, t := range w.m.Skipped { // tensors the model does not use (its MTP block): never read
		add(rangeOf(t.Data))
	}
	var own []gguf.Range
	for _, t := range f.Tensors {
		if r, ok := rangeOf(t.Data); ok {
			own = append(own, subtract(r, skip)...)
		}
	}
	if w.m.TokEmbd != nil {
		if r, ok := rangeOf(w.m.TokEmbd.Data); ok {
			own = append(own, r)
		}
	}
	return own
}

// subtract returns the parts of r outside every range of cut.
func subtract(r gguf.Range, cut []gguf.Range) []gguf.Range {
	out := []gguf.Range{r}
	for _, c := range cut {
		var next []gguf.Range
		for _, p := range out {
			lo, hi := max(p.Off, c.Off), min(p.Off+p.N, c.Off+c.N)
			if lo >= hi {
				next = append(next, p)
				continue
			}
			if lo > p.Off {
				next = append(next, gguf.Range{Off: p.Off, N: lo - p.Off})
			}
			if end := p.Off + p.N; hi < end {
				next = append(next, gguf.Range{Off: hi, N: end - hi})
			}
		}
		out = next
	}
	return out
}

// StreamsLayer reports whether layer il's matrices are streamed (so they
// are not packed or kept resident at load).
func (w *WeightPath) StreamsLayer(il int) bool {
	return w != nil && w.lay.streamed != nil && w.lay.streamed[il]
}

// Prefetching reports whether MoE layers should prefetch the next layer's
// guessed experts (Hooks.PrefetchNext).
func (w *WeightPath) Prefetching() bool {
	return w != nil && w.plan.Streaming() && w.cfg.PrefetchDepth > 0
}

// Plan returns the placement plan.
func (w *WeightPath) Plan() Plan { return w.plan }

// Close releases the reader and the slabs. The path must not run afterwards.
func (w *WeightPath) Close() error {
	var err error
	if w.rd != nil {
		err = w.rd.Close()
	}
	if w.slabs != nil {
		w.slabs.free()
		w.slabs = nil
	}
	return err
}

// WeightStats are the weight path's counters since load.
type WeightStats struct {
	Hits, Misses  []int64 // per layer
	BytesRead     int64   // bytes read from disk (experts and streamed layers)
	ReadNanos     int64   // summed durations of the reads (several in flight at once)
	Evictions     int64
	CachedExperts int
	// speculative prefetch: reads issued, used by the next layer, evicted
	// unused (accuracy = used / issued once the run is over)
	PrefetchIssued, PrefetchUsed, PrefetchWasted int64
	// layer streaming: streamed layers found read when compute reached
	// them, layers compute waited for, and the time it waited
	LayersReady, LayersWaited, LayerWaitNanos int64

	// reads issued to the disk (an expert's ranges in one batch, a layer
	// matrix's 1 MiB pieces), experts and layer matrices read whole, and
	// the time at least one read was in flight (the disk's busy time)
	Reads, ExpertsRead, MatricesRead, DiskBusyNanos int64
	// misses that found the expert's prefetch still in flight (no read
	// of their own: they waited for the prefetch's)
	PrefetchLate int64
}

// Stats returns a snapshot of the counters (safe from any goroutine).
func (w *WeightPath) Stats() WeightStats {
	var s WeightStats
	if w.cache != nil {
		w.cache.stats(&s)
	}
	if w.ls != nil {
		w.ls.stats(&s)
	}
	w.reads.stats(&s)
	return s
}

// ResetStats zeroes the hit, miss and read counters (after Preload, so
// they describe the run).
func (w *WeightPath) ResetStats() {
	if w.cache != nil {
		w.cache.resetStats()
	}
	if w.ls != nil {
		w.ls.resetStats()
	}
	w.reads.reset()
}

// readPort is how the expert cache and the layer stream reach the weight
// path's stages in a run. request sends a read to the reader; it does not
// block (the edge has room for a read per slot, and a slot has at most one
// read outstanding). await waits for one completed read and hands it to
// its owner's complete, the cache's or the stream's, whichever asked: so
// either may wait out the other's reads. await fails at once when the run
// is aborted.
type readPort interface {
	request(readReq) error
	await() error
}

// Streams is one run of the weight path as compute sees it: compute's ends
// of the run's edges, and the expert cache and layer stream reading
// through them. It is made for each graph run (nil when nothing streams)
// and valid inside the compute stage's goroutine of that run.
type Streams struct {
	ctx      context.Context     // compute's (bind)
	reqs     *graph.Out[readReq] // compute -> reader
	done     *graph.In[readDone] // uploader -> compute
	experts  *expertSource       // nil: no routed experts stream
	layers   *layerSource        // nil: no layer streams
	prefetch bool
}

var _ readPort = (*Streams)(nil)

func (s *Streams) request(r readReq) error { return s.reqs.Send(s.ctx, r) }

func (s *Streams) await() error {
	d, err := s.done.Recv(s.ctx)
	if err != nil {
		return err
	}
	if d.mat >= 0 {
		s.layers.complete(d)
	} else {
		s.experts.complete(d)
	}
	return nil
}

// Experts returns the routed experts' source, nil when experts do not
// stream.
func (s *Streams) Experts() model.Experts {
	if s == nil || s.experts == nil {
		return nil
	}
	return s.experts
}

// Hooks returns h with the run's streamed weight sources (experts,
// layers) in it, and prefetch on when the path is configured to; a nil s
// (nothing streams) returns h unchanged. The caller installs the result
// with model.Context.SetHooks for the run.
func (s *Streams) Hooks(h model.Hooks) model.Hooks {
	if s == nil {
		return h
	}
	if s.experts != nil {
		h.Experts, h.PrefetchNext = s.experts, s.prefetch
	}
	if s.layers != nil {
		h.Layers = s.layers
	}
	return h
}

// bind gives s compute's context (the stage's function).
func (s *Streams) bind(ctx context.Context) { s.ctx = ctx }

// finish waits for the reads in flight when compute stops.
func (s *Streams) finish() {
	if s.experts != nil {
		s.experts.finish()
	}
	if s.layers != nil {
		s.layers.finish()
	}
}

// add wires the path's stages into g next to the compute stage comp and
// returns the run's Streams (nil when nothing streams), valid inside
// comp's goroutine once bind has given them comp's context.
func (w *WeightPath) add(g *graph.Graph, rec *graph.Recorder, comp *graph.Stage) *Streams {
	if w == nil || !w.plan.Streaming() {
		return nil
	}
	reader, pool, up := g.Stage("reader"), g.Stage("pool"), g.Stage("uploader")
	// every outstanding read owns a slot: edges as deep as the slots never
	// block compute (which would deadlock it against the uploader)
	capReq := w.plan.LayerSlots * model.NStreamable
	if w.cache != nil {
		capReq += len(w.cache.slots)
	}
	nSlabs := len(w.slabs.staging)
	reqs, reqsIn := graph.Connect[readReq](comp, reader, capReq)
	free, freeIn := graph.Connect[int](pool, reader, nSlabs)
	read, readIn := graph.Connect[staged](reader, up, nSlabs)
	ret, retIn := graph.Connect[int](up, pool, nSlabs)
	done, doneIn := graph.Connect[readDone](up, comp, capReq)
	rd := newReader(w.rd, w.lay, w.slabs, w.cfg.QueueDepth, &w.reads, rec, reader)
	u := &uploader{placer: w.place, rec: rec, stg: up}
	pool.Do(func(ctx context.Context) error { return w.slabs.run(ctx, retIn, free) })
	reader.Do(func(ctx context.Context) error { return rd.run(ctx, reqsIn, freeIn, read) })
	up.Do(func(ctx context.Context) error { return u.run(ctx, readIn, ret, done) })

	s := &Streams{reqs: reqs, done: doneIn, prefetch: w.cfg.PrefetchDepth > 0}
	if w.cache != nil {
		s.experts = &expertSource{expertCache: w.cache, port: s, rec: rec, stg: comp}
	}
	if w.ls != nil {
		s.layers = &layerSource{layerStream: w.ls, port: s, rec: rec, stg: comp}
	}
	return s
}

// Run runs fn as the compute stage of a graph that holds the weight path's
// stages, for tools that drive a model.Context themselves (bench): fn
// attaches st (nil when nothing streams) to its Context and uses it only
// inside fn.
func (w *WeightPath) Run(ctx context.Context, rec *graph.Recorder, fn func(ctx context.Context, st *Streams) error) error {
	g := graph.New(rec)
	comp := g.Stage("compute")
	st := w.add(g, rec, comp)
	comp.Do(func(ctx context.Context) error {
		if st == nil {
			return fn(ctx, nil)
		}
		st.bind(ctx)
		defer st.finish()
		return fn(ctx, st)
	})
	return g.Run(ctx)
}

// RunContext is Run for a tool driving mctx (bench): the weight path's
// streams are attached to mctx while fn runs, and so is a kv-compress
// stage when mctx's cache keeps f16 copies of recent rows (--kv-recent), as
// in the engine.
func (w *WeightPath) RunContext(ctx context.Context, rec *graph.Recorder, mctx *model.Context, fn func(ctx context.Context) error) error {
	g := graph.New(rec)
	comp := g.Stage("compute")
	st := w.add(g, rec, comp)
	kvc := addKVCompress(g, comp, mctx.KV)
	comp.Do(func(ctx context.Context) error {
		if st != nil {
			st.bind(ctx)
			defer st.finish()
		}
		h := st.Hooks(mctx.Hooks())
		if kvc != nil {
			kvc.bind(ctx)
			h.KVDefer = kvc
		}
		defer mctx.SetHooks(mctx.SetHooks(h))
		return fn(ctx)
	})
	return g.Run(ctx)
}

// Preload reads every routed expert into the cache through the weight
// path's stages, when the cache holds them all (Plan.Slots ==
// Plan.Experts): the model then runs with nothing left to read, as a fully
// resident one (llama.cpp loads every weight before its first token, too).
// It does nothing when the cache is smaller.
func (w *WeightPath) Preload(ctx context.Context) error {
	if w.cache == nil || w.plan.Slots < w.plan.Experts {
		return nil
	}
	ids := make([]int, w.m.NExpert)
	for i := range ids {
		ids[i] = i
	}
	return w.Run(ctx, nil, func(ctx context.Context, st *Streams) error {
		ex := st.Experts()
		for il := range w.m.NLayer {
			if err := ex.Fetch(il, ids); err != nil {
				return err
			}
			for range ids {
				if _, _, err := ex.Next(); err != nil {
					ex.Release(il)
					return err
				}
			}
			ex.Release(il)
		}
		return nil
	})
}
