package serve_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/stages"
)

// get returns a GET's status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestModelFileChanged: a model whose experts stream from a file that is
// then truncated answers each API with a 503 naming the model by its
// alias, never the server's path or byte offsets; /health reports the
// model failed (503, JSON naming the alias and the reason) from
// SetModelFailed until it is cleared.
func TestModelFileChanged(t *testing.T) {
	src := filepath.Join(golden.Dir(t), "models", "synth-qwen3moe-Q8_0.gguf")
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "secret-dir", "m.gguf")
	os.MkdirAll(filepath.Dir(path), 0o755)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	be := cpu.NewBackend(2, nil)
	t.Cleanup(be.Close)
	b, err := model.Open(path, be.Supports, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	probe, err := stages.NewWeightPath(b.Model, path, be, stages.WeightConfig{PlanOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	p := probe.Plan()
	wp, err := stages.NewWeightPath(b.Model, path, be, stages.WeightConfig{Budget: p.Resident + p.Staging + int64(b.Model.NExpertUsed)*p.SlotBytes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wp.Close() })
	if _, err := be.PackModel(b.Model, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := wp.OwnResident(func(w *model.Weight) bool {
		d := be.MatMulBytes(w)
		return len(d) > 0 && &d[0] != &w.Data[0]
	}); err != nil {
		t.Fatal(err)
	}
	url, srv := serveOn(t, b, be, wp, path, 2, "tiny-moe")
	if got := complete(t, url, "Once upon a time"); got == "" {
		t.Fatal("no text before the change")
	}
	if err := os.Truncate(path, int64(b.File.DataOffset)); err != nil {
		t.Fatal(err)
	}
	noSecrets := func(what, body string) {
		t.Helper()
		if !strings.Contains(body, "tiny-moe") {
			t.Errorf("%s: %s does not name the model's alias", what, body)
		}
		for _, leak := range []string{"secret-dir", path, "range [", "offset"} {
			if strings.Contains(body, leak) {
				t.Errorf("%s: %s shows %q", what, body, leak)
			}
		}
	}
	for _, c := range []struct{ api, path, body string }{
		{"openai", "/v1/completions", `{"prompt":"Once upon a time","max_tokens":8}`},
		{"openai", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":8,"stream":true}`},
		{"anthropic", "/v1/messages", `{"model":"tiny-moe","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`},
		{"ollama", "/api/generate", `{"model":"tiny-moe","prompt":"hi","stream":false}`},
	} {
		resp, err := http.Post(url+c.path, "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(c.body, `"stream":true`) && resp.StatusCode != 503 {
			t.Errorf("%s after the file changed: %d %s, want 503", c.path, resp.StatusCode, raw)
		}
		noSecrets(c.path, string(raw))
	}
	if st, body := get(t, url+"/health"); st != 200 {
		t.Errorf("/health before SetModelFailed: %d %s", st, body)
	}
	srv.SetModelFailed("its file changed since it was loaded")
	st, body := get(t, url+"/health")
	var h struct{ Status, Model, Reason string }
	if err := json.Unmarshal([]byte(body), &h); st != 503 || err != nil || h.Model != "tiny-moe" || !strings.Contains(h.Reason, "file changed") {
		t.Errorf("/health of a failed model: %d %s", st, body)
	}
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x","max_tokens":2}`))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("request to a failed model: %d %s", resp.StatusCode, raw)
	}
	noSecrets("request to a failed model", string(raw))
	srv.SetModelFailed("")
	if st, body := get(t, url+"/health"); st != 200 || body != `{"status":"ok"}` {
		t.Errorf("/health after recovery: %d %s", st, body)
	}
}
