package stages_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/stages"
)

// refEmbedding computes an embedding the plain way: one forward of the
// whole input on a private context, the last layer's output ("l_out")
// taken from the eval hook, the output RMSNorm written out here, then
// pooling and L2 normalisation in float64.
func refEmbedding(t *testing.T, fx fixture, toks []int32, pool stages.Pooling) []float32 {
	t.Helper()
	m := fx.m
	c, err := m.NewContext(cpu.NewRef(), len(toks), 1, len(toks))
	if err != nil {
		t.Fatal(err)
	}
	d := m.NEmbd
	hidden := make([]float32, len(toks)*d)
	c.SetHooks(model.Hooks{Eval: func(name string, layer int, x []float32, n, dim int) {
		if name == "l_out" && layer == m.NLayer-1 {
			copy(hidden, x)
		}
	}})
	b := &model.Batch{Tokens: toks, Pos: make([]int32, len(toks)), Seq: make([]int32, len(toks)), Logits: make([]bool, len(toks))}
	for i := range b.Pos {
		b.Pos[i] = int32(i)
	}
	if _, err := c.Decode(b); err != nil {
		t.Fatal(err)
	}
	// result_norm: x / sqrt(mean(x²) + eps) ⊙ output_norm
	for r := range toks {
		x := hidden[r*d : (r+1)*d]
		var ss float64
		for _, v := range x {
			ss += float64(v) * float64(v)
		}
		scale := 1 / math.Sqrt(ss/float64(d)+float64(m.RMSEps))
		for i := range x {
			x[i] = float32(float64(x[i]) * scale * float64(m.OutputNorm[i]))
		}
	}
	sum := make([]float64, d)
	var rows []int
	switch pool {
	case stages.PoolMean:
		for r := range toks {
			rows = append(rows, r)
		}
	case stages.PoolCLS:
		rows = []int{0}
	case stages.PoolLast:
		rows = []int{len(toks) - 1}
	}
	for _, r := range rows {
		for i := range d {
			sum[i] += float64(hidden[r*d+i])
		}
	}
	var norm float64
	for _, v := range sum {
		norm += v * v
	}
	out := make([]float32, d)
	for i, v := range sum {
		out[i] = float32(v / math.Sqrt(norm))
	}
	return out
}

// embedReq is an embedding request with a collector.
func embedReq(toks []int32, pool stages.Pooling) (*stages.Request, *collector) {
	col := newCollector()
	return &stages.Request{Prompt: toks, Pooling: pool, Emit: col.emit}, col
}

func maxDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

func l2(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

const embedTol = 2e-6 // float32 rounding of the norm and the mean

var pools = []stages.Pooling{stages.PoolMean, stages.PoolCLS, stages.PoolLast}

// TestEmbeddingMatchesReference: each pooling, through the whole graph
// (prefill in several chunks), equals the plain computation, has norm 1,
// and the three poolings differ.
func TestEmbeddingMatchesReference(t *testing.T) {
	fx := load(t, "stories260K.gguf")
	toks := fx.tok.Encode("Once upon a time, there was a little girl named Lily. She loved to play outside.", true, true)
	got := map[stages.Pooling][]float32{}
	for _, pool := range pools {
		e, err := stages.NewEngine(fx.m, fx.tok, cpu.NewRef(), stages.Config{NCtx: 64, MaxBatch: 7}, nil)
		if err != nil {
			t.Fatal(err)
		}
		r, col := embedReq(toks, pool)
		if err := runEngine(t, e, r); err != nil {
			t.Fatal(err)
		}
		ev := col.final
		if ev.Finish != stages.FinishStop || ev.Err != nil || col.text.Len() != 0 {
			t.Fatalf("%v: finish %q err %v text %q", pool, ev.Finish, ev.Err, col.text.String())
		}
		if ev.Usage.PromptTokens != len(toks) || ev.Usage.GeneratedTokens != 0 {
			t.Errorf("%v: usage %+v", pool, ev.Usage)
		}
		if len(ev.Embedding) != fx.m.NEmbd {
			t.Fatalf("%v: %d values, want %d", pool, len(ev.Embedding), fx.m.NEmbd)
		}
		if d := maxDiff(ev.Embedding, refEmbedding(t, fx, toks, pool)); d > embedTol {
			t.Errorf("%v: differs from the reference by %g", pool, d)
		}
		if n := l2(ev.Embedding); math.Abs(n-1) > 1e-6 {
			t.Errorf("%v: norm %v", pool, n)
		}
		got[pool] = ev.Embedding
	}
	for i, a := range pools {
		for _, b := range pools[i+1:] {
			if maxDiff(got[a], got[b]) < 1e-3 {
				t.Errorf("%v and %v embeddings are the same", a, b)
			}
		}
	}
	// cls of a text is last of its first token alone (causal attention)
	one, col := embedReq(toks[:1], stages.PoolLast)
	e, _ := stages.NewEngine(fx.m, fx.tok, cpu.NewRef(), stages.Config{NCtx: 64}, nil)
	if err := runEngine(t, e, one); err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(col.final.Embedding, got[stages.PoolCLS]); d != 0 {
		t.Errorf("cls differs from the first token alone by %g", d)
	}
}

// TestEmbeddingsAmongGeneration: embedding requests running together with
// generation requests, in a KV cache small enough to preempt, leave the
// generated text as it is alone, and their vectors equal the ones computed
// alone; the same text twice gives the same vector; an embedding request
// after a generation request with the same prompt (cached) is unchanged.
func TestEmbeddingsAmongGeneration(t *testing.T) {
	fx := load(t, "stories260K.gguf")
	prompts := prompts32()[:8]
	gens := soloTexts(t, fx, prompts[:4], 40)
	solo := map[string][]float32{}
	for _, p := range prompts {
		solo[p] = refEmbedding(t, fx, fx.tok.Encode(p, true, true), stages.PoolMean)
	}
	for _, lay := range layouts {
		for _, kv := range []int{0, 64} {
			if lay.name == "fixed" && kv > 0 {
				continue
			}
			e, err := stages.NewEngine(fx.m, fx.tok, lay.ops(), stages.Config{NCtx: 64, NSeq: 6, MaxBatch: 16, BlockSize: 8, KVTokens: kv}, nil)
			if err != nil {
				t.Fatal(err)
			}
			var reqs []*stages.Request
			var gcols []*collector
			ecols := map[int][]*collector{}
			for i, p := range prompts {
				toks := fx.tok.Encode(p, true, true)
				if i < 4 {
					c := newCollector()
					gcols = append(gcols, c)
					reqs = append(reqs, &stages.Request{Prompt: toks, Params: greedy(), MaxTokens: 40, IgnoreEOG: true, Emit: c.emit})
				}
				for range 2 { // each text twice; the first four also generated
					r, c := embedReq(toks, stages.PoolMean)
					ecols[i] = append(ecols[i], c)
					reqs = append(reqs, r)
				}
			}
			if err := runEngine(t, e, reqs...); err != nil {
				t.Fatal(err)
			}
			name := lay.name + "/kv" + itoa(kv)
			for i, c := range gcols {
				if got := c.text.String(); got != gens[i] {
					t.Errorf("%s: generation %d among embeddings: %q, alone %q", name, i, got, gens[i])
				}
			}
			for i, p := range prompts {
				a, b := ecols[i][0].final.Embedding, ecols[i][1].final.Embedding
				if maxDiff(a, b) != 0 {
					t.Errorf("%s: %q embedded twice differs by %g", name, p, maxDiff(a, b))
				}
				if d := maxDiff(a, solo[p]); d > embedTol {
					t.Errorf("%s: %q among others differs from the reference by %g", name, p, d)
				}
			}
			st := e.Stats()
			if kv > 0 && st.Preemptions == 0 {
				t.Errorf("%s: a pool of one context never preempted", name)
			}
			if st.KVBlocksUsed != 0 || st.Running != 0 {
				t.Errorf("%s: after the run: %+v", name, st)
			}
			t.Logf("%s: %+v", name, st)
		}
	}
}

// TestEmbeddingReusesCacheOnlyForLast: after a generation request with the
// same prompt, last pooling takes the cached prefix (and is unchanged);
// mean pooling recomputes every row.
func TestEmbeddingReusesCacheOnlyForLast(t *testing.T) {
	fx := load(t, "stories260K.gguf")
	toks := fx.tok.Encode(strings.Repeat("Once upon a time, there was a girl. ", 3), true, true)
	for _, pool := range pools {
		e, _ := stages.NewEngine(fx.m, fx.tok, cpu.NewRef(), stages.Config{NCtx: 128, BlockSize: 8}, nil)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- e.Run(ctx) }()
		gen := newCollector()
		if err := e.Submit(&stages.Request{Prompt: toks, Params: greedy(), MaxTokens: 2, Emit: gen.emit}); err != nil {
			t.Fatal(err)
		}
		<-gen.done
		r, col := embedReq(toks, pool)
		if err := e.Submit(r); err != nil {
			t.Fatal(err)
		}
		<-col.done
		e.Close()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		cancel()
		cached := col.final.Usage.CachedTokens
		if pool == stages.PoolLast && cached == 0 || pool != stages.PoolLast && cached != 0 {
			t.Errorf("%v: %d cached tokens", pool, cached)
		}
		if d := maxDiff(col.final.Embedding, refEmbedding(t, fx, toks, pool)); d > embedTol {
			t.Errorf("%v after a cached prompt: differs from the reference by %g", pool, d)
		}
	}
}

// TestEmbeddingFillsContext: an embedding input may use the whole context
// (nothing is generated); one token more is refused, naming the limit.
func TestEmbeddingFillsContext(t *testing.T) {
	fx := load(t, "stories260K.gguf")
	e, _ := stages.NewEngine(fx.m, fx.tok, cpu.NewRef(), stages.Config{NCtx: 32}, nil)
	toks := make([]int32, 33)
	for i := range toks {
		toks[i] = int32(10 + i)
	}
	r, _ := embedReq(toks, stages.PoolMean)
	if err := e.Submit(r); err == nil || !strings.Contains(err.Error(), "context of 32") {
		t.Errorf("33 tokens in a context of 32: %v", err)
	}
	r, col := embedReq(toks[:32], stages.PoolMean)
	if err := runEngine(t, e, r); err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(col.final.Embedding, refEmbedding(t, fx, toks[:32], stages.PoolMean)); d > embedTol {
		t.Errorf("a full context differs from the reference by %g", d)
	}
	bad := &stages.Request{Prompt: toks[:4], Pooling: stages.Pooling(4)}
	if err := e.Submit(bad); err == nil || !strings.Contains(err.Error(), "pooling(4)") {
		t.Errorf("rank pooling: %v", err)
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	s := ""
	for ; n > 0; n /= 10 {
		s = string(rune('0'+n%10)) + s
	}
	return s
}
