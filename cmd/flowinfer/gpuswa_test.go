//go:build cgo

package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/gpu/vk"
)

// TestRunVulkanSWA: the sliding-window families on run --backend vulkan.
// gemma3-small's cache would keep rings, which the device refuses naming
// --swa-full (before loading; --dry-run too); with --swa-full the device
// prints the CPU's greedy text, whole and split (-ngl 3), and --dry-run
// the plan. gpt-oss-small (sliding layers, MXFP4 experts) is refused
// without --swa-full and runs its experts in device slots with it.
func TestRunVulkanSWA(t *testing.T) {
	in, err := vk.NewInstance(vk.Config{})
	if err != nil || len(in.Devices()) == 0 {
		t.Skipf("no Vulkan device: %v", err)
	}
	in.Close()
	dir := t.TempDir()
	g3, oss := filepath.Join(dir, "gemma3.gguf"), filepath.Join(dir, "oss.gguf")
	if _, stderr, err := flowinfer(t, "gen", "--preset", "gemma3-small", "--type", "F32", "-o", g3); err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	if _, stderr, err := flowinfer(t, "gen", "--preset", "gpt-oss-small", "--pure", "--type", "Q8_0", "-o", oss); err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	args := []string{"run", "-m", g3, "-p", "Once upon a time", "-n", "12", "--temp", "0"}
	for _, extra := range [][]string{nil, {"--dry-run"}} {
		_, stderr, err := flowinfer(t, append(append(args, "--backend", "vulkan"), extra...)...)
		if err == nil || !strings.Contains(stderr, "sliding window of 128") || !strings.Contains(stderr, "--swa-full") {
			t.Errorf("gemma3 %v without --swa-full: err %v, stderr %q", extra, err, stderr)
		}
	}
	want, _, err := flowinfer(t, append(args, "--backend", "cpu")...)
	if err != nil {
		t.Fatal(err)
	}
	for _, ngl := range []string{"99", "3"} {
		got, stderr, err := flowinfer(t, append(args, "--backend", "vulkan", "--swa-full", "-ngl", ngl)...)
		if err != nil {
			t.Fatalf("-ngl %s: %v: %s", ngl, err, stderr)
		}
		if got != want || len(want) < 20 {
			t.Errorf("vulkan --swa-full -ngl %s printed %q, cpu %q", ngl, got, want)
		}
	}
	_, stderr, err := flowinfer(t, append(args, "--backend", "vulkan", "--swa-full", "--dry-run")...)
	if err != nil || !strings.Contains(stderr, "all 6 layers and the output on the GPU") {
		t.Errorf("gemma3 --dry-run: err %v, stderr %q", err, stderr)
	}
	// gpt-oss: sliding layers too (refused without --swa-full), MXFP4
	// experts in device slots with --swa-full
	_, stderr, err = flowinfer(t, "run", "-m", oss, "-p", "Once", "-n", "4", "--backend", "vulkan")
	if err == nil || !strings.Contains(stderr, "--swa-full") {
		t.Errorf("gpt-oss without --swa-full: err %v, stderr %q", err, stderr)
	}
	out, stderr, err := flowinfer(t, "run", "-m", oss, "-p", "Once", "-n", "4", "--temp", "0", "--backend", "vulkan", "--swa-full")
	if err != nil || len(out) <= len("Once") || !strings.Contains(stderr, "routed experts") || !strings.Contains(stderr, "on the GPU") {
		t.Errorf("gpt-oss MXFP4 experts on the device: err %v, stdout %q, stderr %q", err, out, stderr)
	}
}
