package gpu

// placement.go: which parts of a model compute on the Vulkan device and
// which on the CPU (--n-gpu-layers, or a plan fitted to --vram), and the
// memory each side holds. The plan is pure arithmetic on the model's
// shapes: --dry-run prints it without opening a device.

import (
	"fmt"
	"strings"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/model"
)

// gpuArchs are the architectures whose every op runs on the device.
var gpuArchs = map[string]bool{"llama": true, "qwen2": true, "qwen3": true}

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
	if p.Budget > 0 {
		fmt.Fprintf(&b, " (budget %v)", configs.ByteSize(p.Budget))
	}
	fmt.Fprintf(&b, "; host memory: weights %v, KV %v", configs.ByteSize(p.CPUWeights), configs.ByteSize(p.CPUKV))
	return b.String()
}

// Placeable reports why m cannot be split between the device and the CPU
// (nil if it can): the device backend's refusals (routed experts, an
// architecture without device shaders).
func Placeable(m *model.Model) error {
	if m.NExpert > 0 {
		return fmt.Errorf("gpu: routed experts (model with %d experts) cannot run on the GPU, in whole or in part; use the cpu backend", m.NExpert)
	}
	if !gpuArchs[m.Arch] {
		return fmt.Errorf("gpu: architecture %s cannot run on the GPU, in whole or in part (supported: llama, qwen2, qwen3); use the cpu backend", m.Arch)
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
	for _, v := range []model.Vector{L.AttnNorm, L.Bq, L.Bk, L.Bv, L.Bo, L.QNorm, L.KNorm, L.Sinks, L.FFNNorm} {
		n += int64(4 * len(v))
	}
	return n
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
func PlanVRAM(m *model.Model, budget, kvLayer, reserve int64) Plan {
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
	p.Why, p.Budget = fmt.Sprintf("--vram %v", configs.ByteSize(budget)), budget
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
// for a step of up to maxBatch tokens: the staging ring and the device
// copies of the Context's activations (model.NewContextKV's buffers:
// x, xn, tmp, q, k, v, att, gate, up, outRows, embd and the logits).
func Reserve(h *model.Hyper, maxBatch int) int64 {
	per := 5*h.NEmbd + h.QDim() + h.KDim() + h.VDim() + h.NHead*h.HeadDimV + 2*max(h.NFF, h.NFFExp) + h.NVocab
	return stagingBytes + 4*int64(maxBatch)*int64(per)
}

// stagingBytes is the device backend's staging ring (backend.go's
// ringBytes, which only cgo builds have).
const stagingBytes = 16 << 20
