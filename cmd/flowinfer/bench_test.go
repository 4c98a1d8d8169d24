package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/bench"
	"github.com/flowinfer/flowinfer/io/gguf"
)

// TestBench runs `flowinfer bench` on a golden model in both output
// formats.
func TestBench(t *testing.T) {
	m, _ := goldenModel(t, "stories260K.gguf")
	out, stderr, err := flowinfer(t, "bench", "-m", m, "-p", "16", "-n", "4", "-r", "2", "-t", "2")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 4 || !strings.HasPrefix(lines[0], "| model ") || !strings.HasSuffix(lines[0], " t/s |") {
		t.Fatalf("not llama-bench's table:\n%s", out)
	}
	if !strings.Contains(lines[2], " pp16 |") || !strings.Contains(lines[3], " tg4 |") || !strings.Contains(lines[2], " ± ") {
		t.Errorf("rows:\n%s", out)
	}
	out, stderr, err = flowinfer(t, "bench", "-m", m, "-p", "8", "-n", "0", "-r", "1", "-o", "json", "--isa", "go")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	var rs []map[string]any
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(rs) != 1 || rs[0]["n_prompt"].(float64) != 8 || rs[0]["isa"] != "go" || rs[0]["avg_ts"].(float64) <= 0 {
		t.Errorf("json: %v", rs)
	}
	if _, _, err := flowinfer(t, "bench", "-m", m, "-p", "0", "-n", "0"); err == nil {
		t.Error("bench with no test succeeded")
	}
	if _, _, err := flowinfer(t, "bench", "-m", m, "-p", "8", "-d", "-1"); err == nil {
		t.Error("bench at a negative depth succeeded")
	}
	// lists and depths, in llama-bench's order and names
	out, stderr, err = flowinfer(t, "bench", "-m", m, "-p", "16,8", "-n", "4", "-d", "0,20", "-r", "1", "-t", "1", "-o", "json")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	rs = nil
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := [][3]float64{{16, 0, 0}, {8, 0, 0}, {0, 4, 0}, {16, 0, 20}, {8, 0, 20}, {0, 4, 20}}
	if len(rs) != len(want) {
		t.Fatalf("%d results, want %d:\n%s", len(rs), len(want), out)
	}
	for i, w := range want {
		if got := [3]float64{rs[i]["n_prompt"].(float64), rs[i]["n_gen"].(float64), rs[i]["n_depth"].(float64)}; got != w {
			t.Errorf("result %d: (n_prompt, n_gen, n_depth) = %v, want %v", i, got, w)
		}
	}
	out, stderr, err = flowinfer(t, "bench", "-m", m, "-p", "16", "-n", "0", "-d", "20", "-r", "1")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if !strings.Contains(out, " pp16 @ d20 |") {
		t.Errorf("no pp16 @ d20 row:\n%s", out)
	}
	// -ctk/-ctv lists: every K type with every V type, K outer
	out, stderr, err = flowinfer(t, "bench", "-m", m, "-p", "8", "-n", "2", "-r", "1", "-t", "1", "-ctk", "f32,f16", "-ctv", "f16,tq3", "-o", "json")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	rs = nil
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	kv := [][2]string{{"f32", "f16"}, {"f32", "f16"}, {"f32", "tq3"}, {"f32", "tq3"}, {"f16", "f16"}, {"f16", "f16"}, {"f16", "tq3"}, {"f16", "tq3"}}
	if len(rs) != len(kv) {
		t.Fatalf("%d results, want %d:\n%s", len(rs), len(kv), out)
	}
	for i, w := range kv {
		if got := [2]string{rs[i]["type_k"].(string), rs[i]["type_v"].(string)}; got != w || rs[i]["avg_ts"].(float64) <= 0 {
			t.Errorf("result %d: (type_k, type_v) = %v, avg_ts %v; want %v", i, got, rs[i]["avg_ts"], w)
		}
	}
	if _, stderr, err := flowinfer(t, "bench", "-m", m, "-p", "8", "-n", "0", "-ctk", "f16,q4_1"); err == nil || !strings.Contains(stderr, `"q4_1"`) {
		t.Errorf("-ctk f16,q4_1: err %v, stderr %q; want a refusal naming q4_1", err, stderr)
	}
}

// TestGen writes the demo preset in several types and checks the files
// load in bench.
func TestGen(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		typ   string
		pure  bool
		ftype uint64
	}{{"Q4_K_M", false, 15}, {"Q8_0", true, 7}, {"IQ4_NL", true, 25}, {"IQ4_XS", true, 30}, {"MXFP4", true, 38},
		{"IQ3_XXS", true, 23}, {"IQ3_S", true, 26}, {"IQ2_XXS", true, 19}, {"IQ2_XS", true, 20},
		{"IQ2_S", true, 29}, {"IQ1_S", true, 24}, {"IQ1_M", true, 31}} {
		t.Run(c.typ, func(t *testing.T) {
			out := filepath.Join(dir, c.typ+".gguf")
			args := []string{"gen", "--preset", "demo", "--type", c.typ, "-o", out, "--seed", "5"}
			if c.pure {
				args = append(args, "--pure")
			}
			if _, stderr, err := flowinfer(t, args...); err != nil {
				t.Fatalf("%v\n%s", err, stderr)
			}
			f, err := gguf.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			ft, _ := f.GetUint("general.file_type")
			f.Close()
			if ft != c.ftype {
				t.Errorf("general.file_type %d, want %d", ft, c.ftype)
			}
			if _, stderr, err := flowinfer(t, "bench", "-m", out, "-p", "8", "-n", "2", "-r", "1"); err != nil {
				t.Fatalf("bench on the generated file: %v\n%s", err, stderr)
			}
		})
	}
	if _, _, err := flowinfer(t, "gen", "--preset", "nope", "-o", filepath.Join(dir, "x.gguf")); err == nil {
		t.Error("unknown preset accepted")
	}
	if _, _, err := flowinfer(t, "gen", "--preset", "demo", "--type", "Q9_9", "--pure", "-o", filepath.Join(dir, "x.gguf")); err == nil {
		t.Error("unknown type accepted")
	}
	// IQ4_XS has no mixture here: without --pure the error says to use it.
	if _, stderr, err := flowinfer(t, "gen", "--preset", "demo", "--type", "IQ4_XS", "-o", filepath.Join(dir, "x.gguf")); err == nil ||
		!strings.Contains(err.Error()+stderr, "--pure") {
		t.Errorf("IQ4_XS mixture: %v %s, want an error pointing to --pure", err, stderr)
	}
	if _, stderr, err := flowinfer(t, "gen", "--preset", "demo", "--type", "IQ2_XXS", "-o", filepath.Join(dir, "x.gguf")); err == nil ||
		!strings.Contains(err.Error()+stderr, "--pure") {
		t.Errorf("IQ2_XXS mixture: %v %s, want an error pointing to --pure", err, stderr)
	}
	// RoPE scaling and context overrides (the rope-scaling golden's models).
	out := filepath.Join(dir, "yarn.gguf")
	if _, stderr, err := flowinfer(t, "gen", "--preset", "demo", "--type", "F32", "--pure", "--ctx", "1024", "--rope-scaling", "yarn",
		"--rope-factor", "4", "--rope-orig-ctx", "256", "-o", out); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	f, err := gguf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	typ, _ := f.GetString("llama.rope.scaling.type")
	fac, _ := f.GetFloat("llama.rope.scaling.factor")
	orig, _ := f.GetUint("llama.rope.scaling.original_context_length")
	ctx, _ := f.GetUint("llama.context_length")
	if typ != "yarn" || fac != 4 || orig != 256 || ctx != 1024 {
		t.Errorf("rope scaling keys: type %q factor %g original context %d context %d", typ, fac, orig, ctx)
	}
	// A preset with its own YaRN (mistral3) keeps it when no --rope flag is
	// given, and the file runs.
	out = filepath.Join(dir, "mistral3.gguf")
	if _, stderr, err := flowinfer(t, "gen", "--preset", "mistral3-small", "--type", "Q4_K_M", "-o", out); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	m3, err := gguf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	typ, _ = m3.GetString("mistral3.rope.scaling.type")
	temp, _ := m3.GetFloat("mistral3.attention.temperature_scale")
	m3.Close()
	if typ != "yarn" || float32(temp) != 0.1 {
		t.Errorf("mistral3-small: rope scaling %q, temperature %g; want the preset's yarn and 0.1", typ, temp)
	}
	if _, stderr, err := flowinfer(t, "bench", "-m", out, "-p", "8", "-n", "2", "-r", "1"); err != nil {
		t.Fatalf("bench on mistral3-small: %v\n%s", err, stderr)
	}
	for _, args := range [][]string{
		{"--rope-factor", "4"}, // no --rope-scaling
		{"--rope-scaling", "longrope"},
		{"--rope-scaling", "yarn", "--rope-factor", "-4"},
		{"--ctx", "-1"},
	} {
		if _, _, err := flowinfer(t, append([]string{"gen", "--preset", "demo", "-o", filepath.Join(dir, "x.gguf")}, args...)...); err == nil {
			t.Errorf("gen %v accepted", args)
		}
	}
}

// TestComputeRoofline checks the second roofline line's arithmetic: a
// step takes at least weights/bandwidth + max(KV/bandwidth, arithmetic at
// the peaks), float32 and integer operations each at their own.
func TestComputeRoofline(t *testing.T) {
	r := &bench.Result{}
	r.NGen, r.NDepth = 32, 8192
	// 2 repetitions: 32 tokens in 1 s (32 t/s) and in 0.8 s (40 t/s),
	// read bandwidth 30 and 40 GB/s before them
	r.SamplesNS = []int64{1e9, 8e8}
	r.Probes = []float64{30e9, 40e9}
	const weights, kv, flops, peak = 600e6, 60e6, 1e9, 200e9 // attention: 5 ms at the peak
	var b strings.Builder
	printComputeRoofline(&b, r, attnOps{flt: flops}, peaks{fma: peak}, 2, weights, kv)
	// rep 1: 20 ms + max(2, 5) ms = 25 ms: 40 t/s ceiling, 32 t/s = 80%
	// rep 2: 15 ms + max(1.5, 5) ms = 20 ms: 50 t/s ceiling, 40 t/s = 80%
	want := "roofline: tg32 @ d8192: attention 1 GFLOP per token, 5.00 ms at the float32 FMA peak (200 GFLOP/s, 2 threads) against 1.50-2.00 ms for its KV bytes; products and attention in turn: ceilings 40.0-50.0 t/s; 36.00 t/s = 80% of them (80%, 80%)\n"
	if b.String() != want {
		t.Errorf("got  %q\nwant %q", b.String(), want)
	}
	// KV bytes slower than the arithmetic (10 and 7.5 ms): the bytes-only
	// ceilings, 1/30 ms and 1/22.5 ms
	b.Reset()
	printComputeRoofline(&b, r, attnOps{flt: flops}, peaks{fma: peak}, 2, weights, 300e6)
	if !strings.Contains(b.String(), "ceilings 33.3-44.4 t/s; 36.00 t/s = 93% of them (96%, 90%)") {
		t.Errorf("KV-bound: %s", b.String())
	}
	// integer scores and sums (0.4 G operations each) at 100 G/s: 1 + 4 +
	// 4 ms; rep 1: 29 ms (34.5 t/s, 32 t/s = 93%), rep 2: 24 ms (41.7 t/s,
	// 96%)
	b.Reset()
	printComputeRoofline(&b, r, attnOps{0.2e9, 0.4e9, 0.4e9}, peaks{peak, 100e9, 100e9}, 2, weights, kv)
	want = "roofline: tg32 @ d8192: attention 1 G operations per token (0.8 G in int16 multiply-adds), 9.00 ms at the measured peaks (float32 FMA 200 GFLOP/s, int16 multiply-add 100 GOP/s, 2 threads) against 1.50-2.00 ms for its KV bytes; products and attention in turn: ceilings 34.5-41.7 t/s; 36.00 t/s = 94% of them (93%, 96%)\n"
	if b.String() != want {
		t.Errorf("integer: got  %q\nwant %q", b.String(), want)
	}
	// AVX-512: scores at 300 G/s, sums at 100: 1 + 1.33 + 4 ms
	b.Reset()
	printComputeRoofline(&b, r, attnOps{0.2e9, 0.4e9, 0.4e9}, peaks{peak, 300e9, 100e9}, 2, weights, kv)
	if !strings.Contains(b.String(), "6.33 ms at the measured peaks (float32 FMA 200 GFLOP/s, int16 multiply-add 300 (scores), 100 (sums) GOP/s, 2 threads)") {
		t.Errorf("two integer peaks: %s", b.String())
	}
}
