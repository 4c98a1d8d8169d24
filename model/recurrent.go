package model

// recurrent.go: the per-sequence state of a hybrid model's recurrent
// layers (qwen35's gated delta net) and the ops that advance it. Each
// sequence owns, per recurrent layer, the short convolution's last
// SSM.Conv-1 inputs and the delta rule's state matrix per value head. The
// state lives in the KV cache (KVCache.State), allocated with it for its
// sequences and counted in its Bytes, so memory budgets and admission see
// it. Unlike K/V rows a state cannot be rebuilt from a prefix of cached
// tokens: a sequence's state is only valid at the position it has reached
// (RecurrentState.Next), and Context.Decode refuses a batch that does not
// continue a sequence from there or start it at position 0.
//
// To reuse a cached prompt prefix anyway, the state keeps a bounded pool of
// checkpoints (ReserveCheckpoints): Save copies one sequence's whole state
// (every recurrent layer's buffers, whatever their shapes) with the
// position it has reached, Restore copies it back into any sequence, which
// then continues from that position on K/V rows of the same tokens. The
// pool is allocated with the state and counted in its Bytes. Which
// positions to checkpoint, and which checkpoint a prompt may use, is the
// scheduler's (stages' kvblocks.go): the state does not know tokens.

import (
	"fmt"
)

// SSMHyper is the shape of a hybrid's recurrent layers (llama.cpp's ssm_*
// hyperparameters): qwen35's gated delta net or nemotron_h's Mamba-2.
type SSMHyper struct {
	Conv   int // ssm.conv_kernel: taps of the causal convolution
	Inner  int // ssm.inner_size: value heads × head dimension (Mamba-2: heads × head dimension)
	State  int // ssm.state_size: head dimension of q, k and v (Mamba-2: B's and C's width per group)
	DtRank int // ssm.time_step_rank: value heads (one decay per head)
	Groups int // ssm.group_count: q/k heads (Mamba-2: B/C groups)
}

// ConvDim is the convolution's channels: q and k (Mamba-2: B and C) of
// every group, v (Mamba-2: x) of every head.
func (s *SSMHyper) ConvDim() int { return 2*s.Groups*s.State + s.Inner }

// ConvState is the floats of one sequence's convolution state in one layer.
func (s *SSMHyper) ConvState() int { return (s.Conv - 1) * s.ConvDim() }

// DeltaState is the floats of one sequence's recurrent state in one layer:
// a State-wide row per value channel (the delta rule's d×d matrix per
// value head; Mamba-2's d_state per channel of every head).
func (s *SSMHyper) DeltaState() int { return s.Inner * s.State }

// DeltaNet is what a hybrid model's recurrent layers need from a backend,
// beyond Ops. Each call works on the rows of one sequence, in order.
type DeltaNet interface {
	// ConvSiLU runs ggml_ssm_conv then ggml_silu on n rows of ch channels
	// of x: with in_c the channel's k-1 state values followed by its n
	// inputs, out[t·ch+c] = silu(Σ_i in_c[t+i]·w[c·k+i]), the sum in
	// float32 from i = 0. state (channel-major, k-1 values per channel)
	// becomes the last k-1 values of in_c. out must not overlap x.
	ConvSiLU(out, x, state, w []float32, n, ch, k int)
	// L2Norm divides each of n rows of dim in place by max(‖row‖, eps)
	// (ggml_l2_norm: the sum of squares in float64).
	L2Norm(x []float32, n, dim int, eps float32)
	// GatedDeltaNet runs ggml_gated_delta_net for n tokens: row t of qkv
	// holds q (hk heads of d), k (hk heads of d), v (hv heads of d); g and
	// beta hold hv values per row. Value head h reads q/k head h%hk. With
	// the state of head h stored transposed (S[h][j·d+i] = S_ij), each token
	// does S ← exp(g)·S; δ_j = (v_j − Σ_i S_ij·k_i)·β; S_ij += k_i·δ_j;
	// out_j = Σ_i S_ij·q_i / √d. out has n rows of hv·d.
	GatedDeltaNet(out, qkv, g, beta, state []float32, n, hk, hv, d int)
	// GatedRMSNorm sets each of n rows of dim of out to
	// rmsnorm(x)·w·silu(z) (llama.cpp's build_norm_gated). out may be x.
	GatedRMSNorm(out, x, z []float32, w Vector, n, dim int, eps float32)
	// SigmoidMul sets x[i] *= 1/(1+exp(-g[i])) (the gated attention's
	// output gate).
	SigmoidMul(x, g []float32)
}

// RecurrentState holds every sequence's recurrent-layer state.
type RecurrentState struct {
	h      SSMHyper
	layers []int       // layer index -> slot among recurrent layers, -1 for attention layers
	conv   [][]float32 // [slot] nSeq × ConvState
	delta  [][]float32 // [slot] nSeq × DeltaState
	// Next[s] is the position sequence s's state has reached: the next
	// token it can take (0: empty).
	Next []int32
	// ckpt is the checkpoint pool: ckpt[i] holds one sequence's state,
	// layer by layer (conv then delta), saved at position ckptPos[i].
	ckpt    [][]float32
	ckptPos []int32
}

// newRecurrentState allocates the state of h's recurrent layers for nSeq
// sequences (nil when h has none).
func newRecurrentState(h *Hyper, nSeq int) *RecurrentState {
	if !h.Hybrid() {
		return nil
	}
	r := &RecurrentState{h: h.SSM, layers: make([]int, h.NLayer), Next: make([]int32, nSeq)}
	for il := range r.layers {
		r.layers[il] = -1
		if h.IsRecurrent(il) {
			r.layers[il] = len(r.conv)
			r.conv = append(r.conv, make([]float32, nSeq*h.SSM.ConvState()))
			r.delta = append(r.delta, make([]float32, nSeq*h.SSM.DeltaState()))
		}
	}
	return r
}

// Bytes is the state's storage, its checkpoint pool included.
func (r *RecurrentState) Bytes() int64 {
	if r == nil {
		return 0
	}
	var n int64
	for i := range r.conv {
		n += 4 * int64(len(r.conv[i])+len(r.delta[i]))
	}
	return n + int64(len(r.ckpt))*r.SeqBytes()
}

// seqFloats is the floats of one sequence's state over all recurrent
// layers.
func (r *RecurrentState) seqFloats() int {
	return len(r.conv) * (r.h.ConvState() + r.h.DeltaState())
}

// SeqBytes is the bytes of one sequence's state (of one checkpoint).
func (r *RecurrentState) SeqBytes() int64 {
	if r == nil {
		return 0
	}
	return 4 * int64(r.seqFloats())
}

// ReserveCheckpoints makes the checkpoint pool n checkpoints, all empty
// (what it held is dropped).
func (r *RecurrentState) ReserveCheckpoints(n int) {
	r.ckpt, r.ckptPos = make([][]float32, n), make([]int32, n)
	for i := range r.ckpt {
		r.ckpt[i] = make([]float32, r.seqFloats())
	}
}

// Checkpoints returns the pool's size.
func (r *RecurrentState) Checkpoints() int {
	if r == nil {
		return 0
	}
	return len(r.ckpt)
}

// Save copies sequence seq's state, at position Next[seq], into
// checkpoint ck (overwriting it) and returns that position.
func (r *RecurrentState) Save(ck, seq int) int {
	dst := r.ckpt[ck][:0]
	for il, s := range r.layers {
		if s >= 0 {
			c, d := r.Layer(il, seq)
			dst = append(append(dst, c...), d...)
		}
	}
	r.ckptPos[ck] = r.Next[seq]
	return int(r.Next[seq])
}

// Restore gives sequence seq the state saved in checkpoint ck: the next
// batch of seq continues from the position it was saved at, which it
// returns.
func (r *RecurrentState) Restore(seq, ck int) int {
	src := r.ckpt[ck]
	for il, s := range r.layers {
		if s >= 0 {
			c, d := r.Layer(il, seq)
			src = src[copy(c, src):]
			src = src[copy(d, src):]
		}
	}
	r.Next[seq] = r.ckptPos[ck]
	return int(r.ckptPos[ck])
}

// Layer returns sequence seq's convolution and delta-rule state in layer il.
func (r *RecurrentState) Layer(il, seq int) (conv, delta []float32) {
	s := r.layers[il]
	cs, ds := r.h.ConvState(), r.h.DeltaState()
	return r.conv[s][seq*cs : (seq+1)*cs], r.delta[s][seq*ds : (seq+1)*ds]
}

// Reset empties sequence seq's state (a new sequence, or a freed one).
func (r *RecurrentState) Reset(seq int) {
	for il, s := range r.layers {
		if s >= 0 {
			c, d := r.Layer(il, seq)
			clear(c)
			clear(d)
		}
	}
	r.Next[seq] = 0
}

// Copy gives sequence dst the state of src (a fork: n > 1 choices).
func (r *RecurrentState) Copy(dst, src int) {
	if dst == src {
		return
	}
	for il, s := range r.layers {
		if s >= 0 {
			dc, dd := r.Layer(il, dst)
			sc, sd := r.Layer(il, src)
			copy(dc, sc)
			copy(dd, sd)
		}
	}
	r.Next[dst] = r.Next[src]
}

// check verifies that the batch continues each sequence's state: a
// sequence's rows are consecutive positions starting at Next[s], or at 0
// (which resets its state). It resets the sequences that start at 0 and
// sets Next to the position after each sequence's last row. On error
// nothing changes.
func (r *RecurrentState) check(b *Batch) error {
	for i, s := range b.Seq {
		want := r.Next[s]
		if prev := lastRow(b, i, s); prev >= 0 {
			want = b.Pos[prev] + 1
		} else if b.Pos[i] == 0 {
			want = 0
		}
		if b.Pos[i] != want {
			return fmt.Errorf("%w: sequence %d: position %d, but its recurrent state is at position %d (a hybrid model's state continues only from where it is, or from a restored checkpoint)", ErrBatch, s, b.Pos[i], want)
		}
	}
	for i, s := range b.Seq {
		if lastRow(b, i, s) < 0 && b.Pos[i] == 0 {
			r.Reset(int(s))
		}
	}
	for i, s := range b.Seq {
		r.Next[s] = b.Pos[i] + 1
	}
	return nil
}

// lastRow is the row before i of sequence s in b, or -1.
func lastRow(b *Batch, i int, s int32) int {
	for j := i - 1; j >= 0; j-- {
		if b.Seq[j] == s {
			return j
		}
	}
	return -1
}

// RecurrentStateBytes is the size of the recurrent state a KV cache
// allocates for nSeq sequences of a model of hyperparameters h (0 unless
// hybrid): memory budgets count it beside the K/V cells. n checkpoints
// (RecurrentState.ReserveCheckpoints) take RecurrentStateBytes(h, n).
func RecurrentStateBytes(h *Hyper, nSeq int) int64 {
	var n int64
	for il := range h.NLayer {
		if h.IsRecurrent(il) {
			n += int64(nSeq) * 4 * int64(h.SSM.ConvState()+h.SSM.DeltaState())
		}
	}
	return n
}

// hybridActFloats is the floats per batch row of a hybrid Context's
// scratch (qwen35Scratch).
func hybridActFloats(h *Hyper) int {
	if !h.Hybrid() {
		return 0
	}
	if isNemotronH(h.Arch) {
		return nemotronHActFloats(h)
	}
	vd := h.SSM.DtRank * h.SSM.State
	return 3*h.QDim() + 3*h.SSM.ConvDim() + 3*vd + 4*h.SSM.DtRank + hybridMoEActFloats(h)
}

// HybridActBytes is the bytes of a hybrid Context's extra scratch for
// batches of maxBatch rows (0 for the other families).
func HybridActBytes(h *Hyper, maxBatch int) int64 {
	return int64(maxBatch) * 4 * int64(hybridActFloats(h))
}
