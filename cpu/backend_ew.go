package cpu

// backend_ew.go: the Backend's elementwise and row-wise operations
// (RMSNorm, RoPE, SwiGLU, GeGLU, Add, Scale, softmax): one ewTask split by rows across
// the workers when the work pays for a dispatch, and the Go loops the
// kernels fall back on (rmsNormRows, rotate, swiglu). It holds no matrix
// product (backend_matmul.go) and no attention (backend_attn.go).

import (
	"math"
	"sync/atomic"

	"github.com/flowinfer/flowinfer/model"
)

// ewKind selects an elementwise operation of ewTask.
type ewKind uint8

const (
	ewRMSNorm ewKind = iota
	ewSwiGLU
	ewAdd
	ewSoftmax
	ewRope
	ewGeGLU
	ewScale
	ewSwiGLUOAI
)

// parallelMin is the number of float32s below which an elementwise
// operation runs on the caller alone (a dispatch costs about a
// microsecond; this much work takes a few).
const parallelMin = 1 << 14

// ewTask is an elementwise or row-wise operation split into row ranges.
type ewTask struct {
	k            *Kernels
	kind         ewKind
	out, x, y    []float32
	weight       []float32
	dim          int
	eps          float32
	alpha, limit float32 // SwiGLUOAI
	pos          []int32
	nHead        int
	rope         *model.Rope
	gelu         *[1 << 16]float32 // GeGLU's table
	s            float32           // Scale's factor
	n            int               // rows (or elements for SwiGLU/Add)
	chunks, size int
	next         atomic.Int64
}

func (e *ewTask) run(int) {
	for {
		c := int(e.next.Add(1) - 1)
		if c >= e.chunks {
			return
		}
		r0 := c * e.size
		r1 := min(r0+e.size, e.n)
		e.do(r0, r1)
	}
}

func (e *ewTask) do(r0, r1 int) {
	switch e.kind {
	case ewRMSNorm:
		e.k.RMSNorm(e.out[r0*e.dim:r1*e.dim], e.x[r0*e.dim:r1*e.dim], e.weight, e.dim, e.eps)
	case ewSwiGLU:
		e.k.SwiGLU(e.out[r0:r1], e.x[r0:r1], e.y[r0:r1])
	case ewSwiGLUOAI:
		swigluOAI(e.out[r0:r1], e.x[r0:r1], e.y[r0:r1], e.alpha, e.limit)
	case ewAdd:
		add(e.out[r0:r1], e.x[r0:r1])
	case ewGeGLU:
		geglu(e.gelu, e.out[r0:r1], e.x[r0:r1], e.y[r0:r1])
	case ewScale:
		scale(e.out[r0:r1], e.s)
	case ewSoftmax:
		for t := r0; t < r1; t++ {
			softmaxRow(e.k, e.out[t*e.dim:(t+1)*e.dim])
		}
	case ewRope:
		half, row := e.rope.Dim/2, e.nHead*e.dim
		cs := e.y[r0*4*half : r1*4*half]
		for t := r0; t < r1; t++ {
			e.rope.Table(cs[(t-r0)*4*half:(t-r0+1)*4*half], e.pos[t])
		}
		e.k.Rope(e.out[r0*row:r1*row], cs, r1-r0, e.nHead, e.dim, half, e.rope.Type == model.RopeNeox)
	}
}

// expCost is the cost of an element whose operation has an exp, in units
// of a plain elementwise operation (for runEW's split).
const expCost = 8

// runEW runs e over n rows of rowLen units of work each (about one float32
// of a plain elementwise operation), in parallel when it is large.
func (b *Backend) runEW(e *ewTask, n, rowLen int) {
	e.n = n
	workers := b.workers.count()
	if workers == 1 || n*rowLen < parallelMin || n < 2 {
		e.do(0, n)
		return
	}
	minRows := max(1, parallelMin/(4*max(rowLen, 1)))
	e.chunks, e.size = chunks(n, workers, 4, minRows, 1)
	e.next.Store(0)
	b.workers.run(e)
}

// RMSNorm implements model.Ops (as Ref: sum of squares in float64, scale in
// float32) with Kernels.RMSNorm, split by rows.
func (b *Backend) RMSNorm(out, x []float32, weight model.Vector, n, dim int, eps float32) {
	e := &b.ew
	e.kind, e.out, e.x, e.weight, e.dim, e.eps = ewRMSNorm, out, x, weight, dim, eps
	b.runEW(e, n, dim)
}

// rmsNormRows is Kernels.RMSNorm in Go.
func rmsNormRows(out, x, weight []float32, dim int, eps float32) {
	for t := 0; t < len(x)/dim; t++ {
		xr, yr := x[t*dim:(t+1)*dim], out[t*dim:(t+1)*dim]
		var s0, s1, s2, s3 float64
		i := 0
		for ; i+4 <= len(xr); i += 4 {
			s0 += float64(xr[i] * xr[i])
			s1 += float64(xr[i+1] * xr[i+1])
			s2 += float64(xr[i+2] * xr[i+2])
			s3 += float64(xr[i+3] * xr[i+3])
		}
		for ; i < len(xr); i++ {
			s0 += float64(xr[i] * xr[i])
		}
		mean := float32((s0 + s1 + s2 + s3) / float64(dim))
		scale := 1 / float32(math.Sqrt(float64(mean+eps)))
		if weight == nil {
			for i, v := range xr {
				yr[i] = v * scale
			}
			continue
		}
		w := weight[:dim]
		for i, v := range xr {
			yr[i] = v * scale * w[i]
		}
	}
}

// Rope implements model.Ops: the angle tables of each row (model.Rope.Table),
// then the rotation (Kernels.Rope), split by rows.
func (b *Backend) Rope(x []float32, pos []int32, n, nHead, headDim int, rp *model.Rope) {
	if need := n * 4 * (rp.Dim / 2); len(b.ropeCS) < need {
		b.ropeCS = make([]float32, need)
	}
	e := &b.ew
	e.kind, e.out, e.y, e.pos, e.nHead, e.dim, e.rope = ewRope, x, b.ropeCS, pos, nHead, headDim, rp
	b.runEW(e, n, nHead*headDim)
}

// rotate is Kernels.Rope in Go.
func rotate(x, cs []float32, rows, nHead, headDim, half int, neox bool) {
	for t := range rows {
		c, s := cs[t*4*half:t*4*half+2*half], cs[t*4*half+2*half:(t+1)*4*half]
		for hd := range nHead {
			v := x[(t*nHead+hd)*headDim : (t*nHead+hd+1)*headDim]
			if neox {
				for i := range half {
					x0, x1 := v[i], v[i+half]
					v[i] = x0*c[i] - x1*s[i]
					v[i+half] = x0*s[i] + x1*c[i]
				}
				continue
			}
			for i := range half {
				x0, x1 := v[2*i], v[2*i+1]
				v[2*i] = x0*c[2*i] - x1*s[2*i+1]
				v[2*i+1] = x0*s[2*i+1] + x1*c[2*i]
			}
		}
	}
}

// SwiGLU implements model.Ops.
func (b *Backend) SwiGLU(out, gate, up []float32) {
	e := &b.ew
	e.kind, e.out, e.x, e.y = ewSwiGLU, out, gate, up
	b.runEW(e, len(gate), expCost)
}

// swiglu is SwiGLU on a range (expf's body with expPoly inlined: this
// loop runs once per FFN activation).
func swiglu(out, gate, up []float32) {
	up = up[:len(gate)]
	out = out[:len(gate)]
	for i, g := range gate {
		x := -g
		var e float32
		if x > -87 && x < 88 {
			e = float32(expPoly(float64(x)))
		} else {
			e = expfSlow(x)
		}
		out[i] = g / (1 + e) * up[i]
	}
}

// GeGLU implements model.Ops: ggml's table lookup (gelu.go), split by
// elements.
func (b *Backend) GeGLU(out, gate, up []float32) {
	e := &b.ew
	e.kind, e.out, e.x, e.y, e.gelu = ewGeGLU, out, gate, up, geluTable()
	b.runEW(e, len(gate), 4)
}

// Scale implements model.Ops.
func (b *Backend) Scale(x []float32, s float32) {
	e := &b.ew
	e.kind, e.out, e.s = ewScale, x, s
	b.runEW(e, len(x), 1)
}

func scale(x []float32, s float32) {
	for i := range x {
		x[i] *= s
	}
}

// SwiGLUOAI implements model.ClampedSwiGLU (gpt-oss's experts): Ref's
// formula with expPoly for the exp, split across the workers. There is no
// C kernel for it yet.
func (b *Backend) SwiGLUOAI(out, gate, up []float32, alpha, limit float32) {
	e := &b.ew
	e.kind, e.out, e.x, e.y, e.alpha, e.limit = ewSwiGLUOAI, out, gate, up, alpha, limit
	b.runEW(e, len(gate), expCost)
}

// swigluOAI is SwiGLUOAI on a range (expf's body with expPoly inlined, as
// swiglu).
func swigluOAI(out, gate, up []float32, alpha, limit float32) {
	up = up[:len(gate)]
	out = out[:len(gate)]
	for i, g := range gate {
		x := min(g, limit)
		y := min(max(up[i], -limit), limit)
		a := alpha * (-x)
		var ex float32
		if a > -87 && a < 88 {
			ex = float32(expPoly(float64(a)))
		} else {
			ex = expfSlow(a)
		}
		out[i] = x / (1 + ex) * (y + 1)
	}
}

// Add implements model.Ops.
func (b *Backend) Add(dst, src []float32) {
	e := &b.ew
	e.kind, e.out, e.x = ewAdd, dst, src
	b.runEW(e, len(dst), 1)
}

func add(dst, src []float32) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] += src[i]
	}
}

// AddRows implements model.Ops.
func (b *Backend) AddRows(x []float32, bias model.Vector) {
	for i := 0; i+len(bias) <= len(x); i += len(bias) {
		add(x[i:i+len(bias)], bias)
	}
}

// Softmax implements model.Ops.
func (b *Backend) Softmax(x []float32, n, dim int) {
	e := &b.ew
	e.kind, e.out, e.dim = ewSoftmax, x, dim
	b.runEW(e, n, dim*expCost)
}

// softmaxRow normalises one row in place (float64 sum, float32 scale).
func softmaxRow(k *Kernels, row []float32) {
	mx := float32(math.Inf(-1))
	for _, v := range row {
		mx = max(mx, v)
	}
	inv := float32(1 / k.ExpSub(row, mx))
	for i := range row {
		row[i] *= inv
	}
}
