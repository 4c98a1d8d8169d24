// plan.go: the tensors of a model (names, shapes, what random values they
// hold) and the type each gets, following llama-quantize's choice of type
// per tensor (llama_tensor_get_type in src/llama-quant.cpp) for the
// mixtures supported here.
//
// Only the rules that fire for the supported mixtures and architectures are
// implemented: the IQ mixtures and Falcon's special cases are not.

package synth

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/flowinfer/flowinfer/quant"
)

// mixInfo is one llama-quantize file type: its LLAMA_FTYPE number and the
// default type of its 2-D weights.
type mixInfo struct {
	name  string
	ftype uint32
	def   quant.Type
}

// mixTable lists the supported mixtures (llama.h's enum llama_ftype).
func mixTable() []mixInfo {
	return []mixInfo{
		{"F32", 0, quant.F32},
		{"F16", 1, quant.F16},
		{"Q4_0", 2, quant.Q4_0},
		{"Q4_1", 3, quant.Q4_1},
		{"Q8_0", 7, quant.Q8_0},
		{"Q5_0", 8, quant.Q5_0},
		{"Q5_1", 9, quant.Q5_1},
		{"Q2_K", 10, quant.Q2_K},
		{"Q3_K_S", 11, quant.Q3_K},
		{"Q3_K_M", 12, quant.Q3_K},
		{"Q3_K_L", 13, quant.Q3_K},
		{"Q4_K_S", 14, quant.Q4_K},
		{"Q4_K_M", 15, quant.Q4_K},
		{"Q5_K_S", 16, quant.Q5_K},
		{"Q5_K_M", 17, quant.Q5_K},
		{"Q6_K", 18, quant.Q6_K},
		{"Q2_K_S", 21, quant.Q2_K},
		{"BF16", 32, quant.BF16},
	}
}

// Mixes returns the names of the supported mixtures (Options.Mix), as
// llama-quantize spells them.
func Mixes() []string {
	var out []string
	for _, m := range mixTable() {
		out = append(out, m.name)
	}
	return out
}

func lookupMix(name string) (mixInfo, bool) {
	for _, m := range mixTable() {
		if strings.EqualFold(m.name, name) {
			return m, true
		}
	}
	return mixInfo{}, false
}

// pureFileType is the general.file_type of a file whose 2-D weights all have
// type t, as llama-quantize --pure writes it (Q4_K -> Q4_K_M and so on).
func pureFileType(t quant.Type) (uint32, bool) {
	switch t {
	case quant.Q3_K: // llama-quantize's "Q3_K" is Q3_K_M
		return 12, true
	case quant.Q4_K:
		return 15, true
	case quant.Q5_K:
		return 17, true
	case quant.IQ4_NL: // LLAMA_FTYPE_MOSTLY_IQ4_NL (no mixture rules here: --pure only)
		return 25, true
	case quant.IQ4_XS: // LLAMA_FTYPE_MOSTLY_IQ4_XS
		return 30, true
	case quant.MXFP4: // LLAMA_FTYPE_MOSTLY_MXFP4_MOE
		return 38, true
	case quant.IQ2_XXS: // LLAMA_FTYPE_MOSTLY_IQ2_XXS (the lattice types: --pure only too)
		return 19, true
	case quant.IQ2_XS: // LLAMA_FTYPE_MOSTLY_IQ2_XS
		return 20, true
	case quant.IQ3_XXS: // LLAMA_FTYPE_MOSTLY_IQ3_XXS
		return 23, true
	case quant.IQ1_S: // LLAMA_FTYPE_MOSTLY_IQ1_S
		return 24, true
	case quant.IQ3_S: // LLAMA_FTYPE_MOSTLY_IQ3_S
		return 26, true
	case quant.IQ2_S: // LLAMA_FTYPE_MOSTLY_IQ2_M: its base type is IQ2_S (LLAMA_FTYPE_MOSTLY_IQ2_S's is IQ2_XS)
		return 29, true
	case quant.IQ1_M: // LLAMA_FTYPE_MOSTLY_IQ1_M
		return 31, true
	}
	for _, m := range mixTable() {
		if m.def == t {
			return m.ftype, true
		}
	}
	return 0, false
}

// role says what random values a tensor holds.
type role int

const (
	roleWeight    role = iota // N(0, std²)
	roleNorm                  // 1 + N(0, 0.1²)
	roleBias                  // N(0, 0.1²)
	roleRouter                // N(0, 0.02²) times a per-expert scale
	roleNegNorm               // -(1 + N(0, std²)): qwen35's ssm_a = -exp(A_log)
	roleRopeFreqs             // gemma4's rope_freqs: 1 for the first Tensor.rot values, 1e30 after
)

// Tensor is one tensor of a planned model file.
type Tensor struct {
	Name string
	Type quant.Type
	// Dims in ggml order: Dims[0] is the row length.
	Dims []uint64
	// Bytes is the size of the tensor's data.
	Bytes uint64

	role  role
	std   float64
	sigma float64 // router: lognormal σ of the per-expert scales (0: the golden table)
	boost float64 // norms: kOutlierChannels channels times this (0: none)
	layer int     // -1 outside the blocks
	vIdx  int     // attn_v and attn_qkv: its index among them in file order
	rot   int     // rope_freqs: the pairs that rotate
	base  float64 // norms: the value they are drawn around (0: 1)
}

// Plan returns the tensors Write writes for s and o, in file order, with
// their types. It is what `flowinfer gen --dry-run` would print.
func Plan(s Spec, o Options) ([]Tensor, error) {
	s, _, err := prepare(s, o)
	if err != nil {
		return nil, err
	}
	ts, _, err := plan(s, o)
	return ts, err
}

// plan lists the tensors of s, assigns their types and returns them with
// the file type.
func plan(s Spec, o Options) ([]Tensor, uint32, error) {
	ts := tensorList(s)
	q, err := newTyper(s, o)
	if err != nil {
		return nil, 0, err
	}
	// llama-quantize counts the attn_v-like tensors in file order
	// (i_attention_wv of n_attention_wv): one per layer, but none in
	// qwen3next's delta-net layers with ssm_in and in gemma4's global
	// layers with attention_k_eq_v
	for i := range ts {
		if c := category(ts[i].Name); c == "attn_v" || c == "attn_qkv" {
			ts[i].vIdx = q.nAttnV
			q.nAttnV++
		}
	}
	ftype, err := gptOssFileType(s, o, q.ftype)
	if err != nil {
		return nil, 0, err
	}
	for i := range ts {
		t := &ts[i]
		if typ, ok := gptOssType(s, t); ok {
			t.Type = typ
		} else if t.Type, err = q.typeOf(t); err != nil {
			return nil, 0, err
		}
		rb, err := quant.RowBytes(t.Type, int(t.Dims[0]))
		if err != nil {
			return nil, 0, fmt.Errorf("synth: tensor %q: %w", t.Name, err)
		}
		t.Bytes = uint64(rb)
		for _, d := range t.Dims[1:] {
			t.Bytes *= d
		}
	}
	return ts, ftype, nil
}

// tensorList returns s's tensors (types not yet set) in llama-quantize's
// order: tensors outside the blocks first, then block by block, each group
// sorted by name (llama_model_loader's weight_name_comparer).
func tensorList(s Spec) []Tensor {
	if s.Arch == "gpt-oss" {
		return gptOssTensors(s)
	}
	if s.Arch == "gemma4" {
		return gemma4Tensors(s) // gemma4.go
	}
	var ts []Tensor
	add := func(layer int, name string, r role, std float64, dims ...int) {
		d := make([]uint64, len(dims))
		for i, x := range dims {
			d[i] = uint64(x)
		}
		if layer >= 0 {
			name = "blk." + strconv.Itoa(layer) + "." + name
		}
		ts = append(ts, Tensor{Name: name, Dims: d, role: r, std: std, layer: layer})
	}
	const std = 0.02
	qkStd := std
	if s.Arch == "llama" || s.Arch == "qwen2" || s.Arch == "mistral3" {
		qkStd = 0.08 // as the golden synthetic models: attention not near-uniform
	}
	e, v := s.NEmbd, s.NVocab
	qDim, kvDim := s.NHead*s.HeadDim, s.NHeadKV*s.HeadDim
	embdStd, attnOutStd := std, std
	if s.EmbdStd > 0 {
		embdStd = s.EmbdStd
	}
	if s.AttnOutStd > 0 {
		attnOutStd = s.AttnOutStd
	}
	add(-1, "token_embd.weight", roleWeight, embdStd, e, v)
	add(-1, "output_norm.weight", roleNorm, 0.1, e)
	if !s.Tied {
		add(-1, "output.weight", roleWeight, std, e, v)
	}
	for i := range s.blockCount() {
		if s.Arch == "qwen35" || hybridMoE(s.Arch) {
			qwen35Block(s, i, add)
			continue
		}
		if isNemotron(s.Arch) {
			nemotronBlock(s, i, add, attnOutStd)
			continue
		}
		add(i, "attn_norm.weight", roleNorm, 0.1, e)
		add(i, "attn_q.weight", roleWeight, qkStd, e, qDim)
		add(i, "attn_k.weight", roleWeight, qkStd, e, kvDim)
		add(i, "attn_v.weight", roleWeight, std, e, kvDim)
		add(i, "attn_output.weight", roleWeight, attnOutStd, qDim, e)
		switch s.Arch {
		case "qwen2":
			add(i, "attn_q.bias", roleBias, 0.1, qDim)
			add(i, "attn_k.bias", roleBias, 0.1, kvDim)
			add(i, "attn_v.bias", roleBias, 0.1, kvDim)
		case "qwen3", "qwen3moe":
			add(i, "attn_q_norm.weight", roleNorm, 0.1, s.HeadDim)
			add(i, "attn_k_norm.weight", roleNorm, 0.1, s.HeadDim)
			ts[len(ts)-1].boost = s.KOutliers
		case "gemma3":
			gemma3Tensors(s, i, add) // gemma3.go
		}
		add(i, "ffn_norm.weight", roleNorm, 0.1, e)
		if s.NExpert > 0 {
			add(i, "ffn_gate_inp.weight", roleRouter, std, e, s.NExpert)
			ts[len(ts)-1].sigma = s.RouterSigma
			add(i, "ffn_gate_exps.weight", roleWeight, std, e, s.NFFExp, s.NExpert)
			add(i, "ffn_up_exps.weight", roleWeight, std, e, s.NFFExp, s.NExpert)
			add(i, "ffn_down_exps.weight", roleWeight, std, s.NFFExp, e, s.NExpert)
		} else {
			add(i, "ffn_gate.weight", roleWeight, std, e, s.NFF)
			add(i, "ffn_up.weight", roleWeight, std, e, s.NFF)
			add(i, "ffn_down.weight", roleWeight, std, s.NFF, e)
		}
	}
	for i := range ts { // every router's per-expert scales
		if ts[i].role == roleRouter {
			ts[i].sigma = s.RouterSigma
		}
	}
	slices.SortStableFunc(ts, func(a, b Tensor) int {
		if a.layer != b.layer {
			return a.layer - b.layer
		}
		return strings.Compare(a.Name, b.Name)
	})
	return ts
}

// typer picks each tensor's type.
type typer struct {
	s      Spec
	pure   bool
	mix    mixInfo
	ftype  uint32
	is70B  bool
	gqa    int // llama_hparams::n_gqa(0): layer 0's heads per KV head, 0 if it has no KV heads
	nAttnV int // attn_v and attn_qkv tensors in the file
}

func newTyper(s Spec, o Options) (*typer, error) {
	q := &typer{s: s}
	if o.Mix != "" {
		m, ok := lookupMix(o.Mix)
		if !ok {
			if t, isType := quant.TypeByName(o.Mix); isType {
				if _, pure := pureFileType(t); pure {
					var named []string // the mixtures whose default type t is
					for _, m := range mixTable() {
						if m.def == t {
							named = append(named, m.name)
						}
					}
					if len(named) > 0 {
						return nil, fmt.Errorf("synth: %s is a tensor type, not a mixture: its mixtures are %s; --pure writes every 2-D weight %s", o.Mix, strings.Join(named, ", "), t)
					}
					return nil, fmt.Errorf("synth: llama-quantize's %s mixture rules are not implemented; a pure %s file (every 2-D weight %s) is (--pure)", o.Mix, t, t)
				}
			}
			return nil, fmt.Errorf("synth: unknown mixture %q (supported: %s)", o.Mix, strings.Join(Mixes(), ", "))
		}
		q.mix, q.ftype = m, m.ftype
	} else {
		ft, ok := pureFileType(o.Type)
		if !ok {
			return nil, fmt.Errorf("synth: cannot write tensors of type %s (supported: %s)", o.Type, supportedTypes)
		}
		q.pure, q.mix.def, q.ftype = true, o.Type, ft
	}
	// llama.cpp's LLM_TYPE_70B (llm_load_hparams): llama with 80 layers and
	// grouped-query attention, qwen2 with 80 layers.
	q.is70B = s.NLayer == 80 && (s.Arch == "llama" && s.NHead != s.NHeadKV || s.Arch == "qwen2")
	q.gqa = gqaLayer0(s)
	return q, nil
}

// gqaLayer0 is llama_hparams::n_gqa() as llama-quantize calls it (layer 0,
// from the attention.head_count and head_count_kv the file holds): gemma4
// writes head_count_kv per layer, nemotron_h writes 0 for the layers
// without attention (layer 0 is Mamba-2 in its presets, so 0), the qwen35
// family writes one count for all layers (its delta net layer 0 counts as
// NHead/NHeadKV).
func gqaLayer0(s Spec) int {
	nkv := s.NHeadKV
	switch {
	case s.Arch == "gemma4":
		_, nkv = s.gemma4Head(0)
	case isNemotron(s.Arch) && (len(s.Nemotron.Pattern) == 0 || s.Nemotron.Pattern[0] != '*'):
		nkv = 0
	}
	if nkv == 0 {
		return 0
	}
	return s.NHead / nkv
}

// useMoreBits is llama-quant.cpp's use_more_bits: the first and last
// eighth of the layers and every third one between get more bits.
func useMoreBits(i, n int) bool {
	return i < n/8 || i >= 7*n/8 || (i-n/8)%3 == 2
}

// category is llama-quant.cpp's tensor_get_category for our names.
func category(name string) string {
	switch {
	case name == "output.weight":
		return "output"
	case name == "token_embd.weight" || name == "per_layer_token_embd.weight":
		return "token_embd"
	}
	for _, c := range []string{"attn_qkv.weight", "attn_v.weight", "attn_k.weight", "attn_q.weight", "attn_output.weight", "ffn_up", "ffn_gate", "ffn_down"} {
		if strings.Contains(name, c) {
			return strings.TrimSuffix(c, ".weight")
		}
	}
	return ""
}

// typeOf returns t's type: llama_tensor_get_type for the mixture, or the
// pure type, then llama.cpp's fallback for rows that are not a whole number
// of blocks.
func (q *typer) typeOf(t *Tensor) (quant.Type, error) {
	// tensor_allows_quantization: 2-D and 3-D weights except norms and the
	// MoE router stay F32, as the converter writes them.
	if len(t.Dims) < 2 || t.role != roleWeight {
		return quant.F32, nil
	}
	if t.Name == "per_layer_model_proj.weight" { // gemma4's: llama-quantize keeps it
		return quant.F32, nil
	}
	nt := q.mix.def
	if !nt.IsQuantized() {
		return nt, nil
	}
	if !q.pure {
		nt = q.mixRule(t, nt)
	}
	return fallback(t, nt)
}

// mixRule is the part of llama_tensor_get_type_impl (src/llama-quant.cpp)
// that applies to the supported mixtures; each case names its branch.
func (q *typer) mixRule(t *Tensor, nt quant.Type) quant.Type {
	ftype := q.mix.name
	nExpert8 := q.s.NExpert == 8
	switch cat := category(t.Name); {
	case cat == "output" || (cat == "token_embd" && q.s.Tied):
		// the OUTPUT branch (tied embeddings take it too): Q8_0 if the rows
		// are not a whole number of the mixture's blocks, else Q6_K unless
		// Q8_0 already; no mixture here changes it further
		if int(t.Dims[0])%nt.BlockSize() != 0 {
			return quant.Q8_0
		}
		if nt != quant.Q8_0 {
			return quant.Q6_K
		}
	case cat == "attn_v" || cat == "attn_qkv":
		// the category_is_attn_v branch: a fused attn_qkv (qwen35's delta
		// net layers) takes attn_v's rule and counter, counted in file order
		// (so in nemotron_h over its attention layers only); n_gqa is layer
		// 0's
		switch {
		case ftype == "Q2_K":
			nt = quant.Q3_K
			if q.gqa >= 4 {
				nt = quant.Q4_K
			}
		case ftype == "Q2_K_S" && q.gqa >= 4:
			nt = quant.Q4_K
		case ftype == "Q3_K_M":
			nt = quant.Q4_K
			if t.vIdx < 2 {
				nt = quant.Q5_K
			}
		case ftype == "Q3_K_L":
			nt = quant.Q5_K
		case (ftype == "Q4_K_M" || ftype == "Q5_K_M") && useMoreBits(t.vIdx, q.nAttnV):
			nt = quant.Q6_K
		case ftype == "Q4_K_S" && t.vIdx < 4:
			nt = quant.Q5_K
		}
		if q.is70B && (nt == quant.Q3_K || nt == quant.Q4_K) { // LLM_TYPE_70B
			nt = quant.Q5_K
		}
		if nExpert8 {
			nt = quant.Q8_0
		}
	case cat == "attn_k":
		if nExpert8 {
			nt = quant.Q8_0
		}
	case cat == "ffn_down":
		// layer from the name (MoE) or the running count (dense): the same
		// number in file order
		i, n := t.layer, q.s.blockCount() // llama-quantize's n_ffn_down: n_layer_all
		if q.s.Arch == "nemotron_h" {     // dense: the running count of ffn_down tensors
			i = q.s.Nemotron.before('-', t.layer)
		}
		switch {
		case ftype == "Q2_K":
			nt = quant.Q3_K
		case ftype == "Q2_K_S" && i < n/8:
			nt = quant.Q4_K
		case ftype == "Q3_K_M":
			// i_layer < n_layer/16 ? Q5_K : Q4_K (Q3_K only for Falcon)
			nt = quant.Q4_K
			if i < n/16 {
				nt = quant.Q5_K
			}
		case ftype == "Q3_K_L":
			nt = quant.Q5_K
		case ftype == "Q4_K_M" && useMoreBits(i, n):
			nt = quant.Q6_K
		case ftype == "Q5_K_M" && useMoreBits(i, n):
			nt = quant.Q6_K
		case ftype == "Q4_K_S" && i < n/8:
			nt = quant.Q5_K
		}
	case cat == "attn_output":
		if nExpert8 {
			// eight experts: Q5_K for these mixtures, Q3_K_L included in
			// none of them
			switch ftype {
			case "Q2_K", "Q3_K_S", "Q3_K_M", "Q4_K_S", "Q4_K_M":
				nt = quant.Q5_K
			}
			break
		}
		switch ftype {
		case "Q2_K":
			nt = quant.Q3_K
		case "Q3_K_M":
			nt = quant.Q4_K
		case "Q3_K_L":
			nt = quant.Q5_K
		}
	}
	// TOKEN_EMBD (untied), ATTENTION_Q, FFN_GATE, FFN_UP and the rest
	// (qwen35's attn_gate and ssm_* weights, gemma4's extra projections)
	// keep the mixture's default type in these mixtures
	return nt
}

// fallback is llama-quant.cpp's tensor_type_fallback: a K-quant whose rows
// are not a whole number of 256-blocks falls back to a 32-block type, and
// that to F16 if the rows are not a multiple of 32 either.
func fallback(t *Tensor, nt quant.Type) (quant.Type, error) {
	cols := int(t.Dims[0])
	if cols%nt.BlockSize() == 0 {
		return nt, nil
	}
	var fb quant.Type
	switch nt {
	case quant.Q2_K, quant.Q3_K:
		fb = quant.Q4_0
	case quant.Q4_K:
		fb = quant.Q5_0
	case quant.Q5_K:
		fb = quant.Q5_1
	case quant.Q6_K:
		fb = quant.Q8_0
	case quant.IQ4_XS, quant.IQ3_XXS, quant.IQ3_S, quant.IQ2_XXS, quant.IQ2_XS, quant.IQ2_S, quant.IQ1_S, quant.IQ1_M:
		fb = quant.IQ4_NL
	default:
		return 0, fmt.Errorf("synth: tensor %q: rows of %d are not a whole number of %s blocks of %d, and llama.cpp has no fallback type for %s", t.Name, cols, nt, nt.BlockSize(), nt)
	}
	if cols%fb.BlockSize() != 0 {
		fb = quant.F16
	}
	return fb, nil
}
