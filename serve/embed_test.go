package serve_test

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/serve"
	"github.com/flowinfer/flowinfer/stages"
)

// refEmbedding computes an embedding the plain way: one forward of the
// whole input on a private context, the last layer's output taken from
// the eval hook, the output RMSNorm written out here, then pooling and L2
// normalisation in float64.
func refEmbedding(t *testing.T, m *model.Model, toks []int32, pool stages.Pooling) []float64 {
	t.Helper()
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
	rows := []int{len(toks) - 1}
	switch pool {
	case stages.PoolMean:
		rows = rows[:0]
		for r := range toks {
			rows = append(rows, r)
		}
	case stages.PoolCLS:
		rows = []int{0}
	}
	sum := make([]float64, d)
	for _, r := range rows {
		x := hidden[r*d : (r+1)*d]
		var ss float64
		for _, v := range x {
			ss += float64(v) * float64(v)
		}
		scale := 1 / math.Sqrt(ss/float64(d)+float64(m.RMSEps))
		for i, v := range x {
			sum[i] += float64(v) * scale * float64(m.OutputNorm[i])
		}
	}
	var norm float64
	for _, v := range sum {
		norm += v * v
	}
	for i := range sum {
		sum[i] /= math.Sqrt(norm)
	}
	return sum
}

// vec reads a JSON array of numbers.
func vec(t *testing.T, v any) []float64 {
	t.Helper()
	a, ok := v.([]any)
	if !ok {
		t.Fatalf("not an array: %v", v)
	}
	out := make([]float64, len(a))
	for i, x := range a {
		out[i] = x.(float64)
	}
	return out
}

func diff(a, b []float64) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d float64
	for i := range a {
		d = max(d, math.Abs(a[i]-b[i]))
	}
	return d
}

func norm2(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x * x
	}
	return math.Sqrt(s)
}

const embedTol = 2e-6

var embedTexts = []string{"Once upon a time, there was a little girl named Lily.", "The cat sat on the mat.", "One day"}

// TestOpenAIEmbeddings: /v1/embeddings of a string, a list, and token ids,
// as floats and base64, equal the plain computation (last pooling: the
// model has no pooling_type), with norm 1, the same for the same text
// however it is batched, and usage counting the input tokens.
func TestOpenAIEmbeddings(t *testing.T) {
	ts := start(t, serve.Config{Aliases: []string{"stories"}}, stages.Config{NSeq: 2})
	m, tok := ts.bundle.Model, ts.bundle.Tokenizer
	ref := make([][]float64, len(embedTexts))
	total := 0
	for i, s := range embedTexts {
		toks := tok.Encode(s, true, true)
		total += len(toks)
		ref[i] = refEmbedding(t, m, toks, stages.PoolLast)
	}
	one := func(body map[string]any) map[string]any {
		t.Helper()
		r := ts.post(t, "/v1/embeddings", body)
		if r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		return r.json(t)
	}
	// one string
	got := one(map[string]any{"model": "stories", "input": embedTexts[0]})
	if got["object"] != "list" || got["model"] != "stories" || path(got, "data.0.object") != "embedding" || num(path(got, "data.0.index")) != 0 {
		t.Errorf("response %v", got)
	}
	v0 := vec(t, path(got, "data.0.embedding"))
	if len(v0) != m.NEmbd {
		t.Fatalf("%d values, want %d", len(v0), m.NEmbd)
	}
	if d := diff(v0, ref[0]); d > embedTol {
		t.Errorf("differs from the reference by %g", d)
	}
	if n := norm2(v0); math.Abs(n-1) > 1e-6 {
		t.Errorf("norm %v", n)
	}
	n0 := len(tok.Encode(embedTexts[0], true, true))
	if num(path(got, "usage.prompt_tokens")) != n0 || num(path(got, "usage.total_tokens")) != n0 {
		t.Errorf("usage %v, want %d tokens", got["usage"], n0)
	}
	// the same text again, and in a list with others (run together)
	again := vec(t, path(one(map[string]any{"input": embedTexts[0]}), "data.0.embedding"))
	if diff(again, v0) != 0 {
		t.Errorf("the same text twice differs by %g", diff(again, v0))
	}
	list := one(map[string]any{"input": embedTexts, "encoding_format": "float"})
	for i := range embedTexts {
		if num(path(list, "data."+strconv.Itoa(i)+".index")) != i {
			t.Errorf("data[%d] index %v", i, path(list, "data."+strconv.Itoa(i)+".index"))
		}
		v := vec(t, path(list, "data."+strconv.Itoa(i)+".embedding"))
		if d := diff(v, ref[i]); d > embedTol {
			t.Errorf("list item %d differs from the reference by %g", i, d)
		}
		if i == 0 && diff(v, v0) != 0 {
			t.Errorf("item 0 in a list differs from alone by %g", diff(v, v0))
		}
	}
	if num(path(list, "usage.prompt_tokens")) != total {
		t.Errorf("list usage %v, want %d", list["usage"], total)
	}
	// base64: little-endian float32
	b64 := one(map[string]any{"input": embedTexts, "encoding_format": "base64"})
	for i := range embedTexts {
		raw, err := base64.StdEncoding.DecodeString(path(b64, "data."+strconv.Itoa(i)+".embedding").(string))
		if err != nil || len(raw) != 4*m.NEmbd {
			t.Fatalf("base64 item %d: %v, %d bytes", i, err, len(raw))
		}
		v := make([]float64, m.NEmbd)
		for k := range v {
			v[k] = float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*k:])))
		}
		f := vec(t, path(list, "data."+strconv.Itoa(i)+".embedding"))
		for k := range f { // JSON carries float32's shortest decimal
			f[k] = float64(float32(f[k]))
		}
		if d := diff(v, f); d != 0 {
			t.Errorf("base64 item %d differs from float by %g", i, d)
		}
	}
	// token ids, one array and several
	ids := tok.Encode(embedTexts[1], true, true)
	got = one(map[string]any{"input": ids})
	if d := diff(vec(t, path(got, "data.0.embedding")), ref[1]); d > embedTol {
		t.Errorf("token ids differ from the reference by %g", d)
	}
	got = one(map[string]any{"input": [][]int32{ids, tok.Encode(embedTexts[2], true, true)}})
	if d := diff(vec(t, path(got, "data.1.embedding")), ref[2]); d > embedTol {
		t.Errorf("token id arrays differ from the reference by %g", d)
	}
}

// TestEmbeddingPoolingFlag: --pooling mean and cls give those poolings,
// each different.
func TestEmbeddingPoolingFlag(t *testing.T) {
	var vs [][]float64
	for _, pool := range []stages.Pooling{stages.PoolMean, stages.PoolCLS, stages.PoolLast} {
		ts := start(t, serve.Config{Pooling: pool}, stages.Config{})
		toks := ts.bundle.Tokenizer.Encode(embedTexts[0], true, true)
		r := ts.post(t, "/v1/embeddings", map[string]any{"input": embedTexts[0]})
		if r.status != 200 {
			t.Fatalf("%v: status %d: %s", pool, r.status, r.body)
		}
		v := vec(t, path(r.json(t), "data.0.embedding"))
		if d := diff(v, refEmbedding(t, ts.bundle.Model, toks, pool)); d > embedTol {
			t.Errorf("%v: differs from the reference by %g", pool, d)
		}
		vs = append(vs, v)
	}
	if diff(vs[0], vs[1]) < 1e-3 || diff(vs[0], vs[2]) < 1e-3 || diff(vs[1], vs[2]) < 1e-3 {
		t.Error("mean, cls and last pooling give the same vector")
	}
}

// withPooling writes stories260K with llama.pooling_type set to p.
func withPooling(t *testing.T, p uint32) string {
	t.Helper()
	f, err := gguf.Open(modelPath(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := gguf.NewWriter()
	w.CopyKVs(f, nil)
	w.Set("llama.pooling_type", gguf.Uint32(p))
	for _, tn := range f.Tensors {
		if err := w.AddTensor(tn.Name, tn.Type, tn.Dims, tn.Data); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "pooled.gguf")
	o, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteTo(o); err != nil {
		t.Fatal(err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestEmbeddingPoolingMetadata: the GGUF's pooling_type decides the
// pooling; rank pooling (a reranker) is refused naming the key, and
// /api/show then leaves "embedding" out of the capabilities.
func TestEmbeddingPoolingMetadata(t *testing.T) {
	ts := startModel(t, withPooling(t, 1), serve.Config{}, stages.Config{}, 0)
	toks := ts.bundle.Tokenizer.Encode(embedTexts[0], true, true)
	r := ts.post(t, "/api/embed", map[string]any{"model": "pooled", "input": embedTexts[0]})
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if d := diff(vec(t, path(r.json(t), "embeddings.0")), refEmbedding(t, ts.bundle.Model, toks, stages.PoolMean)); d > embedTol {
		t.Errorf("pooling_type 1 (mean): differs from the reference by %g", d)
	}

	ts = startModel(t, withPooling(t, 4), serve.Config{}, stages.Config{}, 0)
	r = ts.post(t, "/v1/embeddings", map[string]any{"input": "x"})
	if r.status != 400 || !strings.Contains(path(r.json(t), "error.message").(string), "llama.pooling_type is 4 (rank") {
		t.Errorf("rank pooling: %d %s", r.status, r.body)
	}
	caps := path(ts.post(t, "/api/show", map[string]any{"model": "pooled"}).json(t), "capabilities").([]any)
	if len(caps) != 1 || caps[0] != "completion" {
		t.Errorf("capabilities of a reranker: %v", caps)
	}
}

// TestEmbeddingErrors: what /v1/embeddings and /api/embed refuse, each
// naming the field or the limit.
func TestEmbeddingErrors(t *testing.T) {
	ts := start(t, serve.Config{}, stages.Config{NCtx: 32})
	long := strings.Repeat("the cat sat on the mat and ", 20)
	for _, c := range []struct {
		body   any
		status int
		param  string
		has    string
	}{
		{map[string]any{"input": "x", "dimensions": 8}, 400, "dimensions", "dimensions: 8 is not supported: embeddings have the model's 64 dimensions"},
		{map[string]any{"input": "x", "encoding_format": "int8"}, 400, "encoding_format", `"int8"`},
		{map[string]any{}, 400, "input", "input is required"},
		{map[string]any{"input": []string{}}, 400, "input", "empty array"},
		{map[string]any{"input": ""}, 400, "input", "input[0] is an empty string"},
		{map[string]any{"input": []any{"a", 1}}, 400, "input", "array of strings"},
		{map[string]any{"input": []int{1, 99999}}, 400, "input", "token 99999 is outside the vocabulary"},
		{map[string]any{"input": []string{"ok", long}}, 400, "input", "input[1] has"},
		{map[string]any{"input": "x", "model": "nope"}, 404, "model", `"nope" not found`},
		{map[string]any{"input": make([]string, 2049)}, 400, "input", "at most 2048"},
	} {
		r := ts.post(t, "/v1/embeddings", c.body)
		m := r.json(t)
		msg, _ := path(m, "error.message").(string)
		if r.status != c.status || path(m, "error.param") != c.param || !strings.Contains(msg, c.has) {
			t.Errorf("%v: %d %s", c.body, r.status, r.body)
		}
	}
	// the model's own dimensions ask for nothing
	for _, p := range []string{"/v1/embeddings", "/api/embed"} {
		if r := ts.post(t, p, map[string]any{"model": "stories260K", "input": "x", "dimensions": ts.bundle.Model.NEmbd}); r.status != 200 {
			t.Errorf("%s with the model's dimensions: %d %s", p, r.status, r.body)
		}
	}
	r := ts.post(t, "/v1/embeddings", map[string]any{"input": long})
	if m := r.json(t); path(m, "error.code") != "context_length_exceeded" || !strings.Contains(path(m, "error.message").(string), "the context holds 32") {
		t.Errorf("too long: %s", r.body)
	}
	// Ollama: over the context is cut unless truncate is false
	tok := ts.bundle.Tokenizer
	toks := tok.Encode(long, true, true)[:32]
	r = ts.post(t, "/api/embed", map[string]any{"model": "stories260K", "input": long})
	if r.status != 200 {
		t.Fatalf("truncated: %d %s", r.status, r.body)
	}
	if d := diff(vec(t, path(r.json(t), "embeddings.0")), refEmbedding(t, ts.bundle.Model, toks, stages.PoolLast)); d > embedTol {
		t.Errorf("truncated input differs from its first 32 tokens by %g", d)
	}
	if m := r.json(t); num(m["prompt_eval_count"]) != 32 {
		t.Errorf("truncated prompt_eval_count %v", m["prompt_eval_count"])
	}
	// options.num_ctx is the context inputs are cut to
	r = ts.post(t, "/api/embed", map[string]any{"model": "stories260K", "input": long, "options": map[string]any{"num_ctx": 8}})
	if m := r.json(t); r.status != 200 || num(m["prompt_eval_count"]) != 8 {
		t.Fatalf("num_ctx 8: %d %s", r.status, r.body)
	}
	if d := diff(vec(t, path(r.json(t), "embeddings.0")), refEmbedding(t, ts.bundle.Model, toks[:8], stages.PoolLast)); d > embedTol {
		t.Errorf("num_ctx 8: differs from the first 8 tokens by %g", d)
	}
	for _, c := range []struct {
		body   any
		status int
		has    string
	}{
		{map[string]any{"model": "stories260K", "input": long, "truncate": false}, 400, "the context holds 32"},
		{map[string]any{"model": "stories260K", "input": long, "truncate": false, "options": map[string]any{"num_ctx": 8}}, 400, "the context holds 8"},
		{map[string]any{"model": "stories260K", "input": "x", "options": map[string]any{"num_ctx": 64}}, 400, "options.num_ctx: 64 is not between 1 and the server's context of 32"},
		{map[string]any{"model": "stories260K", "input": "x", "dimensions": 4}, 400, "dimensions: 4 is not supported"},
		{map[string]any{"model": "stories260K", "input": []int{1}}, 400, "string or an array of strings"},
		// an empty request loads the model (TestOllamaEmbed); an empty
		// item among the inputs is an error
		{map[string]any{"model": "stories260K", "input": []string{"x", ""}}, 400, "input[1] is an empty string"},
		{map[string]any{"model": "nope", "input": "x"}, 404, `model "nope" not found`},
		{map[string]any{"input": "x"}, 400, "model is required"},
	} {
		r := ts.post(t, "/api/embed", c.body)
		msg, _ := r.json(t)["error"].(string)
		if r.status != c.status || !strings.Contains(msg, c.has) {
			t.Errorf("/api/embed %v: %d %s", c.body, r.status, r.body)
		}
	}
}

// TestOllamaEmbed: /api/embed equals /v1/embeddings, in Ollama's shape; ""
// and [] answer no embeddings (Ollama loads the model).
func TestOllamaEmbed(t *testing.T) {
	ts := start(t, serve.Config{Aliases: []string{"stories"}}, stages.Config{})
	r := ts.post(t, "/api/embed", map[string]any{"model": "stories", "input": embedTexts})
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	m := r.json(t)
	oai := ts.post(t, "/v1/embeddings", map[string]any{"input": embedTexts}).json(t)
	for i := range embedTexts {
		if d := diff(vec(t, path(m, "embeddings."+strconv.Itoa(i))), vec(t, path(oai, "data."+strconv.Itoa(i)+".embedding"))); d != 0 {
			t.Errorf("item %d: ollama and openai differ by %g", i, d)
		}
	}
	if m["model"] != "stories" || num(m["prompt_eval_count"]) != num(path(oai, "usage.prompt_tokens")) || m["total_duration"] == nil || m["load_duration"] == nil {
		t.Errorf("response %v", m)
	}
	// Ollama answers an empty request ("", [] or no input) with 200 and no
	// embeddings, having loaded the model; OpenAI's /v1/embeddings refuses
	// it (TestEmbeddingErrors). Each endpoint follows its own API.
	for _, in := range []any{"", []string{}, nil} {
		body := map[string]any{"model": "stories", "input": in}
		if in == nil {
			delete(body, "input")
		}
		r := ts.post(t, "/api/embed", body)
		m := r.json(t)
		if e, ok := m["embeddings"].([]any); r.status != 200 || !ok || len(e) != 0 || m["model"] != "stories" {
			t.Errorf("input %v: %d %v", in, r.status, m)
		}
	}
}

// TestEmbeddingsDuringGeneration: embedding requests sent while streams
// generate (every step slowed, so that they overlap) leave the streams'
// text as it is without them, and are themselves unchanged.
func TestEmbeddingsDuringGeneration(t *testing.T) {
	ts := startSlow(t, serve.Config{}, stages.Config{NSeq: 3}, 2*time.Millisecond)
	req := map[string]any{"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0}
	alone := path(ts.post(t, "/v1/completions", req).json(t), "choices.0.text")
	want := vec(t, path(ts.post(t, "/v1/embeddings", map[string]any{"input": embedTexts}).json(t), "data.2.embedding"))
	var wg sync.WaitGroup
	texts := make([]any, 2)
	for i := range texts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			texts[i] = path(ts.post(t, "/v1/completions", req).json(t), "choices.0.text")
		}()
	}
	waitFor(t, "streams running", func() bool { return ts.engine.Stats().Running == 2 })
	for range 5 {
		r := ts.post(t, "/v1/embeddings", map[string]any{"input": embedTexts})
		if d := diff(vec(t, path(r.json(t), "data.2.embedding")), want); d != 0 {
			t.Errorf("embedding during generation differs by %g", d)
		}
	}
	wg.Wait()
	for i, s := range texts {
		if s != alone {
			t.Errorf("stream %d with embeddings: %q, alone %q", i, s, alone)
		}
	}
}

// TestEmbeddingClientLeaves: a client that disconnects while a long list
// is embedded cancels its inputs: the engine ends with nothing running or
// queued and no KV block held, and the server keeps answering.
func TestEmbeddingClientLeaves(t *testing.T) {
	ts := startSlow(t, serve.Config{}, stages.Config{NSeq: 2}, 20*time.Millisecond)
	inputs := make([]string, 100)
	for i := range inputs {
		inputs[i] = "Once upon a time " + strconv.Itoa(i)
	}
	body, _ := json.Marshal(map[string]any{"input": inputs})
	c, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST /v1/embeddings HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	waitFor(t, "inputs running", func() bool { return ts.engine.Stats().Running > 0 })
	c.Close()
	waitFor(t, "inputs cancelled", func() bool {
		st := ts.engine.Stats()
		return st.Running == 0 && st.Queued == 0 && st.KVBlocksUsed == 0
	})
	st := ts.engine.Stats()
	t.Logf("%+v", st)
	if st.PromptTokens >= int64(len(inputs)*5) {
		t.Errorf("every input was admitted (%d prompt tokens) although the client left", st.PromptTokens)
	}
	if r := ts.post(t, "/v1/embeddings", map[string]any{"input": "x"}); r.status != 200 {
		t.Errorf("after the client left: %d %s", r.status, r.body)
	}
}
