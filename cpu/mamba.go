package cpu

// mamba.go: the ops of a Mamba-2 hybrid's layers (model.Mamba: nemotron_h
// and nemotron_h_moe) as ggml's CPU backend computes them (ops.cpp:
// ggml_compute_forward_ssm_conv_f32 followed by ggml_add and ggml_silu,
// ggml_compute_forward_ssm_scan_f32 with a scalar decay per head followed
// by the D skip's ggml_mul and ggml_add, ggml_rms_norm and ggml_mul over
// groups, ggml_relu and ggml_sqr), in plain Go: the Ref's methods and the
// per-channel, per-head and per-row functions the Backend runs in parallel
// (mamba_backend.go) on the Go kernel path; its SIMD paths run the C
// kernels of the convolution and the scan (kern_ssm.go) instead. The scan
// runs token by token for prefill as for decode, as ggml's CPU op does;
// the chunked state-space-duality form is not implemented (docs/decisions.md:
// the SIMD scan leaves it at most ~1.5% of a prefill to win). The scan's inner sum (scanRow) is sequential for a
// state narrower than 32 floats, as ggml's; from 32 on ggml sums in
// vector lanes and we in four partial sums, so the results may differ in
// the last bits there (the goldens' tolerances cover it; their small
// presets use a state of 16).

import (
	"math"

	"github.com/flowinfer/flowinfer/model"
)

var _ model.Mamba = (*Ref)(nil)

// SSMConv implements model.Mamba.
func (r *Ref) SSMConv(out, x, state, w, bias []float32, n, ch, k int) {
	ssmConvRows(out, x, state, w, bias, n, ch, k, 0, ch)
}

// ssmConvRows is SSMConv on channels [c0, c1), token by token so that x
// is read along its rows: the window of channel c at token t is its state
// values from t on, then inputs up to t; each sum runs from tap 0 as
// ggml_ssm_conv's.
func ssmConvRows(out, x, state, w, bias []float32, n, ch, k, c0, c1 int) {
	k1 := k - 1
	for t := range n {
		or := out[t*ch : (t+1)*ch]
		for c := c0; c < c1; c++ {
			st, wc := state[c*k1:(c+1)*k1], w[c*k:(c+1)*k]
			var s float32
			for i, wi := range wc {
				var in float32
				if j := t + i; j < k1 {
					in = st[j]
				} else {
					in = x[(j-k1)*ch+c]
				}
				s += float32(in * wi) // a float32 sum from tap 0, no fused multiply-add
			}
			if bias != nil {
				s += bias[c]
			}
			or[c] = s / (1 + expf32(-s))
		}
	}
	// the new state: each channel's last k-1 values of state ++ inputs
	for c := c0; c < c1; c++ {
		st := state[c*k1 : (c+1)*k1]
		if n >= k1 {
			for i := range k1 {
				st[i] = x[(n-k1+i)*ch+c]
			}
			continue
		}
		copy(st, st[n:]) // shift the kept state values down, then the n inputs
		for i := range n {
			st[k1-n+i] = x[i*ch+c]
		}
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
			yo[i] = scanRow(si, B, C, dA, xdt) + float32(xi*d[h]) // the D skip: ggml_mul then ggml_add

		}
	}
}

// scanRow advances one state row (state = prev·dA + B·xdt, unfused, as
// ggml's scalar and vector paths both compute it) and returns state·C.
// Below 32 values the sum is sequential, as ggml's (its vector loop
// starts at 32); from 32 on it is four interleaved partial sums added
// pairwise at the end, so the sum's dependency chain does not bound the
// loop (ggml also sums there in vector lanes, in another order: the
// goldens' tolerance covers the difference in the last bits).
func scanRow(si, B, C []float32, dA, xdt float32) float32 {
	n := len(si)
	B, C = B[:n], C[:n]
	if n < 32 {
		var sum float32
		for j := range si {
			st := float32(si[j]*dA) + float32(B[j]*xdt)
			sum += float32(st * C[j])
			si[j] = st
		}
		return sum
	}
	var s0, s1, s2, s3 float32
	j := 0
	for ; j+4 <= n; j += 4 {
		t0 := float32(si[j]*dA) + float32(B[j]*xdt)
		t1 := float32(si[j+1]*dA) + float32(B[j+1]*xdt)
		t2 := float32(si[j+2]*dA) + float32(B[j+2]*xdt)
		t3 := float32(si[j+3]*dA) + float32(B[j+3]*xdt)
		s0 += float32(t0 * C[j])
		s1 += float32(t1 * C[j+1])
		s2 += float32(t2 * C[j+2])
		s3 += float32(t3 * C[j+3])
		si[j], si[j+1], si[j+2], si[j+3] = t0, t1, t2, t3
	}
	for ; j < n; j++ {
		t := float32(si[j]*dA) + float32(B[j]*xdt)
		s0 += float32(t * C[j])
		si[j] = t
	}
	return (s0 + s1) + (s2 + s3)
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
