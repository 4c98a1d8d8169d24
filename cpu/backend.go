package cpu

// backend.go: Backend, the fast CPU implementation of model.Ops. It
// computes what Ref computes (the same activation conversion before every
// matrix product, the same per-block integer dot products) on a persistent
// pool of workers with the SIMD kernels; only the order of float additions
// differs. Matrix products split the weight rows into blocks that workers
// claim from a shared counter; activations are converted once per matrix
// (in parallel for batches); a batch multiplies tiles of weight rows by
// tiles of tokens (GemmRows) instead of one matrix-vector product per
// token; weights the kernels have a packed layout for are multiplied in
// that layout (backend_pack.go). Attention runs in parallel over (rows,
// KV head) units (backend_attn.go); norms, SwiGLU and softmax split rows
// across workers when the work pays for a dispatch.
//
// Steady-state calls allocate nothing: scratch grows to the largest
// operation seen and is then reused. A Backend runs one operation at a time
// (like Ref): give each model.Context its own.

import (
	"fmt"
	"math"
	"sync/atomic"

	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/quant"
)

// Backend is the multi-threaded SIMD backend.
type Backend struct {
	pool *pool
	k    *Kernels

	act []byte // activations converted to a vec-dot type

	// NoPack keeps MatMul on the file's weight layout: by default a weight
	// the kernels can pack is copied into their packed layout when first
	// used (or by PackModel), and products read the copy.
	NoPack bool
	// DropPacked makes PackModel release each matrix's pages of the file
	// mapping as soon as its packed copy exists (madvise DONTNEED: a clean
	// file page costs nothing to read again), so resident weights cost
	// their size once, also at the peak.
	DropPacked bool
	packed     map[packKey]*Packed // nil value: not packable

	mat    matTask
	one    [1]*model.Weight // MatMul's argument to MatMuls
	oneOut [1][]float32
	quant  quantTask
	ew     ewTask
	ropeCS []float32 // Rope's angle tables (4·Dim/2 floats per row)
	attn   attnTask
	store  kvStoreTask
	rot    rotTask
}

var (
	_ model.Ops         = (*Backend)(nil)
	_ model.MultiMatMul = (*Backend)(nil)
	_ model.KVStorer    = (*Backend)(nil)
	_ model.Rotator     = (*Backend)(nil)
)

// NewBackend returns a backend on threads workers (≤ 0: PhysicalCores)
// with the given kernels (nil: Best()). It starts threads-1 goroutines,
// which Close stops. With C kernels it raises GOMAXPROCS to threads+1
// unless the environment sets it (procs.go says why).
func NewBackend(threads int, kernels *Kernels) *Backend {
	if threads <= 0 {
		threads = PhysicalCores()
	}
	if kernels == nil {
		kernels = Best()
	}
	if kernels.ISA() != ISAScalarGo {
		reserveProcs(threads)
	}
	b := &Backend{pool: newPool(threads), k: kernels, packed: make(map[packKey]*Packed)}
	b.attn.init(threads)
	b.store.init(threads)
	b.ew.k = kernels
	return b
}

// Threads returns the number of workers (the calling goroutine included).
func (b *Backend) Threads() int { return b.pool.workers() }

// ISA returns the kernels' instruction-set path.
func (b *Backend) ISA() ISA { return b.k.ISA() }

// Close stops the workers. The backend must not be used afterwards.
func (b *Backend) Close() { b.pool.close() }

// Supports implements model.Ops.
func (b *Backend) Supports(t quant.Type) bool { return b.k.Supports(t) }

// chunks returns how many pieces of at least minSize of a range of n to
// cut so that each of the workers gets several (for balance when a core
// is busy elsewhere), and the piece size, a multiple of align.
func chunks(n, workers, perWorker, minSize, align int) (count, size int) {
	size = max(minSize, (n+workers*perWorker-1)/(workers*perWorker))
	size = (size + align - 1) / align * align
	return (n + size - 1) / size, size
}

// MatMul implements model.Ops.
func (b *Backend) MatMul(out []float32, w *model.Weight, x []float32, n int) {
	b.one[0], b.oneOut[0] = w, out
	b.MatMuls(b.oneOut[:], b.one[:], x, n)
	b.one[0], b.oneOut[0] = nil, nil
}

// MatMuls implements model.MultiMatMul: the products of up to maxParts
// weights with the same activations, converted once and split into one
// parallel operation (in decode, the q, k and v projections are three
// small products: as one they pay one dispatch and one tail, not three).
// Each output row is computed exactly as MatMul computes it.
func (b *Backend) MatMuls(outs [][]float32, ws []*model.Weight, x []float32, n int) {
	if len(ws) > maxParts || !sameInput(ws) {
		for i, w := range ws {
			b.MatMul(outs[i], w, x, n)
		}
		return
	}
	cols := ws[0].Cols
	vt := quant.VecDotType(ws[0].Type)
	var act []byte
	var arb int
	if vt == quant.F32 {
		act, arb = f32bytes(x[:n*cols]), 4*cols
	} else {
		arb = rowBytes(vt, cols)
		if cap(b.act) < n*arb {
			b.act = make([]byte, n*arb)
		}
		act = b.act[:n*arb]
		b.convert(vt, x[:n*cols], cols, n, act, arb)
	}
	m := &b.mat
	m.k, m.cols, m.a, m.arb, m.n = b.k, cols, act, arb, n
	m.np, m.total = len(ws), 0
	workers := b.pool.workers()
	for i, w := range ws {
		p := &m.parts[i]
		p.wt, p.w, p.rowBytes, p.rows = w.Type, w.Data, w.RowBytes, w.Rows
		p.pk = b.packedFor(w, &p.view)
		p.out, p.ldo = outs[i][:n*w.Rows], w.Rows
		if n == 1 {
			// at least dotMinWork weights per claim: smaller products are
			// not worth a dispatch
			p.bounds = guided(p.bounds[:0], w.Rows, workers, max(16, dotMinWork/cols), PackRows)
			p.rowChunks, p.rowSize = len(p.bounds)-1, 0
			p.tokChunks, p.tokSize = 1, 1
		} else {
			p.tokChunks, p.tokSize = chunks(n, 1, 1, gemmTokens, 1)
			p.tokSize = min(p.tokSize, gemmTokens)
			p.tokChunks = (n + p.tokSize - 1) / p.tokSize
			p.rowChunks, p.rowSize = chunks(w.Rows, workers, 4, gemmRowsMin, 8)
			p.rowSize = min(p.rowSize, gemmRowsMax)
			p.rowChunks = (w.Rows + p.rowSize - 1) / p.rowSize
			if n*w.Rows*cols < 4*dotMinWork {
				p.rowChunks, p.rowSize, p.tokChunks, p.tokSize = 1, w.Rows, 1, n
			}
		}
		p.first = m.total
		m.total += int64(p.rowChunks * p.tokChunks)
	}
	m.next.Store(0)
	if m.total == 1 {
		m.run(0)
	} else {
		b.pool.run(m)
	}
	for i := range m.np {
		m.parts[i].w, m.parts[i].out, m.parts[i].pk = nil, nil, nil
	}
}

// guided appends to b the boundaries 0 = b[0] < b[1] < ... = n of chunks
// of a range of n rows, sizes multiples of align (but the last), for a
// parallel loop in which workers claim chunks in order. Sizes shrink as
// the work runs out (OpenMP's guided schedule): each chunk is the rows
// left over 2·workers, at least minSize. The first chunks are long, so
// each worker streams long runs of weights, and the last ones are short,
// so workers finish together: with equal chunks of 1/16 of a matrix, the
// first worker done waits on average 1/32 of the product (measured: 3-4%
// of a decode step spinning).
func guided(b []int32, n, workers, minSize, align int) []int32 {
	minSize = (max(minSize, 1) + align - 1) / align * align
	b = append(b, 0)
	for r := 0; r < n; {
		size := (n - r) / (2 * workers) / align * align
		size = min(max(size, minSize), n-r)
		r += size
		b = append(b, int32(r))
	}
	return b
}

// sameInput reports whether the weights take the same activations: the
// same width and the same dot-product type.
func sameInput(ws []*model.Weight) bool {
	if len(ws) == 0 {
		return false
	}
	for _, w := range ws[1:] {
		if w.Cols != ws[0].Cols || quant.VecDotType(w.Type) != quant.VecDotType(ws[0].Type) {
			return false
		}
	}
	return true
}

// maxParts is the most weights one MatMuls call multiplies together.
const maxParts = 4

// dotMinWork is the fewest weights a worker multiplies per claim in a
// matrix-vector product (tens of microseconds: a dispatch costs one or
// two).
const dotMinWork = 1 << 16

// Tiles of a batched product: a worker multiplies up to gemmRowsMax weight
// rows by up to gemmTokens activation rows per claim (activations of 64
// tokens of a 8192-wide row in Q8_K are 146 KB: they stay in L2 while the
// weight rows stream past).
const (
	gemmTokens  = 64
	gemmRowsMin = 16
	gemmRowsMax = 128
)

// convert converts n rows of x to vt, in parallel for large batches.
func (b *Backend) convert(vt quant.Type, x []float32, cols, n int, act []byte, arb int) {
	if n < 4 || b.pool.workers() == 1 {
		b.k.QuantizeRows(vt, x, n, cols, act)
		return
	}
	q := &b.quant
	q.k, q.vt, q.x, q.cols, q.n, q.dst, q.rb = b.k, vt, x, cols, n, act, arb
	q.chunks, q.size = chunks(n, b.pool.workers(), 4, 1, 1)
	q.next.Store(0)
	b.pool.run(q)
}

// matTask is one to maxParts matrix products of the same activations, each
// cut into (row block, token block) chunks; chunks are numbered part after
// part and, within a part, row-block-major, so a worker keeps its weight
// rows in cache while it goes through the token blocks.
type matTask struct {
	k      *Kernels
	cols   int
	a      []byte
	arb, n int
	parts  [maxParts]matPart
	np     int
	total  int64
	next   atomic.Int64
}

// matPart is one weight's product within a matTask.
type matPart struct {
	wt                 quant.Type
	w                  []byte
	pk                 *Packed // w packed, or nil
	view               Packed  // pk of a Weight.Packed weight
	rowBytes, rows     int
	out                []float32
	ldo                int
	rowChunks, rowSize int     // rowSize 0: the chunks of bounds
	bounds             []int32 // row chunk i is [bounds[i], bounds[i+1])
	tokChunks, tokSize int
	first              int64 // number of the part's first chunk
}

func (m *matTask) run(int) {
	for {
		c := m.next.Add(1) - 1
		if c >= m.total {
			return
		}
		p := &m.parts[0]
		for i := 1; i < m.np && c >= m.parts[i].first; i++ {
			p = &m.parts[i]
		}
		m.do(p, int(c-p.first))
	}
}

// do computes chunk c of part p.
func (m *matTask) do(p *matPart, c int) {
	rc, tc := c/p.tokChunks, c%p.tokChunks
	var r0, r1 int
	if p.rowSize == 0 {
		r0, r1 = int(p.bounds[rc]), int(p.bounds[rc+1])
	} else {
		r0 = rc * p.rowSize
		r1 = min(r0+p.rowSize, p.rows)
	}
	t0 := tc * p.tokSize
	t1 := min(t0+p.tokSize, m.n)
	switch {
	case p.pk != nil && m.n == 1:
		m.k.DotRowsPacked(p.pk, r0, r1, m.a, p.out)
	case p.pk != nil:
		m.k.GemmRowsPacked(p.pk, r0, r1, m.a[t0*m.arb:t1*m.arb], t1-t0, p.out[t0*p.ldo:], p.ldo)
	case m.n == 1:
		m.k.DotRows(p.wt, p.w, p.rowBytes, m.cols, r0, r1, m.a, p.out)
	default:
		m.k.GemmRows(p.wt, p.w, p.rowBytes, m.cols, r0, r1, m.a[t0*m.arb:t1*m.arb], t1-t0, p.out[t0*p.ldo:], p.ldo)
	}
}

// quantTask converts rows of activations.
type quantTask struct {
	k            *Kernels
	vt           quant.Type
	x            []float32
	cols, n      int
	dst          []byte
	rb           int
	chunks, size int
	next         atomic.Int64
}

func (q *quantTask) run(int) {
	for {
		c := int(q.next.Add(1) - 1)
		if c >= q.chunks {
			return
		}
		t0 := c * q.size
		t1 := min(t0+q.size, q.n)
		q.k.QuantizeRows(q.vt, q.x[t0*q.cols:t1*q.cols], t1-t0, q.cols, q.dst[t0*q.rb:t1*q.rb])
	}
}

// Embed implements model.Ops.
func (b *Backend) Embed(out []float32, w *model.Weight, ids []int32) {
	deq := quant.DequantizeFunc(w.Type)
	for t, id := range ids {
		deq(w.Row(int(id)), out[t*w.Cols:(t+1)*w.Cols])
	}
}

// ewKind selects an elementwise operation of ewTask.
type ewKind uint8

const (
	ewRMSNorm ewKind = iota
	ewSwiGLU
	ewAdd
	ewSoftmax
	ewRope
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
	pos          []int32
	nHead        int
	rope         *model.Rope
	n            int // rows (or elements for SwiGLU/Add)
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
	case ewAdd:
		add(e.out[r0:r1], e.x[r0:r1])
	case ewSoftmax:
		for t := r0; t < r1; t++ {
			softmaxRow(e.k, e.out[t*e.dim:(t+1)*e.dim])
		}
	case ewRope:
		half, row := e.rope.Dim/2, e.nHead*e.dim
		cs := e.y[r0*4*half : r1*4*half]
		for t := r0; t < r1; t++ {
			ropeTable(cs[(t-r0)*4*half:(t-r0+1)*4*half], e.pos[t], e.rope)
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
	workers := b.pool.workers()
	if workers == 1 || n*rowLen < parallelMin || n < 2 {
		e.do(0, n)
		return
	}
	minRows := max(1, parallelMin/(4*max(rowLen, 1)))
	e.chunks, e.size = chunks(n, workers, 4, minRows, 1)
	e.next.Store(0)
	b.pool.run(e)
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

// Rope implements model.Ops: the angle tables of each row (ropeTable),
// then the rotation (Kernels.Rope), split by rows.
func (b *Backend) Rope(x []float32, pos []int32, n, nHead, headDim int, rp *model.Rope) {
	if need := n * 4 * (rp.Dim / 2); len(b.ropeCS) < need {
		b.ropeCS = make([]float32, need)
	}
	e := &b.ew
	e.kind, e.out, e.y, e.pos, e.nHead, e.dim, e.rope = ewRope, x, b.ropeCS, pos, nHead, headDim, rp
	b.runEW(e, n, nHead*headDim)
}

// ropeTable writes the 4·half floats of Kernels.Rope's angle table for
// position p, as Ref.Rope computes the angles: ggml's float32 recurrence
// theta *= base^(-2/dim), YaRN's mix of the extrapolated and interpolated
// angle when rp.ExtFactor != 0, cos and sin in float64 rounded to float32,
// times rp.MScale().
func ropeTable(cs []float32, p int32, rp *model.Rope) {
	thetaScale := float32(math.Pow(float64(rp.Base), float64(-2/float32(rp.Dim))))
	half := rp.Dim / 2
	c, s := cs[:2*half], cs[2*half:4*half]
	mscale := rp.MScale()
	theta := float32(p)
	for i := range half {
		extrap := theta
		if rp.Factors != nil {
			extrap /= rp.Factors[i]
		}
		th := rp.Scale * extrap
		if rp.ExtFactor != 0 {
			mix := model.YarnRamp(rp.Corr[0], rp.Corr[1], i) * rp.ExtFactor
			th = float32(th*(1-mix)) + float32(extrap*mix)
		}
		sin64, cos64 := math.Sincos(float64(th))
		cos, sin := float32(cos64)*mscale, float32(sin64)*mscale
		if rp.Type == model.RopeNeox {
			c[i], s[i] = cos, sin
		} else {
			c[2*i], c[2*i+1], s[2*i], s[2*i+1] = cos, cos, -sin, sin
		}
		theta *= thetaScale
	}
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

// swiglu is SwiGLU on a range (expf inlined by hand: this loop runs once
// per FFN activation).
func swiglu(out, gate, up []float32) {
	up = up[:len(gate)]
	out = out[:len(gate)]
	for i, g := range gate {
		x := -g
		var e float32
		if x > -87 && x < 88 {
			f := float64(x)
			k := f*log2e + roundBias - roundBias
			r := f - k*ln2
			r2 := r * r
			p := (1 + r) + r2*(1.0/2+r*(1.0/6)) + r2*r2*((1.0/24+r*(1.0/120))+r2*(1.0/720+r*(1.0/5040)))
			e = float32(p * math.Float64frombits(uint64(int64(k)+1023)<<52))
		} else {
			e = expfSlow(x)
		}
		out[i] = g / (1 + e) * up[i]
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

// rowBytes is quant.RowBytes for shapes validated at load.
func rowBytes(t quant.Type, cols int) int {
	n, err := quant.RowBytes(t, cols)
	if err != nil {
		panic(fmt.Sprintf("cpu: %v", err)) // shapes were validated at load
	}
	return n
}
