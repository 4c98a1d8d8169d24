// This file holds Ollama's model routes: /api/tags (the models there
// are), /api/show (the model's details, template, default parameters and
// GGUF metadata) and /api/ps (the loaded model), so that Ollama clients
// can list and inspect the model. What the file says about itself comes
// from model.Info. The template is the GGUF's Jinja chat template (Ollama
// shows its own Go template), or the ChatML template this server uses
// when the GGUF has none; the modelfile is generated from what the server
// runs with. Digests are empty: the server does not hash the file.

package serve

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/model/toolcall"
)

// ollamaDetails is the "details" object of /api/tags, /api/show and
// /api/ps.
type ollamaDetails struct {
	ParentModel       string   `json:"parent_model"`
	Format            string   `json:"format"`
	Family            string   `json:"family"`
	Families          []string `json:"families"`
	ParameterSize     string   `json:"parameter_size"`
	QuantizationLevel string   `json:"quantization_level"`
}

// ollamaDetails fills the details from in (any maxArray).
func (s *Server) ollamaDetails(b *Backend, in model.Info) ollamaDetails {
	arch := b.Bundle.Model.Arch
	return ollamaDetails{Format: "gguf", Family: arch, Families: []string{arch}, ParameterSize: paramSize(in.Params), QuantizationLevel: strings.ToUpper(in.WeightType)}
}

// paramSize formats a parameter count as Ollama does ("260K", "1.2B").
func paramSize(n uint64) string {
	switch {
	case n >= 1e9:
		return strconv.FormatFloat(float64(n)/1e9, 'f', 1, 64) + "B"
	case n >= 1e6:
		return strconv.FormatFloat(float64(n)/1e6, 'f', 1, 64) + "M"
	case n >= 1e3:
		return strconv.FormatFloat(float64(n)/1e3, 'f', 0, 64) + "K"
	}
	return strconv.FormatUint(n, 10)
}

// ollamaModels answers a list of models (/api/tags, /api/ps): the loaded
// one, as entry renders it with the name the server reports and its
// details.
func (s *Server) ollamaModels(ctx *fasthttp.RequestCtx, entry func(b *Backend, name string, d ollamaDetails) any) {
	b := s.ready(ctx, dialectOllama)
	if b == nil {
		return
	}
	writeJSON(ctx, struct {
		Models []any `json:"models"`
	}{[]any{entry(b, s.reportedName(b), s.ollamaDetails(b, b.Bundle.Info(0)))}})
}

// ollamaTagsEntry is a model of /api/tags.
type ollamaTagsEntry struct {
	Name       string        `json:"name"`
	Model      string        `json:"model"`
	ModifiedAt string        `json:"modified_at"`
	Size       int64         `json:"size"`
	Digest     string        `json:"digest"`
	Details    ollamaDetails `json:"details"`
}

// handleOllamaTags answers /api/tags: the model file.
func (s *Server) handleOllamaTags(ctx *fasthttp.RequestCtx) {
	s.ollamaModels(ctx, func(b *Backend, name string, d ollamaDetails) any {
		return ollamaTagsEntry{Name: name, Model: name, ModifiedAt: ollamaTime(modTime(b.Path)), Size: b.Size, Details: d}
	})
}

// maxInfoArray is the longest metadata array /api/show lists unless
// verbose; longer ones (the tokenizer's tokens, merges) are null, as
// Ollama shows them.
const maxInfoArray = 1024

// ollamaShowFields: /api/show decodes every documented field.
var ollamaShowFields = map[string]fieldRule{}

type ollamaShowRequest struct {
	Model   string `json:"model"`
	Name    string `json:"name"` // older clients
	Verbose bool   `json:"verbose"`
	System  string `json:"system"`
}

type ollamaShowResponse struct {
	License      string         `json:"license,omitempty"`
	Modelfile    string         `json:"modelfile"`
	Parameters   string         `json:"parameters,omitempty"`
	Template     string         `json:"template"`
	Details      ollamaDetails  `json:"details"`
	ModelInfo    map[string]any `json:"model_info"`
	Capabilities []string       `json:"capabilities"`
	ModifiedAt   string         `json:"modified_at"`
}

func (s *Server) handleOllamaShow(ctx *fasthttp.RequestCtx) {
	var req ollamaShowRequest
	b := s.receive(ctx, dialectOllama, &req, ollamaShowFields)
	if b == nil {
		return
	}
	name := req.Model
	if name == "" {
		name = req.Name
	}
	if name == "" {
		badRequest("model", "model is required").write(ctx, dialectOllama)
		return
	}
	if req.System != "" {
		badRequest("system", "system is not supported").write(ctx, dialectOllama)
		return
	}
	if _, e := s.modelName(b, name); e != nil {
		e.message = fmt.Sprintf("model '%s' not found", name)
		e.write(ctx, dialectOllama)
		return
	}
	in := b.Bundle.Info(infoArrays(req.Verbose))
	template := in.Template
	if template == "" && b.Bundle.Template != nil {
		template = b.Bundle.Template.Source() // the ChatML this server uses
	}
	params := s.ollamaParameters(b)
	resp := ollamaShowResponse{
		License:    in.License,
		Modelfile:  s.modelfile(b, template, in.License, params),
		Parameters: formatParameters(params),
		Template:   template,
		Details:    s.ollamaDetails(b, in),
		ModelInfo:  modelInfo(in),
		ModifiedAt: ollamaTime(modTime(b.Path)),
	}
	resp.Capabilities = []string{"completion"}
	if _, e := s.pooling(b); e == nil {
		resp.Capabilities = append(resp.Capabilities, "embedding")
	}
	if templateReasoning(b.Bundle.Template) != toolcall.NoReasoning {
		resp.Capabilities = append(resp.Capabilities, "thinking") // think works
	}
	writeJSON(ctx, resp)
}

// param is one Modelfile PARAMETER line.
type param struct {
	key string
	val string
}

// ollamaParameters are the server's defaults, as Ollama's parameters.
func (s *Server) ollamaParameters(b *Backend) []param {
	d := s.cfg.Defaults
	f := func(v float32) string { return strconv.FormatFloat(float64(v), 'g', -1, 32) }
	ps := []param{
		{"num_ctx", strconv.Itoa(b.Engine.Config().NCtx)},
		{"temperature", f(d.Temperature)},
		{"top_k", strconv.Itoa(d.TopK)},
		{"top_p", f(d.TopP)},
		{"min_p", f(d.MinP)},
		{"repeat_penalty", f(d.RepeatPenalty)},
		{"repeat_last_n", strconv.Itoa(d.RepeatLastN)},
	}
	if s.cfg.MaxTokens > 0 {
		ps = append(ps, param{"num_predict", strconv.Itoa(s.cfg.MaxTokens)})
	}
	stops := append([]string(nil), s.cfg.Stops...)
	if t := b.Bundle.Template; t != nil {
		stops = append(stops, t.StopStrings()...)
	}
	for _, st := range stops {
		ps = append(ps, param{"stop", strconv.Quote(st)})
	}
	return ps
}

// formatParameters lays parameters out as Ollama does: the key padded to
// 30 columns, then the value.
func formatParameters(ps []param) string {
	var sb strings.Builder
	for i, p := range ps {
		if i > 0 {
			sb.WriteByte('\n')
		}
		fmt.Fprintf(&sb, "%-30s %s", p.key, p.val)
	}
	return sb.String()
}

// modelfile generates a Modelfile for what the server runs.
func (s *Server) modelfile(b *Backend, template, license string, ps []param) string {
	var sb strings.Builder
	sb.WriteString("# Modelfile generated by flowinfer\n")
	fmt.Fprintf(&sb, "FROM %s\n", b.Path)
	if template != "" {
		fmt.Fprintf(&sb, "TEMPLATE \"\"\"%s\"\"\"\n", template)
	}
	for _, p := range ps {
		fmt.Fprintf(&sb, "PARAMETER %s %s\n", p.key, p.val)
	}
	if license != "" {
		fmt.Fprintf(&sb, "LICENSE \"\"\"%s\"\"\"\n", license)
	}
	return sb.String()
}

// infoArrays is the longest metadata array /api/show lists: maxInfoArray,
// or every one when verbose.
func infoArrays(verbose bool) int {
	if verbose {
		return -1
	}
	return maxInfoArray
}

// modelInfo is the GGUF metadata as Ollama's model_info: every key but the
// chat template (shown as the template), and general.parameter_count
// counted from the tensors when the file has none.
func modelInfo(in model.Info) map[string]any {
	info := make(map[string]any, len(in.Metadata)+1)
	for _, kv := range in.Metadata {
		if kv.Key == "tokenizer.chat_template" {
			continue
		}
		info[kv.Key] = jsonValue(kv.Value)
	}
	if _, ok := info["general.parameter_count"]; !ok {
		info["general.parameter_count"] = in.Params
	}
	return info
}

// jsonValue makes a metadata value (model.MetaValue) encodable: NaN and
// infinities, which JSON has no numbers for, become null, in arrays too.
func jsonValue(v any) any {
	switch x := v.(type) {
	case float32:
		return finite(x)
	case float64:
		return finite(x)
	case []any:
		for i := range x {
			x[i] = jsonValue(x[i])
		}
	}
	return v
}

// finite keeps a float JSON can encode; NaN and infinities become null.
func finite[F float32 | float64](x F) any {
	if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
		return nil
	}
	return x
}

func modTime(path string) time.Time {
	if st, err := os.Stat(path); err == nil {
		return st.ModTime()
	}
	return time.Time{}
}

// handleOllamaPs answers /api/ps: the one loaded model, which never
// unloads (as Ollama's keep_alive -1), in memory (size: the file and the
// KV cache), none of it on a GPU.
func (s *Server) handleOllamaPs(ctx *fasthttp.RequestCtx) {
	s.ollamaModels(ctx, func(b *Backend, name string, d ollamaDetails) any {
		return ollamaPsEntry{Name: name, Model: name, Size: b.Size + b.Engine.KVBytes(), Details: d,
			ExpiresAt: ollamaTime(time.Now().Add(math.MaxInt64)), ContextLength: b.Engine.Config().NCtx}
	})
}

// ollamaPsEntry is a model of /api/ps.
type ollamaPsEntry struct {
	Name          string        `json:"name"`
	Model         string        `json:"model"`
	Size          int64         `json:"size"`
	Digest        string        `json:"digest"`
	Details       ollamaDetails `json:"details"`
	ExpiresAt     string        `json:"expires_at"`
	SizeVRAM      int64         `json:"size_vram"`
	ContextLength int           `json:"context_length"`
}
