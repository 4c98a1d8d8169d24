package serve_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/serve"
	"github.com/flowinfer/flowinfer/stages"
)

// documented are the request fields each API documents (top level; for
// Ollama also "options"), as of November 2026: OpenAI's create chat
// completion, create completion, create response and create embeddings, Anthropic's
// create message, Ollama's /api/chat, /api/generate, /api/embed, /api/show
// and its model options.
var documented = map[string][]string{
	"/v1/chat/completions": {"messages", "model", "audio", "frequency_penalty", "function_call", "functions", "logit_bias",
		"logprobs", "max_completion_tokens", "max_tokens", "metadata", "modalities", "n", "parallel_tool_calls", "prediction",
		"presence_penalty", "prompt_cache_key", "prompt_cache_retention", "reasoning_effort", "response_format", "safety_identifier", "seed",
		"service_tier", "stop", "store", "stream", "stream_options", "temperature", "tool_choice", "tools", "top_logprobs",
		"top_p", "user", "verbosity", "web_search_options"},
	"/v1/completions": {"model", "prompt", "best_of", "echo", "frequency_penalty", "logit_bias", "logprobs", "max_tokens",
		"n", "presence_penalty", "seed", "stop", "stream", "stream_options", "suffix", "temperature", "top_p", "user"},
	"/v1/responses": {"background", "conversation", "include", "input", "instructions", "max_output_tokens", "max_tool_calls",
		"metadata", "model", "parallel_tool_calls", "previous_response_id", "prompt", "prompt_cache_key", "prompt_cache_retention",
		"reasoning", "safety_identifier", "service_tier", "store", "stream", "stream_options", "temperature", "text", "tool_choice",
		"tools", "top_logprobs", "top_p", "truncation", "user"},
	"/v1/messages": {"model", "messages", "max_tokens", "container", "context_management", "mcp_servers", "metadata",
		"service_tier", "stop_sequences", "stream", "system", "temperature", "thinking", "tool_choice", "tools", "top_k", "top_p"},
	"/api/chat":      {"model", "messages", "tools", "think", "format", "options", "stream", "keep_alive"},
	"/api/generate":  {"model", "prompt", "suffix", "images", "think", "format", "options", "system", "template", "stream", "raw", "keep_alive", "context"},
	"/v1/embeddings": {"input", "model", "dimensions", "encoding_format", "user"},
	"/api/embed":     {"model", "input", "truncate", "options", "keep_alive", "dimensions"},
	"/api/show":      {"model", "verbose"},
	"options": {"num_keep", "seed", "num_predict", "top_k", "top_p", "min_p", "typical_p", "repeat_last_n", "temperature",
		"repeat_penalty", "presence_penalty", "frequency_penalty", "penalize_newline", "stop", "numa", "num_ctx", "num_batch",
		"num_gpu", "main_gpu", "use_mmap", "num_thread", "mirostat", "mirostat_tau", "mirostat_eta", "tfs_z", "low_vram",
		"use_mlock", "vocab_only", "f16_kv", "logits_all"},
}

// probes are values of the fields a request struct does not decode, with
// the answer each gets: 400 naming the field (the value asks for something
// flowinfer does not do) or 200 (accepted: nothing to do, or a neutral
// value).
var probes = []struct {
	field, value string
	status       int
	only         string // the one endpoint the probe applies to, if any
}{
	{"audio", `{"voice":"alloy","format":"wav"}`, 400, ""},
	{"modalities", `["text","audio"]`, 400, ""},
	{"modalities", `["text"]`, 200, ""},
	{"prediction", `{"type":"content","content":"x"}`, 400, ""},
	{"functions", `[{"name":"f"}]`, 400, ""},
	{"function_call", `{"name":"f"}`, 400, ""},
	{"response_format", `{"type":"json_object"}`, 400, ""},
	{"response_format", `{"type":"text"}`, 200, ""},
	{"verbosity", `"low"`, 400, ""},
	{"web_search_options", `{}`, 200, ""},
	{"web_search_options", `{"search_context_size":"low"}`, 400, ""},
	{"store", `true`, 400, ""},
	{"store", `false`, 200, ""},
	{"metadata", `{"k":"v"}`, 200, ""},
	{"user", `"u1"`, 200, ""},
	{"safety_identifier", `"s"`, 200, ""},
	{"service_tier", `"auto"`, 200, ""},
	{"prompt_cache_key", `"k"`, 200, ""},
	{"prompt_cache_retention", `"24h"`, 200, ""},
	{"previous_response_id", `"resp_1"`, 400, ""},
	{"conversation", `"conv_1"`, 400, ""},
	{"background", `true`, 400, ""},
	{"background", `false`, 200, ""},
	{"include", `["message.output_text.logprobs"]`, 400, ""},
	{"include", `[]`, 200, ""},
	{"max_tool_calls", `3`, 400, ""},
	{"prompt", `{"id":"pmpt_1"}`, 400, "/v1/responses"},
	{"top_logprobs", `3`, 400, "/v1/responses"},
	{"n", `2`, 400, "/v1/responses"},
	{"n", `1`, 200, "/v1/responses"},
	{"max_tokens", `5`, 400, "/v1/responses"},
	{"stop", `["x"]`, 400, "/v1/responses"},
	{"logprobs", `true`, 400, "/v1/responses"},
	{"truncation", `"auto"`, 400, ""},
	{"truncation", `"disabled"`, 200, ""},
	{"stream_options", `{"include_obfuscation":false}`, 200, ""},
	{"best_of", `3`, 400, ""},
	{"best_of", `1`, 200, ""},
	{"container", `"c1"`, 400, ""},
	{"context_management", `{"edits":[]}`, 400, ""},
	{"mcp_servers", `[{"type":"url","url":"http://x","name":"m"}]`, 400, ""},
	{"template", `"{{ .Prompt }}"`, 400, ""},
	{"context", `[1,2,3]`, 400, ""},
	{"typical_p", `0.5`, 400, ""},
	{"typical_p", `1`, 200, ""},
	{"tfs_z", `0.9`, 400, ""},
	{"mirostat", `2`, 400, ""},
	{"mirostat", `0`, 200, ""},
	{"mirostat_tau", `5`, 200, ""},
	{"mirostat_eta", `0.1`, 200, ""},
	{"penalize_newline", `true`, 400, ""},
	{"num_keep", `4`, 200, ""},
	{"num_batch", `64`, 200, ""},
	{"num_thread", `2`, 200, ""},
	{"num_gpu", `0`, 200, ""},
	{"main_gpu", `0`, 200, ""},
	{"low_vram", `true`, 200, ""},
	{"use_mmap", `true`, 200, ""},
	{"use_mlock", `false`, 200, ""},
	{"numa", `false`, 200, ""},
	{"vocab_only", `false`, 200, ""},
	{"f16_kv", `true`, 200, ""},
	{"logits_all", `false`, 200, ""},
	{"num_ctx", `64`, 200, ""},
	{"num_ctx", `100000`, 400, ""},
}

// bases are a valid request per endpoint, to which a probe's field is added.
var bases = map[string]string{
	"/v1/chat/completions": `{"messages":[{"role":"user","content":"Once"}],"max_tokens":2`,
	"/v1/completions":      `{"prompt":"Once","max_tokens":2`,
	"/v1/responses":        `{"input":"Once","max_output_tokens":2`,
	"/v1/messages":         `{"model":"stories260K","max_tokens":2,"messages":[{"role":"user","content":"Once"}]`,
	"/api/chat":            `{"model":"stories260K","stream":false,"messages":[{"role":"user","content":"Once"}],"options":{"num_predict":2}`,
	"/api/generate":        `{"model":"stories260K","stream":false,"prompt":"Once","options":{"num_predict":2}`,
	"/v1/embeddings":       `{"input":"Once"`,
	"/api/embed":           `{"model":"stories260K","input":"Once","options":{"temperature":0}`,
	"/api/show":            `{"model":"stories260K"`,
}

// TestDocumentedFields: every field an API documents is either decoded
// (and tested with the endpoint) or covered by a rule; every rule's field
// is probed: a value flowinfer cannot honour is a 400 in the API's shape
// naming the field, an accepted value or a neutral one is a 200. A field
// no API documents is ignored.
func TestDocumentedFields(t *testing.T) {
	ts := start(t, serve.Config{}, stages.Config{NCtx: 128})
	probed := map[string]bool{}
	for _, p := range probes {
		probed[p.field] = true
	}
	for path, fields := range documented {
		decoded, ruled := serve.DecodedFields(path)
		for _, f := range fields {
			if !decoded[f] && !ruled[f] {
				t.Errorf("%s: documented field %q is neither decoded nor covered by a rule: it would be dropped silently", path, f)
			}
			if ruled[f] && !probed[f] {
				t.Errorf("%s: field %q has a rule and no probe", path, f)
			}
		}
		if path == "options" {
			continue
		}
		for _, p := range probes {
			if p.only != "" && p.only != path {
				continue
			}
			var body string
			switch {
			case ruled[p.field]:
				body = bases[path] + `,"` + p.field + `":` + p.value + `}`
			case strings.HasPrefix(path, "/api/") && strings.Contains(bases[path], `"options":{`):
				if _, isOpt := serve.DecodedFields("options"); !isOpt[p.field] && p.field != "num_ctx" {
					continue
				}
				body = strings.Replace(bases[path], `"options":{`, `"options":{"`+p.field+`":`+p.value+`,`, 1) + `}`
			default:
				continue
			}
			r := ts.post(t, path, body)
			if r.status != p.status {
				t.Errorf("%s %s=%s: status %d, want %d: %s", path, p.field, p.value, r.status, p.status, r.body)
				continue
			}
			if p.status == 400 && !strings.Contains(string(r.body), p.field) {
				t.Errorf("%s %s=%s: the error does not name the field: %s", path, p.field, p.value, r.body)
			}
			var m map[string]any
			if json.Unmarshal(r.body, &m) != nil {
				t.Errorf("%s %s: not JSON: %s", path, p.field, r.body)
			}
		}
	}
	// undocumented fields are ignored
	if r := ts.post(t, "/v1/chat/completions", bases["/v1/chat/completions"]+`,"x_vendor_extension":{"a":1}}`); r.status != 200 {
		t.Errorf("undocumented field: %d %s", r.status, r.body)
	}
}
