package stages

// weights.go: the weight path, reader -> pool -> uploader -> compute, for
// models whose routed experts do not all stay in RAM.
//
//   - pool: owns the staging slabs (aligned, allocated once, optionally
//     mlocked) that reads land in, and recycles them; an exhausted pool is
//     what holds the reader back.
//   - reader: turns compute's requests for experts into reads of their
//     byte ranges (io/nvme: pread or io_uring, O_DIRECT) into staging slabs, with up to
//     QueueDepth reads in flight.
//   - uploader: puts a read expert where compute can use it: on the CPU,
//     packs it into the kernels' layout in its expert-cache slot (what a
//     GPU backend's transfer queue would do with device memory), then
//     returns the staging slab to the pool and tells compute.
//   - compute: the router's choices become requests the moment they are
//     known (model.Experts, implemented by expertCache); cached experts
//     compute while the others are read.
//
// Everything that is not a routed expert (embeddings, attention, norms,
// routers, dense FFNs, the output) is resident when the budget holds it: a
// packed copy replaces the mapped pages (cpu.Backend.DropPacked), so it
// costs its size once. When it does not fit, the layers' matrices stream
// too (layerstream.go): the first layers stay resident, the others are
// read through a few layer slots, reading ahead of compute.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/graph"
	"github.com/flowinfer/flowinfer/io/nvme"
	"github.com/flowinfer/flowinfer/model"
)

// WeightConfig configures the weight path.
type WeightConfig struct {
	// Engine reads weights: "mmap" (the whole file mapped, experts read
	// through the page cache as the kernel pages them in: no budget) or
	// "pread" (routed experts read into an expert cache of Budget bytes).
	Engine string
	// Budget is the bytes of weights held in RAM: resident weights, the
	// expert cache and the staging slabs. 0: no limit (every expert is
	// cached once read).
	Budget int64
	// QueueDepth is the number of reads in flight [8].
	QueueDepth int
	// Policy is the expert cache's eviction policy: "slru" (segmented LRU,
	// the default) or "lru".
	Policy string
	// Lock mlocks the cache and staging slabs.
	Lock bool
	// PrefetchDepth 1 guesses each MoE layer's experts from the residual
	// stream one layer early and reads them ahead (model.Context
	// PrefetchNext); 0 reads only what the router chose. Deeper
	// speculation is not implemented.
	PrefetchDepth int
	// NoDirect reads through the page cache instead of O_DIRECT.
	NoDirect bool
	// PlanOnly makes the plan and stops: nothing is opened or allocated
	// (--dry-run); the path cannot run.
	PlanOnly bool

	// force, set by tests only (export_test.go), streams every layer but
	// the first force.resident through force.slots slots whatever the
	// budget: the golden models are too small for a budget to do it.
	force *layerForce
}

type layerForce struct{ resident, slots int }

// Plan is where each kind of weight lives, decided at load from the model
// and the budget.
type Plan struct {
	Engine     string
	Direct     bool
	QueueDepth int
	Budget     int64 // 0: no limit
	Resident   int64 // bytes of weights that stay in RAM (packed copies and views)
	ExpertFile int64 // bytes of all routed experts in the file
	SlotBytes  int64 // one cache slot: the largest expert, in compute's layout
	Experts    int   // routed experts in the model (layers × experts)
	Slots      int   // experts the cache holds
	Staging    int64 // bytes of staging slabs
	// layer streaming (when the layers do not all fit): Layers of the
	// model's layers stream through LayerSlots slots of LayerSlotBytes,
	// reading LayerFile bytes of the file per step; ResidentLayers stay.
	Layers, ResidentLayers, LayerSlots int
	LayerSlotBytes, LayerFile          int64
	// MinBudget is the smallest budget the model runs with (every layer
	// streamed through two slots; MoE: one token's experts cached).
	MinBudget int64
}

// Streaming reports whether some weights are read from disk after load.
func (p Plan) Streaming() bool { return p.Experts > 0 && p.Engine != "mmap" || p.Layers > 0 }

// maxLayerSlots bounds the read-ahead of layer streaming: past a few
// layers, more slots hide no more latency and the bytes do more good as
// resident layers or cached experts.
const maxLayerSlots = 4

// String is the plan in two lines, as printed at load.
func (p Plan) String() string {
	gib := func(b int64) string { return configs.ByteSize(b).String() }
	var sb strings.Builder
	budget := "no limit"
	if p.Budget > 0 {
		budget = gib(p.Budget)
	}
	if p.Layers == 0 {
		fmt.Fprintf(&sb, "weights: budget %s; resident %s (embeddings, attention, norms, routers, dense FFNs, output)", budget, gib(p.Resident))
	} else {
		fmt.Fprintf(&sb, "weights: budget %s; resident %s (embeddings, output, norms, routers, %d of %d layers); %d layers (%s) streamed from disk each step through %d slots of %s",
			budget, gib(p.Resident), p.ResidentLayers, p.ResidentLayers+p.Layers, p.Layers, gib(p.LayerFile), p.LayerSlots, gib(p.LayerSlotBytes))
	}
	switch {
	case p.Experts == 0 && p.Layers == 0:
		sb.WriteString("; no routed experts: nothing streams")
	case p.Experts == 0:
		direct := "buffered"
		if p.Direct {
			direct = "O_DIRECT"
		}
		fmt.Fprintf(&sb, "\nweights: %s %s, %d reads in flight, staging %s", p.Engine, direct, p.QueueDepth, gib(p.Staging))
	case p.Engine == "mmap":
		fmt.Fprintf(&sb, "; %d experts (%s) mapped by mmap, paged in by the kernel", p.Experts, gib(p.ExpertFile))
	default:
		direct := "buffered"
		if p.Direct {
			direct = "O_DIRECT"
		}
		fmt.Fprintf(&sb, "\nweights: expert cache %s = %d of %d experts (%.1f%%), %s of experts streamed from disk; %s %s, %d reads in flight, staging %s",
			gib(int64(p.Slots)*p.SlotBytes), p.Slots, p.Experts, 100*float64(p.Slots)/float64(p.Experts),
			gib(p.ExpertFile*int64(p.Experts-p.Slots)/int64(p.Experts)), p.Engine, direct, p.QueueDepth, gib(p.Staging))
	}
	return sb.String()
}

// expertLayer is where layer l's experts are in the file and in a slot.
type expertLayer struct {
	tmpl   [3]model.Weight // gate, up, down of expert 0 (Data nil)
	off    [3]int64        // file offset of expert 0's bytes
	per    [3]int64        // file bytes per expert
	packed [3]int          // packed size (0: kept in the file layout)
	at     [3]int          // offset in the slot
}

// readChunk is the size of the pieces a streamed layer matrix is read in,
// QueueDepth of them in flight (1 MiB O_DIRECT reads reach the disk's
// bandwidth here: bench/diskbw).
const readChunk = 1 << 20

// WeightPath is the weight path of one model: the plan, the file reader,
// the slabs and the expert cache. It is made once at load (NewWeightPath)
// and runs as stages of a graph (Engine.Run, or Run).
type WeightPath struct {
	m      *model.Model
	cfg    WeightConfig
	plan   Plan
	rd     *nvme.Reader
	packer model.Packer
	layers []expertLayer
	lmats  [][model.NStreamable]layerMat // streamable matrices per layer
	// streamed[il]: layer il's matrices stream (nil: none do)
	streamed []bool

	arena   []byte   // staging slabs, then cache slots
	staging [][]byte // QueueDepth+1 slabs
	stSize  int64
	cache   *expertCache
	ls      *layerStream
	ports   ports // of the current run

	// a streamed matrix is read in chunks by several workers: chunks
	// left and the first error, per staging slab
	left    []atomic.Int32
	errMu   sync.Mutex
	slabErr []error

	readBytes, readNanos atomic.Int64
}

// DefaultQueueDepth is the reads in flight when the config says 0.
const DefaultQueueDepth = 8

// minStagingSlabs: one slab beyond the reads in flight lets the uploader
// work on one while the reader fills the others.
const extraStaging = 1

// NewWeightPath plans the weights of m (loaded from the GGUF at path) for
// ops and allocates the path's memory. With engine mmap, or a model without
// routed experts, it allocates nothing and reads nothing: the mapping
// serves every weight.
func NewWeightPath(m *model.Model, path string, ops model.Ops, cfg WeightConfig) (*WeightPath, error) {
	if cfg.Engine == "" {
		cfg.Engine = "pread"
	}
	if cfg.QueueDepth <= 0 {
		cfg.QueueDepth = DefaultQueueDepth
	}
	if cfg.Policy == "" {
		cfg.Policy = "slru"
	}
	if cfg.Policy != "slru" && cfg.Policy != "lru" {
		return nil, fmt.Errorf("stages: unknown expert cache policy %q (supported: slru, lru)", cfg.Policy)
	}
	if cfg.PrefetchDepth < 0 || cfg.PrefetchDepth > 1 {
		return nil, fmt.Errorf("stages: prefetch_depth %d is not implemented (supported: 0, 1)", cfg.PrefetchDepth)
	}
	if cfg.Budget < 0 {
		return nil, fmt.Errorf("stages: negative RAM budget %d", cfg.Budget)
	}
	switch cfg.Engine {
	case "mmap", "pread", "io_uring":
	default:
		return nil, fmt.Errorf("stages: unknown io_engine %q (supported: pread, io_uring, mmap)", cfg.Engine)
	}
	w := &WeightPath{m: m, cfg: cfg}
	w.packer, _ = ops.(model.Packer)
	p := &w.plan
	p.Engine, p.QueueDepth, p.Budget = cfg.Engine, cfg.QueueDepth, cfg.Budget
	p.Resident = residentBytes(m, w.packer)
	if m.NExpert > 0 {
		if err := w.layout(); err != nil {
			return nil, err
		}
	}
	if cfg.Engine == "mmap" {
		if p.Budget > 0 && p.Resident+p.ExpertFile > p.Budget {
			return nil, fmt.Errorf("stages: io_engine mmap maps the whole model (%s) and cannot keep within the RAM budget of %s; use io_engine pread", size(p.Resident+p.ExpertFile), size(p.Budget))
		}
		return w, nil
	}
	// staging slabs: one expert's three ranges, each widened for O_DIRECT
	nStaging, expertMin := 0, int64(0)
	if m.NExpert > 0 {
		for _, l := range w.layers {
			var s int64
			for i := range 3 {
				s += nvme.BufferSize(l.per[i])
			}
			w.stSize = max(w.stSize, s)
		}
		nStaging = cfg.QueueDepth + extraStaging
		expertMin = int64(m.NExpertUsed) * p.SlotBytes
	}
	sizes, err := w.layoutLayers()
	if err != nil {
		return nil, err
	}
	p.MinBudget = w.layerNeed(sizes, expertMin, nStaging)
	if cfg.force != nil || p.Budget > 0 && p.Resident+int64(nStaging)*w.stSize+expertMin > p.Budget {
		if err := w.planLayers(sizes, expertMin, &nStaging); err != nil {
			return nil, err
		}
	}
	if nStaging == 0 {
		return w, nil // nothing streams
	}
	p.Staging = int64(nStaging) * w.stSize
	layerSlots := int64(p.LayerSlots) * p.LayerSlotBytes
	p.Slots = p.Experts
	if p.Budget > 0 && m.NExpert > 0 {
		left := p.Budget - p.Resident - p.Staging - layerSlots
		if left < expertMin {
			return nil, fmt.Errorf("stages: a RAM budget of %s cannot hold the resident weights (%s), the staging slabs (%s) and one token's %d experts (%s); it needs at least %s",
				size(p.Budget), size(p.Resident), size(p.Staging), m.NExpertUsed, size(expertMin),
				size(p.Resident+p.Staging+layerSlots+expertMin))
		}
		p.Slots = int(min(int64(p.Experts), left/p.SlotBytes))
	}
	if cfg.PlanOnly {
		p.Direct = !cfg.NoDirect // what Open would try
		return w, nil
	}
	// pread: each worker reads its expert's three ranges one after another
	// (QueueDepth 1 per ReadBatch); io_uring: one ring for all workers, room
	// for each one's three ranges in flight at once
	qd := 1
	if cfg.Engine == "io_uring" {
		qd = 3 * cfg.QueueDepth
	}
	rd, err := nvme.Open(path, nvme.Options{Engine: cfg.Engine, Direct: !cfg.NoDirect, QueueDepth: qd})
	if err != nil {
		return nil, err
	}
	w.rd, p.Direct = rd, rd.Direct()
	w.arena, err = nvme.AlignedAlloc(p.Staging+int64(p.Slots)*p.SlotBytes+layerSlots, cfg.Lock)
	if err != nil {
		rd.Close()
		return nil, err
	}
	// staging slabs first: their size is a multiple of nvme.Align, so each
	// starts aligned for O_DIRECT; the cache slots follow
	for i := range nStaging {
		o := int64(i) * w.stSize
		w.staging = append(w.staging, w.arena[o:o+w.stSize:o+w.stSize])
	}
	w.left, w.slabErr = make([]atomic.Int32, nStaging), make([]error, nStaging)
	if m.NExpert > 0 {
		w.cache = newExpertCache(w, p.Slots, cfg.Policy)
	}
	if p.Layers > 0 {
		w.ls = newLayerStream(w, w.streamed, p.LayerSlots)
	}
	return w, nil
}

// planLayers decides which layers stream when the budget cannot hold them
// all: the weights outside the layers' matrices, LayerSlots slots, the
// staging slabs and (MoE) one token's experts come first; then as many
// layers as fit stay resident, from the first; bytes left over buy more
// slots (read-ahead), up to maxLayerSlots, and then (MoE) cached experts.
func (w *WeightPath) planLayers(sizes []int64, expertMin int64, nStaging *int) error {
	p, m := &w.plan, w.m
	var sum, slot int64
	for il, s := range sizes {
		sum += s
		slot = max(slot, s)
		for _, lm := range w.lmats[il] {
			if lm.n > 0 {
				w.stSize = max(w.stSize, nvme.BufferSize(lm.n))
			}
		}
	}
	fixed := p.Resident - sum
	if *nStaging == 0 {
		*nStaging = denseStaging
	}
	staging := int64(*nStaging) * w.stSize
	need := fixed + staging + expertMin + minSlots*slot
	if f := w.cfg.force; f != nil {
		w.streamed = make([]bool, len(sizes))
		p.Resident = fixed
		for il, s := range sizes {
			if il < f.resident {
				p.Resident += s
				p.ResidentLayers++
				continue
			}
			w.streamed[il] = true
			p.Layers++
			for _, lm := range w.lmats[il] {
				p.LayerFile += lm.n
			}
		}
		p.LayerSlots, p.LayerSlotBytes = f.slots, slot
		return nil
	}
	if need > p.Budget {
		experts := ""
		if m.NExpert > 0 {
			experts = fmt.Sprintf(", one token's %d experts (%s)", m.NExpertUsed, size(expertMin))
		}
		return fmt.Errorf("stages: a RAM budget of %s cannot hold the weights that always stay resident (%s: embeddings, output, norms, routers), %d layer slots (%s), the staging slabs (%s)%s; it needs at least %s",
			size(p.Budget), size(fixed), minSlots, size(minSlots*slot), size(staging), experts, size(need))
	}
	avail := p.Budget - need
	// as many layers as fit stay resident; the streamed ones are spread
	// evenly between them, so that the reader reads the next streamed
	// layer while compute runs resident ones (streaming the last layers
	// in a block would leave the reader idle for the resident part of
	// every step)
	nres := 0
	for _, s := range slices.Sorted(slices.Values(sizes)) {
		if s > avail {
			break
		}
		avail -= s
		nres++
	}
	for ; ; nres-- {
		w.streamed = spread(len(sizes), len(sizes)-nres)
		var res int64
		for il, s := range sizes {
			if !w.streamed[il] {
				res += s
			}
		}
		if res <= p.Budget-need || nres == 0 {
			avail = p.Budget - need - res
			p.Resident = fixed + res
			break
		}
	}
	for il := range sizes {
		if !w.streamed[il] {
			p.ResidentLayers++
			continue
		}
		p.Layers++
		for _, lm := range w.lmats[il] {
			p.LayerFile += lm.n
		}
	}
	p.LayerSlots, p.LayerSlotBytes = minSlots, slot
	for p.LayerSlots < maxLayerSlots && p.LayerSlots < p.Layers && avail >= slot {
		p.LayerSlots++
		avail -= slot
	}
	return nil
}

// spread marks k of n layers, evenly spaced (the last of each group).
func spread(n, k int) []bool {
	out := make([]bool, n)
	for i := range n {
		out[i] = (i+1)*k/n != i*k/n
	}
	return out
}

// minSlots is the fewest layer slots: one computes while the next is read.
const minSlots = 2

// denseStaging is the staging slabs of a model without routed experts: one
// is read into while the uploader packs the other.
const denseStaging = 2

// layerNeed is planLayers' smallest budget: every layer streamed.
func (w *WeightPath) layerNeed(sizes []int64, expertMin int64, nStaging int) int64 {
	var sum, slot, st int64
	for il, s := range sizes {
		sum += s
		slot = max(slot, s)
		for _, lm := range w.lmats[il] {
			if lm.n > 0 {
				st = max(st, nvme.BufferSize(lm.n))
			}
		}
	}
	if nStaging == 0 {
		nStaging = denseStaging
	}
	return w.plan.Resident - sum + int64(nStaging)*max(st, w.stSize) + expertMin + minSlots*slot
}

// StreamsLayer reports whether layer il's matrices are streamed (so they
// are not packed or kept resident at load).
func (w *WeightPath) StreamsLayer(il int) bool {
	return w != nil && w.streamed != nil && w.streamed[il]
}

func size(b int64) string { return configs.ByteSize(b).String() }

// layout finds each layer's expert tensors in the file and sizes a slot.
func (w *WeightPath) layout() error {
	m, p := w.m, &w.plan
	f := m.File
	w.layers = make([]expertLayer, m.NLayer)
	for il := range m.Layers {
		el := &w.layers[il]
		at := 0
		for i, ws := range m.Layers[il].Experts() {
			name := fmt.Sprintf("blk.%d.%s.weight", il, model.ExpertNames[i])
			t, ok := f.Tensor(name)
			if !ok || len(ws) != m.NExpert {
				return fmt.Errorf("stages: layer %d has no tensor %s for %d experts", il, name, m.NExpert)
			}
			el.tmpl[i] = ws[0]
			el.tmpl[i].Name, el.tmpl[i].Data = name, nil
			el.per[i] = int64(len(ws[0].Data))
			el.off[i] = int64(f.DataOffset + t.Offset)
			size := int(el.per[i])
			if w.packer != nil {
				if n := w.packer.PackedSize(&ws[0]); n > 0 {
					el.packed[i], size = n, n
				}
			}
			el.at[i] = at
			at += (size + 63) &^ 63
			p.ExpertFile += el.per[i] * int64(m.NExpert)
		}
		p.SlotBytes = max(p.SlotBytes, int64(at))
		p.Experts += m.NExpert
	}
	return nil
}

// residentBytes is what the weights other than routed experts cost in RAM:
// the packed size of the matrices the backend packs, the file size of the
// others, and float32 vectors.
func residentBytes(m *model.Model, pk model.Packer) int64 {
	var n int64
	seen := map[*byte]bool{}
	mat := func(w *model.Weight) {
		if w == nil || len(w.Data) == 0 || seen[&w.Data[0]] {
			return
		}
		seen[&w.Data[0]] = true
		if pk != nil {
			if s := pk.PackedSize(w); s > 0 {
				n += int64(s)
				return
			}
		}
		n += int64(len(w.Data))
	}
	vec := func(v model.Vector) { n += 4 * int64(len(v)) }
	mat(m.TokEmbd)
	mat(m.Output)
	vec(m.OutputNorm)
	for i := range m.Layers {
		L := &m.Layers[i]
		for _, w := range L.Matrices() {
			mat(*w)
		}
		for _, v := range []model.Vector{L.AttnNorm, L.Bq, L.Bk, L.Bv, L.QNorm, L.KNorm, L.FFNNorm} {
			vec(v)
		}
	}
	return n
}

// Prefetching reports whether MoE layers should prefetch the next layer's
// guessed experts (Context.PrefetchNext).
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
	if w.arena != nil {
		nvme.AlignedFree(w.arena)
		w.arena = nil
	}
	return err
}

// ResetStats zeroes the hit, miss and read counters (after Preload, so
// they describe the run).
func (w *WeightPath) ResetStats() {
	if c := w.cache; c != nil {
		for i := range c.hits {
			c.hits[i].Store(0)
			c.misses[i].Store(0)
		}
		c.evictions.Store(0)
		c.pfIssued.Store(0)
		c.pfUsed.Store(0)
		c.pfWaste.Store(0)
	}
	if ls := w.ls; ls != nil {
		ls.ready.Store(0)
		ls.waited.Store(0)
		ls.waitNanos.Store(0)
	}
	w.readBytes.Store(0)
	w.readNanos.Store(0)
}

// WeightStats are the weight path's counters since load.
type WeightStats struct {
	Hits, Misses  []int64 // per layer
	BytesRead     int64   // bytes of experts read from disk
	ReadNanos     int64   // summed time of the reads (in flight together)
	Evictions     int64
	CachedExperts int
	// speculative prefetch: reads issued, used by the next layer, evicted
	// unused (accuracy = used / issued once the run is over)
	PrefetchIssued, PrefetchUsed, PrefetchWasted int64
	// layer streaming: streamed layers found read when compute reached
	// them, layers compute waited for, and the time it waited
	LayersReady, LayersWaited, LayerWaitNanos int64
}

// Stats returns a snapshot of the counters (safe from any goroutine).
func (w *WeightPath) Stats() WeightStats {
	var s WeightStats
	if c := w.cache; c != nil {
		s.Hits, s.Misses = make([]int64, len(c.hits)), make([]int64, len(c.misses))
		for i := range c.hits {
			s.Hits[i], s.Misses[i] = c.hits[i].Load(), c.misses[i].Load()
		}
		s.Evictions = c.evictions.Load()
		s.PrefetchIssued, s.PrefetchUsed, s.PrefetchWasted = c.pfIssued.Load(), c.pfUsed.Load(), c.pfWaste.Load()
		s.CachedExperts = int(c.cached.Load())
	}
	if ls := w.ls; ls != nil {
		s.LayersReady, s.LayersWaited, s.LayerWaitNanos = ls.ready.Load(), ls.waited.Load(), ls.waitNanos.Load()
	}
	s.BytesRead, s.ReadNanos = w.readBytes.Load(), w.readNanos.Load()
	return s
}

// errWeightRead is matched by the error of a failed expert read: it fails
// the requests of the step that needed the expert, not the engine.
var errWeightRead = errors.New("stages: reading weights")

// readReq asks for one expert to be read into a cache slot, or (mat >= 0)
// one matrix of a streamed layer into a layer slot.
type readReq struct {
	slot          int32
	layer, expert int32
	mat           int8 // index in model.Layer.Matrices; -1: an expert
}

// staged is a read expert in a staging slab, on its way to the uploader.
type staged struct {
	req   readReq
	slab  int // index in WeightPath.staging
	views [3][]byte
	err   error
}

// readDone tells compute an expert (or a layer's matrix, mat >= 0) is in
// its slot, or why not.
type readDone struct {
	slot int32
	mat  int8
	err  error
}

// await receives one completed read and hands it to the expert cache or
// the layer stream (compute's goroutine).
func (w *WeightPath) await(ctx context.Context) error {
	d, err := w.ports.doneIn.Recv(ctx)
	if err != nil {
		return err
	}
	if d.mat >= 0 {
		w.ls.complete(d)
	} else {
		w.cache.complete(d)
	}
	return nil
}

// ports are the edges the weight path's stages use.
type ports struct {
	reqs   *graph.Out[readReq] // compute -> reader
	reqsIn *graph.In[readReq]
	free   *graph.Out[int] // pool -> reader: staging slab indices
	freeIn *graph.In[int]
	read   *graph.Out[staged] // reader -> uploader
	readIn *graph.In[staged]
	ret    *graph.Out[int] // uploader -> pool
	retIn  *graph.In[int]
	done   *graph.Out[readDone] // uploader -> compute
	doneIn *graph.In[readDone]
}

// Streams are the weight path's sources for compute, valid inside the
// compute stage's goroutine of one graph run (nil when nothing streams).
type Streams struct {
	w *WeightPath
}

// Experts returns the routed experts' source, nil when experts do not
// stream.
func (s *Streams) Experts() model.Experts {
	if s == nil || s.w.cache == nil {
		return nil
	}
	return s.w.cache
}

// Attach makes mctx take its streamed weights (experts, layers) from s, and
// prefetch when the path is configured to; Detach undoes it.
func (s *Streams) Attach(mctx *model.Context) {
	if s == nil {
		return
	}
	h := mctx.Hooks()
	if s.w.cache != nil {
		h.Experts, h.PrefetchNext = s.w.cache, s.w.Prefetching()
	}
	if s.w.ls != nil {
		h.Layers = s.w.ls
	}
	mctx.SetHooks(h)
}

// Detach undoes Attach.
func (s *Streams) Detach(mctx *model.Context) {
	h := mctx.Hooks()
	h.Experts, h.PrefetchNext, h.Layers = nil, false, nil
	mctx.SetHooks(h)
}

func (s *Streams) bind(ctx context.Context) {
	if s.w.cache != nil {
		s.w.cache.bind(ctx)
	}
	if s.w.ls != nil {
		s.w.ls.bind(ctx)
	}
}

// finish waits for the reads in flight when compute stops.
func (s *Streams) finish() {
	if s.w.cache != nil {
		s.w.cache.finish()
	}
	if s.w.ls != nil {
		s.w.ls.finish()
	}
}

// add wires the path's stages into g next to the compute stage comp and
// returns the sources compute must use (nil when nothing streams), valid
// inside comp's goroutine once bind has given them comp's context.
func (w *WeightPath) add(g *graph.Graph, rec *graph.Recorder, comp *graph.Stage) *Streams {
	if w == nil || !w.plan.Streaming() {
		return nil
	}
	reader, pool, up := g.Stage("reader"), g.Stage("pool"), g.Stage("uploader")
	var p ports
	// every outstanding read owns a slot: edges as deep as the slots never
	// block compute (which would deadlock it against the uploader)
	capReq := w.plan.LayerSlots * model.NStreamable
	if w.cache != nil {
		capReq += len(w.cache.slots)
		w.cache.rec, w.cache.stg = rec, comp
	}
	if w.ls != nil {
		w.ls.rec, w.ls.stg = rec, comp
	}
	p.reqs, p.reqsIn = graph.Connect[readReq](comp, reader, capReq)
	p.free, p.freeIn = graph.Connect[int](pool, reader, len(w.staging))
	p.read, p.readIn = graph.Connect[staged](reader, up, len(w.staging))
	p.ret, p.retIn = graph.Connect[int](up, pool, len(w.staging))
	p.done, p.doneIn = graph.Connect[readDone](up, comp, capReq)
	pool.Do(func(ctx context.Context) error { return w.pool(ctx, p.retIn, p.free) })
	reader.Do(func(ctx context.Context) error { return w.reader(ctx, rec, reader, p.reqsIn, p.freeIn, p.read) })
	up.Do(func(ctx context.Context) error { return w.uploader(ctx, rec, up, p.readIn, p.ret, p.done) })
	w.ports = p
	return &Streams{w: w}
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
		st.Attach(mctx)
		defer st.Detach(mctx)
		if kvc != nil {
			kvc.bind(ctx)
			h := mctx.Hooks()
			h.KVDefer = kvc
			defer mctx.SetHooks(mctx.SetHooks(h))
		}
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

// pool hands out the staging slabs and takes them back from the uploader.
func (w *WeightPath) pool(ctx context.Context, ret *graph.In[int], free *graph.Out[int]) error {
	for i := range w.staging {
		if err := free.Send(ctx, i); err != nil {
			return err
		}
	}
	for {
		i, err := ret.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := free.Send(ctx, i); err != nil {
			return err
		}
	}
}

// readJob is one read for a worker: a whole expert (c0 < 0), or one chunk
// [c0, c1) of a layer matrix into its staging slab at dst.
type readJob struct {
	s           staged
	c0, c1, dst int64
}

// reader takes each request and a free staging slab, and hands the reads
// to QueueDepth workers: an expert's three ranges as one job, a layer
// matrix in readChunk pieces read in parallel (the worker that reads the
// last piece passes the matrix on).
func (w *WeightPath) reader(ctx context.Context, rec *graph.Recorder, stg *graph.Stage, reqs *graph.In[readReq], free *graph.In[int], out *graph.Out[staged]) error {
	work := make(chan readJob, w.cfg.QueueDepth)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(work)
	for range w.cfg.QueueDepth {
		wg.Go(func() {
			for j := range work {
				if j.c0 < 0 {
					w.read(rec, stg, &j.s)
				} else if !w.readPiece(rec, stg, &j) {
					continue
				}
				if out.Send(ctx, j.s) != nil {
					return
				}
			}
		})
	}
	send := func(j readJob) error {
		select {
		case work <- j:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for {
		r, err := reqs.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		slab, err := free.Recv(ctx)
		if err != nil {
			return err
		}
		s := staged{req: r, slab: slab}
		if r.mat < 0 {
			if err := send(readJob{s: s, c0: -1}); err != nil {
				return err
			}
			continue
		}
		// pieces start at the aligned block holding the matrix's first
		// byte, so every piece is an aligned O_DIRECT read and lands where
		// a single read of the whole range would have put it
		lm := &w.lmats[r.layer][r.mat]
		a0, end := lm.off&^(nvme.Align-1), lm.off+lm.n
		s.views[0] = w.staging[slab][lm.off-a0 : lm.off-a0+lm.n]
		n := (end - a0 + readChunk - 1) / readChunk
		w.left[slab].Store(int32(n))
		w.errMu.Lock()
		w.slabErr[slab] = nil
		w.errMu.Unlock()
		for i := range n {
			c0 := a0 + i*readChunk
			if err := send(readJob{s: s, c0: c0, c1: min(end, c0+readChunk), dst: i * readChunk}); err != nil {
				return err
			}
		}
	}
}

// readPiece reads one piece of a layer matrix and reports whether it was
// the last one (j.s then carries the matrix's first error).
func (w *WeightPath) readPiece(rec *graph.Recorder, stg *graph.Stage, j *readJob) bool {
	lm := &w.lmats[j.s.req.layer][j.s.req.mat]
	span := rec.Begin(stg, "read")
	t0 := nanotime()
	_, err := w.rd.ReadAt(w.staging[j.s.slab][j.dst:], j.c0, j.c1-j.c0)
	w.readNanos.Add(nanotime() - t0)
	span.End()
	if err != nil {
		w.errMu.Lock()
		if w.slabErr[j.s.slab] == nil {
			w.slabErr[j.s.slab] = fmt.Errorf("%w: %s: %w", errWeightRead, lm.tmpl.Name, err)
		}
		w.errMu.Unlock()
	} else {
		n := j.c1 - max(j.c0, lm.off) // the matrix's bytes, not the block's head
		w.readBytes.Add(n)
		rec.Add(stg, "bytes read", n)
	}
	if w.left[j.s.slab].Add(-1) != 0 {
		return false
	}
	w.errMu.Lock()
	j.s.err = w.slabErr[j.s.slab]
	w.errMu.Unlock()
	return true
}

// read reads the expert of s.req into its staging slab.
func (w *WeightPath) read(rec *graph.Recorder, stg *graph.Stage, s *staged) {
	l := &w.layers[s.req.layer]
	buf := w.staging[s.slab]
	span := rec.Begin(stg, "read")
	t0 := nanotime()
	// the expert's three ranges: one submission with io_uring, one after
	// another with pread
	var q [3]nvme.Req
	var o int64
	for i := range 3 {
		n := nvme.BufferSize(l.per[i])
		q[i] = nvme.Req{Buf: buf[o : o+n], Off: l.off[i] + int64(s.req.expert)*l.per[i], N: l.per[i]}
		o += n
	}
	if err := w.rd.ReadBatch(q[:]); err != nil {
		s.err = fmt.Errorf("%w: expert %d of layer %d: %w", errWeightRead, s.req.expert, s.req.layer, err)
	} else {
		for i := range 3 {
			s.views[i] = q[i].Data
		}
	}
	w.readNanos.Add(nanotime() - t0)
	span.End()
	if s.err == nil {
		n := l.per[0] + l.per[1] + l.per[2]
		w.readBytes.Add(n)
		rec.Add(stg, "bytes read", n)
	}
}

// uploader puts each read expert into its cache slot in compute's layout.
func (w *WeightPath) uploader(ctx context.Context, rec *graph.Recorder, stg *graph.Stage, in *graph.In[staged], ret *graph.Out[int], done *graph.Out[readDone]) error {
	// packers pack in parallel: one packer was the bounding stage of a
	// 4 GiB run once the disk read 2.4 GB/s (busy 70% of the run)
	work := make(chan staged)
	errc := make(chan error, packers)
	var wg sync.WaitGroup
	for range packers {
		wg.Go(func() {
			for s := range work {
				if s.err == nil {
					span := rec.Begin(stg, "pack")
					s.err = w.place(&s)
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
	for {
		s, err := in.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case work <- s:
		case err := <-errc:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// packers is the uploader's goroutines packing read weights into slots.
const packers = 2

// place packs (or copies) the three matrices of an expert into its cache
// slot, or a layer's matrix into its layer slot.
func (w *WeightPath) place(s *staged) error {
	if s.req.mat >= 0 {
		lm := &w.lmats[s.req.layer][s.req.mat]
		dst := w.ls.slotBytes(s.req.slot)[lm.at:]
		if lm.packed == 0 {
			copy(dst[:lm.n], s.views[0])
			return nil
		}
		src := lm.tmpl
		src.Data = s.views[0]
		if err := w.packer.PackInto(dst[:lm.packed], &src); err != nil {
			return fmt.Errorf("stages: packing %s: %w", lm.tmpl.Name, err)
		}
		return nil
	}
	l := &w.layers[s.req.layer]
	c := w.cache
	slot := c.slotBytes(s.req.slot)
	ew := &c.slots[s.req.slot].w
	for i, dst := range ew.Matrices() {
		*dst = l.tmpl[i]
		if l.packed[i] > 0 {
			src := l.tmpl[i]
			src.Data = s.views[i]
			out := slot[l.at[i] : l.at[i]+l.packed[i]]
			if err := w.packer.PackInto(out, &src); err != nil {
				return fmt.Errorf("stages: packing expert %d of layer %d: %w", s.req.expert, s.req.layer, err)
			}
			dst.Data, dst.Packed = out, true
		} else {
			out := slot[l.at[i] : l.at[i]+int(l.per[i])]
			copy(out, s.views[i])
			dst.Data = out
		}
	}
	return nil
}
