package model_test

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/bench"
	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/model/synth"
	"github.com/flowinfer/flowinfer/quant"
)

// qwen35Write, when set, makes TestQwen35Golden write its models and
// prompt to that directory (the inputs of llama.cpp in
// testdata/qwen35/README.md) instead of testing.
var qwen35Write = flag.String("qwen35-write", "", "write the qwen35 golden's models and prompt to this directory and skip the test")

// qwen35Files are the golden's model files: the preset qwen35-small, seed 1.
var qwen35Files = []struct {
	name string
	o    synth.Options
}{
	{"f32", synth.Options{Type: quant.F32, Seed: 1}},
	{"q4km", synth.Options{Mix: "Q4_K_M", Seed: 1}},
}

// qwen35Prompt is the golden's prompt: the first 37 lines of the golden
// stories text (1531 tokens with BOS in the built-in vocabulary).
func qwen35Prompt(t *testing.T) (prompt, text string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(golden.Dir(t), "text", "stories_eval.txt"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	return strings.Join(lines[:37], ""), string(b)
}

// writeQwen35 writes the golden's model file name into dir.
func writeQwen35(t *testing.T, dir, name string, o synth.Options) string {
	t.Helper()
	s, err := synth.Preset("qwen35-small")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "small-"+name+".gguf")
	if err := synth.WriteFile(path, s, o); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestQwen35Golden: on qwen35-small (F32 and Q4_K_M, regenerated here)
// flowinfer gives llama.cpp's logits at the last position of a 1531-token
// prompt (F32: max |Δ| ≤ 1e-4; Q4_K_M: max |Δ| ≤ 0.1 and rms ≤ 0.02, the
// bounds of cpu/golden_test.go), its 64-token greedy continuation, and
// llama-perplexity's running values on the golden stories text (-c 512)
// within one unit of the 4th decimal it prints; all with F32 KV, as
// llama.cpp was run (testdata/qwen35/README.md).
func TestQwen35Golden(t *testing.T) {
	prompt, text := qwen35Prompt(t)
	dir := t.TempDir()
	if *qwen35Write != "" {
		dir = *qwen35Write
		for _, f := range qwen35Files {
			writeQwen35(t, dir, f.name, f.o)
		}
		if err := os.WriteFile(filepath.Join(dir, "prompt.txt"), []byte(prompt), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Skipf("wrote %s", dir)
	}
	be := cpu.NewBackend(0, cpu.Best())
	defer be.Close()
	for _, f := range qwen35Files {
		t.Run(f.name, func(t *testing.T) {
			checkHybridGolden(t, be, writeQwen35(t, dir, f.name, f.o), filepath.Join("testdata", "qwen35", f.name), f.name == "f32", prompt, text)
		})
	}
}

// checkHybridGolden compares the model at path with llama.cpp's numbers in
// want+".logits", ".greedy.ids" and ".ppl" (testdata/qwen35/README.md says
// how they are made): the last-position logits of prompt (F32: max |Δ| ≤
// 1e-4; quantized: max |Δ| ≤ 0.1 and rms ≤ 0.02), the 64-token greedy
// continuation of prompt without its final newline (a quantized file may
// leave it at a near-tie), and the running perplexity of text at -c 512.
func checkHybridGolden(t *testing.T, be *cpu.Backend, path, want string, f32 bool, prompt, text string) {
	t.Helper()
	b, err := model.Open(path, be.Supports, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ids := b.Tokenizer.Encode(prompt, true, false)
	wantN, wantLogits := readLogits(t, want+".logits")
	if len(ids) != wantN {
		t.Fatalf("prompt is %d tokens, llama.cpp's %d", len(ids), wantN)
	}
	V := b.Model.NVocab
	mctx, err := b.Model.NewContextOf(be, model.KVTypes{K: model.KVF32, V: model.KVF32}, 4096, 1, 2048)
	if err != nil {
		t.Fatal(err)
	}
	logits := decodeFrom(t, mctx, ids, 0, 2048)
	var maxAbs, sq float64
	for i, w := range wantLogits {
		d := math.Abs(float64(logits[i]) - w)
		maxAbs = max(maxAbs, d)
		sq += d * d
	}
	rms := math.Sqrt(sq / float64(V))
	t.Logf("last-position logits: max |Δ| %.3g, rms %.3g", maxAbs, rms)
	if f32 && maxAbs > 1e-4 {
		t.Errorf("max |Δlogit| %.3g > 1e-4", maxAbs)
	} else if !f32 && (maxAbs > 0.1 || rms > 0.02) {
		t.Errorf("max |Δlogit| %.3g (limit 0.1), rms %.3g (limit 0.02)", maxAbs, rms)
	}
	// greedy continuation of the prompt without its final newline
	// (as llama-completion -f reads it), fed in chunks of 512
	gctx, err := b.Model.NewContextOf(be, model.KVTypes{K: model.KVF32, V: model.KVF32}, 4096, 1, 512)
	if err != nil {
		t.Fatal(err)
	}
	gids := b.Tokenizer.Encode(strings.TrimSuffix(prompt, "\n"), true, false)
	nIDs, wantIDs := readLogits(t, want+".greedy.ids")
	if len(gids) != nIDs || len(wantIDs) != 64 {
		t.Fatalf("greedy prompt %d tokens, llama.cpp's %d (%d ids)", len(gids), nIDs, len(wantIDs))
	}
	logits = decodeFrom(t, gctx, gids, 0, 512)
	for i, w := range wantIDs {
		row := logits[len(logits)-V:]
		best := int32(golden.Argmax(row))
		if best != int32(w) {
			// A quantized file may take the other side of a
			// near-tie (cpu/golden_test.go: a top-2 margin within
			// twice the logits' measured deviation); F32 may not.
			if m := top2Margin(row); f32 || m > 2*maxAbs {
				t.Errorf("greedy step %d: token %d, llama.cpp %d (top-2 margin %.3g)", i, best, int(w), m)
			} else {
				t.Logf("greedy: identical for %d tokens, then a near-tie (margin %.3g ≤ 2×%.3g)", i, m, maxAbs)
			}
			break
		}
		pos := int32(len(gids) + i)
		if logits, err = gctx.Decode(&model.Batch{Tokens: []int32{best}, Pos: []int32{pos}, Seq: []int32{0}}); err != nil {
			t.Fatal(err)
		}
	}
	// perplexity
	toks := b.Tokenizer.Encode(text, true, false)
	pctx, err := b.Model.NewContextOf(be, model.KVTypes{K: model.KVF32, V: model.KVF32}, 512, 1, 512)
	if err != nil {
		t.Fatal(err)
	}
	r, err := bench.Perplexity(context.Background(), pctx, toks, bench.PerplexityOptions{NCtx: 512, BOS: b.Tokenizer.BOS()})
	if err != nil {
		t.Fatal(err)
	}
	wantPPL := readRunning(t, want+".ppl")
	if len(wantPPL) != len(r.Running) {
		t.Fatalf("%d chunks, llama.cpp %d", len(r.Running), len(wantPPL))
	}
	// F32: one unit of the 4th printed decimal; quantized: 0.5%
	// (bench/perplexity_test.go's bound for quantized activations)
	for i, p := range r.Running {
		if f32 && math.Abs(p-wantPPL[i]) > 1.5e-4 || math.Abs(p-wantPPL[i]) > 0.005*wantPPL[i] {
			t.Errorf("running PPL [%d] %.4f, llama.cpp %.4f", i+1, p, wantPPL[i])
		}
	}
	t.Logf("PPL %v, llama.cpp %v", r.Running, wantPPL)
}

// top2Margin is the difference between the two largest values of row.
func top2Margin(row []float32) float64 {
	a, b := math.Inf(-1), math.Inf(-1)
	for _, v := range row {
		if x := float64(v); x > a {
			a, b = x, a
		} else if x > b {
			b = x
		}
	}
	return a - b
}

// decodeFrom feeds ids to sequence 0 from position at in batches of at most
// batch tokens and returns the last row's logits.
func decodeFrom(t *testing.T, mctx *model.Context, ids []int32, at, batch int) []float32 {
	t.Helper()
	var logits []float32
	for i := 0; i < len(ids); i += batch {
		n := min(batch, len(ids)-i)
		b := &model.Batch{Tokens: ids[i : i+n], Pos: make([]int32, n), Seq: make([]int32, n), Logits: make([]bool, n)}
		for j := range n {
			b.Pos[j] = int32(at + i + j)
		}
		b.Logits[n-1] = true
		var err error
		if logits, err = mctx.Decode(b); err != nil {
			t.Fatal(err)
		}
	}
	return logits
}

// readLogits reads a .logits golden: "tokens N", then one logit per line.
func readLogits(t *testing.T, path string) (int, []float64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := -1
	var out []float64
	for sc.Scan() {
		if n < 0 {
			if _, err := fmt.Sscanf(sc.Text(), "tokens %d", &n); err != nil {
				t.Fatalf("%s: first line %q", path, sc.Text())
			}
			continue
		}
		v, err := strconv.ParseFloat(sc.Text(), 64)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, v)
	}
	return n, out
}

// readRunning reads llama-perplexity's "[1]x,[2]y,..." line from its output.
func readRunning(t *testing.T, path string) []float64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if !strings.HasPrefix(line, "[1]") {
			continue
		}
		return golden.ParseRunning(t, line)
	}
	t.Fatalf("%s: no running values", path)
	return nil
}

// openQwen35 writes qwen35-small (F32, seed 1) and loads it on be.
func openQwen35(t *testing.T, be model.Ops) *model.Bundle {
	t.Helper()
	b, err := model.Open(writeQwen35(t, t.TempDir(), "f32", synth.Options{Type: quant.F32, Seed: 1}), be.Supports, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// stateOf copies sequence seq's recurrent state (every recurrent layer).
func stateOf(kv *model.KVCache, h *model.Hyper, seq int) []float32 {
	var out []float32
	for il := range h.NLayer {
		if h.IsRecurrent(il) {
			c, d := kv.State.Layer(il, seq)
			out = append(append(out, c...), d...)
		}
	}
	return out
}

func maxDiff(a, b []float32) float64 {
	var m float64
	for i := range a {
		m = max(m, math.Abs(float64(a[i]-b[i])))
	}
	return m
}

// TestQwen35ChunkedPrefill: prefill in uneven chunks, token by token, and
// interleaved with another sequence gives the logits and recurrent state of
// one batch (checkHybridChunks), a fork (its KV rows copied by block, its
// state by State.Copy) continues as its source, and a batch that skips
// positions of a fresh sequence is refused.
func TestQwen35ChunkedPrefill(t *testing.T) {
	be := cpu.NewBackend(0, cpu.Best())
	defer be.Close()
	b := openQwen35(t, be)
	m := b.Model
	ids := checkHybridChunks(t, be, b)
	kv, err := model.NewBlockKVCache(&m.Hyper, model.KVTypes{K: model.KVF32, V: model.KVF32}, 256, 512, 2)
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.NewContextKV(be, kv, 256)
	if err != nil {
		t.Fatal(err)
	}
	bt := &model.Batch{Tokens: ids, Pos: make([]int32, len(ids)), Seq: make([]int32, len(ids)), Logits: make([]bool, len(ids))}
	for j := range ids {
		bt.Pos[j], bt.Seq[j] = int32(j), 1
	}
	if _, err := c.Decode(bt); err != nil {
		t.Fatal(err)
	}
	kv.CopyRows(0, 2, len(ids)) // seq 1's first block to seq 0's
	kv.State.Copy(0, 1)
	var logits []float32
	for s := range int32(2) {
		got, err := c.Decode(&model.Batch{Tokens: []int32{5}, Pos: []int32{int32(len(ids))}, Seq: []int32{s}})
		if err != nil {
			t.Fatal(err)
		}
		if s == 0 {
			logits = slices.Clone(got)
		} else if d := maxDiff(got, logits); d != 0 {
			t.Errorf("fork: the copy's next logits differ by %.3g", d)
		}
	}
}

// checkHybridChunks decodes the first 200 tokens of the golden prompt with
// b's model in one batch, then in chunks of 1, 7, 64, 3 and 125 tokens,
// token by token, and interleaved row by row with a second sequence, and
// requires each way's last logits and recurrent state within 1e-5 of one
// batch's; a batch that skips positions, or starts a fresh sequence after
// position 0 (what reusing a cached KV prefix would do), must be refused.
// It returns the tokens.
func checkHybridChunks(t *testing.T, be model.Ops, b *model.Bundle) []int32 {
	t.Helper()
	m := b.Model
	prompt, _ := qwen35Prompt(t)
	ids := b.Tokenizer.Encode(prompt, true, false)[:200]
	newCtx := func() *model.Context {
		c, err := m.NewContextOf(be, model.KVTypes{K: model.KVF32, V: model.KVF32}, 512, 2, 256)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	one := newCtx()
	if got, w := one.KV.State.Bytes(), model.RecurrentStateBytes(&m.Hyper, 2); got != w || got == 0 {
		t.Errorf("recurrent state %d bytes, RecurrentStateBytes %d", got, w)
	}
	want := slices.Clone(decodeFrom(t, one, ids, 0, 256))
	wantState := stateOf(one.KV, &m.Hyper, 0)
	if m.NExpert > 0 {
		if runs, most := one.ExpertRuns(), int64(m.NLayer*m.NExpert); runs == 0 || runs > most {
			t.Errorf("one batch of %d tokens ran %d experts (at most %d: each chosen expert once per layer)", len(ids), runs, most)
		}
	}
	check := func(name string, c *model.Context, logits []float32, seq int) {
		t.Helper()
		if d := maxDiff(logits, want); d > 1e-5 {
			t.Errorf("%s: logits differ from one batch by %.3g", name, d)
		}
		if d := maxDiff(stateOf(c.KV, &m.Hyper, seq), wantState); d > 1e-5 {
			t.Errorf("%s: recurrent state differs from one batch by %.3g", name, d)
		}
	}
	c := newCtx()
	var logits []float32
	at := 0
	for _, n := range []int{1, 7, 64, 3, 125} {
		logits = decodeFrom(t, c, ids[at:at+n], at, n)
		at += n
	}
	check("chunks 1,7,64,3,125", c, logits, 0)
	c = newCtx()
	check("token by token", c, decodeFrom(t, c, ids, 0, 1), 0)
	// seq 1 gets the prompt, seq 0 other tokens
	c = newCtx()
	for at := 0; at < len(ids); at += 50 {
		bt := &model.Batch{}
		for j := at; j < at+50; j++ {
			bt.Tokens = append(bt.Tokens, ids[j], ids[len(ids)-1-j])
			bt.Pos = append(bt.Pos, int32(j), int32(j))
			bt.Seq = append(bt.Seq, 1, 0)
		}
		bt.Logits = make([]bool, len(bt.Tokens))
		bt.Logits[len(bt.Tokens)-2] = true
		out, err := c.Decode(bt)
		if err != nil {
			t.Fatal(err)
		}
		logits = out
	}
	check("interleaved with another sequence", c, logits, 1)
	fresh := newCtx()
	for _, bt := range []*model.Batch{
		{Tokens: []int32{1}, Pos: []int32{10}, Seq: []int32{0}},
		{Tokens: []int32{1, 2}, Pos: []int32{0, 2}, Seq: []int32{0, 0}},
	} {
		if _, err := fresh.Decode(bt); !errors.Is(err, model.ErrBatch) {
			t.Errorf("batch at positions %v of a fresh sequence: error %v, want ErrBatch", bt.Pos, err)
		}
	}
	return ids
}

// TestQwen35DecodeAllocs: a qwen35 decode step (both kinds of layers)
// allocates nothing once the Context exists.
func TestQwen35DecodeAllocs(t *testing.T) {
	be := cpu.NewBackend(1, nil)
	defer be.Close()
	m := openQwen35(t, be).Model
	c, err := m.NewContextOf(be, model.KVTypes{}, 128, 1, 8)
	if err != nil {
		t.Fatal(err)
	}
	if allocs := decodeAllocs(t, c); allocs != 0 {
		t.Errorf("%v allocations per decode step, want 0", allocs)
	}
}
