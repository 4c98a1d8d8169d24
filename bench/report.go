package bench

// report.go: llama-bench's two output formats for throughput tests, the
// markdown table (model | size | params | backend | threads | test | t/s)
// and the JSON array with llama-bench's field names where they apply, and
// the model description llama-bench prints ("llama 1B Q4_K - Medium").

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/flowinfer/flowinfer/io/gguf"
)

// ModelInfo describes a model file as llama-bench does.
type ModelInfo struct {
	Filename string // as given on the command line
	Type     string // "<arch> <size> <file type>", e.g. "llama 1B Q4_K - Medium"
	Size     uint64 // bytes of all tensors
	NParams  uint64 // elements of all tensors
}

// DescribeModel returns the ModelInfo of a GGUF file.
func DescribeModel(filename string, f *gguf.File) ModelInfo {
	mi := ModelInfo{Filename: filename}
	for _, t := range f.Tensors {
		mi.Size += t.Size
		mi.NParams += t.Elements()
	}
	arch, _ := f.GetString("general.architecture")
	ft, ok := f.GetUint("general.file_type")
	ftName := "unknown, may not work"
	if ok {
		ftName = fileTypeName(ft)
	}
	mi.Type = fmt.Sprintf("%s %s %s", arch, sizeLabel(f, arch), ftName)
	return mi
}

// sizeLabel is llama.cpp's model type for the families flowinfer runs
// (src/models/<arch>.cpp), "?B" where llama.cpp has none.
func sizeLabel(f *gguf.File, arch string) string {
	u := func(k string) uint64 { v, _ := f.GetUint(arch + "." + k); return v }
	nl, embd := u("block_count"), u("embedding_length")
	switch arch {
	case "llama":
		switch nl {
		case 16, 22:
			return "1B"
		case 26, 28:
			return "3B"
		case 32:
			if nv, ok := f.GetUint("llama.vocab_size"); ok && nv < 40000 {
				return "7B"
			}
			return "8B"
		case 40:
			return "13B"
		case 80:
			return "70B"
		}
	case "qwen2":
		switch nl {
		case 24:
			if embd == 1024 {
				return "0.5B"
			}
			return "1B"
		case 28:
			if embd == 1536 {
				return "1.5B"
			}
			return "7B"
		}
	case "qwen3":
		switch nl {
		case 28:
			if embd == 1024 {
				return "0.6B"
			}
			return "1.7B"
		case 36:
			if embd == 2560 {
				return "4B"
			}
			return "8B"
		}
	case "gemma3":
		switch nl {
		case 18:
			return "270M"
		case 26:
			return "1B"
		case 32:
			return "8B"
		case 34:
			return "4B"
		case 48:
			return "12B"
		case 62:
			return "27B"
		}
	case "qwen3moe":
		switch nl {
		case 48:
			return "30B.A3B"
		case 94:
			return "235B.A22B"
		}
	case "gpt-oss":
		switch nl {
		case 24:
			return "20B"
		case 36:
			return "120B"
		}
	case "qwen35moe": // llama_model_qwen35moe::load_arch_hparams
		switch nl {
		case 40:
			return "35B.A3B"
		case 48:
			return "122B.A10B"
		case 60:
			return "397B.A17B"
		}
	case "qwen3next":
		if nl == 48 {
			return "80B.A3B"
		}
	case "mistral3":
		switch nl {
		case 26:
			return "3B"
		case 34:
			return "8B"
		case 40:
			return "14B"
		}
	}
	return "?B"
}

// fileTypeName is llama_ftype_name for general.file_type.
func fileTypeName(ft uint64) string {
	names := map[uint64]string{
		0: "all F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
		10: "Q2_K - Medium", 11: "Q3_K - Small", 12: "Q3_K - Medium", 13: "Q3_K - Large",
		14: "Q4_K - Small", 15: "Q4_K - Medium", 16: "Q5_K - Small", 17: "Q5_K - Medium",
		18: "Q6_K", 19: "IQ2_XXS - 2.0625 bpw", 20: "IQ2_XS - 2.3125 bpw", 21: "Q2_K - Small",
		22: "IQ3_XS - 3.3 bpw", 23: "IQ3_XXS - 3.0625 bpw", 24: "IQ1_S - 1.5625 bpw", 25: "IQ4_NL - 4.5 bpw",
		26: "IQ3_S - 3.4375 bpw", 27: "IQ3_S mix - 3.66 bpw", 28: "IQ2_S - 2.5 bpw", 29: "IQ2_M - 2.7 bpw",
		30: "IQ4_XS - 4.25 bpw", 31: "IQ1_M - 1.75 bpw", 32: "BF16", 38: "MXFP4 MoE",
	}
	if n, ok := names[ft]; ok {
		return n
	}
	return "unknown, may not work"
}

// Result is one test of one model on one engine configuration: a row of
// the table, an object of the JSON array.
type Result struct {
	Model   ModelInfo
	Backend string // "CPU"
	ISA     string // kernel path ("avx2", "go"), flowinfer's addition
	Threads int
	NBatch  int    // most tokens per Decode call (-b)
	NUBatch int    // tokens per forward step (min(-b, -p))
	TypeK   string // KV cache types ("f16")
	TypeV   string
	Build   string // flowinfer version
	CPUInfo string
	Test
}

// WriteMarkdown prints llama-bench's markdown table of results.
func WriteMarkdown(w io.Writer, rs []Result) error {
	cols := []struct {
		name  string
		width int // negative: left-aligned, as llama-bench's
		value func(r *Result) string
	}{
		{"model", -30, func(r *Result) string { return r.Model.Type }},
		{"size", 10, func(r *Result) string { return sizeString(r.Model.Size) }},
		{"params", 10, func(r *Result) string { return paramsString(r.Model.NParams) }},
		{"backend", -10, func(r *Result) string { return r.Backend }},
		{"threads", 7, func(r *Result) string { return fmt.Sprint(r.Threads) }},
	}
	// as llama-bench, the KV types are shown when one differs from f16
	for _, r := range rs {
		if r.TypeK != "f16" || r.TypeV != "f16" {
			cols = append(cols, []struct {
				name  string
				width int
				value func(r *Result) string
			}{
				{"type_k", 6, func(r *Result) string { return r.TypeK }},
				{"type_v", 6, func(r *Result) string { return r.TypeV }},
			}...)
			break
		}
	}
	cols = append(cols, []struct {
		name  string
		width int
		value func(r *Result) string
	}{
		{"test", 15, func(r *Result) string { return r.Name() }},
		{"t/s", 20, func(r *Result) string { return fmt.Sprintf("%.2f ± %.2f", r.AvgTS(), r.StddevTS()) }},
	}...)
	var b strings.Builder
	b.WriteString("|")
	for _, c := range cols {
		fmt.Fprintf(&b, " %*s |", c.width, c.name)
	}
	b.WriteString("\n|")
	for _, c := range cols {
		end := "-"
		if c.width > 0 {
			end = ":"
		}
		fmt.Fprintf(&b, " %s%s |", strings.Repeat("-", abs(c.width)-1), end)
	}
	b.WriteString("\n")
	for i := range rs {
		b.WriteString("|")
		for _, c := range cols {
			fmt.Fprintf(&b, " %*s |", c.width, c.value(&rs[i]))
		}
		b.WriteString("\n")
	}
	if len(rs) > 0 {
		fmt.Fprintf(&b, "\nbuild: flowinfer %s (%s kernels)\n", rs[0].Build, rs[0].ISA)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func sizeString(n uint64) string {
	if n < 1<<30 {
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
}

func paramsString(n uint64) string {
	if n < 1e9 {
		return fmt.Sprintf("%.2f M", float64(n)/1e6)
	}
	return fmt.Sprintf("%.2f B", float64(n)/1e9)
}

// jsonResult has llama-bench's JSON field names (those that apply to a
// CPU engine), plus flowinfer's isa.
type jsonResult struct {
	BuildCommit  string    `json:"build_commit"`
	CPUInfo      string    `json:"cpu_info"`
	GPUInfo      string    `json:"gpu_info"`
	Backends     string    `json:"backends"`
	ISA          string    `json:"isa"`
	ModelFile    string    `json:"model_filename"`
	ModelType    string    `json:"model_type"`
	ModelSize    uint64    `json:"model_size"`
	ModelNParams uint64    `json:"model_n_params"`
	NBatch       int       `json:"n_batch"`
	NUBatch      int       `json:"n_ubatch"`
	NThreads     int       `json:"n_threads"`
	TypeK        string    `json:"type_k"`
	TypeV        string    `json:"type_v"`
	NGPULayers   int       `json:"n_gpu_layers"`
	NPrompt      int       `json:"n_prompt"`
	NGen         int       `json:"n_gen"`
	NDepth       int       `json:"n_depth"`
	TestTime     string    `json:"test_time"`
	AvgNS        int64     `json:"avg_ns"`
	StddevNS     int64     `json:"stddev_ns"`
	AvgTS        float64   `json:"avg_ts"`
	StddevTS     float64   `json:"stddev_ts"`
	SamplesNS    []int64   `json:"samples_ns"`
	SamplesTS    []float64 `json:"samples_ts"`
}

// WriteJSON prints results as llama-bench -o json does: an array of
// objects.
func WriteJSON(w io.Writer, rs []Result) error {
	out := make([]jsonResult, len(rs))
	for i := range rs {
		r := &rs[i]
		out[i] = jsonResult{
			BuildCommit: r.Build, CPUInfo: r.CPUInfo, Backends: r.Backend, ISA: r.ISA,
			ModelFile: r.Model.Filename, ModelType: r.Model.Type, ModelSize: r.Model.Size, ModelNParams: r.Model.NParams,
			NBatch: r.NBatch, NUBatch: r.NUBatch, NThreads: r.Threads, TypeK: r.TypeK, TypeV: r.TypeV,
			NPrompt: r.NPrompt, NGen: r.NGen, NDepth: r.NDepth, TestTime: r.Time.Format("2006-01-02T15:04:05Z"),
			AvgNS: int64(r.AvgNS()), StddevNS: int64(r.StddevNS()), AvgTS: r.AvgTS(), StddevTS: r.StddevTS(),
			SamplesNS: r.SamplesNS, SamplesTS: r.TS(),
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// CPUName returns the first "model name" of /proc/cpuinfo (llama-bench's
// cpu_info), or "" where there is none.
func CPUName() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
