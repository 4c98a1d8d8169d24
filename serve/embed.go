// This file holds the embedding endpoints: OpenAI's /v1/embeddings and
// Ollama's /api/embed. Each input is tokenized and submitted to the engine
// as an embedding request (stages.Request.Pooling): its prompt is
// evaluated like any other prefill, batched with the running generation
// requests, and its final hidden states (after the output norm) are pooled
// and L2-normalised, as llama-server does with --embeddings (embd_normalize
// 2). A list of inputs runs as up to --parallel requests at a time, in
// order.
//
// Pooling is --pooling when set, else the GGUF's <arch>.pooling_type; a
// model that has none (or "none", 0), as generative models do, is pooled
// by its last token: what Ollama does for a generative model, and the only
// token of a causal model that has seen the whole input (llama-server
// instead refuses /v1/embeddings with pooling none). rank pooling (4,
// rerankers) is refused.
//
// It does not implement dimensions other than the model's own (no
// Matryoshka truncation: refused, in both APIs) or Ollama's older
// /api/embeddings.

package serve

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/flowinfer/flowinfer/stages"
)

// maxEmbedInputs is the most inputs one request may carry (OpenAI's
// limit).
const maxEmbedInputs = 2048

// pooling resolves the embedding pooling of the backend's model.
func (s *Server) pooling(b *Backend) (stages.Pooling, *apiError) {
	if s.cfg.Pooling != stages.PoolNone {
		return s.cfg.Pooling, nil
	}
	key := b.Bundle.Model.Arch + ".pooling_type"
	v, ok := b.Bundle.File.Get(key)
	if !ok {
		return stages.PoolLast, nil
	}
	n, ok := v.Int()
	switch p := stages.Pooling(n); {
	case !ok:
		return 0, &apiError{status: 500, kind: "server_error", message: fmt.Sprintf("the model's %s is not an integer (%v)", key, v)}
	case p == stages.PoolNone:
		return stages.PoolLast, nil
	case p == stages.PoolMean || p == stages.PoolCLS || p == stages.PoolLast:
		return p, nil
	case n == 4:
		return 0, badRequest("", "the model's %s is 4 (rank, a reranker): embeddings are not supported; start the server with --pooling mean|cls|last", key)
	}
	return 0, badRequest("", "the model's %s is %d, not a pooling this server supports; start the server with --pooling mean|cls|last", key, n)
}

// checkDimensions refuses a dimensions field other than the model's own
// (no Matryoshka truncation).
func checkDimensions(d *int, nEmbd int) *apiError {
	if d == nil || *d == nEmbd {
		return nil
	}
	return badRequest("dimensions", "dimensions: %d is not supported: embeddings have the model's %d dimensions (no truncation)", *d, nEmbd)
}

// embedInput is one input: text to tokenize, or token ids.
type embedInput struct {
	text   string
	tokens []int32 // nil: text
}

// embedResult is the outcome of one input.
type embedResult struct {
	vec    []float32
	tokens int
}

// embedTokens tokenizes the inputs and checks them against the context of
// nCtx tokens: over it, an input is cut to nCtx when truncate is set, else
// refused naming the limit.
func (s *Server) embedTokens(b *Backend, inputs []embedInput, nCtx int, truncate bool) ([][]int32, *apiError) {
	tok := b.Bundle.Tokenizer
	out := make([][]int32, len(inputs))
	for i, in := range inputs {
		field := "input[" + itoa(i) + "]"
		toks := in.tokens
		if toks == nil {
			toks = tok.Encode(in.text, true, true)
		} else {
			for k, id := range toks {
				if id < 0 || int(id) >= tok.NVocab() {
					return nil, badRequest("input", "%s[%d]: token %d is outside the vocabulary of %d", field, k, id, tok.NVocab())
				}
			}
		}
		switch {
		case len(toks) == 0:
			return nil, badRequest("input", "%s is empty", field)
		case len(toks) > nCtx && truncate:
			toks = toks[:nCtx]
		case len(toks) > nCtx:
			e := badRequest("input", "%s has %d tokens; the context holds %d", field, len(toks), nCtx)
			e.code = "context_length_exceeded"
			return nil, e
		}
		out[i] = toks
	}
	return out, nil
}

// embed runs the inputs and returns their vectors in order; on failure it
// has written the error and returns nil.
func (s *Server) embed(ctx *fasthttp.RequestCtx, b *Backend, d dialect, model, endpoint string, inputs [][]int32, pool stages.Pooling) []embedResult {
	jobs := make([]*job, len(inputs))
	for i, toks := range inputs {
		j := newJob(context.Background(), "", model, endpoint, toks)
		j.req.ID = s.nextID.Add(1)
		j.req.Pooling = pool
		jobs[i] = j
	}
	abandon := func() {
		for _, j := range jobs {
			j.abandon()
		}
	}
	defer abandon() // done or failed: nothing of this request keeps running
	watch := watchClient(ctx.Conn(), abandon)
	defer watch.stop()
	// up to --parallel inputs in flight: a long list neither fills the
	// engine's queue nor holds every KV slot
	window := max(1, b.Engine.Config().NSeq)
	next := 0
	submit := func() *apiError {
		for ; next < len(jobs) && next < window; next++ {
			if err := b.Engine.Submit(jobs[next].req); err != nil {
				return submitError(err)
			}
		}
		return nil
	}
	if e := submit(); e != nil {
		e.write(ctx, d)
		return nil
	}
	out := make([]embedResult, len(jobs))
	for i, j := range jobs {
		_, final := j.wait(b.Done, s.stop)
		switch {
		case final == nil && watch.left():
			s.cfg.Log.Debug("client left before the embeddings", zap.String("endpoint", endpoint))
			ctx.SetStatusCode(statusClientClosed)
			ctx.SetConnectionClose()
			return nil
		case final == nil:
			errEngineDown.write(ctx, d)
			return nil
		case final.Finish == stages.FinishError || len(final.Embedding) == 0:
			s.cfg.Log.Error("embedding failed", zap.String("endpoint", endpoint), zap.Error(final.Err))
			s.failedError(b, "embedding", final.Err).write(ctx, d)
			return nil
		}
		s.metrics.finished(final)
		out[i] = embedResult{vec: final.Embedding, tokens: final.Usage.PromptTokens}
		window++
		if e := submit(); e != nil {
			e.write(ctx, d)
			return nil
		}
	}
	return out
}

// OpenAI /v1/embeddings.

type oaiEmbeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat *string         `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
}

// oaiEmbeddingFields: OpenAI's create embeddings request (fields.go).
var oaiEmbeddingFields = map[string]fieldRule{
	"user": accepted(localServer),
}

type oaiEmbedding struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float32, or a base64 string
}

type oaiEmbeddingResponse struct {
	Object string         `json:"object"`
	Data   []oaiEmbedding `json:"data"`
	Model  string         `json:"model"`
	Usage  struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

// oaiEmbedInputs decodes OpenAI's input: a string, an array of strings,
// an array of token ids, or an array of arrays of token ids.
func oaiEmbedInputs(raw json.RawMessage) ([]embedInput, *apiError) {
	if isNull(raw) {
		return nil, badRequest("input", "input is required")
	}
	var str string
	var strs []string
	var ids []int32
	var idss [][]int32
	var out []embedInput
	switch {
	case json.Unmarshal(raw, &str) == nil:
		out = []embedInput{{text: str}}
	case json.Unmarshal(raw, &strs) == nil:
		for _, s := range strs {
			out = append(out, embedInput{text: s})
		}
	case json.Unmarshal(raw, &ids) == nil:
		out = []embedInput{{tokens: ids}}
	case json.Unmarshal(raw, &idss) == nil:
		for _, t := range idss {
			out = append(out, embedInput{tokens: append([]int32{}, t...)})
		}
	default:
		return nil, badRequest("input", "input must be a string, an array of strings, an array of token ids or an array of arrays of token ids")
	}
	switch {
	case len(out) == 0:
		return nil, badRequest("input", "input is an empty array")
	case len(out) > maxEmbedInputs:
		return nil, badRequest("input", "input has %d items; at most %d are allowed", len(out), maxEmbedInputs)
	}
	for i, in := range out {
		if in.tokens == nil && in.text == "" {
			return nil, badRequest("input", "input[%d] is an empty string", i)
		}
	}
	return out, nil
}

func (s *Server) handleEmbeddings(ctx *fasthttp.RequestCtx) {
	var req oaiEmbeddingRequest
	b := s.receive(ctx, dialectOpenAI, &req, oaiEmbeddingFields)
	if b == nil {
		return
	}
	model, e := s.modelName(b, req.Model)
	if e != nil {
		e.param = "model"
		e.write(ctx, dialectOpenAI)
		return
	}
	base64Out := false
	if f := req.EncodingFormat; f != nil {
		switch *f {
		case "float":
		case "base64":
			base64Out = true
		default:
			badRequest("encoding_format", "encoding_format %q is not one of float, base64", *f).write(ctx, dialectOpenAI)
			return
		}
	}
	if e := checkDimensions(req.Dimensions, b.Bundle.Model.NEmbd); e != nil {
		e.write(ctx, dialectOpenAI)
		return
	}
	pool, e := s.pooling(b)
	if e != nil {
		e.write(ctx, dialectOpenAI)
		return
	}
	inputs, e := oaiEmbedInputs(req.Input)
	if e != nil {
		e.write(ctx, dialectOpenAI)
		return
	}
	toks, e := s.embedTokens(b, inputs, b.Engine.Config().NCtx, false)
	if e != nil {
		e.write(ctx, dialectOpenAI)
		return
	}
	res := s.embed(ctx, b, dialectOpenAI, model, "/v1/embeddings", toks, pool)
	if res == nil {
		return
	}
	resp := oaiEmbeddingResponse{Object: "list", Model: model, Data: make([]oaiEmbedding, len(res))}
	for i, r := range res {
		var v any = r.vec
		if base64Out {
			v = base64Floats(r.vec)
		}
		resp.Data[i] = oaiEmbedding{Object: "embedding", Index: i, Embedding: v}
		resp.Usage.PromptTokens += r.tokens
	}
	resp.Usage.TotalTokens = resp.Usage.PromptTokens
	writeJSON(ctx, resp)
}

// base64Floats encodes a vector as OpenAI's base64 format: the
// little-endian float32 bytes.
func base64Floats(v []float32) string {
	buf := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(buf)
}

// Ollama /api/embed.

type ollamaEmbedRequest struct {
	Model      string          `json:"model"`
	Input      json.RawMessage `json:"input"`
	Truncate   *bool           `json:"truncate"`
	Dimensions *int            `json:"dimensions"`
	// Options: num_ctx is the context inputs are checked against (at most
	// the server's); sampling options do not apply to embeddings.
	Options   *ollamaOptions  `json:"options"`
	KeepAlive json.RawMessage `json:"keep_alive"` // accepted, ignored: the model stays loaded
}

// ollamaEmbedFields: Ollama's /api/embed decodes every documented field.
var ollamaEmbedFields = map[string]fieldRule{}

type ollamaEmbedResponse struct {
	Model           string      `json:"model"`
	Embeddings      [][]float32 `json:"embeddings"`
	TotalDuration   int64       `json:"total_duration,omitempty"`
	LoadDuration    int64       `json:"load_duration,omitempty"`
	PromptEvalCount int         `json:"prompt_eval_count,omitempty"`
}

func (s *Server) handleOllamaEmbed(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	var req ollamaEmbedRequest
	b := s.receive(ctx, dialectOllama, &req, ollamaEmbedFields)
	if b == nil {
		return
	}
	if req.Model == "" {
		badRequest("model", "model is required").write(ctx, dialectOllama)
		return
	}
	model, e := s.modelName(b, req.Model)
	if e != nil {
		e.message = fmt.Sprintf("model %q not found", req.Model)
		e.write(ctx, dialectOllama)
		return
	}
	if e := checkDimensions(req.Dimensions, b.Bundle.Model.NEmbd); e != nil {
		e.write(ctx, dialectOllama)
		return
	}
	// Ollama: a string or an array of strings; "" and [] load the model
	// and answer no embeddings
	var inputs []embedInput
	var str string
	var strs []string
	switch {
	case isNull(req.Input):
	case json.Unmarshal(req.Input, &str) == nil:
		if str != "" {
			inputs = []embedInput{{text: str}}
		}
	case json.Unmarshal(req.Input, &strs) == nil:
		for i, s := range strs {
			if s == "" {
				badRequest("input", "input[%d] is an empty string", i).write(ctx, dialectOllama)
				return
			}
			inputs = append(inputs, embedInput{text: s})
		}
	default:
		badRequest("input", "input must be a string or an array of strings").write(ctx, dialectOllama)
		return
	}
	if len(inputs) > maxEmbedInputs {
		badRequest("input", "input has %d items; at most %d are allowed", len(inputs), maxEmbedInputs).write(ctx, dialectOllama)
		return
	}
	resp := ollamaEmbedResponse{Model: model, Embeddings: [][]float32{}}
	if len(inputs) == 0 {
		writeJSON(ctx, resp)
		return
	}
	pool, e := s.pooling(b)
	if e != nil {
		e.write(ctx, dialectOllama)
		return
	}
	// Ollama truncates an input over the context unless truncate is false
	nCtx := b.Engine.Config().NCtx
	if o := req.Options; o != nil && o.NumCtx != nil {
		if *o.NumCtx > nCtx || *o.NumCtx < 1 {
			badRequest("options.num_ctx", "options.num_ctx: %d is not between 1 and the server's context of %d tokens per sequence (set by its --ctx-size)", *o.NumCtx, nCtx).write(ctx, dialectOllama)
			return
		}
		nCtx = *o.NumCtx
	}
	toks, e := s.embedTokens(b, inputs, nCtx, req.Truncate == nil || *req.Truncate)
	if e != nil {
		e.write(ctx, dialectOllama)
		return
	}
	res := s.embed(ctx, b, dialectOllama, model, "/api/embed", toks, pool)
	if res == nil {
		return
	}
	for _, r := range res {
		resp.Embeddings = append(resp.Embeddings, r.vec)
		resp.PromptEvalCount += r.tokens
	}
	resp.TotalDuration = int64(time.Since(start))
	resp.LoadDuration = 1 // as /api/generate: the model is loaded already
	writeJSON(ctx, resp)
}
