package main

import (
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// runTrace runs `trace -m model --no-measure` with args, its Chrome trace
// written to t.json in a directory of its own, and returns stdout, stderr,
// that directory and the trace.
func runTrace(t *testing.T, model string, args ...string) (string, string, string, []byte) {
	t.Helper()
	dir := t.TempDir()
	out, errOut, err := runEnv(t, nil, append([]string{"trace", "-m", model, "-o", filepath.Join(dir, "t.json"), "--no-measure"}, args...)...)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	data, err := os.ReadFile(filepath.Join(dir, "t.json"))
	if err != nil {
		t.Fatal(err)
	}
	return out, errOut, dir, data
}

// TestTraceCommand: `trace` on stories260K with two requests decoded
// together writes a valid Chrome trace with a track per stage, per-layer
// spans inside compute, queue, bandwidth and engine counter tracks; an SVG;
// and a stall summary whose busy, starved and blocked shares add up to
// each stage's wall time.
func TestTraceCommand(t *testing.T) {
	m, _ := goldenModel(t, "stories260K.gguf")
	out, _, dir, data := runTrace(t, m, "--detail", "ops", "-n", "24", "--requests", "2", "--parallel", "2",
		"--temp", "0", "--queue-sample", "200us")
	var tr struct {
		OtherData   map[string]string `json:"otherData"`
		TraceEvents []struct {
			Ph, Name, Cat string
			Tid           int
			Args          json.RawMessage
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(data, &tr); err != nil {
		t.Fatalf("trace is not JSON: %v", err)
	}
	tracks := map[string]bool{}
	spans := map[string]bool{}
	counters := map[string]bool{}
	for _, e := range tr.TraceEvents {
		switch {
		case e.Ph == "M" && e.Name == "thread_name":
			var a struct{ Name string }
			json.Unmarshal(e.Args, &a)
			tracks[a.Name] = true
		case e.Ph == "X" && e.Cat == "span":
			spans[e.Name] = true
		case e.Ph == "C":
			counters[e.Name] = true
		}
	}
	// a dense model that fits has no weight path stages: nothing streams
	for _, s := range []string{"admit", "scheduler", "compute", "sampler", "streamer"} {
		if !tracks[s] {
			t.Errorf("no track for stage %s", s)
		}
	}
	for l := range 5 { // stories260K has 5 layers
		for _, k := range []string{"attn", "attn_q", "attn_k", "attn_v", "kv_store", "attn_kqv", "attn_output", "ffn", "ffn_gate", "ffn_up", "ffn_down"} {
			if n := k + "-" + strconv.Itoa(l); !spans[n] {
				t.Errorf("no span %s", n)
			}
		}
	}
	for _, s := range []string{"forward", "output", "output_proj"} {
		if !spans[s] {
			t.Errorf("no span %s", s)
		}
	}
	for _, c := range []string{"compute/bytes weights", "compute/bytes weights GB/s", "compute/tokens",
		"engine/requests queued", "engine/requests generating", "engine/KV prefix cache hit %", "sampler/queue sampler->streamer (cap 64)"} {
		if !counters[c] {
			t.Errorf("no counter track %q", c)
		}
	}
	if tr.OtherData["requests"] != "2" || tr.OtherData["parallel"] != "2" {
		t.Errorf("metadata %v", tr.OtherData)
	}

	// The SVG next to the trace is well-formed XML.
	svg, err := os.ReadFile(filepath.Join(dir, "t.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(svg, new(struct{})); err != nil {
		t.Errorf("SVG is not XML: %v", err)
	}

	// Stall table: busy + starved + blocked = 100% per stage.
	row := regexp.MustCompile(`^(\w+)\s+\S+\s+([\d.]+)%\s+([\d.]+)%\s+([\d.]+)%`)
	rows := 0
	for _, line := range strings.Split(out, "\n") {
		mm := row.FindStringSubmatch(line)
		if mm == nil {
			continue
		}
		rows++
		var sum float64
		for _, v := range mm[2:] {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
		}
		if sum < 99.85 || sum > 100.15 {
			t.Errorf("%s: shares add up to %.1f%%", mm[1], sum)
		}
	}
	if rows != 5 {
		t.Errorf("%d stage rows in the stall table, want 5:\n%s", rows, out)
	}
	for _, want := range []string{"bounding stage: compute", "transfer compute/bytes weights", "decode", "tok/s", "compute sub-spans", "ffn_up"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}

// TestTraceOverhead: --overhead runs the job with recording off and on and
// prints both rates.
func TestTraceOverhead(t *testing.T) {
	m, _ := goldenModel(t, "stories260K.gguf")
	out, errOut, err := runEnv(t, nil, "trace", "-m", m, "--detail", "ops", "-n", "16", "--temp", "0", "-o", filepath.Join(t.TempDir(), "t.json"),
		"--svg", "-", "--no-measure", "--overhead", "2")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	if !regexp.MustCompile(`(?s)recording overhead, detail 2 \(2 runs each, alternated\): median decode [\d.]+ tok/s off, [\d.]+ tok/s on.*process CPU time per generated token.*estimate: \d+ events per generated token`).MatchString(out) {
		t.Errorf("no overhead line:\n%s", out)
	}
}

// TestTraceStreamedExperts: a MoE model under a budget that forces expert
// reads shows the weight path's stages, its read and pack spans, and the
// bytes read and cache hits and misses as counters.
func TestTraceStreamedExperts(t *testing.T) {
	m, _ := goldenModel(t, "synth-qwen3moe-Q8_0.gguf")
	out, errOut, _, data := runTrace(t, m, "-n", "16", "--temp", "0", "--ram-budget", "3300KiB")
	var tr struct {
		TraceEvents []struct {
			Ph, Name, Cat string
			Args          json.RawMessage
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(data, &tr); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range tr.TraceEvents {
		if e.Ph == "M" && e.Name == "thread_name" {
			var a struct{ Name string }
			json.Unmarshal(e.Args, &a)
			seen["track "+a.Name] = true
		} else {
			seen[e.Ph+" "+e.Name] = true
		}
	}
	for _, want := range []string{"track reader", "track pool", "track uploader", "X read", "X pack",
		"C reader/bytes read", "C compute/expert misses", "C compute/expert hits"} {
		if !seen[want] {
			t.Errorf("trace has no %q", want)
		}
	}
	if !strings.Contains(errOut+out, "expert cache") {
		t.Errorf("no plan or cache line in the output:\n%s\n%s", out, errOut)
	}
}
