package model

import "math"

// moedevice.go: MoE layers on Ops that keep activations in their own
// memory (package gpu). The router's probabilities, the normalised rows
// and the experts' outputs stay there: the Ops rank each row's experts
// where the probabilities are and hand back only each token's k expert ids
// and weights (the host groups the tokens by expert, renormalises the
// weights and calls Hooks.OnRoute as on the CPU), then run each chosen
// expert on its rows and sum each token's weighted outputs in the
// router's order. Plain SwiGLU experts take this path, and gpt-oss's
// (DeviceMoEBiased: biases on the three products, the clamped SwiGLU, a
// router bias and the softmax of the chosen logits, computed on the host
// from the k logits read back); the families with expert scales, GeGLU
// experts or a selection bias run their MoE on the host's Ops.

// DeviceMoE is implemented by Ops that run a MoE layer's routed experts
// on activations in their own memory.
type DeviceMoE interface {
	// RouteTopK writes the k = len(sel)/n largest of each of the n rows
	// of dim values of x (as earlier ops left them) and their indices to
	// w and sel at row·k, best first, the lower index among equal values
	// (topK's order). It returns the first error of the ops since the
	// last ToHost, like HostSync.ToHost.
	RouteTopK(x []float32, n, dim int, sel []int, w []float32) error
	// Expert sets row v of out, for each v in entries, to w[v] times
	// expert e's output on row v/k of xn: down·(silu(gate·x) ⊙ up·x).
	// gate, up and down are the expert's weights (views of the mapping,
	// or Hooks.Experts'); (il, e) names the expert, for Ops that keep
	// experts' weights in their own memory.
	Expert(il, e int, gate, up, down *Weight, out, xn []float32, entries []int32, k int, w []float32)
	// SumRows sets row t < n of dst to the sum of src's rows t·k ...
	// t·k+k-1 (rows of d values), added in that order.
	SumRows(dst, src []float32, n, k, d int)
}

// DeviceMoEBiased is implemented by DeviceMoE Ops that also run
// gpt-oss's experts.
type DeviceMoEBiased interface {
	// ExpertBiased is Expert with row e of b.Gate, b.Up and b.Down (the
	// layer's per-expert biases, nil: none) added to the gate, up and
	// down products, and with b.OAI the clamped SwiGLU (ClampedSwiGLU
	// with SwiGLUOAIAlpha and SwiGLUOAILimit) instead of SwiGLU.
	ExpertBiased(il, e int, gate, up, down *Weight, b ExpertBiases, out, xn []float32, entries []int32, k int, w []float32)
}

// ExpertBiases is what a layer's experts add to plain SwiGLU experts.
type ExpertBiases struct {
	Gate, Up, Down Vector // NExpert rows of NFFExp, NFFExp and NEmbd (nil: none)
	OAI            bool   // the clamped SwiGLU (gpt-oss)
}

// deviceMoE returns the Ops' DeviceMoE when layer il's experts can run
// there (plain SwiGLU experts, or gpt-oss's on a DeviceMoEBiased), else
// nil.
func (c *Context) deviceMoE(il int) DeviceMoE {
	dm, ok := c.Ops.(DeviceMoE)
	if !ok {
		return nil
	}
	L := c.layer(il)
	if c.M.FFNAct == ActGELU || L.ExpProbsB != nil || L.DownExpsS != nil {
		return nil // gemma4's GeGLU experts and scales, nemotron_h_moe's selection bias
	}
	if _, ok := dm.(DeviceMoEBiased); !ok && c.expertExtras(L) {
		return nil
	}
	return dm
}

// expertExtras reports whether layer L's MoE is more than plain SwiGLU
// experts under a softmax router (gpt-oss's).
func (c *Context) expertExtras(L *Layer) bool {
	return c.M.GatingSoftmaxWeight || c.M.SwiGLUOAI || L.RouterB != nil || L.GateExpsB != nil || L.UpExpsB != nil || L.DownExpsB != nil
}

// softmaxHost is cpu.Ref's Softmax of one row (ggml_soft_max: float64
// sum, float32 scale), for the k weights a DeviceMoE read back.
func softmaxHost(row []float32) {
	mx := float32(math.Inf(-1))
	for _, v := range row {
		mx = max(mx, v)
	}
	var sum float64
	for i, v := range row {
		e := float32(math.Exp(float64(v - mx)))
		row[i] = e
		sum += float64(e)
	}
	inv := float32(1 / sum)
	for i := range row {
		row[i] *= inv
	}
}

// DeviceRouter is implemented by DeviceMoE Ops that can also run a layer's
// routing where the probabilities are, with no host readback: each row's
// top k experts, their weights (renormalised when norm) and the weighted
// sum of their outputs all stay on the device.
type DeviceRouter interface {
	// RouteExperts sets the n rows of dst (n × d) to each row's weighted
	// sum of its k experts' outputs on xn's row, the experts and weights
	// ranked from probs (n × nExpert) as RouteTopK ranks them, out (n·k ×
	// d) holding the weighted outputs in the router's order. It returns
	// false, having recorded nothing, when it cannot (then the caller
	// routes on the host); its errors come back from the next ToHost.
	RouteExperts(il int, probs, xn, out, dst []float32, n, nExpert, k, d int, norm bool) bool
}
