//go:build cgo

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/gpu/vk"
)

// needVulkan skips the test on a machine without a Vulkan device.
func needVulkan(t *testing.T) {
	t.Helper()
	in, err := vk.NewInstance(vk.Config{})
	if err != nil || len(in.Devices()) == 0 {
		t.Skipf("no Vulkan device: %v", err)
	}
	in.Close()
}

// streamText posts body to url+path with stream on and returns the text
// of its SSE events (completions' text or chat's content deltas).
func streamText(url, path, body string) (string, error) {
	resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return "", fmt.Errorf("%s: %d %s", path, resp.StatusCode, b)
	}
	var text strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ev struct {
			Choices []struct {
				Text  string `json:"text"`
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return "", fmt.Errorf("event %q: %v", data, err)
		}
		for _, c := range ev.Choices {
			text.WriteString(c.Text + c.Delta.Content)
		}
	}
	return text.String(), sc.Err()
}

// metricsText returns the server's /metrics.
func metricsText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, b)
	}
	return string(b)
}

// metricValue returns the value of the sample named name (with its
// labels, as exposed) in a /metrics text, or -1 when absent.
func metricValue(text, name string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// concurrent runs the two streamed requests at once and returns their
// texts.
func concurrent(t *testing.T, url string) [2]string {
	t.Helper()
	reqs := [2][2]string{
		{"/v1/completions", `{"prompt":"Once upon a time","max_tokens":24,"stream":true}`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"The little dog"}],"max_tokens":24,"stream":true}`},
	}
	var got [2]string
	var errs [2]error
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = streamText(url, r[0], r[1])
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if got[i] == "" {
			t.Fatalf("request %d: no text", i)
		}
	}
	return got
}

// TestServeVulkan: serve --backend vulkan (lavapipe here) on stories260K
// with two parallel sequences: two concurrent streamed requests (a
// completion and a chat) give the CPU backend's greedy texts, and steps
// carried both sequences' tokens at once (a decode step of more than one
// token in /metrics); a client that leaves mid-stream frees its
// sequence; the server still answers afterwards.
func TestServeVulkan(t *testing.T) {
	needVulkan(t)
	_, cpuURL, _ := startServe(t, "--parallel", "2", "--backend", "cpu")
	want := concurrent(t, cpuURL)

	_, url, log := startServe(t, "--parallel", "2", "--backend", "vulkan")
	if !strings.Contains(log.String(), "flowinfer: vulkan: computing on GPU") || !strings.Contains(log.String(), "in device memory") {
		t.Errorf("stderr does not say the GPU computes with its KV in device memory:\n%s", log)
	}
	if got := concurrent(t, url); got != want {
		t.Errorf("vulkan texts %q, cpu %q", got, want)
	}
	m := metricsText(t, url)
	one, all := metricValue(m, `flowinfer_step_tokens_bucket{kind="decode",le="1"}`), metricValue(m, `flowinfer_step_tokens_count{kind="decode"}`)
	if one < 0 || all <= one {
		t.Errorf("no decode step carried both sequences: %v of %v decode steps had at most 1 token", one, all)
	}

	// a client that leaves mid-stream: its sequence is freed
	resp, err := http.Post(url+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"Once upon a time","max_tokens":200,"stream":true,"logit_bias":{"2":-100}}`))
	if err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(resp.Body)
	for range 3 {
		if _, err := rd.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	if r := metricValue(metricsText(t, url), "flowinfer_running_sequences"); r != 1 {
		t.Errorf("%v running sequences while one streams", r)
	}
	resp.Body.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		m = metricsText(t, url)
		if metricValue(m, "flowinfer_running_sequences") == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the left client's sequence still runs after 20 s:\n%s", m)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := concurrent(t, url); got != want {
		t.Errorf("after the disconnect: vulkan texts %q, cpu %q", got, want)
	}
}

// TestBatchVulkan: batch --backend vulkan writes the CPU backend's
// records (the same greedy choices) for mixed completion and chat
// requests on two parallel sequences.
func TestBatchVulkan(t *testing.T) {
	needVulkan(t)
	m, _ := goldenModel(t, "stories260K.gguf")
	in := batchInput(t, 6, 12)
	choices := func(backend string) []string {
		out := filepath.Join(t.TempDir(), "out.jsonl")
		if _, errOut, err := runEnv(t, nil, "batch", "-m", m, "-i", in, "-o", out, "--parallel", "2", "--ordered", "--no-progress", "--backend", backend); err != nil {
			t.Fatalf("%s: %v\n%s", backend, err, errOut)
		}
		var cs []string
		for i, r := range readBatch(t, out) {
			if r.Response == nil || r.Response.StatusCode != 200 {
				t.Fatalf("%s: record %d: %+v", backend, i, r)
			}
			b, _ := json.Marshal(r.Response.Body["choices"])
			cs = append(cs, string(b))
		}
		return cs
	}
	want, got := choices("cpu"), choices("vulkan")
	if len(want) != 6 || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("vulkan choices:\n%s\ncpu:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestServeVulkanMoE: serve --backend vulkan on the golden qwen3moe file
// under a --vram budget that holds fewer device expert slots than experts
// (the plan says how many): a completion
// gives the CPU's greedy text, and /metrics counts the experts by tier,
// VRAM hits and disk reads (the slots' misses) adding up to the device
// slots' lookups, with no RAM tier on the device path.
func TestServeVulkanMoE(t *testing.T) {
	needVulkan(t)
	model, _ := goldenModel(t, "synth-qwen3moe-Q8_0.gguf")
	body := `{"prompt":"Once upon a time","max_tokens":12,"stream":true}`
	_, cpuURL, _ := startServeModel(t, model, "--backend", "cpu")
	want, err := streamText(cpuURL, "/v1/completions", body)
	if err != nil {
		t.Fatal(err)
	}
	_, url, log := startServeModel(t, model, "--backend", "vulkan", "--vram", "48MiB")
	plan := regexp.MustCompile(`\((\d+) of 16 in slots of`).FindStringSubmatch(log.String())
	if plan == nil {
		t.Fatalf("no expert slots in the plan:\n%s", log)
	}
	planned, _ := strconv.ParseFloat(plan[1], 64)
	if planned >= 16 {
		t.Fatalf("--vram 48MiB holds every expert: %s", plan[0])
	}
	got, err := streamText(url, "/v1/completions", body)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("vulkan %q, cpu %q", got, want)
	}
	m := metricsText(t, url)
	vram, ram, disk := metricValue(m, `flowinfer_expert_tier_total{tier="vram"}`), metricValue(m, `flowinfer_expert_tier_total{tier="ram"}`), metricValue(m, `flowinfer_expert_tier_total{tier="disk"}`)
	hits, misses := metricValue(m, "flowinfer_expert_device_hits_total"), metricValue(m, "flowinfer_expert_device_misses_total")
	slots := metricValue(m, "flowinfer_expert_device_slots")
	if vram != hits || disk != misses || ram != 0 || misses <= 0 || slots != planned {
		t.Errorf("tiers vram %v ram %v disk %v; device hits %v misses %v slots %v", vram, ram, disk, hits, misses, slots)
	}
	if ev := metricValue(m, "flowinfer_expert_device_evictions_total"); ev != misses-planned {
		t.Errorf("%v evictions from %v slots after %v misses", ev, planned, misses)
	}
}

// TestExpertTiersAddUp: run and trace print the experts the steps needed
// by tier, and VRAM hits + RAM hits + disk reads = experts needed: on the
// device with 5 expert slots of 16 (VRAM and disk: misses fill slots from the
// file's mapping), on the CPU with a RAM budget that streams experts
// through an expert cache of 4 (RAM and disk). "Needed" is counted apart from
// the tiers: the model's expert runs, one per expert and layer of a step.
func TestExpertTiersAddUp(t *testing.T) {
	needVulkan(t)
	model, _ := goldenModel(t, "synth-qwen3moe-Q8_0.gguf")
	line := regexp.MustCompile(`expert tiers: (\d+) experts needed in (\d+) steps = (\d+) VRAM hits \+ (\d+) RAM hits \+ (\d+) disk reads`)
	tr := func() string { return filepath.Join(t.TempDir(), "t.json") }
	for _, c := range []struct {
		name string
		args []string
		gpu  bool // the device's slots (VRAM, disk), else the RAM expert cache (RAM, disk)
	}{
		{"run-vulkan", []string{"run", "--backend", "vulkan", "--vram", "49MiB"}, true},
		{"trace-vulkan", []string{"trace", "--no-measure", "-o", tr(), "--backend", "vulkan", "--vram", "49MiB"}, true},
		{"run-cpu", []string{"run", "--backend", "cpu", "--ram-budget", "3600KiB"}, false},
		{"trace-cpu", []string{"trace", "--no-measure", "-o", tr(), "--backend", "cpu", "--ram-budget", "3600KiB"}, false},
	} {
		args := append(c.args, "-m", model, "-p", "Once upon a time", "-n", "8", "--temp", "0")
		out, stderr, err := flowinfer(t, args...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.name, err, stderr)
		}
		f := line.FindStringSubmatch(out + stderr)
		if f == nil {
			t.Fatalf("%s: no expert tiers line:\n%s%s", c.name, out, stderr)
		}
		n := make([]int64, 5)
		for i := range n {
			n[i], _ = strconv.ParseInt(f[i+1], 10, 64)
		}
		needed, steps, vram, ram, disk := n[0], n[1], n[2], n[3], n[4]
		// the device path has no RAM tier, the CPU's no VRAM tier; each
		// budget holds a few experts of 16, so both hits and reads happen
		tiers := ram == 0 && vram > 0
		if !c.gpu {
			tiers = vram == 0 && ram > 0
		}
		if needed == 0 || steps != 8 || vram+ram+disk != needed || disk == 0 || !tiers {
			t.Errorf("%s: %s", c.name, f[0])
		}
		// the device's own count of its lookups agrees (run prints it)
		if d := regexp.MustCompile(`device expert slots: (\d+) hits, (\d+) misses`).FindStringSubmatch(stderr); d != nil && (d[1] != f[3] || d[2] != f[5]) {
			t.Errorf("%s: %s, but %s", c.name, f[0], d[0])
		}
		t.Logf("%s: %s", c.name, f[0])
	}
}

// TestServeVulkanRefusesKV: a KV cache the device cannot hold is refused
// when serve starts, naming the type, not by the engine's first step
// (where every request would fail), and batch refuses it too.
func TestServeVulkanRefusesKV(t *testing.T) {
	needVulkan(t)
	m, _ := goldenModel(t, "stories260K.gguf")
	for _, args := range [][]string{
		{"serve", "-m", m, "--port", "0", "-c", "256"},
		{"batch", "-m", m, "-i", batchInput(t, 2, 4), "-o", filepath.Join(t.TempDir(), "out.jsonl"), "--no-progress"},
	} {
		_, stderr, err := runEnv(t, nil, append(args, "--backend", "vulkan", "-ctk", "bf16", "-ctv", "bf16")...)
		if err == nil || !strings.Contains(stderr, "KV cache of types bf16/bf16") || strings.Contains(stderr, "flowinfer: serving") {
			t.Errorf("%s: err %v, stderr %q", args[0], err, stderr)
		}
	}
}

// TestVulkanDevice: --device (pipeline.device) picks the Vulkan device by
// index or by a part of its name, for run and serve, and a profile's
// hardware.gpus by its name; a device that is not there is an error
// naming it (and listing the devices) before anything computes, for auto
// too; a command without a GPU path refuses --device.
func TestVulkanDevice(t *testing.T) {
	needVulkan(t)
	in, err := vk.NewInstance(vk.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d0 := in.Devices()[0]
	in.Close()
	m, _ := goldenModel(t, "stories260K.gguf")
	run := []string{"run", "-m", m, "-p", "Once upon a time", "-n", "8", "--temp", "0"}
	want, _, err := flowinfer(t, append(run, "--backend", "cpu")...)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.ToUpper(strings.Fields(d0.Name)[0]) // a part of its name, in another case
	computing := fmt.Sprintf("computing on GPU%d %s", d0.Index, d0.Name)
	for _, dev := range []string{strconv.Itoa(d0.Index), name} {
		for _, backend := range []string{"vulkan", "auto"} {
			got, stderr, err := flowinfer(t, append(run, "--backend", backend, "--device", dev)...)
			if err != nil || got != want || !strings.Contains(stderr, computing) {
				t.Errorf("--backend %s --device %s: err %v, printed %q (cpu %q), stderr %q", backend, dev, err, got, want, stderr)
			}
		}
	}
	profile := writeProfile(t, "pipeline:\n  backend: vulkan\n  vram: 1GiB\n  device: no-such-gpu\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{append(run, "--backend", "vulkan", "--device", "99"), "pipeline.device / --device 99: no Vulkan device of that index (devices: GPU0 "},
		{append(run, "--backend", "auto", "--device", "no-such-gpu"), `pipeline.device / --device "no-such-gpu": no Vulkan device of that name (devices: GPU0 `},
		{append([]string{"--config", profile}, run...), `pipeline.device / --device "no-such-gpu": no Vulkan device of that name`},
		{[]string{"serve", "-m", m, "--port", "0", "--backend", "vulkan", "--device", "no-such-gpu"}, `--device "no-such-gpu": no Vulkan device of that name`},
		{[]string{"perplexity", "-m", m, "-f", "main.go", "--device", "0"}, "pipeline.device / --device 0: only run, chat, trace, bench, serve and batch compute on the GPU yet"},
	} {
		_, stderr, err := flowinfer(t, c.args...)
		if err == nil || !strings.Contains(stderr, c.want) || strings.Contains(stderr, "computing on GPU") {
			t.Errorf("%v: err %v, stderr %q, want %q", c.args, err, stderr, c.want)
		}
	}
	// a profile's hardware.gpus names this machine's device: the GPU
	// backends compute on it; one this machine lacks is refused by name
	own := writeProfile(t, fmt.Sprintf("hardware:\n  gpus:\n    - {name: %q, vram: 1GiB}\npipeline:\n  backend: vulkan\n  vram: 64MiB\n", d0.Name))
	if got, stderr, err := flowinfer(t, append([]string{"--config", own}, run...)...); err != nil || got != want || !strings.Contains(stderr, computing) {
		t.Errorf("hardware.gpus %q: err %v, printed %q (cpu %q), stderr %q", d0.Name, err, got, want, stderr)
	}
	other := writeProfile(t, "hardware:\n  gpus:\n    - {name: No Such GPU, vram: 1GiB}\npipeline:\n  backend: vulkan\n  vram: 64MiB\n")
	if _, stderr, err := flowinfer(t, append([]string{"--config", other}, run...)...); err == nil || !strings.Contains(stderr, `hardware.gpus[0].name "No Such GPU": no Vulkan device of that name on this machine (devices: "`+d0.Name) {
		t.Errorf("hardware.gpus of another machine: err %v, stderr %q", err, stderr)
	}
	_, url, _ := startServe(t, "--backend", "vulkan", "--device", strconv.Itoa(d0.Index))
	if got, err := streamText(url, "/v1/completions", `{"prompt":"Once upon a time","max_tokens":8,"stream":true}`); err != nil || got == "" {
		t.Errorf("serve --device %d: %q, %v", d0.Index, got, err)
	}
}
