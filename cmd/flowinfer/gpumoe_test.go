//go:build cgo

package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/gpu/vk"
)

// TestRunVulkanMoE: run --backend vulkan computes the golden qwen3moe
// file on the device and prints the CPU's greedy text, with every expert
// resident (the run's device-slots line: no misses) and with a --vram
// budget that leaves a few expert slots (misses, evictions), under both
// eviction policies; the plan says how many slots the budget holds.
func TestRunVulkanMoE(t *testing.T) {
	in, err := vk.NewInstance(vk.Config{})
	if err != nil || len(in.Devices()) == 0 {
		t.Skipf("no Vulkan device: %v", err)
	}
	in.Close()
	m, _ := goldenModel(t, "synth-qwen3moe-Q8_0.gguf")
	args := []string{"run", "-m", m, "-p", "Once upon a time", "-n", "24", "--temp", "0"}
	want, _, err := flowinfer(t, append(args, "--backend", "cpu")...)
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`device expert slots: (\d+) hits, (\d+) misses, hit rate [0-9.]+%, (\d+) evictions, (\d+) of (\d+) slots`)
	for _, c := range []struct {
		flags []string
		plan  string
		slots int
	}{
		{nil, "routed experts 3.19MiB (16 of 16 in slots of 204KiB)", 16},
		{[]string{"--vram", "48MiB"}, "(2 of 16 in slots of 204KiB)", 2},
		{[]string{"--vram", "48MiB", "--expert-cache-policy", "lru"}, "(2 of 16 in slots of 204KiB)", 2},
	} {
		got, stderr, err := flowinfer(t, append(append(args, "--backend", "vulkan"), c.flags...)...)
		if err != nil {
			t.Fatalf("%v: %v: %s", c.flags, err, stderr)
		}
		if got != want {
			t.Errorf("%v printed %q, cpu %q", c.flags, got, want)
		}
		if !strings.Contains(stderr, c.plan) {
			t.Errorf("%v: stderr has no %q: %s", c.flags, c.plan, stderr)
		}
		f := line.FindStringSubmatch(stderr)
		if f == nil {
			t.Fatalf("%v: no device expert slots line: %s", c.flags, stderr)
		}
		n := make([]int, 5)
		for i := range n {
			n[i], _ = strconv.Atoi(f[i+1])
		}
		hits, misses, evict, filled, slots := n[0], n[1], n[2], n[3], n[4]
		resident := c.slots == 16
		if slots != c.slots || filled > slots || hits+misses == 0 || resident != (misses == 0) || resident != (evict == 0) {
			t.Errorf("%v: %s", c.flags, f[0])
		}
		t.Logf("%v: %s", c.flags, f[0])
	}
}
