package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/bench"
	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model"
)

func TestThroughput(t *testing.T) {
	dir := golden.Dir(t)
	b, err := model.Open(filepath.Join(dir, "models/stories260K.gguf"), cpu.NewRef().Supports, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	be := cpu.NewBackend(2, nil)
	defer be.Close()
	for _, tc := range []struct {
		name                    string
		np, ng, depth, maxBatch int
		want                    []string
	}{
		{"pp+tg", 40, 8, 0, 40, []string{"pp40", "tg8"}},
		{"pp in batches", 40, 0, 0, 16, []string{"pp40"}},
		{"tg only", 0, 12, 0, 1, []string{"tg12"}},
		{"at depth", 24, 4, 37, 16, []string{"pp24 @ d37", "tg4 @ d37"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := tc.depth + max(tc.np, tc.ng)
			rec := &posRecorder{Backend: be}
			mctx, err := b.Model.NewContext(rec, n, 1, tc.maxBatch)
			if err != nil {
				t.Fatal(err)
			}
			probes := 0
			tests, err := bench.Throughput(context.Background(), mctx, bench.ThroughputConfig{
				NPrompt: tc.np, NGen: tc.ng, NDepth: tc.depth, Reps: 3, Seed: 1, BOS: b.Tokenizer.BOS(),
				Probe: func() float64 { probes++; return float64(probes) },
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(tests) != len(tc.want) {
				t.Fatalf("%d tests, want %d", len(tests), len(tc.want))
			}
			for i, tt := range tests {
				if tt.Name() != tc.want[i] {
					t.Errorf("test %d is %s, want %s", i, tt.Name(), tc.want[i])
				}
				if len(tt.SamplesNS) != 3 || tt.AvgTS() <= 0 || tt.NDepth != tc.depth {
					t.Errorf("%s: samples %v, avg %g t/s, depth %d", tt.Name(), tt.SamplesNS, tt.AvgTS(), tt.NDepth)
				}
				// the probe ran before and after each tg repetition, and
				// only then; each repetition keeps the larger
				if want := []float64{2, 4, 6}; tt.NGen == 0 && len(tt.Probes) != 0 || tt.NGen > 0 && !slices.Equal(tt.Probes, want) {
					t.Errorf("%s: probes %v", tt.Name(), tt.Probes)
				}
			}
			if want := 6 * min(tc.ng, 1); probes != want {
				t.Errorf("%d probes, want %d", probes, want)
			}
			// every position of the context was used: the depth once, the
			// tests after it; no step started below the depth but the
			// depth's own (at most ceil(depth/maxBatch) of them)
			if rec.maxPos != int32(n-1) {
				t.Errorf("last position %d, want %d", rec.maxPos, n-1)
			}
			if d := (tc.depth + tc.maxBatch - 1) / tc.maxBatch; tc.depth > 0 && rec.belowDepth(tc.depth) != d*len(b.Model.Layers) {
				t.Errorf("%d attention calls started below the depth %d, want %d", rec.belowDepth(tc.depth), tc.depth, d*len(b.Model.Layers))
			}
		})
	}
	// a sliding window on layer 0: its ring loses the depth's window to
	// each test, and the repetitions still start from the depth
	win := *b.Model
	win.Hyper.Window = make([]int, len(win.Layers))
	win.Hyper.Window[0] = 8
	wctx, err := win.NewContext(be, 37+40, 1, 16)
	if err != nil {
		t.Fatal(err)
	}
	if wctx.KV.Ring(0) == 0 {
		t.Fatal("layer 0 has no ring")
	}
	for i := range 2 { // the second call finds the depth ready
		if _, err := bench.Throughput(context.Background(), wctx, bench.ThroughputConfig{
			NPrompt: 40, NGen: 4, NDepth: 37, Reps: 3, Seed: 1, BOS: b.Tokenizer.BOS(), DepthReady: i > 0,
		}); err != nil {
			t.Fatalf("sliding window at a depth: %v", err)
		}
	}
	dctx, _ := b.Model.NewContext(be, 40, 1, 16)
	if _, err := bench.Throughput(context.Background(), dctx, bench.ThroughputConfig{NPrompt: 8, NDepth: 33, Reps: 1}); err == nil {
		t.Error("a prompt at a depth beyond the context was accepted")
	}
	mctx, _ := b.Model.NewContext(be, 16, 1, 16)
	if _, err := bench.Throughput(context.Background(), mctx, bench.ThroughputConfig{NPrompt: 17, Reps: 1}); err == nil {
		t.Error("a prompt longer than the context was accepted")
	}
	if _, err := bench.Throughput(context.Background(), mctx, bench.ThroughputConfig{Reps: 1}); err == nil {
		t.Error("no tests was accepted")
	}
}

// posRecorder records the first position of every Attention call.
type posRecorder struct {
	*cpu.Backend
	starts []int32
	maxPos int32
}

func (r *posRecorder) Attention(out, q []float32, kv *model.KVCache, layer int, seq, pos []int32, h *model.Hyper, a model.Attn) {
	r.starts = append(r.starts, pos[0])
	r.maxPos = max(r.maxPos, pos[len(pos)-1])
	r.Backend.Attention(out, q, kv, layer, seq, pos, h, a)
}

// belowDepth returns the calls that started below position d.
func (r *posRecorder) belowDepth(d int) int {
	n := 0
	for _, p := range r.starts {
		if int(p) < d {
			n++
		}
	}
	return n
}

func TestStats(t *testing.T) {
	tt := bench.Test{NPrompt: 512, SamplesNS: []int64{4e9, 5e9}}
	ts := tt.TS()
	if ts[0] != 128 || ts[1] != 102.4 {
		t.Fatalf("TS = %v", ts)
	}
	if got := tt.AvgTS(); got != 115.2 {
		t.Errorf("AvgTS = %g", got)
	}
	// sample standard deviation of {128, 102.4}: 25.6/√2
	if got := tt.StddevTS(); got < 18.1019 || got > 18.1020 {
		t.Errorf("StddevTS = %g", got)
	}
}

func sampleResults() []bench.Result {
	info := bench.ModelInfo{Filename: "m.gguf", Type: "llama 1B Q4_K - Medium", Size: 638885408 - 6*1024*1024, NParams: 1_040_000_000}
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	return []bench.Result{
		{Model: info, Backend: "CPU", ISA: "avx2", Threads: 2, NBatch: 512, TypeK: "f16", TypeV: "f16", Build: "dev",
			Test: bench.Test{NPrompt: 512, SamplesNS: []int64{4e9, 5e9}, Time: at}},
		{Model: info, Backend: "CPU", ISA: "avx2", Threads: 2, NBatch: 512, TypeK: "f16", TypeV: "f16", Build: "dev",
			Test: bench.Test{NGen: 128, SamplesNS: []int64{4e9, 4e9}, Time: at}},
	}
}

// TestWriteMarkdown pins llama-bench's table layout.
func TestWriteMarkdown(t *testing.T) {
	var buf bytes.Buffer
	if err := bench.WriteMarkdown(&buf, sampleResults()); err != nil {
		t.Fatal(err)
	}
	want := `| model                          |       size |     params | backend    | threads |            test |                  t/s |
| ------------------------------ | ---------: | ---------: | ---------- | ------: | --------------: | -------------------: |
| llama 1B Q4_K - Medium         | 603.29 MiB |     1.04 B | CPU        |       2 |           pp512 |       115.20 ± 18.10 |
| llama 1B Q4_K - Medium         | 603.29 MiB |     1.04 B | CPU        |       2 |           tg128 |         32.00 ± 0.00 |

build: flowinfer dev (avx2 kernels)
`
	if got := buf.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	// a KV type other than f16 adds llama-bench's type_k and type_v columns
	rs := sampleResults()
	rs[1].TypeK, rs[1].TypeV = "q8_0", "tq3"
	buf.Reset()
	if err := bench.WriteMarkdown(&buf, rs); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| threads | type_k | type_v |            test |", "|       2 |    f16 |    f16 |           pp512 |", "|       2 |   q8_0 |    tq3 |           tg128 |"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("no %q in\n%s", want, buf.String())
		}
	}
}

// TestWriteJSON checks llama-bench's field names and values.
func TestWriteJSON(t *testing.T) {
	var buf bytes.Buffer
	if err := bench.WriteJSON(&buf, sampleResults()); err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d objects", len(got))
	}
	for _, k := range []string{"model_filename", "model_type", "model_size", "model_n_params", "n_threads", "n_prompt", "n_gen",
		"avg_ts", "stddev_ts", "avg_ns", "stddev_ns", "samples_ns", "samples_ts", "test_time", "backends", "type_k"} {
		if _, ok := got[0][k]; !ok {
			t.Errorf("field %s missing", k)
		}
	}
	if got[0]["n_prompt"].(float64) != 512 || got[0]["avg_ts"].(float64) != 115.2 || got[1]["n_gen"].(float64) != 128 {
		t.Errorf("values: %v", got[0])
	}
	if s := got[0]["test_time"].(string); !strings.HasPrefix(s, "2026-11-21T10:00:00") {
		t.Errorf("test_time %q", s)
	}
}

func TestDescribeModel(t *testing.T) {
	dir := golden.Dir(t)
	b, err := model.Open(filepath.Join(dir, "models/synth-llama-Q4_K_M.gguf"), cpu.NewRef().Supports, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	mi := bench.DescribeModel("x.gguf", b.File)
	// 2 layers: llama.cpp has no size label for it
	if mi.Type != "llama ?B Q4_K - Medium" || mi.Size == 0 || mi.NParams == 0 {
		t.Errorf("%+v", mi)
	}
	// gpt-oss: llama.cpp's labels by layer count, MXFP4_MOE's file type
	for _, c := range []struct {
		layers, ftype uint32
		want          string
	}{{24, 38, "gpt-oss 20B MXFP4 MoE"}, {36, 0, "gpt-oss 120B all F32"}, {4, 38, "gpt-oss ?B MXFP4 MoE"}} {
		w := gguf.NewWriter()
		w.Set("general.architecture", gguf.String("gpt-oss"))
		w.Set("gpt-oss.block_count", gguf.Uint32(c.layers))
		w.Set("general.file_type", gguf.Uint32(c.ftype))
		var buf bytes.Buffer
		if _, err := w.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		f, err := gguf.Parse(buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if got := bench.DescribeModel("x.gguf", f).Type; got != c.want {
			t.Errorf("gpt-oss, %d layers, file type %d: %q, want %q", c.layers, c.ftype, got, c.want)
		}
	}
}

func TestDecodeBytes(t *testing.T) {
	dir := golden.Dir(t)
	b, err := model.Open(filepath.Join(dir, "models/synth-llama-Q8_0.gguf"), cpu.NewRef().Supports, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m := b.Model
	// every 2-D weight but the embeddings is read once, plus one
	// embedding row and the cache rows
	var want int64
	for _, tn := range b.File.Tensors {
		if len(tn.Dims) == 2 && tn.Name != "token_embd.weight" {
			want += int64(tn.Size)
		}
	}
	kv, err := model.KVBytesPerToken(&m.Hyper, model.KVTypes{K: model.KVQ8_0, V: model.KVF16})
	if err != nil {
		t.Fatal(err)
	}
	if kv != m.NLayer*(m.KDim()/32*34+m.VDim()*2) {
		t.Errorf("q8_0/f16 cache: %d bytes per token", kv)
	}
	want += int64(m.TokEmbd.RowBytes) + int64(10*kv)
	if got := bench.DecodeBytes(m, kv, 9); got != want {
		t.Errorf("DecodeBytes = %d, want %d", got, want)
	}
}

// TestProbeRegions: a probe over regions of odd sizes (and an empty one)
// reads them all, any number of threads, and changes nothing.
func TestProbeRegions(t *testing.T) {
	var rs [][]byte
	for i, n := range []int{3 << 20, 0, 1, 5<<20 + 7, 65} {
		r := make([]byte, n)
		for j := range r {
			r[j] = byte(i + j)
		}
		rs = append(rs, r)
	}
	for _, threads := range []int{1, 2, 3} {
		p := bench.ProbeRegions(rs, threads)
		if p.Size() != 8<<20+73 {
			t.Fatalf("size %d", p.Size())
		}
		if bw := p.Measure(2); bw < 1e8 {
			t.Errorf("%d threads: %.3g B/s", threads, bw)
		}
	}
	for i, r := range rs {
		for j, v := range r {
			if v != byte(i+j) {
				t.Fatalf("region %d byte %d changed", i, j)
			}
		}
	}
	if bw := bench.ProbeRegions(nil, 2).Measure(1); bw != 0 {
		t.Errorf("no regions: %g B/s", bw)
	}
}

// TestAttentionFLOPs: llama-1b's shape at depth 8192 does 1.07 GFLOP of
// attention per token (16 layers × 32 heads × 2·(64+64) × 8192).
func TestAttentionFLOPs(t *testing.T) {
	h := model.Hyper{NLayer: 16, NHead: 32, NHeadKV: 8, HeadDimK: 64, HeadDimV: 64}
	if got, want := bench.AttentionFLOPs(&h, 8191), 16.0*32*256*8192; got != want {
		t.Errorf("AttentionFLOPs = %g, want %g", got, want)
	}
	h.HeadDimV = 32 // MLA-style unequal K and V widths count each
	if got, want := bench.AttentionFLOPs(&h, 0), 16.0*32*2*96; got != want {
		t.Errorf("AttentionFLOPs(dv=32, pos 0) = %g, want %g", got, want)
	}
}

// TestAttentionOps: the split of AttentionFLOPs by the kernels' arithmetic
// (cpu.IntegerKV) follows each layer's types, --kv-recent's f16 rows and
// the protected layers, and adds up to the whole.
func TestAttentionOps(t *testing.T) {
	h := model.Hyper{NLayer: 4, NHead: 8, NHeadKV: 2, HeadDimK: 64, HeadDimV: 64}
	const pos = 1000
	half := 8.0 * 2 * 64 * (pos + 1) // one layer's K scores (or V sums)
	for _, c := range []struct {
		kv              model.KVTypes
		flt, intK, intV float64 // in layer halves
	}{
		{model.KVTypes{K: model.KVF16, V: model.KVF16}, 8, 0, 0},
		{model.KVTypes{K: model.KVQ4_0, V: model.KVQ8_0}, 0, 4, 4},
		{model.KVTypes{K: model.KVQ8_0, V: model.KVTQ3}, 4, 0, 4},
		{model.KVTypes{K: model.KVTQ4, V: model.KVF16}, 4, 4, 0},
		{model.KVTypes{K: model.KVQ4_0, V: model.KVQ4_0, Protect: 1}, 4, 2, 2}, // layers 0 and 3 in f16
	} {
		flt, intK, intV, err := bench.AttentionOps(&h, c.kv, pos, cpu.IntegerKV)
		if err != nil || flt != c.flt*half || intK != c.intK*half || intV != c.intV*half {
			t.Errorf("%s: %g, %g, %g (%v), want %g, %g, %g", c.kv, flt/half, intK/half, intV/half, err, c.flt, c.intK, c.intV)
		}
	}
	// --kv-recent: the recent rows of the quantized halves are f16
	kv := model.KVTypes{K: model.KVQ4_0, V: model.KVF16, Recent: 256}
	r := float64(kv.RecentRows(pos))
	if r <= 0 || r >= pos {
		t.Fatalf("RecentRows(%d) = %g", pos, r)
	}
	flt, intK, intV, err := bench.AttentionOps(&h, kv, pos, cpu.IntegerKV)
	row := 8.0 * 2 * 64 // one position's K scores in a layer
	if wantK := 4 * row * (pos + 1 - r); err != nil || intK != wantK || intV != 0 || flt+intK != bench.AttentionFLOPs(&h, pos) {
		t.Errorf("%s: %g, %g, %g (%v), want int K %g, the rest float", kv, flt, intK, intV, err, wantK)
	}
	h.HeadDimK = 48 // q4_0 needs blocks of 32
	if _, _, _, err := bench.AttentionOps(&h, model.KVTypes{K: model.KVQ4_0, V: model.KVF16}, pos, cpu.IntegerKV); err == nil {
		t.Error("q4_0 K of 48 values: no error")
	}
}

// TestComputePeak: run is called threads times per repetition, at once,
// and the rate is the operations of all threads over the wall time, which
// the sleeps bound from above.
func TestComputePeak(t *testing.T) {
	for _, threads := range []int{1, 2, 3} {
		var calls, running, most atomic.Int64
		run := func() float64 {
			calls.Add(1)
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(20 * time.Millisecond)
			running.Add(-1)
			return 1000
		}
		r := bench.ComputePeak(run, threads, 2)
		if calls.Load() != int64(2*threads) {
			t.Errorf("%d threads: run called %d times, want %d", threads, calls.Load(), 2*threads)
		}
		if most.Load() != int64(threads) {
			t.Errorf("%d threads: at most %d runs at once", threads, most.Load())
		}
		if limit := float64(threads) * 1000 / 0.020; r <= 0 || r > limit {
			t.Errorf("%d threads: %g ops/s, want in (0, %g]", threads, r, limit)
		}
	}
	if r := bench.ComputePeak(func() float64 { return 0 }, 2, 1); r != 0 {
		t.Errorf("no work: %g ops/s", r)
	}
}
