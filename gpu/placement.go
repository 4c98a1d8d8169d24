package gpu

// placement.go: which parts of a model compute on the Vulkan device and
// which on the CPU (--n-gpu-layers, or a plan fitted to --vram), and the
// memory each side holds. The plan is pure arithmetic on the model's
// shapes: --dry-run prints it without opening a device.

import (
	"fmt"
	"strings"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/gpu/vk"
	"github.com/flowinfer/flowinfer/model"
)

// gpuArchs are the architectures whose every op runs on the device.
var gpuArchs = map[string]bool{"llama": true, "qwen2": true, "qwen3": true, "gemma3": true}

// moeArchs are the MoE architectures whose layers run on the device
// (model's DeviceMoE): qwen3moe's SwiGLU experts under a softmax router,
// gpt-oss's biased experts with the clamped SwiGLU under the softmax of
// the chosen logits.
var moeArchs = map[string]bool{"qwen3moe": true, "gpt-oss": true}

// Plan places a model: GPU[il] says whether repeating layer il computes on
// the device (its weights, norms and KV cache in device memory), Output
// whether the output norm and projection do. The token embeddings stay on
// the host (looked up by the CPU when layer 0 is there, dequantized into
// the staging ring by the device backend when it is not), as llama.cpp
// keeps its input layer on the CPU.
type Plan struct {
	GPU    []bool
	Output bool
	Why    string // how the plan was chosen (-ngl N, --vram B, all)

	// Memory, in bytes: weights (matrices and vectors) on each side, the
	// KV cache on each side, and the device budget the plan was fitted to
	// (0: none).
	GPUWeights, CPUWeights int64
	GPUKV, CPUKV           int64
	Budget                 int64

	// Routed experts (a MoE model, which runs whole on the device or
	// whole on the CPU): Experts in the model (layers × experts), and
	// ExpertSlots device slots of SlotBytes each holding them: all of
	// them resident (ExpertSlots == Experts, uploaded at load), or fewer,
	// a cache of the experts the router picks, filled from host memory
	// on a miss and evicted by ExpertPolicy (expertstore.go).
	Experts, ExpertSlots int
	SlotBytes            int64
	ExpertPolicy         configs.CachePolicy
}

// NGPU returns the repeating layers on the device.
func (p *Plan) NGPU() int {
	n := 0
	for _, g := range p.GPU {
		if g {
			n++
		}
	}
	return n
}

// AllGPU reports whether everything computes on the device.
func (p *Plan) AllGPU() bool { return p.Output && p.NGPU() == len(p.GPU) }

// NoGPU reports whether nothing computes on the device.
func (p *Plan) NoGPU() bool { return !p.Output && p.NGPU() == 0 }

// NGL returns the --n-gpu-layers value that makes this plan.
func (p *Plan) NGL() int {
	if !p.Output {
		return 0
	}
	return p.NGPU() + 1
}

// String is the plan as the load line and --dry-run print it.
func (p *Plan) String() string {
	var b strings.Builder
	n := len(p.GPU)
	fmt.Fprintf(&b, "placement (%s, as -ngl %d): ", p.Why, p.NGL())
	switch {
	case p.AllGPU():
		fmt.Fprintf(&b, "all %d layers and the output on the GPU", n)
	case p.NoGPU():
		fmt.Fprintf(&b, "all %d layers and the output on the CPU", n)
	default:
		first := n - p.NGPU()
		if p.NGPU() > 0 {
			fmt.Fprintf(&b, "%s on the CPU, %s on the GPU", layerRange(0, first-1), layerRange(first, n-1))
		} else {
			fmt.Fprintf(&b, "all %d layers on the CPU", n)
		}
		if p.Output {
			b.WriteString(", the output on the GPU")
		} else {
			b.WriteString(", the output on the CPU")
		}
	}
	fmt.Fprintf(&b, "; device memory: weights %v, KV %v", configs.ByteSize(p.GPUWeights), configs.ByteSize(p.GPUKV))
	if p.Experts > 0 && !p.NoGPU() {
		fmt.Fprintf(&b, ", routed experts %v (%d of %d in slots of %v)", configs.ByteSize(int64(p.ExpertSlots)*p.SlotBytes), p.ExpertSlots, p.Experts, configs.ByteSize(p.SlotBytes))
	}
	if p.Budget > 0 {
		fmt.Fprintf(&b, " (budget %v)", configs.ByteSize(p.Budget))
	}
	fmt.Fprintf(&b, "; host memory: weights %v, KV %v", configs.ByteSize(p.CPUWeights), configs.ByteSize(p.CPUKV))
	return b.String()
}

// Placeable reports why m cannot run on the device (nil if it can): the
// device backend's refusals (an architecture without device shaders).
// A MoE model (qwen3moe) runs whole on the device or not at all: its
// placement is all or nothing (SplitPlaceable).
func Placeable(m *model.Model) error {
	return deviceArch(m)
}

// PlaceableKV reports, as an ErrUnsupported error, why m's KV cache of
// types t for contexts of nCtx positions and steps of up to maxBatch rows
// cannot live on the device (nil if it can): a sliding-window layer that
// would keep a ring of its window (model.SWARingRows), which the host
// copies and checkpoints itself; the device keeps a row per position,
// as t.SWAFull (--swa-full) makes every layer do.
func PlaceableKV(m *model.Model, t model.KVTypes, nCtx, maxBatch int) error {
	for l := range m.NLayer {
		if r := model.SWARingRows(t, m.LayerWindow(l), maxBatch, nCtx); r > 0 {
			return fmt.Errorf("gpu: %w: layer %d's sliding window of %d would keep a ring of %d rows per sequence, and the device keeps a row per position: pass --swa-full", vk.ErrUnsupported, l, m.LayerWindow(l), r)
		}
	}
	return nil
}

// SplitPlaceable reports why m cannot be split between the device and the
// CPU (nil if it can): a MoE model cannot.
func SplitPlaceable(m *model.Model) error {
	if m.NExpert > 0 {
		return fmt.Errorf("gpu: a model with routed experts (%d) runs whole on the device or whole on the CPU, not split between them", m.NExpert)
	}
	return nil
}

// deviceArch reports, as an ErrUnsupported error, why m's architecture
// has no device form (nil: it has one).
func deviceArch(m *model.Model) error {
	switch {
	case m.NExpert > 0 && !moeArchs[m.Arch]:
		// the hybrids' recurrent layers, gemma4's GeGLU experts and
		// per-layer inputs, nemotron_h_moe's selection bias have no
		// device form yet
		return fmt.Errorf("gpu: %w: routed experts of architecture %s (supported: qwen3moe, gpt-oss); use the cpu backend", vk.ErrUnsupported, m.Arch)
	case m.NExpert == 0 && !gpuArchs[m.Arch]:
		// mistral3's temperature on Q (applied on the host), qwen35's
		// recurrent layers, gemma4's per-layer inputs have no device
		// form yet
		return fmt.Errorf("gpu: %w: architecture %s (supported: llama, qwen2, qwen3, gemma3, qwen3moe, gpt-oss); use the cpu backend", vk.ErrUnsupported, m.Arch)
	}
	return nil
}

// layerBytes returns the bytes of layer il's matrices and vectors.
func layerBytes(L *model.Layer) int64 {
	var n int64
	for _, w := range L.Matrices() {
		if *w != nil {
			n += int64((*w).Rows * (*w).RowBytes)
		}
	}
	for _, v := range layerVectors(L) {
		n += int64(4 * len(v))
	}
	return n
}

// layerVectors returns layer L's vectors the device holds (nil where L has
// none): norms, biases, sinks, and gpt-oss's router bias and per-expert
// biases (resident whatever the expert slots hold).
func layerVectors(L *model.Layer) []model.Vector {
	return []model.Vector{L.AttnNorm, L.Bq, L.Bk, L.Bv, L.Bo, L.QNorm, L.KNorm, L.Sinks, L.FFNNorm,
		L.AttnPostNorm, L.FFNPostNorm, L.RouterB, L.GateExpsB, L.UpExpsB, L.DownExpsB}
}

// outputBytes returns the bytes of the output norm and projection.
func outputBytes(m *model.Model) int64 {
	return int64(m.Output.Rows*m.Output.RowBytes) + int64(4*len(m.OutputNorm))
}

// PlanLayers places m as llama.cpp's --n-gpu-layers ngl does
// (llama_model::load_tensors: i_gpu_start = max(n_layer + 1 - ngl, 0);
// layer il is on the GPU when il ≥ i_gpu_start, the output layer, counted
// as layer n_layer, when n_layer ≥ i_gpu_start): ngl = 0 puts nothing on
// the GPU, ngl = 1 the output layer alone, ngl = N the output and the last
// N-1 repeating layers, ngl ≥ n_layer + 1 everything. A negative ngl
// means everything (llama.cpp's default -1). kvLayer is one layer's KV
// cache in bytes.
func PlanLayers(m *model.Model, ngl int, kvLayer int64) Plan {
	n := m.NLayer
	if ngl < 0 {
		ngl = n + 1
	}
	start := max(n+1-ngl, 0)
	p := Plan{GPU: make([]bool, n), Output: n >= start, Why: fmt.Sprintf("-ngl %d", ngl)}
	for il := range n {
		p.GPU[il] = il >= start
	}
	p.account(m, kvLayer)
	return p
}

// PlanVRAM places m in a device budget of budget bytes: the output layer
// (norm and projection) first, then repeating layers from the last one
// down while their weights and KV cache (kvLayer bytes each) fit, keeping
// reserve bytes for activations and staging; what does not fit computes on
// the CPU. The result is a PlanLayers plan (a suffix of the layers).
//
// A MoE model is not split: everything but the routed experts goes to the
// device, and the budget left holds as many expert slots as fit (all of
// the experts at most); when not one fits, everything computes on the
// CPU.
func PlanVRAM(m *model.Model, budget, kvLayer, reserve int64) Plan {
	why := fmt.Sprintf("--vram %v", configs.ByteSize(budget))
	if m.NExpert > 0 {
		p := PlanLayers(m, -1, kvLayer)
		left := budget - reserve - p.GPUWeights - p.GPUKV
		if p.SlotBytes <= 0 || left < p.SlotBytes {
			p = PlanLayers(m, 0, kvLayer)
			p.Why, p.Budget = why+", not one expert slot beside the rest", budget
			return p
		}
		p.ExpertSlots = int(min(left/p.SlotBytes, int64(p.Experts)))
		p.Why, p.Budget = why, budget
		return p
	}
	left := budget - reserve
	ngl := 0
	if left >= outputBytes(m) {
		left -= outputBytes(m)
		ngl = 1
		for il := m.NLayer - 1; il >= 0; il-- {
			need := layerBytes(&m.Layers[il]) + kvLayer
			if need > left {
				break
			}
			left -= need
			ngl++
		}
	}
	p := PlanLayers(m, ngl, kvLayer)
	p.Why, p.Budget = why, budget
	return p
}

// account fills in the plan's memory figures.
func (p *Plan) account(m *model.Model, kvLayer int64) {
	p.GPUWeights, p.CPUWeights, p.GPUKV, p.CPUKV = 0, 0, 0, 0
	// the token embeddings are read on the host
	p.CPUWeights += int64(m.TokEmbd.Rows * m.TokEmbd.RowBytes)
	if p.Output {
		p.GPUWeights += outputBytes(m)
	} else if m.Output != m.TokEmbd { // a tied output is the embedding table
		p.CPUWeights += outputBytes(m)
	} else {
		p.CPUWeights += int64(4 * len(m.OutputNorm))
	}
	p.Experts, p.SlotBytes = 0, int64(expertSlotBytes(m))
	for il := range m.Layers {
		p.Experts += len(m.Layers[il].GateExps)
	}
	p.ExpertSlots = p.Experts // all resident unless PlanVRAM says otherwise
	for il := range m.Layers {
		if p.GPU[il] {
			p.GPUWeights += layerBytes(&m.Layers[il])
			p.GPUKV += kvLayer
		} else {
			p.CPUWeights += layerBytes(&m.Layers[il])
			p.CPUKV += kvLayer
		}
	}
}

func layerRange(a, b int) string {
	if a == b {
		return fmt.Sprintf("layer %d", a)
	}
	return fmt.Sprintf("layers %d-%d", a, b)
}

// Reserve returns the device memory a plan keeps beside weights and KV
// for a step of up to maxBatch tokens of m: the staging ring, the device
// copies of the Context's activations (model.NewContextKV's buffers:
// x, xn, tmp, q, k, v, att, gate, up, outRows, embd and the logits), and
// GeGLU's GELU table when m's FFN is GeGLU.
func Reserve(m *model.Model, maxBatch int) int64 {
	h := &m.Hyper
	per := 5*h.NEmbd + h.QDim() + h.KDim() + h.VDim() + h.NHead*h.HeadDimV + 2*max(h.NFF, h.NFFExp) + h.NVocab
	if h.NExpert > 0 { // the router's probabilities, each token's K expert outputs, an expert's scratch
		per += h.NExpert + h.NExpertUsed*h.NEmbd + 2*h.NEmbd + 2*h.NFFExp
	}
	n := stagingBytes + 4*int64(maxBatch)*int64(per)
	if m.FFNAct == model.ActGELU {
		n += geluTableBytes
	}
	return n
}

// geluTableBytes is quant.GELUTable's device copy.
const geluTableBytes = 4 << 16

// stagingBytes is the device backend's staging ring (backend.go's
// ringBytes, which only cgo builds have).
const stagingBytes = 16 << 20

// slotAlign is the alignment of each matrix in a device expert slot
// (expertstore.go).
const slotAlign = 256

// expertSlotBytes returns the bytes of a slot that holds any expert of m,
// and of the 256-aligned offsets of its three matrices.
func expertSlotBytes(m *model.Model) int {
	most := 0
	for il := range m.Layers {
		L := &m.Layers[il]
		if len(L.GateExps) == 0 {
			continue
		}
		for e := range L.GateExps {
			_, n := slotLayout(&L.GateExps[e], &L.UpExps[e], &L.DownExps[e])
			most = max(most, n)
		}
	}
	return most
}

// slotLayout returns the offsets of an expert's gate, up and down
// matrices in a slot and the bytes they take.
func slotLayout(ws ...*model.Weight) ([3]int, int) {
	var off [3]int
	n := 0
	for i, w := range ws {
		off[i] = n
		n += (w.Rows*w.RowBytes + slotAlign - 1) &^ (slotAlign - 1)
	}
	return off, n
}
