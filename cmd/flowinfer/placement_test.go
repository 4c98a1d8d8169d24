//go:build cgo

package main

import (
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/gpu/vk"
)

// TestRunVulkanPlacement: run --backend vulkan with -ngl (llama.cpp's
// spelling) splits stories260K between the device and the CPU and prints
// the CPU's greedy text and the placement; --vram without -ngl fits a
// plan to the budget; --dry-run prints the placement and computes
// nothing; -ngl where nothing is placed, and models the device cannot
// run, are refused by name.
func TestRunVulkanPlacement(t *testing.T) {
	in, err := vk.NewInstance(vk.Config{})
	if err != nil || len(in.Devices()) == 0 {
		t.Skipf("no Vulkan device: %v", err)
	}
	in.Close()
	model, _ := goldenModel(t, "stories260K.gguf")
	args := []string{"run", "-m", model, "-p", "Once upon a time", "-n", "40", "--temp", "0"}
	want, _, err := flowinfer(t, append(args, "--backend", "cpu")...)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		flags []string
		plan  string
	}{
		{[]string{"-ngl", "3"}, "placement (-ngl 3, as -ngl 3): layers 0-2 on the CPU, layers 3-4 on the GPU, the output on the GPU"},
		{[]string{"--n-gpu-layers=1"}, "all 5 layers on the CPU, the output on the GPU"},
		{[]string{"-ngl", "0"}, "all 5 layers and the output on the CPU"},
		{[]string{"--vram", "17MiB"}, "placement (--vram 17MiB, as -ngl 0)"}, // the staging ring and activations take it all
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
	}
	out, stderr, err := flowinfer(t, append(args, "--backend", "vulkan", "--vram", "64MiB", "--dry-run")...)
	if err != nil || out != "" || !strings.Contains(stderr, "flowinfer: vulkan: placement (--vram 64MiB, as -ngl 6): all 5 layers and the output on the GPU; device memory: weights") {
		t.Errorf("--dry-run: err %v, stdout %q, stderr %q", err, out, stderr)
	}
	_, stderr, err = flowinfer(t, append(args, "--backend", "cpu", "-ngl", "2")...)
	if err == nil || !strings.Contains(stderr, "--n-gpu-layers 2: the cpu backend places nothing on a GPU") {
		t.Errorf("-ngl with the cpu backend: err %v, stderr %q", err, stderr)
	}
	moe, _ := goldenModel(t, "synth-qwen3moe-Q8_0.gguf")
	_, stderr, err = flowinfer(t, "run", "-m", moe, "-p", "hi", "-n", "2", "--backend", "vulkan", "-ngl", "2")
	if err == nil || !strings.Contains(stderr, "routed experts") {
		t.Errorf("MoE with -ngl 2: err %v, stderr %q", err, stderr)
	}
}
