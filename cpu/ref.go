// Package cpu implements model.Ops on the CPU.
//
// Ref is the plain-Go reference backend: straightforward loops whose
// numerics follow ggml's CPU backend (activations converted to the weight's
// dot-product type before a matrix product, RMSNorm and softmax sums in
// float64, RoPE angles by ggml's float32 recurrence), so that flowinfer's
// logits match llama.cpp's. It is the oracle fast kernels are tested
// against; it favours clarity over speed and runs on one goroutine.
package cpu

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/quant"
)

// Ref is the reference backend. Its scratch buffers grow to the largest
// operation seen and are then reused: steady-state calls do not allocate.
type Ref struct {
	// Exact multiplies by the dequantized weights in float32 instead of
	// converting activations to the weight's dot type: exact arithmetic on
	// the stored weights (llama.cpp's goldens/exact_f32 references), for
	// separating dequantization and architecture errors from activation
	// rounding.
	Exact bool

	act               []byte    // activations converted to a vec-dot type
	krow, vrow, kvTmp []float32 // Attention: one cached row, decoded
	wrow              []float32 // one dequantized weight row (Exact)
	scores            []float32 // attention scores of one head
}

// NewRef returns a reference backend.
func NewRef() *Ref { return &Ref{} }

var _ model.Ops = (*Ref)(nil)

// PagedKV implements model.PagedKV: Attention reads the cache through
// GetK and GetV only.
func (r *Ref) PagedKV() bool { return true }

// Supports reports whether MatMul handles weights of type t.
func (r *Ref) Supports(t quant.Type) bool {
	return t == quant.F32 || quant.DotFunc(t) != nil
}

// f32bytes views float32s as bytes (little-endian machines only, as ggml).
func f32bytes(x []float32) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))
}

// bytesF32 views bytes as float32s.
func bytesF32(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

// DotF32 is the float32 dot product (ggml_vec_dot_f32), accumulated in
// eight float32 lanes as SIMD code does.
func DotF32(a, b []float32) float32 {
	var s [8]float32
	n := len(a)
	i := 0
	for ; i+8 <= n; i += 8 {
		for j := range 8 {
			s[j] += a[i+j] * b[i+j]
		}
	}
	for ; i < n; i++ {
		s[0] += a[i] * b[i]
	}
	return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]))
}

// MatMul implements model.Ops.
func (r *Ref) MatMul(out []float32, w *model.Weight, x []float32, n int) {
	if w.Type == quant.F32 {
		for t := range n {
			xt := x[t*w.Cols : (t+1)*w.Cols]
			for row := range w.Rows {
				out[t*w.Rows+row] = DotF32(bytesF32(w.Row(row)), xt)
			}
		}
		return
	}
	if r.Exact {
		if cap(r.wrow) < w.Cols {
			r.wrow = make([]float32, w.Cols)
		}
		wr := r.wrow[:w.Cols]
		for row := range w.Rows {
			quant.DequantizeFunc(w.Type)(w.Row(row), wr)
			for t := range n {
				out[t*w.Rows+row] = DotF32(wr, x[t*w.Cols:(t+1)*w.Cols])
			}
		}
		return
	}
	vt := quant.VecDotType(w.Type)
	rb, err := quant.RowBytes(vt, w.Cols)
	if err != nil {
		panic(fmt.Sprintf("cpu: %s: %v", w.Name, err)) // shapes were validated at load
	}
	if cap(r.act) < n*rb {
		r.act = make([]byte, n*rb)
	}
	act := r.act[:n*rb]
	for t := range n {
		if vt == quant.F32 {
			copy(act[t*rb:(t+1)*rb], f32bytes(x[t*w.Cols:(t+1)*w.Cols]))
		} else if err := quant.QuantizeRow(vt, x[t*w.Cols:(t+1)*w.Cols], act[t*rb:(t+1)*rb]); err != nil {
			panic(fmt.Sprintf("cpu: %s: %v", w.Name, err))
		}
	}
	dot := quant.DotFunc(w.Type)
	for t := range n {
		a := act[t*rb : (t+1)*rb]
		for row := range w.Rows {
			out[t*w.Rows+row] = dot(w.Cols, w.Row(row), a)
		}
	}
}

// Embed implements model.Ops.
func (r *Ref) Embed(out []float32, w *model.Weight, ids []int32) {
	for t, id := range ids {
		if err := quant.DequantizeRow(w.Type, w.Row(int(id)), out[t*w.Cols:(t+1)*w.Cols]); err != nil {
			panic(fmt.Sprintf("cpu: %s: %v", w.Name, err))
		}
	}
}

// RMSNorm implements model.Ops as ggml_rms_norm followed by ggml_mul: the
// sum of squares in float64, the scale 1/sqrt(mean+eps) in float32.
func (r *Ref) RMSNorm(out, x []float32, weight model.Vector, n, dim int, eps float32) {
	for t := range n {
		xr, yr := x[t*dim:(t+1)*dim], out[t*dim:(t+1)*dim]
		var sum float64
		for _, v := range xr {
			sum += float64(v * v)
		}
		mean := float32(sum / float64(dim))
		scale := 1 / float32(math.Sqrt(float64(mean+eps)))
		for i, v := range xr {
			yr[i] = v * scale
		}
		if weight != nil {
			for i := range yr {
				yr[i] *= weight[i]
			}
		}
	}
}

// Rope implements model.Ops as ggml_rope_ext (rope_yarn in ggml-cpu's
// ops.cpp): the angle of pair i is pos·base^(-2i/dim), computed by ggml's
// float32 recurrence theta *= theta_scale, divided by the frequency factor;
// its interpolated form is freq_scale times that, and with YaRN
// (ext_factor != 0) the two are mixed by the ramp between the correction
// dims and cos and sin are scaled by attn_factor·(1 + 0.1·ln(1/freq_scale)).
func (r *Ref) Rope(x []float32, pos []int32, n, nHead, headDim int, rp *model.Rope) {
	thetaScale := float32(math.Pow(float64(rp.Base), float64(-2/float32(rp.Dim))))
	half := rp.Dim / 2
	attn := rp.AttnFactor
	if attn == 0 {
		attn = 1
	}
	for t := range n {
		theta := float32(pos[t])
		for i := 0; i < half; i++ {
			extrap := theta
			if rp.Factors != nil {
				extrap /= rp.Factors[i]
			}
			interp := rp.Scale * extrap
			th, mscale := interp, attn
			if rp.ExtFactor != 0 {
				y := (float32(i) - rp.Corr[0]) / max(0.001, rp.Corr[1]-rp.Corr[0])
				mix := (1 - min(1, max(0, y))) * rp.ExtFactor
				// float32() after each product: ggml's C rounds each one.
				th = float32(interp*(1-mix)) + float32(extrap*mix)
				mscale *= 1 + 0.1*float32(math.Log(float64(1/rp.Scale)))
			}
			cos := float32(math.Cos(float64(th))) * mscale
			sin := float32(math.Sin(float64(th))) * mscale
			for hd := range nHead {
				v := x[(t*nHead+hd)*headDim:]
				var i0, i1 int
				if rp.Type == model.RopeNeox {
					i0, i1 = i, i+half
				} else {
					i0, i1 = 2*i, 2*i+1
				}
				x0, x1 := v[i0], v[i1]
				v[i0] = x0*cos - x1*sin
				v[i1] = x0*sin + x1*cos
			}
			theta *= thetaScale
		}
	}
}

// Attention implements model.Ops: for each row and head, scores against the
// cached keys of its sequence at positions ≤ its own, softmax (float64 sum),
// then the weighted sum of the values. Cached rows of any KV type are
// converted to float32 first (KVCache.GetK/GetV: a TurboQuant row is
// decoded and rotated back), so this is attention on exactly the values the
// cache holds; rows a query reads exactly (--kv-recent: from
// KVCache.RecentFrom on) come from their f16 copies. A sliding window
// leaves out the positions before it (a.Visible); a sink joins each head's
// maximum and sum as ggml_soft_max_ext's do.
func (r *Ref) Attention(out, q []float32, kv *model.KVCache, layer int, seq, pos []int32, h *model.Hyper, a model.Attn) {
	group := h.NHead / h.NHeadKV
	dk, dv := h.HeadDimK, h.HeadDimV
	r.krow = grow(r.krow, kv.KDim)
	r.vrow = grow(r.vrow, kv.VDim)
	r.kvTmp = grow(r.kvTmp, 2*max(dk, dv)+64)
	for t := range seq {
		s, np := int(seq[t]), int(pos[t])+1
		r.scores = grow(r.scores, h.NHead*np)
		sc := r.scores[:h.NHead*np]
		lt, e := kv.Layer(layer), kv.RecentFrom(np-1) // rows from e on: --kv-recent's f16 copies
		j0 := 0                                       // the first visible position (a.Visible)
		if a.Window > 0 {
			j0 = max(0, np-a.Window)
		}
		for j := j0; j < np; j++ {
			if lt.RecentK && j >= e {
				kv.GetRecentK(layer, s, j, r.krow)
			} else {
				kv.GetK(layer, s, j, r.krow, r.kvTmp)
			}
			for hd := range h.NHead {
				kh := hd / group
				qh := q[(t*h.NHead+hd)*dk : (t*h.NHead+hd+1)*dk]
				sc[hd*np+j] = DotF32(r.krow[kh*dk:(kh+1)*dk], qh) * a.Scale
			}
		}
		for hd := range h.NHead {
			row := sc[hd*np+j0 : (hd+1)*np]
			mx := float32(math.Inf(-1))
			for _, v := range row {
				mx = max(mx, v)
			}
			if a.Sinks != nil {
				mx = max(mx, a.Sinks[hd])
			}
			var sum float64
			for j := range row {
				e := float32(math.Exp(float64(row[j] - mx)))
				row[j] = e
				sum += float64(e)
			}
			if a.Sinks != nil {
				sum += math.Exp(float64(a.Sinks[hd] - mx))
			}
			inv := float32(1 / sum)
			for j := range row {
				row[j] *= inv
			}
			clear(out[(t*h.NHead+hd)*dv : (t*h.NHead+hd+1)*dv])
		}
		for j := j0; j < np; j++ {
			if lt.RecentV && j >= e {
				kv.GetRecentV(layer, s, j, r.vrow)
			} else {
				kv.GetV(layer, s, j, r.vrow, r.kvTmp)
			}
			for hd := range h.NHead {
				kh := hd / group
				w := sc[hd*np+j]
				o := out[(t*h.NHead+hd)*dv : (t*h.NHead+hd+1)*dv]
				vr := r.vrow[kh*dv : (kh+1)*dv]
				for d := range o {
					o[d] += w * vr[d]
				}
			}
		}
	}
}

// SwiGLU implements model.Ops: out = silu(gate)·up, silu(x) = x/(1+e^-x).
func (r *Ref) SwiGLU(out, gate, up []float32) {
	for i, g := range gate {
		out[i] = g / (1 + float32(math.Exp(float64(-g)))) * up[i]
	}
}

// GeGLU implements model.Ops: out = gelu(gate)·up, gelu by ggml's float16
// table (gelu.go).
func (r *Ref) GeGLU(out, gate, up []float32) {
	t := geluTable()
	for i, g := range gate {
		if g <= -10 {
			out[i] = 0 // not 0·up: ggml writes +0
			continue
		}
		out[i] = gelu(t, g) * up[i]
	}
}

// Scale implements model.Ops (ggml_scale without bias).
func (r *Ref) Scale(x []float32, s float32) {
	for i := range x {
		x[i] *= s
	}
}

// SwiGLUOAI implements model.ClampedSwiGLU as
// ggml_compute_forward_swiglu_oai_f32: x = min(gate, limit), y = up
// clamped to ±limit, out = x/(1+e^(alpha·-x))·(y+1).
func (r *Ref) SwiGLUOAI(out, gate, up []float32, alpha, limit float32) {
	for i, g := range gate {
		x := min(g, limit)
		y := min(max(up[i], -limit), limit)
		glu := x / (1 + float32(math.Exp(float64(alpha*(-x)))))
		out[i] = glu * (y + 1)
	}
}

// Add implements model.Ops.
func (r *Ref) Add(dst, src []float32) {
	for i := range dst {
		dst[i] += src[i]
	}
}

// AddRows implements model.Ops.
func (r *Ref) AddRows(x []float32, b model.Vector) {
	for i := range x {
		x[i] += b[i%len(b)]
	}
}

// Softmax implements model.Ops (ggml_soft_max: float64 sum, float32 scale).
func (r *Ref) Softmax(x []float32, n, dim int) {
	for t := range n {
		row := x[t*dim : (t+1)*dim]
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
}
