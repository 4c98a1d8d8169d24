package model

import "fmt"

// qwen3moe: qwen3's attention with a mixture-of-experts FFN. A router
// (ffn_gate_inp) scores the NExpert experts; softmax; the NExpertUsed most
// probable are run (each a SwiGLU FFN of width NFFExp) and their outputs
// summed, weighted by their probabilities renormalised to sum to one
// (expert_weights_norm / norm_top_k_prob; llama.cpp always renormalises for
// qwen3moe, and so do we unless the file says expert_weights_norm=false).

func loadQwen3MoE(l *loader, m *Model) {
	m.RopeType = RopeNeox
	if m.NExpert == 0 || m.NExpertUsed == 0 {
		l.fail(fmt.Errorf("model: qwen3moe needs expert_count and expert_used_count"))
		return
	}
	if m.NFFExp == 0 {
		m.NFFExp = m.NFF / m.NExpertUsed
	}
	loadCommon(l, m)
	m.Rope.Type = RopeNeox
	for i := range m.Layers {
		loadAttention(l, m, i)
		loadQKNorm(l, m, i)
		L := &m.Layers[i]
		L.FFNNorm = l.vector(blk(i, "ffn_norm.weight"), m.NEmbd, true)
		L.Router = l.matrix(blk(i, "ffn_gate_inp.weight"), m.NEmbd, m.NExpert, true)
		L.GateExps = l.experts(blk(i, "ffn_gate_exps.weight"), m.NEmbd, m.NFFExp, m.NExpert)
		L.UpExps = l.experts(blk(i, "ffn_up_exps.weight"), m.NEmbd, m.NFFExp, m.NExpert)
		L.DownExps = l.experts(blk(i, "ffn_down_exps.weight"), m.NFFExp, m.NEmbd, m.NExpert)
	}
	m.forward = forwardMoE
}

func forwardMoE(c *Context, b *Batch) error {
	c.embed(b)
	return c.layers(b, func(il int, b *Batch) error {
		if err := c.attention(il, b); err != nil { // x += attn(norm(x))
			return err
		}
		return c.moe(il, b) // x += Σ_k w_k · expert_k(norm(x))
	})
}

// moeScratch holds a MoE step's routing and per-expert buffers, allocated
// once per Context (no allocation per step).
type moeScratch struct {
	sel    []int     // n·K selected experts, token-major
	w      []float32 // n·K their weights
	start  []int32   // NExpert+1: each expert's entries in idx
	idx    []int32   // n·K entries t·K+j, grouped by expert, tokens in order
	union  []int     // experts with at least one token, ascending
	xg     []float32 // n × NEmbd: an expert's tokens' inputs, gathered
	yg     []float32 // n × NEmbd: its outputs
	out    []float32 // n·K × NEmbd: weighted output of token t's j-th expert
	cursor []int32   // NExpert: write cursors while grouping
	// the next layer's guessed experts (PrefetchNext)
	pprobs []float32 // n × NExpert
	psel   []int     // n·K
	pw     []float32 // n·K
	pmark  []bool    // NExpert
	punion []int
	shg    []float32 // n: the shared expert's gate (qwen35moe.go)
	shy    []float32 // n × NEmbd: the shared expert's gated output
}

func (s *moeScratch) alloc(n int, h *Hyper) {
	k := h.NExpertUsed
	s.sel, s.w = make([]int, n*k), make([]float32, n*k)
	s.start, s.idx = make([]int32, h.NExpert+1), make([]int32, n*k)
	s.union = make([]int, 0, h.NExpert)
	s.xg, s.yg = make([]float32, n*h.NEmbd), make([]float32, n*h.NEmbd)
	s.out = make([]float32, n*k*h.NEmbd)
	s.cursor = make([]int32, h.NExpert)
	s.pprobs, s.psel, s.pw = make([]float32, n*h.NExpert), make([]int, n*k), make([]float32, n*k)
	s.pmark, s.punion = make([]bool, h.NExpert), make([]int, 0, h.NExpert)
	if h.NFFShexp > 0 {
		s.shg, s.shy = make([]float32, n), make([]float32, n*h.NEmbd)
	}
}

// moe runs the mixture-of-experts FFN sub-layer by expert: the router
// picks each token's experts, the tokens are grouped by expert, and each
// chosen expert runs once for all its tokens (one matrix-matrix product per
// expert and step, so each expert's weights are read once per batch). Each
// token's weighted expert outputs are summed in the router's order, so the
// result does not depend on the order in which experts are computed (with
// Hooks.Experts, the order their weights arrive from disk).
func (c *Context) moe(il int, b *Batch) error {
	m, L, ops := c.M, c.layer(il), c.Ops
	n, h := b.Len(), &m.Hyper
	d := h.NEmbd
	c.span("moe", il, true)
	defer c.span("moe", il, false)
	ops.RMSNorm(c.xn, c.x[:n*d], L.FFNNorm, n, d, h.RMSEps)
	c.eval("ffn_norm", il, c.xn, n, d)
	// router probabilities (n × NExpert)
	probs := c.probs[:n*h.NExpert]
	c.matmul("ffn_gate_inp", il, probs, L.Router, c.xn, n)
	if L.RouterB != nil { // gpt-oss
		ops.AddRows(probs, L.RouterB)
	}
	if !h.GatingSoftmaxWeight { // gpt-oss: the chosen logits' softmax, below
		ops.Softmax(probs, n, h.NExpert)
	}
	c.eval("ffn_moe_probs", il, probs, n, h.NExpert)
	if err := c.routed(il, n, probs); err != nil {
		return err
	}
	ops.Add(c.x[:n*d], c.tmp[:n*d])
	c.eval("l_out", il, c.x, n, d)
	return nil
}

// routed runs the routed experts of layer il on the n rows of c.xn given
// the router's probabilities (n × NExpert): each token's top NExpertUsed
// experts, their weights (renormalised with NormTopK), and c.tmp set to
// each token's weighted sum of its experts' outputs, plus the gated shared
// expert's where the layer has one.
func (c *Context) routed(il, n int, probs []float32) error {
	m, L, ops := c.M, c.layer(il), c.Ops
	h := &m.Hyper
	K, d := h.NExpertUsed, h.NEmbd
	s := &c.moeS
	c.moeRows = n
	dm := c.deviceMoE(il)
	if dr, ok := dm.(DeviceRouter); ok && c.hooks.OnRoute == nil && c.hooks.Experts == nil && !h.GatingSoftmaxWeight && L.UpShexp == nil &&
		dr.RouteExperts(il, probs[:n*h.NExpert], c.xn[:n*d], s.out[:n*K*d], c.tmp[:n*d], n, h.NExpert, K, d, h.NormTopK) {
		// routed without the host (moedevice.go): nothing to group here;
		// n·K runs counts each row's experts (distinct for one row, the
		// case the gpu backend takes)
		c.expertRuns += int64(n * K)
		c.eval("ffn_moe_out", il, c.tmp, n, d)
		return nil
	}
	if dm != nil { // ranked where the probabilities are (moedevice.go)
		if err := dm.RouteTopK(probs, n, h.NExpert, s.sel[:n*K], s.w[:n*K]); err != nil {
			return err
		}
	}
	// each token's top-K experts and weights
	clear(s.start)
	for t := range n {
		sel, w := s.sel[t*K:(t+1)*K], s.w[t*K:(t+1)*K]
		if dm == nil {
			topK(probs[t*h.NExpert:(t+1)*h.NExpert], sel, w)
		}
		if h.GatingSoftmaxWeight {
			if dm != nil { // w was read back from the device: softmax where it is
				softmaxHost(w)
			} else {
				ops.Softmax(w, 1, K)
			}
		}
		if h.NormTopK {
			var sum float32
			for _, x := range w {
				sum += x
			}
			sum = max(sum, 6.103515625e-5) // as llama.cpp's clamp
			for j := range w {
				w[j] /= sum
			}
		}
		if c.hooks.OnRoute != nil {
			c.hooks.OnRoute(il, t, sel, w)
		}
		for _, e := range sel {
			s.start[e+1]++
		}
	}
	// group the (token, slot) entries by expert (a counting sort)
	s.union = s.union[:0]
	for e := range h.NExpert {
		if s.start[e+1] > 0 {
			s.union = append(s.union, e)
		}
		s.start[e+1] += s.start[e]
	}
	next := c.moeNext(h.NExpert)
	for i, e := range s.sel[:n*K] {
		s.idx[next[e]] = int32(i)
		next[e]++
	}
	// run each chosen expert on its tokens, and the shared expert
	// (qwen35moe, qwen3next) while the first streamed ones are read
	shared := L.UpShexp != nil
	if c.hooks.Experts == nil {
		if shared {
			c.sharedExpert(il, n)
		}
		for _, e := range s.union {
			c.expert(il, e, &L.GateExps[e], &L.UpExps[e], &L.DownExps[e])
		}
	} else if err := c.streamedExperts(il, shared); err != nil {
		return err
	}
	// x += Σ_j w_j · expert_j(norm(x)), in the router's order
	if dm != nil {
		dm.SumRows(c.tmp[:n*d], s.out[:n*K*d], n, K, d)
	} else {
		for t := range n {
			acc := c.tmp[t*d : (t+1)*d]
			copy(acc, s.out[t*K*d:(t*K+1)*d])
			for j := 1; j < K; j++ {
				ops.Add(acc, s.out[(t*K+j)*d:(t*K+j+1)*d])
			}
		}
	}
	c.eval("ffn_moe_out", il, c.tmp, n, d)
	if shared { // + the gated shared expert, as llama.cpp adds it
		ops.Add(c.tmp[:n*d], s.shy[:n*d])
		c.eval("ffn_out", il, c.tmp, n, d)
	}
	return nil
}

// moeNext returns each expert's write cursor into idx (its group's start).
func (c *Context) moeNext(nExpert int) []int32 {
	s := &c.moeS
	if cap(s.cursor) < nExpert {
		s.cursor = make([]int32, nExpert)
	}
	cur := s.cursor[:nExpert]
	copy(cur, s.start[:nExpert])
	return cur
}

// streamedExperts runs the layer's chosen experts as Hooks.Experts
// delivers them, in groups of at most MaxFetch, and with shared the shared
// expert once the first group's reads are issued (it needs no read).
func (c *Context) streamedExperts(il int, shared bool) error {
	s := &c.moeS
	src := c.hooks.Experts
	step := max(1, src.MaxFetch())
	for lo := 0; lo < len(s.union); lo += step {
		ids := s.union[lo:min(lo+step, len(s.union))]
		if err := src.Fetch(il, ids); err != nil {
			return err
		}
		if nx := c.nextMoE(il); lo == 0 && c.hooks.PrefetchNext && nx >= 0 {
			if pf, ok := src.(Prefetcher); ok {
				if err := pf.Prefetch(nx, c.guessNext(nx)); err != nil {
					src.Release(il)
					return err
				}
			}
		}
		if lo == 0 && shared {
			c.sharedExpert(il, c.moeRows)
		}
		for range ids {
			e, w, err := src.Next()
			if err != nil {
				src.Release(il)
				return err
			}
			c.expert(il, e, &w.Gate, &w.Up, &w.Down)
		}
		src.Release(il)
	}
	return nil
}

// nextMoE is the first layer after il with routed experts, or -1: il+1
// in the all-MoE families, the next 'E' layer in nemotron_h_moe.
func (c *Context) nextMoE(il int) int {
	for j := il + 1; j < c.M.NLayer; j++ {
		if c.M.Layers[j].Router != nil { // routers stay resident even when layers stream
			return j
		}
	}
	return -1
}

// guessNext returns the union over the batch of the experts layer nx's
// router would pick if its input were the residual stream as it is now
// (after the running layer's attention): that layer's input differs only
// by this layer's expert outputs and the layers between.
func (c *Context) guessNext(nx int) []int {
	h, s, ops := &c.M.Hyper, &c.moeS, c.Ops
	L := &c.M.Layers[nx] // its norm and router: resident even when the layer streams
	n, d := c.moeRows, h.NEmbd
	xn := s.yg[:n*d] // scratch: yg is free until the experts run
	switch {
	case L.Router == nil: // a dense layer (gemma4 may mix them): nothing to guess
		return nil
	case L.RouterScale != nil: // gemma4's router input
		c.gemma4RouterInput(xn, c.x[:n*d], L, n)
	case L.ExpProbsB != nil: // nemotron_h_moe: the block's one norm
		ops.RMSNorm(xn, c.x[:n*d], L.AttnNorm, n, d, h.RMSEps)
	default:
		ops.RMSNorm(xn, c.x[:n*d], L.FFNNorm, n, d, h.RMSEps)
	}
	probs := s.pprobs[:n*h.NExpert]
	ops.MatMul(probs, L.Router, xn, n)
	if L.RouterB != nil {
		ops.AddRows(probs, L.RouterB)
	}
	if L.ExpProbsB != nil { // nemotron_h_moe chooses by sigmoid + selection bias
		for i, x := range probs {
			probs[i] = 1/(1+expf32(-x)) + L.ExpProbsB[i%h.NExpert]
		}
	}
	clear(s.pmark)
	s.punion = s.punion[:0]
	K := h.NExpertUsed
	dm := c.deviceMoE(nx)
	if dm != nil { // ranked where the logits are (moedevice.go)
		if err := dm.RouteTopK(probs, n, h.NExpert, s.psel[:n*K], s.pw[:n*K]); err != nil {
			if c.hostErr == nil {
				c.hostErr = err // Decode returns it at the end of the forward pass
			}
			return nil
		}
	}
	for t := range n {
		// softmax keeps the order: the top K logits are the top K
		// probabilities (gpt-oss chooses on the logits anyway)
		sel := s.psel[t*K : (t+1)*K]
		if dm == nil {
			topK(probs[t*h.NExpert:(t+1)*h.NExpert], sel, s.pw[:K])
		}
		for _, e := range sel {
			if !s.pmark[e] {
				s.pmark[e] = true
				s.punion = append(s.punion, e)
			}
		}
	}
	return s.punion
}

// expert runs expert e on the tokens routed to it and writes each token's
// weighted output into its slot of c.moeS.out. A nil or empty gateW is an
// ungated expert (nemotron_h_moe): down(relu(up·x)²).
func (c *Context) expert(il, e int, gateW, upW, downW *Weight) {
	h, s := &c.M.Hyper, &c.moeS
	K, d, f := h.NExpertUsed, h.NEmbd, h.NFFExp
	entries := s.idx[s.start[e]:s.start[e+1]]
	m := len(entries)
	c.expertRuns++
	if dm := c.deviceMoE(il); dm != nil { // on the Ops' rows (moedevice.go)
		out, xn := s.out[:c.moeRows*K*d], c.xn[:c.moeRows*d]
		if L := c.layer(il); c.expertExtras(L) { // gpt-oss
			b := ExpertBiases{Gate: L.GateExpsB, Up: L.UpExpsB, Down: L.DownExpsB, OAI: c.M.SwiGLUOAI}
			dm.(DeviceMoEBiased).ExpertBiased(il, e, gateW, upW, downW, b, out, xn, entries, K, s.w)
			return
		}
		dm.Expert(il, e, gateW, upW, downW, out, xn, entries, K, s.w)
		return
	}
	xg, yg := s.xg[:m*d], s.yg[:m*d]
	for i, v := range entries {
		t := int(v) / K
		copy(xg[i*d:(i+1)*d], c.xn[t*d:(t+1)*d])
	}
	gate, up := c.gate[:m*f], c.up[:m*f]
	if gateW == nil || len(gateW.Data) == 0 { // nemotron_h_moe: ungated, relu(up)²
		c.matmul("ffn_up_exps", il, up, upW, xg, m)
		c.Ops.(Mamba).ReluSqr(up)
		gate = up
	} else {
		c.matmuls("ffn_gate_up_exps", il, xg, m, mm{"ffn_gate_exps", gate, gateW}, mm{"ffn_up_exps", up, upW})
		L := c.layer(il) // gpt-oss's expert biases: resident, by expert id
		c.addExpertBias(up, L.UpExpsB, e, f)
		c.addExpertBias(gate, L.GateExpsB, e, f)
		c.expertGLU(gate, up)
	}
	L := c.layer(il)
	c.matmul("ffn_down_exps", il, yg, downW, gate, m)
	c.addExpertBias(yg, L.DownExpsB, e, d)
	if L.DownExpsS != nil { // gemma4's per-expert output scale
		c.Ops.Scale(yg, L.DownExpsS[e])
	}
	for i, v := range entries {
		wt := s.w[v]
		o, y := s.out[int(v)*d:(int(v)+1)*d], yg[i*d:(i+1)*d]
		for k := range o {
			o[k] = y[k] * wt
		}
	}
}

// topK writes the indices of the len(sel) largest probabilities into sel, in
// descending order (the lower index first on ties), and their values into w.
func topK(p []float32, sel []int, w []float32) {
	for j := range sel {
		best := -1
		for i, x := range p {
			if best >= 0 && x <= p[best] {
				continue
			}
			taken := false
			for _, s := range sel[:j] {
				if s == i {
					taken = true
					break
				}
			}
			if !taken {
				best = i
			}
		}
		sel[j], w[j] = best, p[best]
	}
}
