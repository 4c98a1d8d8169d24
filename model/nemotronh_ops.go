package model

// nemotronh_ops.go: what a Mamba-2 hybrid's layers (nemotron_h,
// nemotron_h_moe) need from a backend beyond Ops, with each op's
// definition as ggml computes it. cpu.Ref holds the plain references.

// Mamba is implemented by backends that run Mamba-2 layers. Each call
// works on the rows of one sequence, in order, except GroupRMSNorm and
// ReluSqr, which work row by row.
type Mamba interface {
	// SSMConv runs ggml_ssm_conv, the bias's ggml_add and ggml_silu on n
	// rows of ch channels of x: with in_c the channel's k-1 state values
	// followed by its n inputs, out[t·ch+c] = silu(Σ_i in_c[t+i]·w[c·k+i]
	// + bias[c]), the sum in float32 from i = 0 (bias nil: none). state
	// (channel-major, k-1 values per channel) becomes the last k-1 values
	// of in_c. out must not overlap x.
	SSMConv(out, x, state, w, bias []float32, n, ch, k int)
	// SSMScan runs ggml_ssm_scan with a scalar decay per head (Mamba-2)
	// and adds the D skip, for n tokens. Row t of xbc holds x (nHead heads
	// of headDim), B (nGroup groups of dState), C (nGroup groups of
	// dState); dt holds nHead values per row (the dt bias already added);
	// a and d hold one value per head. Head h reads group h/(nHead/nGroup).
	// With Δ = softplus(dt) each token does, for every i < headDim,
	// s_i ← s_i·exp(Δ·a_h) + B·(x_i·Δ); y_i = s_i·C + x_i·d_h, where
	// state holds s (head-major, headDim rows of dState) and y has n rows
	// of nHead·headDim.
	SSMScan(y, xbc, dt, a, d, state []float32, n, nHead, headDim, nGroup, dState int)
	// GroupRMSNorm sets each of n rows of dim of out to x's row with each
	// of its groups (dim/groups values) RMS-normalised on its own, times
	// w (dim values): the grouped ssm_norm. out may be x.
	GroupRMSNorm(out, x []float32, w Vector, n, dim, groups int, eps float32)
	// ReluSqr sets x[i] = max(x[i], 0)² (ggml_relu then ggml_sqr: the
	// squared-ReLU FFN activation).
	ReluSqr(x []float32)
}
