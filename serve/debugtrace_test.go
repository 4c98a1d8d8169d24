package serve_test

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/flowinfer/flowinfer/serve"
	"github.com/flowinfer/flowinfer/stages"
)

// TestDebugTrace: GET /debug/trace?seconds=N captures the live traffic of
// that window as Chrome trace JSON with the stage tracks.
func TestDebugTrace(t *testing.T) {
	ts := start(t, serve.Config{}, stages.Config{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 3 {
			ts.post(t, "/v1/chat/completions", map[string]any{"messages": chatMsgs, "max_tokens": 8, "stream": true})
		}
	}()
	r := ts.do(t, "GET", "/debug/trace?seconds=0.5", nil)
	wg.Wait()
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var tr struct {
		TraceEvents []struct {
			Name string         `json:"name"`
			Ph   string         `json:"ph"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(r.body, &tr); err != nil {
		t.Fatalf("not JSON: %v\n%.300s", err, r.body)
	}
	tracks := map[string]bool{}
	spans := 0
	for _, e := range tr.TraceEvents {
		if e.Ph == "M" && e.Name == "thread_name" {
			tracks[e.Args["name"].(string)] = true
		}
		if e.Ph == "X" {
			spans++
		}
	}
	for _, s := range []string{"scheduler", "compute", "sampler", "streamer"} {
		if !tracks[s] {
			t.Errorf("no %s track in %v", s, tracks)
		}
	}
	if spans == 0 {
		t.Error("no spans in the window")
	}
	if r := ts.do(t, "GET", "/debug/trace?seconds=-1", nil); r.status != 400 || !strings.Contains(string(r.body), "seconds") {
		t.Errorf("bad seconds: %d %s", r.status, r.body)
	}
}
