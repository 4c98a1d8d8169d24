package stages

// plan.go: the weight path's plan, decided at load from the model, the
// backend's packed layout and the byte budget: which weights stay
// resident, how many routed experts the cache holds, which layers stream
// through how many slots, how many staging slabs the reads land in, and
// where each tensor that may be read is in the file and in a slot. It is
// arithmetic over the model's tensor table: it opens no file and allocates
// no slab (NewWeightPath does that from the plan).

import (
	"fmt"
	"slices"
	"strings"
	"unsafe"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/io/nvme"
	"github.com/flowinfer/flowinfer/model"
)

// WeightConfig configures the weight path. Zero fields take the defaults
// in brackets. The values come validated from configs; NewWeightPath
// refuses what it cannot plan with rather than guessing.
type WeightConfig struct {
	// Engine reads weights [configs.EnginePread]: configs.EngineMmap maps
	// the whole file and keeps every expert resident (packed at load from
	// the mapping, or owned by OwnResident: no expert cache); pread and
	// io_uring read routed experts into an expert cache of Budget bytes.
	Engine configs.IOEngine
	// Budget is the bytes of weights held in RAM: resident weights, the
	// expert cache and the staging slabs. 0: no limit (every expert is
	// cached once read).
	Budget int64
	// QueueDepth is the number of reads in flight [DefaultQueueDepth].
	QueueDepth int
	// Policy is the expert cache's eviction policy [configs.PolicySLRU].
	Policy configs.CachePolicy
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

// DefaultQueueDepth is the reads in flight when the config says 0.
const DefaultQueueDepth = 8

func (c WeightConfig) withDefaults() WeightConfig {
	if c.Engine == "" {
		c.Engine = configs.EnginePread
	}
	if c.QueueDepth <= 0 {
		c.QueueDepth = DefaultQueueDepth
	}
	if c.Policy == "" {
		c.Policy = configs.PolicySLRU
	}
	return c
}

// check refuses what the plan cannot be made with: a value configs would
// have refused, reaching the weight path anyway, is an error here rather
// than a guess.
func (c WeightConfig) check() error {
	if _, err := configs.ParseIOEngine(string(c.Engine)); err != nil {
		return fmt.Errorf("stages: %w", err)
	}
	if _, err := configs.ParseCachePolicy(string(c.Policy)); err != nil {
		return fmt.Errorf("stages: %w", err)
	}
	if c.PrefetchDepth < 0 || c.PrefetchDepth > 1 {
		return fmt.Errorf("stages: prefetch_depth %d is not implemented (supported: 0, 1)", c.PrefetchDepth)
	}
	if c.Budget < 0 {
		return fmt.Errorf("stages: negative RAM budget %d", c.Budget)
	}
	return nil
}

// Plan is where each kind of weight lives, decided at load from the model
// and the budget.
type Plan struct {
	Engine     configs.IOEngine
	Direct     bool
	QueueDepth int
	Budget     int64 // 0: no limit
	Resident   int64 // bytes of weights that stay in RAM (packed copies and views)
	ExpertFile int64 // bytes of all routed experts in the file
	SlotBytes  int64 // one cache slot: the largest expert, in compute's layout
	Experts    int   // routed experts in the model (layers × experts)
	Slots      int   // experts the cache holds
	Staging    int64 // bytes of staging slabs (Slabs × SlabBytes)
	// layer streaming (when the layers do not all fit): Layers of the
	// model's layers stream through LayerSlots slots of LayerSlotBytes,
	// reading LayerFile bytes of the file per step; ResidentLayers stay.
	Layers, ResidentLayers, LayerSlots int
	LayerSlotBytes, LayerFile          int64
	// MinBudget is the smallest budget the model runs with (every layer
	// streamed through two slots; MoE: one token's experts cached).
	MinBudget int64
	// Slabs staging slabs of SlabBytes each (an expert's three reads, or
	// the largest streamed matrix, widened for O_DIRECT); 0 when nothing
	// is read after load.
	Slabs     int
	SlabBytes int64
	// Skipped tensors of SkippedBytes in the file are not used by the
	// model (model.Model.Skipped: a multi-token-prediction block): never
	// read, not resident.
	Skipped      int
	SkippedBytes int64
}

// Streaming reports whether some weights are read from disk after load.
func (p Plan) Streaming() bool {
	return p.Experts > 0 && p.Engine != configs.EngineMmap || p.Layers > 0
}

// String is the plan in two lines (three with skipped tensors), as
// printed at load.
func (p Plan) String() string {
	var sb strings.Builder
	budget := "no limit"
	if p.Budget > 0 {
		budget = size(p.Budget)
	}
	if p.Layers == 0 {
		fmt.Fprintf(&sb, "weights: budget %s; resident %s (embeddings, attention and recurrent mixers, norms, routers, dense FFNs and shared experts, output)", budget, size(p.Resident))
	} else {
		fmt.Fprintf(&sb, "weights: budget %s; resident %s (embeddings, output, norms, routers, %d of %d layers); %d layers (%s) streamed from disk each step through %d slots of %s",
			budget, size(p.Resident), p.ResidentLayers, p.ResidentLayers+p.Layers, p.Layers, size(p.LayerFile), p.LayerSlots, size(p.LayerSlotBytes))
	}
	direct := "buffered"
	if p.Direct {
		direct = "O_DIRECT"
	}
	switch {
	case p.Experts == 0 && p.Layers == 0:
		sb.WriteString("; no routed experts: nothing streams")
	case p.Experts == 0:
		fmt.Fprintf(&sb, "\nweights: %s %s, %d reads in flight, staging %s", p.Engine, direct, p.QueueDepth, size(p.Staging))
	case p.Engine == configs.EngineMmap:
		fmt.Fprintf(&sb, "; %d experts (%s) mapped by mmap, paged in by the kernel", p.Experts, size(p.ExpertFile))
	default:
		fmt.Fprintf(&sb, "\nweights: expert cache %s = %d of %d experts (%.1f%%), %s of experts streamed from disk; %s %s, %d reads in flight, staging %s",
			size(int64(p.Slots)*p.SlotBytes), p.Slots, p.Experts, 100*float64(p.Slots)/float64(p.Experts),
			size(p.ExpertFile*int64(p.Experts-p.Slots)/int64(p.Experts)), p.Engine, direct, p.QueueDepth, size(p.Staging))
	}
	if p.Skipped > 0 {
		fmt.Fprintf(&sb, "\nweights: skipped %d tensors (%s) of the multi-token-prediction block: not run, not read", p.Skipped, size(p.SkippedBytes))
	}
	return sb.String()
}

func size(b int64) string { return configs.ByteSize(b).String() }

// slotMat is one matrix the weight path may read: where it is in the file
// and where it goes in a slot.
type slotMat struct {
	tmpl   model.Weight // the tensor, Data nil
	off, n int64        // file range (routed experts: expert 0's; expert e's is stride bytes further per e)
	stride int64        // routed experts: from one expert to the next (n, or 2n in a fused ffn_gate_up_exps)
	packed int          // packed size (0: kept in the file's layout)
	at     int          // offset in the slot
}

// bytes returns the matrix's size in a slot.
func (m *slotMat) bytes() int {
	if m.packed > 0 {
		return m.packed
	}
	return int(m.n)
}

// in returns the matrix's place in slot.
func (m *slotMat) in(slot []byte) []byte { return slot[m.at : m.at+m.bytes()] }

// weight returns the matrix as compute reads it from slot.
func (m *slotMat) weight(slot []byte) model.Weight {
	w := m.tmpl
	w.Data = m.in(slot)
	if m.packed > 0 {
		w.Packed = true
	}
	return w
}

// expertLayer is a layer's routed experts: gate, up and down, in
// model.ExpertNames order.
type expertLayer [3]slotMat

// weightLayout is where the weights that may be read after load are, per
// layer: its routed experts, and the streamable matrices of its
// model.Layer.Matrices; and which layers stream.
type weightLayout struct {
	experts  []expertLayer                // nil: no routed experts
	mats     [][model.NStreamable]slotMat // nil: no layer can stream (mmap)
	streamed []bool                       // layer il's matrices stream (nil: none do)
}

// weightSizes are what the budget arithmetic needs of a model's layout.
type weightSizes struct {
	resident  int64   // every weight but the routed experts, in RAM
	layerSlot []int64 // per layer: its streamable matrices in compute's layout
	layerFile []int64 // per layer: the same in the file
	layerSlab int64   // the staging slab of the largest streamable matrix
	// routed experts: how many (layers × experts), how many a token uses,
	// the largest in compute's layout (a slot), the staging slab of the
	// largest, and all of them in the file
	experts, expertsUsed               int
	expertSlot, expertSlab, expertFile int64
}

// planWeights plans the weights of m, for a backend that packs through pk
// (nil: none), within cfg's budget, and returns the plan and the layout of
// the tensors it reads.
func planWeights(m *model.Model, pk model.Packer, cfg WeightConfig) (Plan, *weightLayout, error) {
	cfg = cfg.withDefaults()
	if err := cfg.check(); err != nil {
		return Plan{}, nil, err
	}
	lay := &weightLayout{}
	sz := weightSizes{resident: residentBytes(m, pk)}
	var err error
	if m.NExpert > 0 {
		if lay.experts, err = layoutExperts(m, pk, &sz); err != nil {
			return Plan{}, nil, err
		}
	}
	if cfg.Engine != configs.EngineMmap {
		if lay.mats, err = layoutLayers(m, pk, &sz); err != nil {
			return Plan{}, nil, err
		}
	}
	p, streamed, err := planBudget(sz, cfg)
	lay.streamed = streamed
	p.Skipped, p.SkippedBytes = len(m.Skipped), m.SkippedBytes()
	return p, lay, err
}

// fileMat finds w (named name in the file) in m's file.
func fileMat(m *model.Model, pk model.Packer, w *model.Weight, name string) (slotMat, bool) {
	t, ok := m.File.Tensor(name)
	if !ok {
		return slotMat{}, false
	}
	sm := slotMat{tmpl: *w, n: int64(len(w.Data)), off: int64(m.File.DataOffset + t.Offset)}
	sm.tmpl.Name, sm.tmpl.Data = name, nil
	if pk != nil {
		sm.packed = pk.PackedSize(w)
	}
	return sm, true
}

// expertMat finds the routed experts ws (one per expert, views of one 3-D
// tensor of the file: named name, or for the gate and up of a fused
// ffn_gate_up_exps, that tensor) in m's file: where expert 0's matrix is
// and how far apart the experts are.
func expertMat(m *model.Model, pk model.Packer, ws []model.Weight, il int, name string) (slotMat, bool) {
	t, ok := m.File.Tensor(name)
	if !ok && (name == fmt.Sprintf("blk.%d.%s.weight", il, model.ExpertNames[0]) || name == fmt.Sprintf("blk.%d.%s.weight", il, model.ExpertNames[1])) {
		t, ok = m.File.Tensor(fmt.Sprintf("blk.%d.ffn_gate_up_exps.weight", il))
	}
	if !ok || len(ws) == 0 || len(t.Data) == 0 {
		return slotMat{}, false
	}
	// where view b lies in t's data
	at := func(b []byte) (int64, bool) {
		p, base := uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(unsafe.Pointer(unsafe.SliceData(t.Data)))
		if p < base || p-base+uintptr(len(b)) > uintptr(len(t.Data)) {
			return 0, false
		}
		return int64(p - base), true
	}
	w := &ws[0]
	o0, ok := at(w.Data)
	if !ok {
		return slotMat{}, false
	}
	sm := slotMat{tmpl: *w, n: int64(len(w.Data)), off: int64(m.File.DataOffset+t.Offset) + o0, stride: int64(len(w.Data))}
	if len(ws) > 1 {
		o1, ok := at(ws[1].Data)
		if !ok || o1 <= o0 {
			return slotMat{}, false
		}
		sm.stride = o1 - o0
	}
	if last, ok := at(ws[len(ws)-1].Data); !ok || last != o0+int64(len(ws)-1)*sm.stride {
		return slotMat{}, false // not evenly spaced in the tensor
	}
	sm.tmpl.Name, sm.tmpl.Data = t.Name, nil
	if pk != nil {
		sm.packed = pk.PackedSize(w)
	}
	return sm, true
}

// placeMats gives each matrix its offset in a slot (64-byte aligned, for
// the kernels) and returns the slot size they need.
func placeMats(ms []slotMat) int64 {
	at := 0
	for i := range ms {
		ms[i].at = at
		at += roundUp(ms[i].bytes(), 64)
	}
	return int64(at)
}

// layoutExperts finds each layer's routed experts in the file.
func layoutExperts(m *model.Model, pk model.Packer, sz *weightSizes) ([]expertLayer, error) {
	out := make([]expertLayer, m.NLayer)
	for il := range m.Layers {
		el := &out[il]
		var slab int64
		exps := m.Layers[il].Experts()
		if len(exps[0]) == 0 && len(exps[1]) == 0 && len(exps[2]) == 0 {
			continue // a layer without routed experts (nemotron_h_moe's Mamba-2 and attention layers)
		}
		for i, ws := range exps {
			name := fmt.Sprintf("blk.%d.%s.weight", il, model.ExpertNames[i])
			var ok bool
			if i == 0 && ws == nil {
				continue // ungated experts (nemotron_h_moe): no gate to read (n = 0)
			}
			if len(ws) == m.NExpert {
				el[i], ok = expertMat(m, pk, ws, il, name)
			}
			if !ok {
				return nil, fmt.Errorf("stages: layer %d has no tensor %s for %d experts", il, name, m.NExpert)
			}
			slab += nvme.BufferSize(el[i].n)
			sz.expertFile += el[i].n * int64(m.NExpert)
		}
		sz.expertSlot = max(sz.expertSlot, placeMats(el[:]))
		sz.expertSlab = max(sz.expertSlab, slab)
		sz.experts += m.NExpert
	}
	sz.expertsUsed = m.NExpertUsed
	return out, nil
}

// layoutLayers finds the streamable matrices of every layer in the file.
func layoutLayers(m *model.Model, pk model.Packer, sz *weightSizes) ([][model.NStreamable]slotMat, error) {
	out := make([][model.NStreamable]slotMat, m.NLayer)
	sz.layerSlot, sz.layerFile = make([]int64, m.NLayer), make([]int64, m.NLayer)
	for il := range m.Layers {
		ms := m.Layers[il].Matrices()
		for i, pw := range ms[:model.NStreamable] {
			w := *pw
			if w == nil {
				continue
			}
			sm, ok := fileMat(m, pk, w, w.Name)
			if !ok {
				return nil, fmt.Errorf("stages: layer %d: no tensor %s in the file", il, w.Name)
			}
			out[il][i] = sm
			sz.layerFile[il] += sm.n
			if sm.n > 0 {
				sz.layerSlab = max(sz.layerSlab, nvme.BufferSize(sm.n))
			}
		}
		sz.layerSlot[il] = placeMats(out[il][:])
	}
	return out, nil
}

// The budget arithmetic's constants.
const (
	// extraStaging: one slab beyond the reads in flight lets the uploader
	// work on one while the reader fills the others.
	extraStaging = 1
	// denseStaging is the staging slabs of a model without routed
	// experts: one is read into while the uploader packs the other.
	denseStaging = 2
	// minSlots is the fewest layer slots: one computes while the next is
	// read.
	minSlots = 2
	// maxLayerSlots bounds the read-ahead of layer streaming: past a few
	// layers, more slots hide no more latency and the bytes do more good
	// as resident layers or cached experts.
	maxLayerSlots = 4
)

// planBudget is the plan's arithmetic: from the sizes of a model's weights
// and the budget, what stays resident, what streams, and how many slabs
// and slots there are. It returns which layers stream (nil: none).
//
// Routed experts (unless mapped) always stream: the resident weights, the
// staging slabs and one token's experts come first, the rest of the budget
// caches experts. When that does not fit, the layers' matrices stream too
// (planLayers).
func planBudget(sz weightSizes, cfg WeightConfig) (Plan, []bool, error) {
	p := Plan{Engine: cfg.Engine, QueueDepth: cfg.QueueDepth, Budget: cfg.Budget, Resident: sz.resident}
	if sz.experts > 0 {
		p.Experts, p.ExpertFile, p.SlotBytes = sz.experts, sz.expertFile, sz.expertSlot
	}
	if cfg.Engine == configs.EngineMmap {
		if p.Budget > 0 && p.Resident+p.ExpertFile > p.Budget {
			return Plan{}, nil, fmt.Errorf("stages: io_engine mmap maps the whole model (%s) and cannot keep within the RAM budget of %s; use io_engine pread", size(p.Resident+p.ExpertFile), size(p.Budget))
		}
		return p, nil, nil
	}
	slabs, slab, expertMin := 0, int64(0), int64(0)
	if p.Experts > 0 {
		slabs, slab = cfg.QueueDepth+extraStaging, sz.expertSlab
		expertMin = int64(sz.expertsUsed) * p.SlotBytes
	}
	p.MinBudget = minBudget(sz, expertMin, slabs)
	var streamed []bool
	if cfg.force != nil || p.Budget > 0 && p.Resident+int64(slabs)*slab+expertMin > p.Budget {
		var err error
		if slabs == 0 {
			slabs = denseStaging
		}
		slab = max(slab, sz.layerSlab)
		if streamed, err = planLayers(&p, sz, cfg.force, int64(slabs)*slab, expertMin); err != nil {
			return Plan{}, nil, err
		}
	}
	if slabs == 0 {
		return p, nil, nil // nothing streams
	}
	p.Slabs, p.SlabBytes, p.Staging = slabs, slab, int64(slabs)*slab
	p.Slots = p.Experts
	if p.Budget > 0 && p.Experts > 0 {
		layerSlots := int64(p.LayerSlots) * p.LayerSlotBytes
		left := p.Budget - p.Resident - p.Staging - layerSlots
		if left < expertMin {
			return Plan{}, nil, fmt.Errorf("stages: a RAM budget of %s cannot hold the resident weights (%s), the staging slabs (%s) and one token's %d experts (%s); it needs at least %s",
				size(p.Budget), size(p.Resident), size(p.Staging), sz.expertsUsed, size(expertMin),
				size(p.Resident+p.Staging+layerSlots+expertMin))
		}
		p.Slots = int(min(int64(p.Experts), left/p.SlotBytes))
	}
	p.Direct = !cfg.NoDirect // what nvme.Open tries; NewWeightPath says what it got
	return p, streamed, nil
}

// layerTotals returns the sum and the largest of the layers' slot sizes.
func layerTotals(sz weightSizes) (sum, slot int64) {
	for _, s := range sz.layerSlot {
		sum += s
		slot = max(slot, s)
	}
	return sum, slot
}

// minBudget is the smallest budget planLayers accepts: every layer
// streamed through minSlots slots.
func minBudget(sz weightSizes, expertMin int64, slabs int) int64 {
	sum, slot := layerTotals(sz)
	if slabs == 0 {
		slabs = denseStaging
	}
	return sz.resident - sum + int64(slabs)*max(sz.layerSlab, sz.expertSlab) + expertMin + minSlots*slot
}

// planLayers decides which layers stream when the budget cannot hold them
// all: the weights outside the layers' matrices, minSlots layer slots, the
// staging slabs and (MoE) one token's experts come first; then as many
// layers as fit stay resident, spread evenly between the streamed ones;
// bytes left over buy more slots (read-ahead), up to maxLayerSlots, and
// then (MoE) cached experts. With force the split is given.
func planLayers(p *Plan, sz weightSizes, force *layerForce, staging, expertMin int64) ([]bool, error) {
	n := len(sz.layerSlot)
	sum, slot := layerTotals(sz)
	fixed := p.Resident - sum
	need := fixed + staging + expertMin + minSlots*slot
	var streamed []bool
	p.LayerSlots, p.LayerSlotBytes = minSlots, slot
	switch {
	case force != nil:
		streamed = make([]bool, n)
		for il := force.resident; il < n; il++ {
			streamed[il] = true
		}
		p.LayerSlots = force.slots
	case need > p.Budget:
		experts := ""
		if sz.experts > 0 {
			experts = fmt.Sprintf(", one token's %d experts (%s)", sz.expertsUsed, size(expertMin))
		}
		return nil, fmt.Errorf("stages: a RAM budget of %s cannot hold the weights that always stay resident (%s: embeddings, output, norms, routers), %d layer slots (%s), the staging slabs (%s)%s; it needs at least %s",
			size(p.Budget), size(fixed), minSlots, size(minSlots*slot), size(staging), experts, size(need))
	default:
		streamed = chooseStreamed(sz.layerSlot, p.Budget-need)
	}
	p.Resident = fixed
	for il, s := range sz.layerSlot {
		if !streamed[il] {
			p.Resident += s
			p.ResidentLayers++
			continue
		}
		p.Layers++
		p.LayerFile += sz.layerFile[il]
	}
	if force == nil {
		avail := p.Budget - need - (p.Resident - fixed)
		for p.LayerSlots < maxLayerSlots && p.LayerSlots < p.Layers && avail >= slot {
			p.LayerSlots++
			avail -= slot
		}
	}
	return streamed, nil
}

// chooseStreamed returns which layers stream when avail bytes are left for
// resident ones: as many as fit stay resident; the streamed ones are
// spread evenly between them, so that the reader reads the next streamed
// layer while compute runs resident ones (streaming the last layers in a
// block would leave the reader idle for the resident part of every step).
// When the spread layers cost more than the smallest ones did, one fewer
// stays.
func chooseStreamed(sizes []int64, avail int64) []bool {
	nres, left := 0, avail
	for _, s := range slices.Sorted(slices.Values(sizes)) {
		if s > left {
			break
		}
		left -= s
		nres++
	}
	for ; ; nres-- {
		streamed := spread(len(sizes), len(sizes)-nres)
		var res int64
		for il, s := range sizes {
			if !streamed[il] {
				res += s
			}
		}
		if res <= avail || nres == 0 {
			return streamed
		}
	}
}

// spread marks k of n layers, evenly spaced (the last of each group).
func spread(n, k int) []bool {
	out := make([]bool, n)
	for i := range n {
		out[i] = (i+1)*k/n != i*k/n
	}
	return out
}

// residentBytes is what the weights other than routed experts cost in RAM:
// the packed size of the matrices the backend packs, the file size of the
// others and of the token embeddings, and float32 vectors.
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
	// the token embeddings are read by row in the file's layout (an owned
	// copy, WeightPath.OwnResident); tied to a packed output, the output's
	// packed copy costs its size beside them
	if e := m.TokEmbd; e != nil && len(e.Data) > 0 {
		n += int64(len(e.Data))
		if m.Output != e || pk == nil || pk.PackedSize(e) == 0 {
			seen[&e.Data[0]] = true
		}
	}
	mat(m.Output)
	vec(m.OutputNorm)
	for i := range m.Layers {
		L := &m.Layers[i]
		for _, w := range L.Matrices() {
			mat(*w)
		}
		for _, v := range []model.Vector{L.AttnNorm, L.Bq, L.Bk, L.Bv, L.QNorm, L.KNorm, L.Bo, L.Sinks, L.FFNNorm, L.AttnPostNorm, L.FFNPostNorm,
			L.RouterB, L.GateExpsB, L.UpExpsB, L.DownExpsB} { // gpt-oss's expert biases stay resident (model/gptoss.go)
			vec(v)
		}
	}
	return n
}
