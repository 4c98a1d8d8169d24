package serve_test

import (
	"bytes"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/serve"
	"github.com/flowinfer/flowinfer/stages"
)

// TestRequestAllocBound sends hostile bodies of about 1 MiB (the body
// limit here) to every generation API and checks the server allocates at
// most 8 MiB + 24 times the body for each (measured: at most 20 MiB, for
// tokenizing a 1 MiB prompt; a body of 350,000 empty objects took 98 MiB
// before MaxJSONObjects), and answers with a 4xx, never a 5xx.
func TestRequestAllocBound(t *testing.T) {
	const limit = 1 << 20
	ts := start(t, serve.Config{MaxBodyBytes: limit}, stages.Config{})
	fill := func(prefix, unit, suffix string) string {
		n := (limit - len(prefix) - len(suffix) - 64) / len(unit)
		return prefix + strings.Repeat(unit, n) + suffix
	}
	bodies := map[string]string{
		"deep-arrays":   fill(`{"model":"stories260K","messages":`, "[", ""),
		"deep-objects":  fill(`{"model":"stories260K","messages":`, `{"a":`, ""),
		"empty-objects": strings.TrimSuffix(fill(`{"model":"stories260K","messages":[`, "{},", ""), ",") + "]}",
		"numbers":       strings.TrimSuffix(fill(`{"model":"stories260K","stop":[`, "1e999999,", ""), ",") + "]}",
		"escapes":       fill(`{"model":"stories260K","prompt":"`, `\u00e9`, `"}`),
		"many-keys":     strings.TrimSuffix(fill(`{"model":"stories260K",`, `"x":0,`, ""), ",") + "}",
		"short-strings": strings.TrimSuffix(fill(`{"model":"stories260K","stop":[`, `"a",`, ""), ",") + "]}",
	}
	for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages", "/api/chat", "/api/generate"} {
		for name, body := range bodies {
			t.Run(path+"/"+name, func(t *testing.T) {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				resp, err := http.Post(ts.url+path, "application/json", bytes.NewReader([]byte(body)))
				if err != nil {
					t.Fatal(err)
				}
				data, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				runtime.ReadMemStats(&after)
				got := after.TotalAlloc - before.TotalAlloc
				if resp.StatusCode >= 500 {
					t.Errorf("status %d: %.200s", resp.StatusCode, data)
				}
				if got > 8<<20+24*uint64(len(body)) {
					t.Errorf("%d-byte body: allocated %d MiB", len(body), got>>20)
				}
				t.Logf("status %d, %d KiB body, %d MiB allocated: %.100s", resp.StatusCode, len(body)>>10, got>>20, data)
			})
		}
	}
}
