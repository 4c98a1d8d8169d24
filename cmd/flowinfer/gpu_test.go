//go:build cgo

package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/gpu/vk"
)

// TestRunVulkan: run --backend vulkan (lavapipe here) prints the CPU's
// greedy text for stories260K with the default f16 KV cache, and says
// which device computed; commands without a GPU path refuse vulkan, and a
// KV type without a shader is refused by name.
func TestRunVulkan(t *testing.T) {
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
	got, stderr, err := flowinfer(t, append(args, "--backend", "vulkan")...)
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	if got != want || len(want) < 60 {
		t.Errorf("vulkan printed %q, cpu %q", got, want)
	}
	if !strings.Contains(stderr, "flowinfer: vulkan: computing on GPU") {
		t.Errorf("stderr does not name the device: %q", stderr)
	}
	_, stderr, err = flowinfer(t, append(args, "--backend", "vulkan", "-ctk", "bf16", "-ctv", "bf16")...)
	if err == nil || !strings.Contains(stderr, "KV cache of types bf16/bf16") {
		t.Errorf("bf16 KV on vulkan: err %v, stderr %q", err, stderr)
	}
	// with -ngl placing everything, a budget that holds the staging ring
	// but not the weights, KV cache and activations names the buffer that
	// did not fit (a weight, or with the allocator's smaller chunks under
	// small budgets, the KV cache, made with the context, or an
	// activation); without -ngl, --vram plans a split:
	// TestRunVulkanPlacement
	_, stderr, err = flowinfer(t, append(args, "--backend", "vulkan", "--vram", "17MiB", "-ngl", "99")...)
	named := strings.Contains(stderr, `gpu: weight "`) || strings.Contains(stderr, "gpu: KV cache layer ") || strings.Contains(stderr, "gpu: activation of ")
	if err == nil || !named || !strings.Contains(stderr, "budget exceeded") {
		t.Errorf("vulkan --vram 17MiB -ngl 99: err %v, stderr %q", err, stderr)
	}
	_, stderr, err = flowinfer(t, "perplexity", "-m", model, "-f", "main.go", "--backend", "vulkan")
	if err == nil || !strings.Contains(stderr, "--backend vulkan: only run, chat, trace, bench, serve and batch compute on the GPU yet") {
		t.Errorf("perplexity --backend vulkan: err %v, stderr %q", err, stderr)
	}
}

// TestChatVulkan: chat on the vulkan backend, whole and split, answers two
// turns (the second reusing the first's cached conversation in its KV
// sequence) with the CPU's text.
func TestChatVulkan(t *testing.T) {
	in, err := vk.NewInstance(vk.Config{})
	if err != nil || len(in.Devices()) == 0 {
		t.Skipf("no Vulkan device: %v", err)
	}
	in.Close()
	model, _ := goldenModel(t, "stories260K.gguf")
	chat := func(flags ...string) string {
		cmd := exec.Command(binPath, append([]string{"chat", "-m", model, "--temp", "0", "-n", "30", "-c", "512"}, flags...)...)
		cmd.Env = append(os.Environ(), "FLOWINFER_CACHE="+t.TempDir())
		cmd.Stdin = strings.NewReader("Once upon a time\nThe little dog\n/exit\n")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("chat %v: %v\n%s", flags, err, errb.String())
		}
		return out.String()
	}
	want := chat("--backend", "cpu")
	if len(want) < 60 {
		t.Fatalf("cpu: want two replies of 30 tokens, got %q", want)
	}
	for _, ngl := range []string{"99", "3"} {
		if got := chat("--backend", "vulkan", "-ngl", ngl); got != want {
			t.Errorf("vulkan -ngl %s: %q, cpu %q", ngl, got, want)
		}
	}
}
