package cpu

// backend_matmul.go: the Backend's matrix products (MatMul, MatMuls): the
// activations converted once per call (in parallel for batches), then the
// weight rows, times the tokens in tiles for a batch, cut into chunks that
// workers claim. It computes no dot product itself (Kernels.DotRows,
// GemmRows and their packed forms) and packs no weight (backend_pack.go).

import (
	"sync/atomic"

	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/quant"
)

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
	workers := b.workers.count()
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
		b.workers.run(m)
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
	if n < 4 || b.workers.count() == 1 {
		b.k.QuantizeRows(vt, x, n, cols, act)
		return
	}
	q := &b.quant
	q.k, q.vt, q.x, q.cols, q.n, q.dst, q.rb = b.k, vt, x, cols, n, act, arb
	q.chunks, q.size = chunks(n, b.workers.count(), 4, 1, 1)
	q.next.Store(0)
	b.workers.run(q)
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
