package model

import (
	"fmt"
	"math"

	"github.com/flowinfer/flowinfer/io/gguf"
)

// RopeType selects which elements RoPE rotates together.
type RopeType int

const (
	// RopeNorm rotates adjacent pairs (x[2i], x[2i+1]): llama.
	RopeNorm RopeType = iota
	// RopeNeox rotates halves (x[i], x[i+d/2]): qwen2, qwen3, qwen3moe.
	RopeNeox
)

func (r RopeType) String() string {
	if r == RopeNeox {
		return "neox"
	}
	return "norm"
}

// Hyper holds an architecture's hyperparameters, read from GGUF keys
// "<arch>.*" with llama.cpp's defaults.
type Hyper struct {
	Arch      string
	NVocab    int
	NCtxTrain int // training context (<arch>.context_length)
	NEmbd     int
	NLayer    int // the blocks the forward pass runs
	// NLayerNextN is how many multi-token-prediction blocks follow the
	// NLayer blocks in the file (qwen35's <arch>.nextn_predict_layers):
	// block_count counts them, NLayer does not. They are not loaded, run
	// or read (Model.Skipped), as llama.cpp loads them without
	// --mtp (TENSOR_SKIP).
	NLayerNextN int
	NHead       int
	NHeadKV     int
	HeadDimK    int // <arch>.attention.key_length, default NEmbd/NHead
	HeadDimV    int
	NFF         int
	RMSEps      float32
	RopeType    RopeType
	RopeDim     int     // rotated dimensions per head (rope.dimension_count)
	RopeBase    float32 // rope.freq_base
	RopeScale   float32 // freq_scale = 1/rope.scaling.factor (1 for none); see rope.go
	NExpert     int
	NExpertUsed int
	NFFExp      int
	NFFShexp    int  // the shared expert's width (qwen35moe, qwen3next; 0: none)
	NormTopK    bool // renormalise the top-k expert weights

	// RoPE scaling (rope.go): the resolved rope.scaling.type (none, linear
	// or yarn), YaRN's ext_factor (1 for yarn, else 0), llama.cpp's
	// yarn_attn_factor, and the original context YaRN's ramp is computed
	// for (rope.scaling.original_context_length, default NCtxTrain).
	RopeScaling    string
	RopeExtFactor  float32
	RopeAttnFactor float32
	NCtxOrig       int
	// YaRN's ramp bounds (rope.scaling.yarn_beta_fast and yarn_beta_slow,
	// llama.cpp's defaults 32 and 1 where the family does not read them)
	// and yarn_log_multiplier (HF's mscale_all_dim; 0: none), which
	// changes RopeAttnFactor; see rope.go.
	YarnBetaFast, YarnBetaSlow float32
	YarnLogMul                 float32

	// Attention temperature (mistral3's attention.temperature_scale; 0:
	// none): every query row at position p is multiplied by
	// AttnTempFactor(p), which grows with p in steps of AttnTempFloor
	// positions (the original YaRN context).
	AttnTempScale float32
	AttnTempFloor int

	// gpt-oss (gptoss.go): the router's weights are the softmax of the
	// chosen experts' logits only (llama.cpp's
	// LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT), and the experts'
	// activation is the clamped SwiGLU (ggml_swiglu_oai).
	GatingSoftmaxWeight bool
	SwiGLUOAI           bool

	// Window holds each layer's sliding attention window (0: the layer
	// attends to every position), or is nil when no layer slides.
	Window []int

	// Hybrid models (qwen35): Recurrent[il] marks the linear-attention
	// (gated delta net) layers, SSM their shapes, RopeSections the
	// rope.dimension_sections of the attention layers' M-RoPE; nil and
	// zero for the other families.
	Recurrent    []bool
	SSM          SSMHyper
	RopeSections [4]int
	// SSMGroupedHeads: value head h of a recurrent layer reads q/k head
	// h/(DtRank/Groups), each key head's value heads side by side
	// (qwen3next's repeat-interleave); false: head h%Groups, the key
	// heads tiled (qwen35, qwen35moe).
	SSMGroupedHeads bool

	// gemma4 (gemma4.go): NLayerKV > 0 says only layers below it keep
	// K and V (llama.cpp's n_layer_kv_from_start); a later layer reads
	// KVSource's. NEmbdPerLayer is the width of the per-layer token
	// embeddings (embedding_length_per_layer_input; 0: none).
	NLayerKV      int
	NEmbdPerLayer int

	// Per-layer shapes (gemma4): the sliding layers' head sizes and
	// rotated dimensions (attention.key_length_swa, value_length_swa,
	// rope.dimension_count_swa; 0: the global HeadDimK, HeadDimV,
	// RopeDim), and per-layer KV head counts and FFN widths
	// (head_count_kv and feed_forward_length as arrays; nil: NHeadKV and
	// NFF for every layer). NHeadKV and NFF then hold the largest entry.
	// Read them through HeadDimKAt, HeadDimVAt, RopeDimAt, NHeadKVAt and
	// NFFAt, as llama.cpp's n_embd_head_k(il), n_head_kv(il), n_ff(il).
	HeadDimKSWA, HeadDimVSWA, RopeDimSWA int
	NHeadKVArr, NFFArr                   []int

	// Nemotron-H (nemotronh.go): which layers are attention-only and
	// FFN-only, and the MoE variant's routing; zero for the others.
	NH NemotronHyper
}

// KVSource returns the layer whose K and V layer il attends to: il itself,
// or, for a layer from NLayerKV on, the last layer before NLayerKV of its
// kind: NLayerKV-2 if il slides, else NLayerKV-1 (llama.cpp's
// layer_reuse_cb for gemma3n and gemma4, which assumes those two layers
// are one sliding and one global; gemma4.go checks it).
func (h *Hyper) KVSource(il int) int {
	if h.NLayerKV <= 0 || il < h.NLayerKV {
		return il
	}
	if h.LayerWindow(il) > 0 {
		return h.NLayerKV - 2
	}
	return h.NLayerKV - 1
}

// FFWidth is the widest gated FFN a layer runs: dense, routed expert or
// shared expert (the width of a Context's gate and up buffers).
func (h *Hyper) FFWidth() int {
	w := max(h.NFF, h.NFFExp, h.NFFShexp)
	for _, n := range h.NFFArr {
		w = max(w, n)
	}
	return w
}

// IsRecurrent reports whether layer il is a recurrent (linear-attention)
// layer, whose state is kept per sequence instead of in the KV cache.
func (h *Hyper) IsRecurrent(il int) bool { return il < len(h.Recurrent) && h.Recurrent[il] }

// KeepsKV reports whether layer il stores K and V rows in the cache: not a
// recurrent layer, not one that reads another layer's (KVSource: gemma4's
// shared KV layers), and not one of nemotron_h's FFN-only layers (llama.cpp's
// filter_attn of llama_memory_hybrid gives those no cache either).
func (h *Hyper) KeepsKV(il int) bool {
	return !h.IsRecurrent(il) && h.KVSource(il) == il && !(il < len(h.NH.FFN) && h.NH.FFN[il])
}

// Hybrid reports whether some layers are recurrent.
func (h *Hyper) Hybrid() bool { return len(h.Recurrent) > 0 }

// LayerWindow is layer il's sliding window, 0 for full attention.
func (h *Hyper) LayerWindow(il int) int {
	if il < len(h.Window) {
		return h.Window[il]
	}
	return 0
}

// HeadDimKAt is layer il's K head size: HeadDimKSWA on a sliding layer
// when set, else HeadDimK (llama_hparams::n_embd_head_k(il)).
func (h *Hyper) HeadDimKAt(il int) int {
	if h.HeadDimKSWA > 0 && h.LayerWindow(il) > 0 {
		return h.HeadDimKSWA
	}
	return h.HeadDimK
}

// HeadDimVAt is HeadDimKAt for V.
func (h *Hyper) HeadDimVAt(il int) int {
	if h.HeadDimVSWA > 0 && h.LayerWindow(il) > 0 {
		return h.HeadDimVSWA
	}
	return h.HeadDimV
}

// RopeDimAt is layer il's rotated dimensions (llama_hparams::n_rot(il)).
func (h *Hyper) RopeDimAt(il int) int {
	if h.RopeDimSWA > 0 && h.LayerWindow(il) > 0 {
		return h.RopeDimSWA
	}
	return h.RopeDim
}

// NHeadKVAt is layer il's KV head count.
func (h *Hyper) NHeadKVAt(il int) int {
	if il < len(h.NHeadKVArr) {
		return h.NHeadKVArr[il]
	}
	return h.NHeadKV
}

// NFFAt is layer il's dense FFN width.
func (h *Hyper) NFFAt(il int) int {
	if il < len(h.NFFArr) {
		return h.NFFArr[il]
	}
	return h.NFF
}

// PerLayerShapes reports whether some layer's head size, rotated
// dimensions, KV head count or FFN width differs from the scalar fields.
func (h *Hyper) PerLayerShapes() bool {
	for il := range h.NLayer {
		if h.HeadDimKAt(il) != h.HeadDimK || h.HeadDimVAt(il) != h.HeadDimV || h.RopeDimAt(il) != h.RopeDim ||
			h.NHeadKVAt(il) != h.NHeadKV || h.NFFAt(il) != h.NFF {
			return true
		}
	}
	return false
}

// AtLayer returns a copy of h with layer il's head sizes, rotated
// dimensions, KV head count and FFN width in the scalar fields: what the
// attention and FFN ops of that layer read (h itself when nothing varies).
func (h *Hyper) AtLayer(il int) *Hyper {
	if h.HeadDimKSWA == 0 && h.HeadDimVSWA == 0 && h.RopeDimSWA == 0 && h.NHeadKVArr == nil && h.NFFArr == nil {
		return h
	}
	c := *h
	c.HeadDimK, c.HeadDimV, c.RopeDim = h.HeadDimKAt(il), h.HeadDimVAt(il), h.RopeDimAt(il)
	c.NHeadKV, c.NFF = h.NHeadKVAt(il), h.NFFAt(il)
	c.HeadDimKSWA, c.HeadDimVSWA, c.RopeDimSWA, c.NHeadKVArr, c.NFFArr = 0, 0, 0, nil, nil
	return &c
}

// KDimAt is the width of layer il's K row (llama_hparams::n_embd_k_gqa(il)).
func (h *Hyper) KDimAt(il int) int { return h.NHeadKVAt(il) * h.HeadDimKAt(il) }

// VDimAt is the width of layer il's V row.
func (h *Hyper) VDimAt(il int) int { return h.NHeadKVAt(il) * h.HeadDimVAt(il) }

// QDimAt is the width of layer il's Q row.
func (h *Hyper) QDimAt(il int) int { return h.NHead * h.HeadDimKAt(il) }

// MaxKDim, MaxVDim, MaxQDim and MaxAttDim are the largest K, V, Q and
// attention-output row over the layers (scratch sizes).
func (h *Hyper) MaxKDim() int { return h.maxOver(h.KDimAt) }

// MaxVDim: see MaxKDim.
func (h *Hyper) MaxVDim() int { return h.maxOver(h.VDimAt) }

// MaxQDim: see MaxKDim.
func (h *Hyper) MaxQDim() int { return h.maxOver(h.QDimAt) }

// MaxAttDim: see MaxKDim.
func (h *Hyper) MaxAttDim() int {
	return h.maxOver(func(il int) int { return h.NHead * h.HeadDimVAt(il) })
}

func (h *Hyper) maxOver(f func(int) int) int {
	n := f(0)
	for il := 1; il < h.NLayer; il++ {
		n = max(n, f(il))
	}
	return n
}

// KDim is the width of one token's K row (all KV heads).
func (h *Hyper) KDim() int { return h.NHeadKV * h.HeadDimK }

// VDim is the width of one token's V row.
func (h *Hyper) VDim() int { return h.NHeadKV * h.HeadDimV }

// QDim is the width of one token's Q row.
func (h *Hyper) QDim() int { return h.NHead * h.HeadDimK }

type keyReader struct {
	f    *gguf.File
	arch string
	err  error
}

func (k *keyReader) uint(name string, def int, required bool) int {
	key := k.arch + "." + name
	v, ok := k.f.Get(key)
	if !ok {
		if required && k.err == nil {
			k.err = fmt.Errorf("model: missing required key %q", key)
		}
		return def
	}
	if v.Type() == gguf.TypeArray {
		if k.err == nil {
			k.err = fmt.Errorf("model: key %q is a per-layer array; only a single value is supported", key)
		}
		return def
	}
	u, ok := v.Uint()
	if !ok || u > math.MaxInt32 {
		if k.err == nil {
			k.err = fmt.Errorf("model: key %q: want a non-negative integer, got %s", key, v)
		}
		return def
	}
	return int(u)
}

// uintOrArr reads a key that is one value or an array of one value per
// layer (llama.cpp's get_key_or_arr): it returns the value, or the largest
// entry and the array (nil for one value).
func (k *keyReader) uintOrArr(name string, nLayer, def int, required bool) (int, []int) {
	key := k.arch + "." + name
	v, ok := k.f.Get(key)
	if !ok || v.Type() != gguf.TypeArray {
		return k.uint(name, def, required), nil
	}
	if v.Len() != nLayer {
		if k.err == nil {
			k.err = fmt.Errorf("model: key %q has %d entries for %d layers", key, v.Len(), nLayer)
		}
		return def, nil
	}
	arr, hi := make([]int, nLayer), 0
	for il := range arr {
		e, _ := v.Index(il)
		u, ok := e.Uint()
		if !ok || u > math.MaxInt32 {
			if k.err == nil {
				k.err = fmt.Errorf("model: key %q: entry %d is %s, want a non-negative integer", key, il, e)
			}
			return def, nil
		}
		arr[il] = int(u)
		hi = max(hi, arr[il])
	}
	return hi, arr
}

func (k *keyReader) float(name string, def float32) float32 {
	key := k.arch + "." + name
	v, ok := k.f.Get(key)
	if !ok {
		return def
	}
	x, ok := v.Float()
	if !ok {
		if k.err == nil {
			k.err = fmt.Errorf("model: key %q: want a number, got %s", key, v)
		}
		return def
	}
	return float32(x)
}

// ReadHyper reads and validates the hyperparameters of arch from f.
func ReadHyper(f *gguf.File, arch string) (Hyper, error) {
	k := &keyReader{f: f, arch: arch}
	h := Hyper{Arch: arch}
	h.NCtxTrain = k.uint("context_length", 0, true)
	h.NEmbd = k.uint("embedding_length", 0, true)
	h.NLayer = k.uint("block_count", 0, true)
	nemo := isNemotronH(arch)    // per-layer feed_forward_length and head_count_kv: readNemotronHHyper
	perLayer := arch == "gemma4" // head_count_kv and feed_forward_length may be per-layer arrays
	if perLayer {
		h.NFF, h.NFFArr = k.uintOrArr("feed_forward_length", h.NLayer, 0, true)
	} else if !nemo {
		h.NFF = k.uint("feed_forward_length", 0, arch != "qwen3moe" && arch != "qwen35moe" && arch != "qwen3next")
	}
	if arch == "mistral3" {
		h.AttnTempScale = k.float("attention.temperature_scale", 0)
	}
	if nemo {
		h.NHead = nemotronHHeads(k, h.NLayer)
	} else {
		h.NHead = k.uint("attention.head_count", 0, true)
	}
	if perLayer {
		h.NHeadKV, h.NHeadKVArr = k.uintOrArr("attention.head_count_kv", h.NLayer, h.NHead, false)
		for il, n := range h.NHeadKVArr {
			if n == 0 || h.NHead%n != 0 {
				return h, fmt.Errorf("model: head_count %d is not a multiple of layer %d's head_count_kv %d", h.NHead, il, n)
			}
		}
	} else if !nemo {
		h.NHeadKV = k.uint("attention.head_count_kv", h.NHead, false)
	}
	if k.err != nil {
		return h, k.err
	}
	if h.NHead == 0 || h.NEmbd == 0 || h.NLayer == 0 {
		return h, fmt.Errorf("model: %s: embedding_length %d, block_count %d, head_count %d must all be positive", arch, h.NEmbd, h.NLayer, h.NHead)
	}
	h.HeadDimK = k.uint("attention.key_length", h.NEmbd/h.NHead, false)
	h.HeadDimV = k.uint("attention.value_length", h.HeadDimK, false)
	h.RopeDim = k.uint("rope.dimension_count", h.HeadDimK, false)
	h.RopeBase = k.float("rope.freq_base", 10000)
	h.RMSEps = k.float("attention.layer_norm_rms_epsilon", 1e-5)
	if err := readRopeScaling(k, &h); err != nil {
		return h, err
	}
	if n, ok := f.GetUint(arch + ".vocab_size"); ok {
		h.NVocab = int(n)
	} else if v, ok := f.Get("tokenizer.ggml.tokens"); ok {
		h.NVocab = v.Len()
	}
	h.NExpert = k.uint("expert_count", 0, false)
	h.NExpertUsed = k.uint("expert_used_count", 0, false)
	h.NFFExp = k.uint("expert_feed_forward_length", 0, false)
	h.NormTopK = true
	if b, ok := f.GetBool(arch + ".expert_weights_norm"); ok {
		h.NormTopK = b
	}
	if k.err != nil {
		return h, k.err
	}
	if arch == "qwen35moe" || arch == "qwen3next" {
		if err := readHybridMoEHyper(k, &h); err != nil {
			return h, err
		}
	}
	if arch == "qwen35" || arch == "qwen35moe" || arch == "qwen3next" {
		if err := readQwen35Hyper(k, &h); err != nil {
			return h, err
		}
	}
	if nemo {
		if err := readNemotronHHyper(k, &h); err != nil {
			return h, err
		}
	}
	switch {
	case h.NHeadKV == 0 || h.NHead%h.NHeadKV != 0:
		return h, fmt.Errorf("model: head_count %d is not a multiple of head_count_kv %d", h.NHead, h.NHeadKV)
	case h.HeadDimK == 0 || h.HeadDimV == 0:
		return h, fmt.Errorf("model: zero head dimension")
	case h.RopeDim > h.HeadDimK || h.RopeDim%2 != 0:
		return h, fmt.Errorf("model: rope.dimension_count %d must be even and at most the head dimension %d", h.RopeDim, h.HeadDimK)
	case h.NVocab <= 0:
		return h, fmt.Errorf("model: vocabulary size unknown (no %s.vocab_size and no tokenizer.ggml.tokens)", arch)
	case !(h.RMSEps > 0) || !(h.RopeBase > 0):
		return h, fmt.Errorf("model: rms epsilon %g and rope base %g must be positive", h.RMSEps, h.RopeBase)
	case h.NExpert > 0 && (h.NExpertUsed == 0 || h.NExpertUsed > h.NExpert):
		return h, fmt.Errorf("model: expert_used_count %d must be in [1, expert_count %d]", h.NExpertUsed, h.NExpert)
	case math.IsNaN(float64(h.AttnTempScale)) || math.IsInf(float64(h.AttnTempScale), 0):
		return h, fmt.Errorf("model: key %q = %g: want a finite number", arch+".attention.temperature_scale", h.AttnTempScale)
	}
	if h.AttnTempScale != 0 {
		// llama.cpp (llama_model_mistral3::load_arch_hparams) steps the
		// temperature at the original YaRN context.
		h.AttnTempFloor = h.NCtxOrig
		if h.AttnTempFloor == 0 {
			return h, fmt.Errorf("model: %s.attention.temperature_scale needs a positive original context (rope.scaling.original_context_length or context_length)", arch)
		}
	}
	return h, nil
}

// AttnTempFactor is what the attention temperature multiplies the query
// at position p by: log(⌊p/AttnTempFloor⌋ + 1)·AttnTempScale + 1, computed as
// llama.cpp's llm_graph_input_attn_temp::set_input does (position, division
// and floor in float32, the logarithm and the rest in double, the result
// rounded to float32). It is 1 for p below AttnTempFloor.
func (h *Hyper) AttnTempFactor(p int32) float32 {
	q := float32(math.Floor(float64(float32(p) / float32(h.AttnTempFloor))))
	// the conversion forbids a fused multiply-add, as the C++ has none
	return float32(float64(math.Log(float64(q)+1)*float64(h.AttnTempScale)) + 1)
}
