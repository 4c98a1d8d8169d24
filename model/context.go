package model

// context.go: a Context runs forward steps of a model: it owns the KV
// cache and the scratch buffers of one batch, checks a batch (Decode), and
// computes the logits and embeddings of the rows that want them. The
// decoder blocks are in block.go and the architectures' files.

import (
	"errors"
	"fmt"
)

// Batch is one forward step: tokens with their sequence and position. A
// token attends to the cells of its sequence at positions ≤ its own, so the
// batch must hold, for each sequence, consecutive positions after the
// cached ones.
type Batch struct {
	Tokens []int32
	Pos    []int32
	Seq    []int32
	// Logits marks the rows whose logits are wanted (nil: all rows).
	Logits []bool
	// Embd marks the rows whose final hidden state (after the output
	// norm, llama.cpp's "result_norm", what its embeddings pool) is
	// wanted (nil: none); Context.Embeddings returns them.
	Embd []bool
	// TopK > 0 says only the TopK largest logits of each row are needed
	// (larger first, lower id among equals): on Ops that rank logits on
	// the device (TopKer) with TopK <= MaxTopK, Decode returns rows holding
	// those at their ids and -Inf elsewhere (topk.go); other Ops return
	// whole rows.
	TopK int
}

// Len returns the number of tokens.
func (b *Batch) Len() int { return len(b.Tokens) }

// ErrBatch reports a malformed batch.
var ErrBatch = errors.New("model: bad batch")

// EvalFunc, installed as Hooks.Eval, is called with every named
// intermediate (e.g. "attn_norm", layer 3): n rows of dim. It is for
// debugging and diffing against llama.cpp's llama-eval-callback; nil costs
// nothing.
type EvalFunc func(name string, layer int, x []float32, n, dim int)

// Context runs forward steps of a model on a backend with its own KV cache
// and scratch buffers, allocated once for batches of up to MaxBatch tokens.
// What the runtime around it plugs in (weight sources, a KV deferrer,
// tracing) comes through SetHooks.
type Context struct {
	M        *Model
	Ops      Ops
	KV       *KVCache
	MaxBatch int

	hooks      Hooks // SetHooks
	expertRuns int64 // ExpertRuns

	x, xn, q, k, v, att, tmp []float32 // MaxBatch × width
	gate, up                 []float32 // MaxBatch × max(NFF, NFFExp)
	probs                    []float32 // MaxBatch × NExpert
	moeS                     moeScratch
	q35                      qwen35Scratch    // hybrid layers' buffers (qwen35)
	q3n                      nextScratch      // qwen3next's fused projections (qwen3next.go)
	g4                       gemma4Scratch    // per-layer inputs (gemma4)
	nh                       nemotronHScratch // Mamba-2 hybrid layers' buffers (nemotron_h)
	cur                      *Layer           // the running layer's weights (Hooks.Layers)
	curIL                    int
	moeRows                  int // tokens of the MoE step running
	rowIdx                   []int
	outRows                  []float32    // rows selected for logits
	embd                     []float32    // rows selected for embeddings (MaxBatch × NEmbd)
	nEmbd                    int          // rows in embd after the last Decode
	logits                   []float32    // MaxBatch × NVocab
	mmOuts                   [3][]float32 // matmuls' arguments
	mmWs                     [3]*Weight
	hostErr                  error   // the first HostSync error of an eval hook in this step
	topIDs                   []int32 // Batch.TopK's pairs (topk.go)
	topVals                  []float32
}

// NewContext allocates a context with a contiguous f32 cache of nCtx
// positions for nSeq sequences and scratch for batches of up to maxBatch
// tokens.
func (m *Model) NewContext(ops Ops, nCtx, nSeq, maxBatch int) (*Context, error) {
	return m.NewContextOf(ops, KVTypes{}, nCtx, nSeq, maxBatch)
}

// NewContextOf is NewContext with a cache of types t.
func (m *Model) NewContextOf(ops Ops, t KVTypes, nCtx, nSeq, maxBatch int) (*Context, error) {
	if nCtx <= 0 || nSeq <= 0 || maxBatch <= 0 {
		return nil, fmt.Errorf("model: context size %d, sequences %d and batch %d must be positive", nCtx, nSeq, maxBatch)
	}
	kv, err := NewKVCacheOf(&m.Hyper, t, nCtx, nSeq)
	if err != nil {
		return nil, err
	}
	return m.NewContextKV(ops, kv, maxBatch)
}

// NewContextKV allocates a context on the cache kv (made for this model)
// with scratch for batches of up to maxBatch tokens. A paged cache needs a
// backend implementing PagedKV.
func (m *Model) NewContextKV(ops Ops, kv *KVCache, maxBatch int) (*Context, error) {
	h := &m.Hyper
	switch {
	case maxBatch <= 0:
		return nil, fmt.Errorf("model: batch %d must be positive", maxBatch)
	case kv.NLayer != h.NLayer || kv.KDim != h.KDim() || kv.VDim != h.VDim():
		return nil, fmt.Errorf("model: KV cache of %d layers × %d/%d does not fit the model (%d × %d/%d)", kv.NLayer, kv.KDim, kv.VDim, h.NLayer, h.KDim(), h.VDim())
	case kv.Paged() && !SupportsPagedKV(ops):
		return nil, fmt.Errorf("model: the backend does not support a paged KV cache")
	case h.Hybrid() && kv.State == nil:
		return nil, fmt.Errorf("model: the KV cache has no recurrent state for the hybrid model's layers")
	}
	if err := checkOps(m, ops); err != nil {
		return nil, err
	}
	c := &Context{M: m, Ops: ops, KV: kv, MaxBatch: maxBatch}
	kv.storer, _ = ops.(KVStorer)
	if err := c.placeKV(ops); err != nil { // split.go
		return nil, err
	}
	kv.ReserveRecent(maxBatch)
	kv.ReserveSWA(maxBatch)
	n := maxBatch
	c.x = make([]float32, n*h.NEmbd)
	c.xn = make([]float32, n*h.NEmbd)
	c.tmp = make([]float32, n*h.NEmbd)
	// the largest layer's rows (gemma4's sliding and global layers differ)
	c.q = make([]float32, n*h.MaxQDim())
	c.k = make([]float32, n*h.MaxKDim())
	c.v = make([]float32, n*h.MaxVDim())
	c.att = make([]float32, n*h.MaxAttDim())
	ff := h.FFWidth()
	c.gate = make([]float32, n*ff)
	c.up = make([]float32, n*ff)
	if h.NExpert > 0 {
		c.probs = make([]float32, n*h.NExpert)
		c.moeS.alloc(n, h)
	}
	switch {
	case isNemotronH(h.Arch):
		c.nh.alloc(n, h)
	case h.Hybrid():
		c.q35.alloc(n, h)
	}
	if h.Arch == "qwen3next" {
		c.q3n.alloc(n, h)
	}
	c.rowIdx = make([]int, n)
	c.outRows = make([]float32, n*h.NEmbd)
	c.embd = make([]float32, n*h.NEmbd)
	c.logits = make([]float32, n*h.NVocab)
	return c, nil
}

func (c *Context) span(name string, layer int, begin bool) {
	if c.hooks.Span != nil {
		c.hooks.Span(name, layer, begin)
	}
}

// matmul is Ops.MatMul inside a span.
func (c *Context) matmul(name string, layer int, out []float32, w *Weight, x []float32, n int) {
	c.span(name, layer, true)
	c.Ops.MatMul(out, w, x, n)
	c.span(name, layer, false)
}

// mm is one product of matmuls: a span name, the output and the weight.
type mm struct {
	name string
	out  []float32
	w    *Weight
}

// matmuls multiplies x by each weight: in one operation inside one span
// (name) when the Ops implement MultiMatMul, else as separate matmul calls.
func (c *Context) matmuls(name string, layer int, x []float32, n int, ps ...mm) {
	multi, ok := c.Ops.(MultiMatMul)
	if !ok || c.hooks.SplitProducts || len(ps) > len(c.mmOuts) {
		for _, p := range ps {
			c.matmul(p.name, layer, p.out, p.w, x, n)
		}
		return
	}
	outs, ws := c.mmOuts[:len(ps)], c.mmWs[:len(ps)]
	for i, p := range ps {
		outs[i], ws[i] = p.out, p.w
	}
	c.span(name, layer, true)
	multi.MatMuls(outs, ws, x, n)
	c.span(name, layer, false)
	clear(outs)
	clear(ws)
}

func (c *Context) eval(name string, layer int, x []float32, n, dim int) {
	if c.hooks.Eval != nil {
		if err := c.toHost(x); err != nil {
			if c.hostErr == nil {
				c.hostErr = err // Decode returns it at the end of the forward pass
			}
			return
		}
		c.hooks.Eval(name, layer, x[:n*dim], n, dim)
	}
}

// HostSync is implemented by Ops that keep activations in device memory
// between operations (package gpu): the host slices passed to the Ops
// name the activations, and their contents are current only after
// ToHost. The Context calls ToHost(x) before it reads or writes x itself,
// where x is any slice of the buffer concerned; ToHost also returns the
// first error of the ops since its last call (Ops methods have none).
type HostSync interface {
	ToHost(x []float32) error
}

// toHost makes x's buffer current on the host (HostSync), if the Ops keep
// it elsewhere.
func (c *Context) toHost(x []float32) error {
	if s, ok := c.Ops.(HostSync); ok {
		return s.ToHost(x)
	}
	return nil
}

// Decode runs one forward step and returns the logits of the rows marked in
// b.Logits (all rows when nil), packed in batch order: len = rows × NVocab.
// The slice is reused by the next call.
func (c *Context) Decode(b *Batch) ([]float32, error) {
	n := b.Len()
	if n == 0 || n > c.MaxBatch {
		return nil, fmt.Errorf("%w: %d tokens (max %d)", ErrBatch, n, c.MaxBatch)
	}
	if len(b.Pos) != n || len(b.Seq) != n || (b.Logits != nil && len(b.Logits) != n) || (b.Embd != nil && len(b.Embd) != n) {
		return nil, fmt.Errorf("%w: tokens, positions, sequences and logit or embedding flags differ in length", ErrBatch)
	}
	for i := range n {
		if t := b.Tokens[i]; t < 0 || int(t) >= c.M.NVocab {
			return nil, fmt.Errorf("%w: token %d out of range [0, %d)", ErrBatch, t, c.M.NVocab)
		}
		if p := b.Pos[i]; p < 0 || int(p) >= c.KV.NCtx {
			return nil, fmt.Errorf("%w: position %d outside the context of %d", ErrBatch, p, c.KV.NCtx)
		}
		if s := b.Seq[i]; s < 0 || int(s) >= c.KV.nSeq {
			return nil, fmt.Errorf("%w: sequence %d out of range [0, %d)", ErrBatch, s, c.KV.nSeq)
		}
		if kv := c.KV; kv.Paged() {
			t := kv.Tables[b.Seq[i]]
			if int(b.Pos[i])>>kv.shift >= len(t) {
				return nil, fmt.Errorf("%w: sequence %d has no KV block for position %d", ErrBatch, b.Seq[i], b.Pos[i])
			}
		}
	}
	if err := c.KV.PrepareRecent(b.Seq, b.Pos); err != nil {
		return nil, err
	}
	if err := c.KV.PrepareSWA(b.Seq, b.Pos); err != nil {
		return nil, err
	}
	c.nEmbd, c.hostErr = 0, nil
	if err := c.M.forward(c, b); err != nil {
		c.KV.flush() // the step failed anyway: its error is the one to report
		return nil, err
	}
	if err := c.hostErr; err != nil { // an eval hook's HostSync failure
		c.hostErr = nil
		c.KV.flush()
		return nil, err
	}
	if err := c.embeddings(b); err != nil {
		c.KV.flush()
		return nil, err
	}
	out, err := c.output(b)
	if err != nil {
		c.KV.flush()
		return nil, err
	}
	if err := c.KV.flush(); err != nil { // the deferred rows (Hooks.KVDefer)
		return nil, err
	}
	return out, nil
}

// ExpertRuns returns the routed experts run so far (one per expert and
// step, whatever its number of tokens), for the weight bytes a step used.
func (c *Context) ExpertRuns() int64 { return c.expertRuns }

// Embeddings returns the final hidden states (after the output norm) of
// the rows marked in Batch.Embd by the last Decode, packed in batch order:
// len = rows × NEmbd. The slice is reused by the next call.
func (c *Context) Embeddings() []float32 { return c.embd[:c.nEmbd*c.M.NEmbd] }

// embeddings applies the final norm to the rows that want embeddings.
func (c *Context) embeddings(b *Batch) error {
	if b.Embd == nil {
		return nil
	}
	h := &c.M.Hyper
	if err := c.toHost(c.x); err != nil {
		return err
	}
	if err := c.toHost(c.embd); err != nil {
		return err
	}
	rows := 0
	for i, want := range b.Embd {
		if want {
			copy(c.embd[rows*h.NEmbd:(rows+1)*h.NEmbd], c.x[i*h.NEmbd:(i+1)*h.NEmbd])
			rows++
		}
	}
	if rows == 0 {
		return nil
	}
	c.span("output", -1, true)
	c.Ops.RMSNorm(c.embd, c.embd[:rows*h.NEmbd], c.M.OutputNorm, rows, h.NEmbd, h.RMSEps)
	c.span("output", -1, false)
	if err := c.toHost(c.embd); err != nil {
		return err
	}
	c.nEmbd = rows
	return nil
}

// output applies the final norm and the output projection to the rows that
// want logits.
func (c *Context) output(b *Batch) ([]float32, error) {
	h := &c.M.Hyper
	n := b.Len()
	if err := c.toHost(c.x); err != nil {
		return nil, err
	}
	if err := c.toHost(c.outRows); err != nil {
		return nil, err
	}
	rows := 0
	for i := range n {
		if b.Logits == nil || b.Logits[i] {
			copy(c.outRows[rows*h.NEmbd:(rows+1)*h.NEmbd], c.x[i*h.NEmbd:(i+1)*h.NEmbd])
			rows++
		}
	}
	if rows == 0 {
		return c.logits[:0], nil
	}
	c.span("output", -1, true)
	c.Ops.RMSNorm(c.outRows, c.outRows[:rows*h.NEmbd], c.M.OutputNorm, rows, h.NEmbd, h.RMSEps)
	c.eval("result_norm", -1, c.outRows, rows, h.NEmbd)
	out := c.logits[:rows*h.NVocab]
	c.matmul("output_proj", -1, out, c.M.Output, c.outRows[:rows*h.NEmbd], rows)
	if c.M.SoftCap != 0 { // gemma4: cap·tanh(logits/cap), on the host
		if err := c.toHost(out); err != nil {
			return nil, err
		}
		softCap(out, c.M.SoftCap)
	}
	c.eval("result_output", -1, out, rows, h.NVocab)
	c.span("output", -1, false)
	if tk, ok := c.Ops.(TopKer); ok && b.TopK > 0 && b.TopK <= tk.MaxTopK() {
		return out, c.topKRows(tk, out, rows, b.TopK)
	}
	return out, c.toHost(out)
}
