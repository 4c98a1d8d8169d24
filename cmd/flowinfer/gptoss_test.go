package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/quant"
)

// TestGptOssCommands: `gen --preset gpt-oss-small` keeps the preset's YaRN
// keys and writes MXFP4 experts (file type 38 with Q8_0 for the rest);
// `run` generates from it, resident and with its experts streamed under a
// RAM budget (the same greedy text); `bench` names it as llama-bench does;
// `trace` writes a Chrome trace with expert reads.
func TestGptOssCommands(t *testing.T) {
	dir := t.TempDir()
	m := filepath.Join(dir, "gpt-oss-small.gguf")
	if _, stderr, err := flowinfer(t, "gen", "--preset", "gpt-oss-small", "--pure", "--type", "Q8_0", "-o", m); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	f, err := gguf.Open(m)
	if err != nil {
		t.Fatal(err)
	}
	ft, _ := f.GetUint("general.file_type")
	typ, _ := f.GetString("gpt-oss.rope.scaling.type")
	exps, _ := f.Tensor("blk.0.ffn_up_exps.weight")
	f.Close()
	if ft != 38 || typ != "yarn" || exps == nil || exps.Type != quant.MXFP4 {
		t.Fatalf("file type %d, rope scaling %q, experts %v", ft, typ, exps)
	}
	base := []string{"run", "-m", m, "-n", "24", "--temp", "0", "--no-display-prompt", "-p", "Once upon a time"}
	resident, stderr, err := flowinfer(t, base...)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, stderr)
	}
	streamed, stderr, err := flowinfer(t, append(base, "--ram-budget", "4MiB")...)
	if err != nil {
		t.Fatalf("run --ram-budget 4MiB: %v\n%s", err, stderr)
	}
	if resident == "" || streamed != resident || !strings.Contains(stderr, "expert cache") {
		t.Errorf("resident %q, streamed %q (stderr has an expert cache line: %v)", resident, streamed, strings.Contains(stderr, "expert cache"))
	}
	out, stderr, err := flowinfer(t, "bench", "-m", m, "-p", "16", "-n", "4", "-r", "1")
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr)
	}
	if !strings.Contains(out, "gpt-oss ?B MXFP4 MoE") || !strings.Contains(out, "tg4") {
		t.Errorf("bench output:\n%s", out)
	}
	_, _, _, data := runTrace(t, m, "-n", "8", "--ram-budget", "4MiB")
	var tr struct {
		TraceEvents []struct{ Ph, Name string } `json:"traceEvents"`
	}
	if err := json.Unmarshal(data, &tr); err != nil {
		t.Fatalf("trace is not JSON: %v", err)
	}
	reads := 0
	for _, e := range tr.TraceEvents {
		if strings.Contains(e.Name, "read") {
			reads++
		}
	}
	if reads == 0 {
		t.Error("the trace of a streamed gpt-oss run has no read span")
	}
}
