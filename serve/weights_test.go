package serve_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/serve"
	"github.com/flowinfer/flowinfer/stages"
)

// startMoE serves the golden qwen3moe model, with its experts streamed
// through an expert cache of budget bytes (0: resident, from the mapping).
func startMoE(t *testing.T, budget int64) (string, *stages.WeightPath) {
	t.Helper()
	path := filepath.Join(golden.Dir(t), "models", "synth-qwen3moe-Q8_0.gguf")
	be := cpu.NewBackend(2, nil)
	t.Cleanup(be.Close)
	b, err := model.Open(path, be.Supports, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	var wp *stages.WeightPath
	if budget > 0 {
		probe, err := stages.NewWeightPath(b.Model, path, be, stages.WeightConfig{})
		if err != nil {
			t.Fatal(err)
		}
		p := probe.Plan()
		probe.Close()
		wp, err = stages.NewWeightPath(b.Model, path, be, stages.WeightConfig{Budget: p.Resident + p.Staging + budget*p.SlotBytes, PrefetchDepth: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { wp.Close() })
	}
	be.PackModel(b.Model, wp == nil, nil)
	url, _ := serveOn(t, b, be, wp, path, 3)
	return url, wp
}

// serveOn runs an engine of nSeq sequences on b over wp (nil: every weight
// resident) and a server answering as aliases on a loopback port, both
// stopped at the test's end; it returns the server's URL and the server.
func serveOn(t *testing.T, b *model.Bundle, ops model.Ops, wp *stages.WeightPath, path string, nSeq int, aliases ...string) (string, *serve.Server) {
	t.Helper()
	e, err := stages.NewEngine(b.Model, b.Tokenizer, ops, stages.Config{NCtx: 128, NSeq: nSeq, Weights: wp}, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	ctx, abort := context.WithCancel(context.Background())
	go func() { e.Run(ctx); close(done) }()
	srv := serve.New(serve.Config{Defaults: greedy(), Aliases: aliases, Heartbeat: 50 * time.Millisecond})
	srv.SetBackend(&serve.Backend{Engine: e, Bundle: b, Path: path, Done: done})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		e.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
		abort()
		<-done
	})
	return "http://" + ln.Addr().String(), srv
}

func complete(t *testing.T, url, prompt string) string {
	t.Helper()
	body := fmt.Sprintf(`{"prompt": %q, "max_tokens": 12, "temperature": 0}`, prompt)
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Choices []struct{ Text string }
	}
	if err := decodeBody(resp, &out); err != nil || len(out.Choices) != 1 {
		t.Fatalf("status %d, %v", resp.StatusCode, err)
	}
	return out.Choices[0].Text
}

// TestServeStreamedExperts: a MoE model served with its experts streamed
// through a cache that holds only three of them answers as the resident
// model does, serves concurrent requests, and shows the cache on /metrics.
func TestServeStreamedExperts(t *testing.T) {
	prompts := []string{"Once upon a time", "The cat sat on the", "One day, Lily"}
	resident, _ := startMoE(t, 0)
	want := make([]string, len(prompts))
	for i, p := range prompts {
		want[i] = complete(t, resident, p)
	}
	streamed, wp := startMoE(t, 3)
	for i, p := range prompts {
		if got := complete(t, streamed, p); got != want[i] {
			t.Errorf("%q: streamed %q, resident %q", p, got, want[i])
		}
	}
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() { complete(t, streamed, "Once upon a time there was") })
	}
	wg.Wait()
	resp, err := http.Get(streamed + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	m := string(raw)
	for _, want := range []string{`flowinfer_expert_cache_misses_total{layer="0"}`, `flowinfer_expert_cache_hits_total{layer="1"}`,
		"flowinfer_expert_cache_hit_ratio", "flowinfer_weight_read_bytes_total", "flowinfer_expert_cache_evictions_total", "flowinfer_expert_cache_slots 3",
		"flowinfer_expert_prefetch_total", "flowinfer_expert_prefetch_used_total", "flowinfer_expert_prefetch_wasted_total"} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if wp.Stats().Evictions == 0 {
		t.Error("a three-expert cache evicted nothing")
	}
	// the tiers: no device slots, RAM hits and disk reads as the cache
	// counted them (the engine is idle: the counters no longer move)
	var hits, misses int64
	st := wp.Stats()
	for l := range st.Hits {
		hits, misses = hits+st.Hits[l], misses+st.Misses[l]
	}
	for _, want := range []string{`flowinfer_expert_tier_total{tier="vram"} 0`, fmt.Sprintf(`flowinfer_expert_tier_total{tier="ram"} %d`, hits),
		fmt.Sprintf(`flowinfer_expert_tier_total{tier="disk"} %d`, misses)} {
		if !strings.Contains(m, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if misses == 0 || strings.Contains(m, "flowinfer_expert_device_") {
		t.Errorf("%d misses; device slot metrics without a device: %v", misses, strings.Contains(m, "flowinfer_expert_device_"))
	}
}

func decodeBody(resp *http.Response, v any) error {
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
