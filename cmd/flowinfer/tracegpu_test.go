//go:build cgo

package main

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/gpu/vk"
)

// TestTraceVulkan: `trace --backend vulkan` (lavapipe here) on stories260K
// writes device spans timed by Vulkan timestamps: per layer ("gpu:attn-3",
// "gpu:ffn-3") and the output, each of positive duration, every layer
// present, none overlapping another, and all of them together no longer
// than the run's wall time; host waits for the device are compute
// sub-spans; the summary prints the device time and the waits, and the
// stall report has one line for the device's spans, not one per layer.
// At --detail stages it says there are no device spans and why.
func TestTraceVulkan(t *testing.T) {
	in, err := vk.NewInstance(vk.Config{})
	if err != nil || len(in.Devices()) == 0 {
		t.Skipf("no Vulkan device: %v", err)
	}
	in.Close()
	m, _ := goldenModel(t, "stories260K.gguf")
	out, _, _, data := runTrace(t, m, "--backend", "vulkan", "-n", "16", "--temp", "0")
	var tr struct {
		TraceEvents []struct {
			Ph, Name string
			Ts, Dur  float64 // µs
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(data, &tr); err != nil {
		t.Fatalf("trace is not JSON: %v", err)
	}
	var sum float64
	var gpu [][2]float64
	layers := map[string]bool{}
	waits := 0
	for _, e := range tr.TraceEvents {
		if e.Ph != "X" {
			continue
		}
		if e.Name == "gpu-wait" {
			waits++
		}
		name, ok := strings.CutPrefix(e.Name, "gpu:")
		if !ok {
			continue
		}
		if !(e.Dur > 0) {
			t.Errorf("device span %s at %vµs: duration %vµs", e.Name, e.Ts, e.Dur)
		}
		sum += e.Dur
		gpu = append(gpu, [2]float64{e.Ts, e.Ts + e.Dur})
		layers[name] = true
	}
	for _, want := range []string{"attn-0", "ffn-0", "attn-4", "ffn-4", "output"} {
		if !layers[want] {
			t.Errorf("no device span gpu:%s (have %v)", want, layers)
		}
	}
	if waits == 0 {
		t.Error("no gpu-wait spans")
	}
	for i := range gpu {
		for j := range i {
			a, b := gpu[i], gpu[j]
			if a[0] < b[1]-1 && b[0] < a[1]-1 { // 1 µs: the JSON's rounding
				t.Fatalf("device spans overlap: %v and %v", a, b)
			}
		}
	}
	wm := regexp.MustCompile(`(?m)^wall ([0-9.]+[µmn]?s);`).FindStringSubmatch(out)
	if wm == nil {
		t.Fatalf("no wall time in:\n%s", out)
	}
	wall, err := time.ParseDuration(wm[1])
	if err != nil {
		t.Fatal(err)
	}
	if sum <= 0 || time.Duration(sum*1e3) > wall {
		t.Errorf("device spans sum to %vµs, wall %v", sum, wall)
	}
	g := regexp.MustCompile(`gpu: device time in (\d+) layer-level spans ([0-9.]+[µmn]?s) .* the host waited for the device ([0-9.]+[µmn]?s) in (\d+) waits`).FindStringSubmatch(out)
	if g == nil {
		t.Fatalf("no device summary in:\n%s", out)
	}
	if n, _ := strconv.Atoi(g[1]); n != len(gpu) {
		t.Errorf("summary counts %d device spans, the trace has %d", n, len(gpu))
	}
	if strings.Count(out, "was in flight") != 1 || !strings.Contains(out, "at least one gpu was in flight") {
		t.Errorf("stall report's work lines:\n%s", out)
	}
	out, _, _, _ = runTrace(t, m, "--backend", "vulkan", "-n", "4", "--detail", "stages")
	if !strings.Contains(out, "gpu: no device spans at --detail stages") {
		t.Errorf("--detail stages:\n%s", out)
	}
}

// TestTraceVulkanExpertUploads: `trace --backend vulkan` on the golden
// qwen3moe file under a --vram budget that leaves two expert slots (of
// 16 experts) streams experts into the slots: the trace has device spans
// "gpu:upload-<layer>" for both layers, each of positive duration, the
// summary's upload bytes equal the misses times the slot bytes (every
// miss of the run uploads one slot's bytes, and the device timed every
// upload), and the time compute waited for the uploads is reported.
func TestTraceVulkanExpertUploads(t *testing.T) {
	in, err := vk.NewInstance(vk.Config{})
	if err != nil || len(in.Devices()) == 0 {
		t.Skipf("no Vulkan device: %v", err)
	}
	in.Close()
	m, _ := goldenModel(t, "synth-qwen3moe-Q8_0.gguf")
	out, _, _, data := runTrace(t, m, "--backend", "vulkan", "--vram", "48MiB", "-n", "12", "--temp", "0")
	var tr struct {
		TraceEvents []struct {
			Ph, Name string
			Dur      float64 // µs
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(data, &tr); err != nil {
		t.Fatalf("trace is not JSON: %v", err)
	}
	uploads, waits := map[string]int{}, 0
	for _, e := range tr.TraceEvents {
		if e.Ph != "X" {
			continue
		}
		if strings.HasPrefix(e.Name, "gpu:upload-wait-") {
			waits++
			continue
		}
		if strings.HasPrefix(e.Name, "gpu:upload-") {
			uploads[e.Name]++
			if !(e.Dur > 0) {
				t.Errorf("upload span %s: duration %vµs", e.Name, e.Dur)
			}
		}
	}
	if uploads["gpu:upload-0"] == 0 || uploads["gpu:upload-1"] == 0 || waits == 0 {
		t.Errorf("upload spans %v, %d upload-wait spans", uploads, waits)
	}
	u := regexp.MustCompile(`gpu uploads: (\d+) bytes in (\d+) uploads, device time [^=]+= ([0-9.]+) GB/s; compute waited for them ([0-9.]+[µmn]?s) in (\d+) waits`).FindStringSubmatch(out)
	s := regexp.MustCompile(`gpu expert slots: (\d+) hits, (\d+) misses of (\d+)-byte slots; (\d+) bytes uploaded`).FindStringSubmatch(out)
	if u == nil || s == nil || !strings.Contains(out, "gpu uploads per layer: 0: ") {
		t.Fatalf("no upload summary in:\n%s", out)
	}
	bytes, _ := strconv.ParseInt(u[1], 10, 64)
	n, _ := strconv.Atoi(u[2])
	misses, _ := strconv.ParseInt(s[2], 10, 64)
	slot, _ := strconv.ParseInt(s[3], 10, 64)
	up, _ := strconv.ParseInt(s[4], 10, 64)
	if misses == 0 || bytes != misses*slot || up != bytes {
		t.Errorf("upload spans hold %d bytes; %d misses of %d-byte slots, %d bytes uploaded", bytes, misses, slot, up)
	}
	if total := uploads["gpu:upload-0"] + uploads["gpu:upload-1"]; n != total {
		t.Errorf("summary counts %d uploads, the trace has %d spans", n, total)
	}
	t.Logf("%s\n%s", u[0], s[0])
}
