// This file holds what each endpoint does with the request fields its API
// documents but flowinfer does not decode: a field whose absence of effect
// is right for a local server is accepted (with the reason written down);
// any other is refused with a 400 naming it unless its value asks for
// nothing (null, false, an empty list, "none", ...). Fields no API
// documents are ignored, as OpenAI-compatible servers do, and logged at
// debug level. TestDocumentedFields walks every documented field.

package serve

import (
	"bytes"
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"sync"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"
)

// fieldRule is one documented field that the request struct does not
// decode.
type fieldRule struct {
	// accept, when set, is why the field is accepted whatever its value.
	accept string
	// neutral reports the values that ask for nothing; any other value is
	// refused with refuse as the message. nil: only an absent field, null,
	// false, 0, "", [] or {}.
	neutral func(json.RawMessage) bool
	refuse  string
}

// accepted returns a rule that accepts the field.
func accepted(why string) fieldRule { return fieldRule{accept: why} }

// refused returns a rule that refuses every value but the empty ones and
// those in also (compared as compact JSON).
func refused(msg string, also ...string) fieldRule {
	return fieldRule{refuse: msg, neutral: func(raw json.RawMessage) bool {
		if empty(raw) {
			return true
		}
		var b bytes.Buffer
		if json.Compact(&b, raw) != nil {
			return false
		}
		for _, a := range also {
			if b.String() == a {
				return true
			}
		}
		return false
	}}
}

// empty reports JSON that asks for nothing: null, false, 0, "", [] or {}.
func empty(raw json.RawMessage) bool {
	switch string(bytes.TrimSpace(raw)) {
	case "", "null", "false", "0", `""`, "[]", "{}":
		return true
	}
	return false
}

const (
	noFunctions = "the deprecated functions API is not supported: send tools and tool_choice"
	noAudio     = "flowinfer generates text only"
	localServer = "a local server has no accounts, storage or tiers: nothing to do"
)

// oaiChatFields: OpenAI's create chat completion request.
var oaiChatFields = map[string]fieldRule{
	"audio":                  refused(noAudio),
	"modalities":             refused(noAudio, `["text"]`),
	"prediction":             refused("predicted outputs are not implemented"),
	"functions":              refused(noFunctions),
	"function_call":          refused(noFunctions, `"none"`, `"auto"`),
	"verbosity":              refused("verbosity control is not implemented", `"medium"`),
	"web_search_options":     refused("web search is not available"),
	"store":                  refused("stored completions are not available"),
	"metadata":               accepted(localServer),
	"user":                   accepted(localServer),
	"safety_identifier":      accepted(localServer),
	"service_tier":           accepted(localServer),
	"prompt_cache_key":       accepted("prefixes are cached automatically"),
	"prompt_cache_retention": accepted("prefixes are cached automatically"),
}

// oaiCompletionFields: OpenAI's (legacy) create completion request.
var oaiCompletionFields = map[string]fieldRule{
	"best_of": refused("best_of is not implemented", "1"),
	"user":    accepted(localServer),
}

// antFields: Anthropic's create message request (also count_tokens).
var antFields = map[string]fieldRule{
	"container":          refused("containers are not available"),
	"context_management": refused("context management is not implemented"),
	"mcp_servers":        refused("MCP servers are not available"),
	"metadata":           accepted(localServer),
	"service_tier":       accepted(localServer),
}

// ollamaChatFields and ollamaGenerateFields: Ollama's /api/chat and
// /api/generate.
var (
	ollamaChatFields     = map[string]fieldRule{}
	ollamaGenerateFields = map[string]fieldRule{
		"template": refused("a request template is not supported: the model's chat template is used"),
		"context":  refused("the context parameter (deprecated) is not supported: send the conversation to /api/chat"),
	}
	// ollamaOptionFields: the "options" object. Resource hints are the
	// server's flags' business, as with a model loaded before the request.
	ollamaOptionFields = map[string]fieldRule{
		"typical_p":        refused("typical_p is not implemented", "1"),
		"tfs_z":            refused("tfs_z is not implemented", "1"),
		"mirostat":         refused("mirostat is not implemented"),
		"mirostat_tau":     accepted("only matters with mirostat, which is refused"),
		"mirostat_eta":     accepted("only matters with mirostat, which is refused"),
		"penalize_newline": refused("penalize_newline is not implemented"),
		"num_keep":         accepted("the context is never shifted: a prompt that does not fit is an error"),
		"num_batch":        accepted("resource setting: the server's --batch-size decides"),
		"num_thread":       accepted("resource setting: the server's --threads decides"),
		"num_gpu":          accepted("resource setting: this build computes on the CPU"),
		"main_gpu":         accepted("resource setting: this build computes on the CPU"),
		"low_vram":         accepted("resource setting: this build computes on the CPU"),
		"use_mmap":         accepted("resource setting: the server's --io-engine decides"),
		"use_mlock":        accepted("resource setting: the server's --mlock decides"),
		"numa":             accepted("resource setting"),
		"vocab_only":       accepted("resource setting"),
		"f16_kv":           accepted("resource setting: the server's -ctk/-ctv decide"),
		"logits_all":       accepted("resource setting"),
	}
)

// decodeRequest decodes the body into v (a pointer to a request struct)
// and applies rules to the documented fields v does not decode; for a
// request with Ollama's "options" object (withOptions), also
// ollamaOptionFields to the fields of the options.
func (s *Server) decodeRequest(ctx *fasthttp.RequestCtx, v any, rules map[string]fieldRule) *apiError {
	if e := decode(ctx, v); e != nil {
		return e
	}
	if e := s.checkFields(ctx.PostBody(), v, rules, ""); e != nil {
		return e
	}
	if _, ok := v.(withOptions); !ok {
		return nil
	}
	var o struct {
		Options json.RawMessage `json:"options"`
	}
	if json.Unmarshal(ctx.PostBody(), &o) != nil || isNull(o.Options) {
		return nil
	}
	return s.checkFields(o.Options, &ollamaOptions{}, ollamaOptionFields, "options.")
}

// withOptions is a request that decodes Ollama's "options" object
// (ollamaOptions), whose documented fields have rules of their own.
type withOptions interface{ takesOptions() }

func (*ollamaCommon) takesOptions()       {}
func (*ollamaEmbedRequest) takesOptions() {}

// checkFields applies rules to the fields of the JSON object body that v
// (a request struct) does not decode.
func (s *Server) checkFields(body []byte, v any, rules map[string]fieldRule, prefix string) *apiError {
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return nil // decode already accepted it: not an object of fields
	}
	known := jsonFields(reflect.TypeOf(v))
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	sort.Strings(names) // the first refused field by name, deterministically
	for _, name := range names {
		if known[name] {
			continue
		}
		r, ok := rules[name]
		switch {
		case !ok:
			s.cfg.Log.Debug("ignoring a request field no API documents", zap.String("field", prefix+name))
		case r.accept != "":
		case r.neutral != nil && !r.neutral(fields[name]), r.neutral == nil && !empty(fields[name]):
			return badRequest(prefix+name, "%s%s: %s", prefix, name, r.refuse)
		}
	}
	return nil
}

var fieldCache sync.Map // reflect.Type -> map[string]bool

// jsonFields returns the JSON names a struct type decodes, embedded
// structs included.
func jsonFields(t reflect.Type) map[string]bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]bool)
	}
	m := map[string]bool{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case f.Anonymous && name == "":
			for k := range jsonFields(f.Type) {
				m[k] = true
			}
		case name != "" && name != "-":
			m[name] = true
		}
	}
	fieldCache.Store(t, m)
	return m
}
