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

	"github.com/flowinfer/flowinfer/stages"
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
	if rows := stallRows(t, out); len(rows) != 5 {
		t.Errorf("%d stage rows in the stall table, want 5:\n%s", len(rows), out)
	}
	// Everything resident: compute bounds, the others wait on it.
	if b, _ := bounding(t, out); b != "compute" {
		t.Errorf("bounding stage %q, want compute:\n%s", b, out)
	}
	for _, want := range []string{"transfer compute/bytes weights", "decode", "tok/s", "compute sub-spans", "ffn_up"} {
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
	// Every expert read is a miss that found no prefetch in flight, or a
	// prefetch: the counts say which.
	mm := regexp.MustCompile(`expert cache: (\d+) hits, (\d+) misses \((\d+) of them already being prefetched\)`).FindStringSubmatch(out)
	if mm == nil {
		t.Fatalf("no expert cache line:\n%s", out)
	}
	n := func(s string) int64 { v, _ := strconv.ParseInt(s, 10, 64); return v }
	misses, late := n(mm[2]), n(mm[3])
	var issued int64
	if pm := regexp.MustCompile(`prefetch: (\d+) expert reads issued ahead, (\d+) used by the next layer \([\d.]+%\), (\d+) evicted unused`).FindStringSubmatch(out); pm != nil {
		issued = n(pm[1])
		if used, wasted := n(pm[2]), n(pm[3]); used+wasted > issued {
			t.Errorf("prefetch: %d issued, %d used, %d wasted", issued, used, wasted)
		}
	}
	reads, experts, matrices := diskReads(t, out)
	if misses == 0 || experts != misses-late+issued || reads != experts || matrices != 0 {
		t.Errorf("%d reads issued, %d experts read, %d matrices; want %d misses - %d already prefetched + %d prefetches\n%s",
			reads, experts, matrices, misses, late, issued, out)
	}
	stallRows(t, out)
	bounding(t, out)
}

// stallRows checks that each row of the stall table in out adds up to
// 100% and returns each stage's busy share.
func stallRows(t *testing.T, out string) map[string]float64 {
	t.Helper()
	row := regexp.MustCompile(`^(\w+)\s+\S+\s+([\d.]+)%\s+([\d.]+)%\s+([\d.]+)%`)
	busy := map[string]float64{}
	for _, line := range strings.Split(out, "\n") {
		mm := row.FindStringSubmatch(line)
		if mm == nil {
			continue
		}
		var sum float64
		for i, v := range mm[2:] {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
			if i == 0 {
				busy[mm[1]] = f
			}
		}
		if sum < 99.85 || sum > 100.15 {
			t.Errorf("%s: shares add up to %.1f%%", mm[1], sum)
		}
	}
	return busy
}

// bounding returns the bounding stage the report names and the chain of
// waits followed to it, checking that the chain ends there.
func bounding(t *testing.T, out string) (string, []string) {
	t.Helper()
	mm := regexp.MustCompile(`(?m)^bounding stage: (\w+) \(busy [\d.]+% of the \S+ run(?:; waits followed: ([\w >-]+))?\)$`).FindStringSubmatch(out)
	if mm == nil {
		t.Errorf("no bounding stage line:\n%s", out)
		return "", nil
	}
	var chain []string
	if mm[2] != "" {
		chain = strings.Split(mm[2], " -> ")
		if chain[len(chain)-1] != mm[1] {
			t.Errorf("the waits followed, %v, do not end at the bounding stage %s", chain, mm[1])
		}
	}
	return mm[1], chain
}

// diskReads parses the stats line of what was read from disk.
func diskReads(t *testing.T, out string) (reads, experts, matrices int64) {
	t.Helper()
	mm := regexp.MustCompile(`flowinfer: disk reads: (\d+) reads issued; read whole: (?:(\d+) experts \(misses and prefetches\))?(?:, )?(?:(\d+) layer matrices)?; \S+ read, \S+ per generated token; disk busy [\d.]+ s \(at least one read in flight; the reads' durations sum to [\d.]+ s\)`).FindStringSubmatch(out)
	if mm == nil {
		t.Fatalf("no disk reads line:\n%s", out)
	}
	n := func(s string) int64 { v, _ := strconv.ParseInt(s, 10, 64); return v }
	return n(mm[1]), n(mm[2]), n(mm[3])
}

// TestTraceStreamedLayers: a dense model whose layers stream from disk
// (the demo preset under a budget of two layer slots): the reader's busy
// time is the time a read was in flight (the union of its workers' reads,
// said in the report, and never more than its busy share), the bounding
// stage is the end of the chain of waits the report prints, and the stats
// count the reads issued and the layer matrices they read.
func TestTraceStreamedLayers(t *testing.T) {
	dir := t.TempDir()
	m := filepath.Join(dir, "demo.gguf")
	if _, errOut, err := flowinfer(t, "gen", "--preset", "demo", "-o", m); err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	out, errOut, _, _ := runTrace(t, m, "-n", "8", "--temp", "0", "--ram-budget", "2700KiB")
	if !strings.Contains(errOut, "streamed from disk each step") {
		t.Fatalf("no layer streams:\n%s", errOut)
	}
	busy := stallRows(t, out)
	mm := regexp.MustCompile(`reader busy counts the time at least one read was in flight: ([\d.]+)% of its wall time \(the union of (\d+) read intervals; their durations sum to ([\d.]+)%\)`).FindStringSubmatch(out)
	if mm == nil {
		t.Fatalf("no line on the reader's reads:\n%s", out)
	}
	inFlight, _ := strconv.ParseFloat(mm[1], 64)
	summed, _ := strconv.ParseFloat(mm[3], 64)
	if inFlight > busy["reader"]+0.05 || inFlight > summed+0.05 || inFlight <= 0 {
		t.Errorf("reads in flight %.1f%% of the reader's wall, busy %.1f%%, summed %.1f%%", inFlight, busy["reader"], summed)
	}
	b, chain := bounding(t, out)
	if _, ok := busy[b]; !ok || len(chain) == 0 && b != "compute" {
		t.Errorf("bounding stage %q by %v:\n%s", b, chain, out)
	}
	reads, experts, matrices := diskReads(t, out)
	if experts != 0 || matrices == 0 || reads < matrices || strconv.FormatInt(reads, 10) != mm[2] {
		t.Errorf("%d reads issued (%s read spans), %d experts, %d layer matrices read", reads, mm[2], experts, matrices)
	}
	if !regexp.MustCompile(`flowinfer: layer stream: \d+ layers run`).MatchString(out) {
		t.Errorf("no layer stream line:\n%s", out)
	}
}

// TestFormatWeightStats: each count of the weight path's stats line says
// what it counts: hits and misses (and the misses that waited for a
// prefetch already in flight), prefetches issued, used and wasted, reads
// issued apart from the experts and layer matrices they read, bytes in all
// and per generated token, the disk's busy time apart from the reads'
// summed durations.
func TestFormatWeightStats(t *testing.T) {
	st := stages.WeightStats{
		Hits: []int64{30, 10}, Misses: []int64{10, 30}, Evictions: 12, CachedExperts: 8,
		PrefetchIssued: 20, PrefetchUsed: 15, PrefetchWasted: 3, PrefetchLate: 5,
		LayersReady: 3, LayersWaited: 13, LayerWaitNanos: 1.5e9,
		BytesRead: 96 << 20, ReadNanos: 9e9, DiskBusyNanos: 2.5e9,
		Reads: 150, ExpertsRead: 55, MatricesRead: 40,
	}
	var b strings.Builder
	formatWeightStats(&b, st, true, 16)
	want := `flowinfer: layer stream: 16 layers run, 3 already read, 13 waited for (1.50 s in all)
flowinfer: expert cache: 40 hits, 40 misses (5 of them already being prefetched), hit rate 50.0% (per layer 25.0%-75.0%), 12 evictions, 8 experts cached
flowinfer: prefetch: 20 expert reads issued ahead, 15 used by the next layer (75.0%), 3 evicted unused
flowinfer: disk reads: 150 reads issued; read whole: 55 experts (misses and prefetches), 40 layer matrices; 96MiB read, 6MiB per generated token; disk busy 2.50 s (at least one read in flight; the reads' durations sum to 9.00 s)
`
	if b.String() != want {
		t.Errorf("stats:\n%s\nwant:\n%s", b.String(), want)
	}
	// a dense model streaming layers: no expert lines; nothing read: no
	// read line
	b.Reset()
	formatWeightStats(&b, stages.WeightStats{Reads: 7, MatricesRead: 7, BytesRead: 700}, false, 0)
	if want := "flowinfer: disk reads: 7 reads issued; read whole: 7 layer matrices; 700 B read; disk busy 0.00 s (at least one read in flight; the reads' durations sum to 0.00 s)\n"; b.String() != want {
		t.Errorf("stats:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	formatWeightStats(&b, stages.WeightStats{}, false, 10)
	if b.String() != "" {
		t.Errorf("nothing read, yet:\n%s", b.String())
	}
}

// TestTraceHybridSpans: on the hybrid families, `trace` shows each
// recurrent layer as a span of its own (a Gated DeltaNet layer as
// "deltanet-L", a Mamba-2 layer as "mamba2-L") beside the attention
// layers' "attn-L", and no layer as both.
func TestTraceHybridSpans(t *testing.T) {
	for _, c := range []struct{ preset, recurrent string }{{"qwen35-small", "deltanet"}, {"nemotronh-small", "mamba2"}} {
		t.Run(c.preset, func(t *testing.T) {
			m := filepath.Join(t.TempDir(), c.preset+".gguf")
			if _, errOut, err := flowinfer(t, "gen", "--preset", c.preset, "-o", m); err != nil {
				t.Fatalf("%v\n%s", err, errOut)
			}
			_, _, _, data := runTrace(t, m, "--detail", "layers", "-n", "4", "--temp", "0")
			var tr struct {
				TraceEvents []struct{ Ph, Name, Cat string } `json:"traceEvents"`
			}
			if err := json.Unmarshal(data, &tr); err != nil {
				t.Fatalf("trace is not JSON: %v", err)
			}
			kinds := map[string]string{} // layer -> recurrent or attn
			for _, e := range tr.TraceEvents {
				if e.Ph != "X" || e.Cat != "span" {
					continue
				}
				kind, layer, ok := strings.Cut(e.Name, "-")
				if !ok || kind != c.recurrent && kind != "attn" {
					continue
				}
				if k, seen := kinds[layer]; seen && k != kind {
					t.Errorf("layer %s has both %s and %s spans", layer, k, kind)
				}
				kinds[layer] = kind
			}
			n := map[string]int{}
			for _, k := range kinds {
				n[k]++
			}
			if n[c.recurrent] == 0 || n["attn"] == 0 {
				t.Errorf("layers by span: %v, want %s layers and attn layers", n, c.recurrent)
			}
		})
	}
}
