package cpu

// deltanet.go: the ops of a hybrid model's recurrent layers
// (model.DeltaNet: qwen35's gated delta net) as ggml's CPU backend computes
// them (ops.cpp: ggml_compute_forward_ssm_conv_f32, _l2_norm_f32,
// _gated_delta_net_one_chunk; unary-ops.cpp's sigmoid), in plain Go: the
// Ref's methods, and the per-head and per-row functions the Backend runs
// in parallel (backend_deltanet.go). The delta rule is computed token by
// token for prefill as for decode, as llama.cpp's CPU backend does (its
// fused GATED_DELTA_NET op, enabled whenever the backend supports it);
// the chunked graph of delta-net-base.cpp is what it uses only where the
// fused op is missing.

import (
	"math"

	"github.com/flowinfer/flowinfer/model"
)

var _ model.DeltaNet = (*Ref)(nil)

// ConvSiLU implements model.DeltaNet.
func (r *Ref) ConvSiLU(out, x, state, w []float32, n, ch, k int) {
	convSiLURows(out, x, state, w, n, ch, k, 0, ch)
}

// convSiLURows is ConvSiLU on channels [c0, c1).
func convSiLURows(out, x, state, w []float32, n, ch, k, c0, c1 int) {
	var win [16]float32 // a channel's window: k-1 state values then n inputs, slid
	for c := c0; c < c1; c++ {
		st, wc := state[c*(k-1):(c+1)*(k-1)], w[c*k:(c+1)*k]
		buf := win[:k]
		if k > len(win) {
			buf = make([]float32, k)
		}
		copy(buf, st)
		for t := range n {
			buf[k-1] = x[t*ch+c]
			var s float32
			for i, wi := range wc {
				s += buf[i] * wi
			}
			out[t*ch+c] = s / (1 + expf32(-s))
			copy(buf, buf[1:])
		}
		copy(st, buf[:k-1])
	}
}

// L2Norm implements model.DeltaNet.
func (r *Ref) L2Norm(x []float32, n, dim int, eps float32) {
	l2NormRows(x, n, dim, eps)
}

func l2NormRows(x []float32, n, dim int, eps float32) {
	for t := range n {
		row := x[t*dim : (t+1)*dim]
		var sum float64
		for _, v := range row {
			sum += float64(v * v)
		}
		scale := 1 / max(float32(math.Sqrt(float64(float32(sum)))), eps)
		for i := range row {
			row[i] *= scale
		}
	}
}

// GatedDeltaNet implements model.DeltaNet.
func (r *Ref) GatedDeltaNet(out, qkv, g, beta, state []float32, n, hk, hv, d int) {
	r.kvTmp = grow(r.kvTmp, d)
	for h := range hv {
		deltaNetHead(out, qkv, g, beta, state[h*d*d:(h+1)*d*d], r.kvTmp[:d], n, hk, hv, d, h)
	}
}

// deltaNetHead runs the gated delta rule of value head h for n tokens
// (ggml_compute_forward_gated_delta_net_one_chunk with K = 1): s is the
// head's state, transposed (s[j·d+i] = S_ij), delta d floats of scratch.
func deltaNetHead(out, qkv, g, beta, s, delta []float32, n, hk, hv, d, h int) {
	cd := (2*hk + hv) * d
	kh := h % hk
	scale := 1 / float32(math.Sqrt(float64(d)))
	for t := range n {
		row := qkv[t*cd : (t+1)*cd]
		q, k := row[kh*d:(kh+1)*d], row[(hk+kh)*d:(hk+kh+1)*d]
		v := row[(2*hk+h)*d : (2*hk+h+1)*d]
		b := beta[t*hv+h]
		// S ← exp(g)·S
		decay := expf32(g[t*hv+h])
		for i := range s {
			s[i] *= decay
		}
		// δ_j = (v_j − S_·j·k)·β
		for j := range d {
			delta[j] = (v[j] - DotF32(s[j*d:(j+1)*d], k)) * b
		}
		// S_ij += k_i·δ_j
		for j := range d {
			sj, dj := s[j*d:(j+1)*d], delta[j]
			for i, ki := range k {
				sj[i] += ki * dj
			}
		}
		// out_j = S_·j·q / √d
		o := out[t*hv*d+h*d : t*hv*d+(h+1)*d]
		for j := range d {
			o[j] = DotF32(s[j*d:(j+1)*d], q) * scale
		}
	}
}

// GatedRMSNorm implements model.DeltaNet.
func (r *Ref) GatedRMSNorm(out, x, z []float32, w model.Vector, n, dim int, eps float32) {
	gatedRMSNormRows(out, x, z, w, n, dim, eps)
}

func gatedRMSNormRows(out, x, z []float32, w model.Vector, n, dim int, eps float32) {
	for t := range n {
		xr, yr, zr := x[t*dim:(t+1)*dim], out[t*dim:(t+1)*dim], z[t*dim:(t+1)*dim]
		var sum float64
		for _, v := range xr {
			sum += float64(v * v)
		}
		scale := 1 / float32(math.Sqrt(float64(float32(sum/float64(dim))+eps)))
		for i, v := range xr {
			zi := zr[i]
			yr[i] = v * scale * w[i] * (zi / (1 + expf32(-zi)))
		}
	}
}

// rmsScaleRows sets each of n rows of dim of out to x·scale·w, scale as
// gatedRMSNormRows computes it: the gated norm before its gate.
func rmsScaleRows(out, x []float32, w model.Vector, n, dim int, eps float32) {
	for t := range n {
		xr, yr := x[t*dim:(t+1)*dim], out[t*dim:(t+1)*dim]
		var sum float64
		for _, v := range xr {
			sum += float64(v * v)
		}
		scale := 1 / float32(math.Sqrt(float64(float32(sum/float64(dim))+eps)))
		for i, v := range xr {
			yr[i] = v * scale * w[i]
		}
	}
}

// SigmoidMul implements model.DeltaNet.
func (r *Ref) SigmoidMul(x, g []float32) {
	for i, gi := range g {
		x[i] *= 1 / (1 + expf32(-gi))
	}
}

// expf32 is C's expf: exp in float64 rounded to float32.
func expf32(x float32) float32 { return float32(math.Exp(float64(x))) }
