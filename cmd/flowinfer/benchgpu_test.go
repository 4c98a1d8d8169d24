//go:build cgo

package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/gpu/vk"
)

// TestBenchVulkan: `bench --backend vulkan` (lavapipe here) prints
// llama-bench's table with backend Vulkan and a positive rate for each
// test; the CPU's options are refused by name.
func TestBenchVulkan(t *testing.T) {
	in, err := vk.NewInstance(vk.Config{})
	if err != nil || len(in.Devices()) == 0 {
		t.Skipf("no Vulkan device: %v", err)
	}
	in.Close()
	m, _ := goldenModel(t, "stories260K.gguf")
	out, stderr, err := flowinfer(t, "bench", "-m", m, "--backend", "vulkan", "-p", "16", "-n", "4", "-r", "1")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	for _, test := range []string{"pp16", "tg4"} {
		re := regexp.MustCompile(`\| Vulkan +\| +1 \| +` + test + ` \| +([0-9.]+) ± `)
		if g := re.FindStringSubmatch(out); g == nil || g[1] == "0.00" {
			t.Errorf("no positive Vulkan %s row in:\n%s", test, out)
		}
	}
	if !strings.Contains(stderr, "computing on GPU") {
		t.Errorf("stderr does not name the device: %q", stderr)
	}
	for _, flag := range []string{"--roofline", "--no-pack"} {
		_, stderr, err := flowinfer(t, "bench", "-m", m, "--backend", "vulkan", "-p", "16", "-n", "0", "-r", "1", flag)
		if err == nil || !strings.Contains(stderr, flag) {
			t.Errorf("%s on vulkan: err %v, stderr %q", flag, err, stderr)
		}
	}
}
