package serve_test

import (
	"strings"
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/serve"
	"github.com/flowinfer/flowinfer/stages"
)

// TestOllamaShow: /api/show answers in Ollama's shape from the GGUF's
// metadata, under "model" or the older "name"; an unknown model is 404.
func TestOllamaShow(t *testing.T) {
	ts := start(t, serve.Config{Aliases: []string{"stories"}, Stops: []string{"END"}}, stages.Config{NCtx: 128})
	for _, key := range []string{"model", "name"} {
		r := ts.post(t, "/api/show", map[string]any{key: "stories"})
		if r.status != 200 {
			t.Fatalf("%s: status %d: %s", key, r.status, r.body)
		}
		m := r.json(t)
		d := m["details"].(map[string]any)
		if d["format"] != "gguf" || d["family"] != "llama" || d["parameter_size"] == "" || d["quantization_level"] == "" || len(d["families"].([]any)) != 1 {
			t.Errorf("details %v", d)
		}
		info := m["model_info"].(map[string]any)
		if info["general.architecture"] != "llama" || num(info["llama.context_length"]) == 0 ||
			num(info["llama.embedding_length"]) != ts.bundle.Model.NEmbd || num(info["general.parameter_count"]) == 0 || num(info["llama.block_count"]) != ts.bundle.Model.NLayer {
			t.Errorf("model_info %v", info)
		}
		if _, ok := info["tokenizer.chat_template"]; ok {
			t.Error("model_info repeats the chat template")
		}
		if toks, ok := info["tokenizer.ggml.tokens"].([]any); !ok || len(toks) != ts.bundle.Model.NVocab {
			t.Errorf("tokenizer.ggml.tokens (%d, at most 1024): %T", ts.bundle.Model.NVocab, info["tokenizer.ggml.tokens"])
		}
		caps := m["capabilities"].([]any)
		if len(caps) != 2 || caps[0] != "completion" || caps[1] != "embedding" {
			t.Errorf("capabilities %v", caps)
		}
		// no template in the GGUF: the ChatML the server uses
		if tpl := m["template"].(string); !strings.Contains(tpl, "<|im_start|>") {
			t.Errorf("template %q", tpl)
		}
		params := m["parameters"].(string)
		for _, want := range []string{"num_ctx                        128", "temperature                    0", `stop                           "END"`} {
			if !strings.Contains(params, want) {
				t.Errorf("parameters lack %q:\n%s", want, params)
			}
		}
		if mf := m["modelfile"].(string); !strings.Contains(mf, "FROM ") || !strings.Contains(mf, "PARAMETER num_ctx 128") || !strings.Contains(mf, `TEMPLATE """`) {
			t.Errorf("modelfile %q", mf)
		}
		if _, err := time.Parse(time.RFC3339Nano, m["modified_at"].(string)); err != nil {
			t.Errorf("modified_at: %v", err)
		}
	}
	r := ts.post(t, "/api/show", map[string]any{"model": "llama3"})
	if r.status != 404 || r.json(t)["error"] != "model 'llama3' not found" {
		t.Errorf("unknown model: %d %s", r.status, r.body)
	}
	r = ts.post(t, "/api/show", map[string]any{})
	if r.status != 400 || !strings.Contains(r.json(t)["error"].(string), "model is required") {
		t.Errorf("no model: %d %s", r.status, r.body)
	}
	if r := ts.do(t, "GET", "/api/show", nil); r.status != 405 {
		t.Errorf("GET /api/show: %d", r.status)
	}
}

// TestOllamaPs: /api/ps lists the loaded model with its context length.
func TestOllamaPs(t *testing.T) {
	ts := start(t, serve.Config{Aliases: []string{"stories"}}, stages.Config{NCtx: 128, NSeq: 2})
	r := ts.do(t, "GET", "/api/ps", nil)
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	ms := r.json(t)["models"].([]any)
	if len(ms) != 1 {
		t.Fatalf("models %v", ms)
	}
	m := ms[0].(map[string]any)
	tags := ts.do(t, "GET", "/api/tags", nil).json(t)
	if m["name"] != "stories" || m["model"] != "stories" || num(m["context_length"]) != 128 || num(m["size_vram"]) != 0 ||
		num(m["size"]) <= num(path(tags, "models.0.size")) {
		t.Errorf("entry %v", m)
	}
	if d := m["details"].(map[string]any); d["family"] != "llama" || d["format"] != "gguf" {
		t.Errorf("details %v", d)
	}
	exp, err := time.Parse(time.RFC3339Nano, m["expires_at"].(string))
	if err != nil || exp.Before(time.Now().AddDate(100, 0, 0)) {
		t.Errorf("expires_at %v (%v): the model never unloads", m["expires_at"], err)
	}
}
