package cpu

// mamba.go: the ops of a Mamba-2 hybrid's layers (model.Mamba: nemotron_h
// and nemotron_h_moe) as ggml's CPU backend computes them (ops.cpp:
// ggml_compute_forward_ssm_conv_f32 followed by ggml_add and ggml_silu,
// ggml_compute_forward_ssm_scan_f32 with a scalar decay per head followed
// by the D skip's ggml_mul and ggml_add, ggml_rms_norm and ggml_mul over
// groups, ggml_relu and ggml_sqr), in plain Go: the Ref's methods and the
// per-channel, per-head and per-row functions the Backend runs in parallel
// (mamba_backend.go). The scan runs token by token for prefill as for
// decode, as ggml's CPU op does; the chunked state-space-duality form is
// not implemented. The scan's inner sum is sequential in float32: ggml's
// AVX path sums a state of 32 or more floats in vector lanes, so its
// result may differ from ours in the last bits there (the goldens'
// tolerances cover it; their small presets use a state of 16, where ggml
// sums sequentially too).

import (
	"math"

	"github.com/flowinfer/flowinfer/model"
)

var _ model.Mamba = (*Ref)(nil)

// SSMConv implements model.Mamba.
func (r *Ref) SSMConv(out, x, state, w, bias []float32, n, ch, k int) {
	ssmConvRows(out, x, state, w, bias, n, ch, k, 0, ch)
}

// ssmConvRows is SSMConv on channels [c0, c1).
func ssmConvRows(out, x, state, w, bias []float32, n, ch, k, c0, c1 int) {
	var win [16]float32 // a channel's window: k-1 state values then n inputs, slid
	buf := win[:]
	if k > len(win) {
		buf = make([]float32, k)
	}
	buf = buf[:k]
	for c := c0; c < c1; c++ {
		st, wc := state[c*(k-1):(c+1)*(k-1)], w[c*k:(c+1)*k]
		var b float32
		if bias != nil {
			b = bias[c]
		}
		copy(buf, st)
		for t := range n {
			buf[k-1] = x[t*ch+c]
			var s float32
			for i, wi := range wc {
				s += float32(buf[i] * wi) // ssm_conv: a float32 sum from tap 0, no fused multiply-add
			}
			if bias != nil {
				s += b
			}
			out[t*ch+c] = s / (1 + expf32(-s))
			copy(buf, buf[1:])
		}
		copy(st, buf[:k-1])
	}
}

// SSMScan implements model.Mamba.
func (r *Ref) SSMScan(y, xbc, dt, a, d, state []float32, n, nHead, headDim, nGroup, dState int) {
	for h := range nHead {
		ssmScanHead(y, xbc, dt, a, d, state, n, nHead, headDim, nGroup, dState, h)
	}
}

// ssmScanHead runs the selective scan of head h for n tokens: its state is
// state[h·headDim·dState:], headDim rows of dState.
func ssmScanHead(y, xbc, dt, a, d, state []float32, n, nHead, headDim, nGroup, dState, h int) {
	inner := nHead * headDim
	cd := inner + 2*nGroup*dState
	g := h / (nHead / nGroup) // repeat_interleave: consecutive heads share a group
	s := state[h*headDim*dState : (h+1)*headDim*dState]
	for t := range n {
		row := xbc[t*cd : (t+1)*cd]
		x := row[h*headDim : (h+1)*headDim]
		B := row[inner+g*dState : inner+(g+1)*dState]
		C := row[inner+(nGroup+g)*dState : inner+(nGroup+g+1)*dState]
		dtSoft := softplusf32(dt[t*nHead+h])
		dA := expf32(float32(dtSoft * a[h]))
		yo := y[t*inner+h*headDim : t*inner+(h+1)*headDim]
		for i, xi := range x {
			xdt := float32(xi * dtSoft)
			si := s[i*dState : (i+1)*dState]
			var sum float32
			for j := range si {
				// state = prev·dA + B·x·dt; y = state·C
				st := float32(si[j]*dA) + float32(B[j]*xdt)
				sum += float32(st * C[j])
				si[j] = st
			}
			// the D skip: y + x·D (ggml_mul then ggml_add)
			yo[i] = sum + float32(xi*d[h])
		}
	}
}

// softplusf32 is ggml_compute_softplus_f32: x above 20, else
// logf(1+expf(x)).
func softplusf32(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(math.Log(float64(1 + expf32(x))))
}

// GroupRMSNorm implements model.Mamba.
func (r *Ref) GroupRMSNorm(out, x []float32, w model.Vector, n, dim, groups int, eps float32) {
	groupRMSNormRows(out, x, w, n, dim, groups, eps)
}

// groupRMSNormRows normalises each group of dim/groups values of each of n
// rows (ggml_rms_norm: the sum of squares in float64, the scale
// 1/sqrtf(mean+eps)) and multiplies by w (dim values: each group its own).
func groupRMSNormRows(out, x []float32, w model.Vector, n, dim, groups int, eps float32) {
	gd := dim / groups
	for r := range n * groups {
		xr, yr, wr := x[r*gd:(r+1)*gd], out[r*gd:(r+1)*gd], w[(r%groups)*gd:(r%groups+1)*gd]
		var sum float64
		for _, v := range xr {
			sum += float64(v * v)
		}
		scale := 1 / float32(math.Sqrt(float64(float32(sum/float64(gd))+eps)))
		for i, v := range xr {
			yr[i] = float32(v*scale) * wr[i]
		}
	}
}

// ReluSqr implements model.Mamba.
func (r *Ref) ReluSqr(x []float32) { reluSqr(x) }

// reluSqr is ggml_relu then ggml_sqr: max(x, 0)².
func reluSqr(x []float32) {
	for i, v := range x {
		if !(v > 0) {
			v = 0
		}
		x[i] = v * v
	}
}
