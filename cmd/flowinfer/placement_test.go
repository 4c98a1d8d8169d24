//go:build cgo

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
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

// TestDryRunAuto: run --dry-run --backend auto prints the plan a run
// would follow. With no Vulkan driver (VK_ICD_FILENAMES naming none), it
// says why the CPU computes and prints the CPU's weight plan, never a
// GPU placement, while vulkan is refused; with the machine's own drivers,
// the GPU placement alone when there is a discrete or integrated GPU
// (the device holds the weights: no weight plan), else the same CPU
// lines (lavapipe is a CPU-type device, which auto does not take).
func TestDryRunAuto(t *testing.T) {
	model, _ := goldenModel(t, "stories260K.gguf")
	args := []string{"run", "-m", model, "-p", "Once upon a time", "--dry-run"}
	dryRun := func(icd string, backend string) (string, string, error) {
		cmd := exec.Command(binPath, append(args, "--backend", backend)...)
		cmd.Env = append(os.Environ(), "FLOWINFER_CACHE="+t.TempDir())
		if icd != "" {
			cmd.Env = append(cmd.Env, "VK_ICD_FILENAMES="+icd)
		}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}
	cpuLines := func(t *testing.T, stderr, why string) {
		t.Helper()
		if !strings.Contains(stderr, "flowinfer: backend auto: the CPU computes ("+why) ||
			!strings.Contains(stderr, "flowinfer: weights: ") || strings.Contains(stderr, "placement") {
			t.Errorf("auto without a GPU: stderr %q, want why the CPU computes (%s) and its weight plan, no placement", stderr, why)
		}
	}
	none := filepath.Join(t.TempDir(), "none.json")
	out, stderr, err := dryRun(none, "auto")
	if err != nil || out != "" {
		t.Fatalf("auto without a driver: err %v, stdout %q, stderr %q", err, out, stderr)
	}
	cpuLines(t, stderr, "vk: ")
	if _, stderr, err := dryRun(none, "vulkan"); err == nil || !strings.Contains(stderr, "--backend vulkan: vk: ") {
		t.Errorf("vulkan without a driver: err %v, stderr %q", err, stderr)
	}

	gpuType := false
	if in, err := vk.NewInstance(vk.Config{}); err == nil {
		for _, d := range in.Devices() {
			gpuType = gpuType || d.Type.String() == "discrete-gpu" || d.Type.String() == "integrated-gpu"
		}
		in.Close()
	}
	out, stderr, err = dryRun("", "auto")
	if err != nil || out != "" {
		t.Fatalf("auto: err %v, stdout %q, stderr %q", err, out, stderr)
	}
	if !gpuType {
		cpuLines(t, stderr, "")
		return
	}
	if !strings.Contains(stderr, "flowinfer: vulkan: placement (all, ") || strings.Contains(stderr, "flowinfer: weights: ") {
		t.Errorf("auto with a GPU: stderr %q, want the placement alone", stderr)
	}
}
