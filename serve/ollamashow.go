// This file holds Ollama's model routes: /api/show (the model's details,
// template, default parameters and GGUF metadata) and /api/ps (the loaded
// model), so that Ollama clients can list and inspect the model. The
// template is the GGUF's Jinja chat template (Ollama shows its own Go
// template), or the ChatML template this server uses when the GGUF has
// none; the modelfile is generated from what the server runs with. Digests
// are empty: the server does not hash the file.

package serve

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/flowinfer/flowinfer/io/gguf"
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

func (s *Server) ollamaDetails(b *Backend) ollamaDetails {
	arch := b.Bundle.Model.Arch
	params, quant := weightFacts(b)
	return ollamaDetails{Format: "gguf", Family: arch, Families: []string{arch}, ParameterSize: paramSize(params), QuantizationLevel: quant}
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
	b := s.ready(ctx, dialectOllama)
	if b == nil {
		return
	}
	var req ollamaShowRequest
	if e := s.decodeRequest(ctx, &req, ollamaShowFields); e != nil {
		e.write(ctx, dialectOllama)
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
	f := b.Bundle.File
	template, _ := f.GetString("tokenizer.chat_template")
	if template == "" && b.Bundle.Template != nil {
		template = b.Bundle.Template.Source() // the ChatML this server uses
	}
	license, _ := f.GetString("general.license")
	params := s.ollamaParameters(b)
	resp := ollamaShowResponse{
		License:    license,
		Modelfile:  s.modelfile(b, template, license, params),
		Parameters: formatParameters(params),
		Template:   template,
		Details:    s.ollamaDetails(b),
		ModelInfo:  modelInfo(b, req.Verbose),
		ModifiedAt: ollamaTime(modTime(b.Path)),
	}
	resp.Capabilities = []string{"completion"}
	if _, e := s.pooling(b); e == nil {
		resp.Capabilities = append(resp.Capabilities, "embedding")
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

// modelInfo is the GGUF metadata as Ollama's model_info: every key but the
// chat template (shown as the template), arrays longer than maxInfoArray
// null unless verbose, and general.parameter_count counted from the
// tensors when the file has none.
func modelInfo(b *Backend, verbose bool) map[string]any {
	f := b.Bundle.File
	info := make(map[string]any, len(f.KVs)+1)
	for _, kv := range f.KVs {
		if kv.Key == "tokenizer.chat_template" {
			continue
		}
		info[kv.Key] = infoValue(kv.Value, verbose)
	}
	if _, ok := info["general.parameter_count"]; !ok {
		n, _ := weightFacts(b)
		info["general.parameter_count"] = n
	}
	return info
}

// infoValue converts a metadata value for JSON.
func infoValue(v gguf.Value, verbose bool) any {
	switch v.Type() {
	case gguf.TypeString:
		s, _ := v.Str()
		return s
	case gguf.TypeBool:
		x, _ := v.Bool()
		return x
	case gguf.TypeFloat32:
		x, _ := v.Float()
		return finite(float32(x))
	case gguf.TypeFloat64:
		x, _ := v.Float()
		return finite(x)
	case gguf.TypeArray:
		if !verbose && v.Len() > maxInfoArray {
			return nil
		}
		vals, _ := v.Array()
		out := make([]any, len(vals))
		for i, e := range vals {
			out[i] = infoValue(e, verbose)
		}
		return out
	}
	if i, ok := v.Int(); ok {
		return i
	}
	if u, ok := v.Uint(); ok {
		return u
	}
	return nil
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
	b := s.ready(ctx, dialectOllama)
	if b == nil {
		return
	}
	type entry struct {
		Name          string        `json:"name"`
		Model         string        `json:"model"`
		Size          int64         `json:"size"`
		Digest        string        `json:"digest"`
		Details       ollamaDetails `json:"details"`
		ExpiresAt     string        `json:"expires_at"`
		SizeVRAM      int64         `json:"size_vram"`
		ContextLength int           `json:"context_length"`
	}
	cfg := b.Engine.Config()
	kvBytes := b.Engine.KVBytes()
	name := s.reportedName(b)
	writeJSON(ctx, struct {
		Models []entry `json:"models"`
	}{[]entry{{Name: name, Model: name, Size: b.Size + kvBytes, Details: s.ollamaDetails(b),
		ExpiresAt: ollamaTime(time.Now().Add(math.MaxInt64)), ContextLength: cfg.NCtx}}})
}
