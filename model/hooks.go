package model

// hooks.go: the one seam between a Context and the runtime around it
// (stages: the weight path, the kv-compress stage, the trace recorder;
// tests and tools): a Hooks value installed with SetHooks. A Context
// never reaches into the runtime otherwise.

// Hooks are what a runtime plugs into a Context's forward pass. The zero
// Hooks runs the model from its file mapping, stores every KV row in its
// layer and observes nothing.
type Hooks struct {
	// Experts supplies the routed experts of MoE layers (the weight
	// path's expert cache); nil: the views of the mapping.
	Experts Experts
	// PrefetchNext, with an Experts that is a Prefetcher, guesses the next
	// layer's experts while a MoE layer runs, by applying the next layer's
	// FFN norm and router to the current residual stream, and prefetches
	// them (speculative prefetch, one layer ahead).
	PrefetchNext bool
	// Layers supplies each layer's weights for the time the layer runs
	// (the weight path's layer streaming); nil: Model.Layers.
	Layers LayerSource
	// KVDefer stores the rows no query of the step reads quantized off
	// the critical path (the kv-compress stage; see KVDeferrer); nil:
	// every row is stored in its layer.
	KVDefer KVDeferrer
	// Span is called at the start (begin=true) and end of each named part
	// of the forward pass: "attn", "ffn", "moe", "output" and the matrix
	// products inside them ("attn_q", "ffn_down", ...; with a MultiMatMul
	// backend and SplitProducts off, "attn_qkv" and "ffn_gate_up" for the
	// fused ones), with the layer (-1 outside layers). Names are
	// constants: a tracer can use them without allocating.
	Span func(name string, layer int, begin bool)
	// SplitProducts runs the products a MultiMatMul backend would fuse
	// (q/k/v, gate/up) as separate MatMul calls, so that Span sees each
	// one: for per-operation traces.
	SplitProducts bool
	// OnRoute is called with each token's selected experts and their
	// weights (MoE models), for tests and traces.
	OnRoute func(layer, row int, experts []int, weights []float32)
	// Eval is called with every named intermediate (see EvalFunc).
	Eval EvalFunc
}

// SetHooks installs h for the steps that follow and returns the hooks it
// replaces, so that a caller can put them back:
//
//	defer c.SetHooks(c.SetHooks(h))
func (c *Context) SetHooks(h Hooks) Hooks {
	old := c.hooks
	c.hooks = h
	c.KV.deferrer = h.KVDefer
	return old
}

// Hooks returns the hooks installed.
func (c *Context) Hooks() Hooks { return c.hooks }
