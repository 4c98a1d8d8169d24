// Weights packed at load time: a copy of a weight matrix in a layout only
// these kernels read, for the types and paths where that makes decode
// faster (Q4_0, Q4_K, Q5_K, Q6_K and Q8_0 on AVX2 and AVX-512: rows
// interleaved in groups of 8, so vector lanes are rows; a third to a half
// of the instructions per weight byte; AVX-512 takes two groups per
// vector). The file's bytes are not changed and the packed products no
// longer read them; the copy has the file's size (Q4_0, Q6_K, Q8_0) or 4
// bytes more per 256 weights (Q4_K 148 instead of 144, Q5_K 180 instead of
// 176). llama.cpp's CPU_REPACK buffers do the same for Q4_0, Q4_K and Q2_K.

package cpu

import (
	"fmt"

	"github.com/flowinfer/flowinfer/quant"
)

// PackRows is the row granularity of packed weights: a packed matrix has a
// multiple of PackRows rows, and packed products take row ranges whose ends
// are multiples of it.
const PackRows = 8

// Packed is a weight matrix in a kernel layout, made by Kernels.Pack. It is
// read-only and safe for concurrent use.
type Packed struct {
	isa        ISA
	wt         quant.Type
	rows, cols int
	data       []byte
}

// Type returns the weight type.
func (p *Packed) Type() quant.Type { return p.wt }

// Rows returns the number of rows.
func (p *Packed) Rows() int { return p.rows }

// Cols returns the number of columns.
func (p *Packed) Cols() int { return p.cols }

// Bytes returns the size of the packed data.
func (p *Packed) Bytes() int { return len(p.data) }

// CanPack reports whether Pack handles a rows×cols matrix of type wt on
// this path.
func (k *Kernels) CanPack(wt quant.Type, rows, cols int) bool {
	if k.isa == ISAScalarGo || rows <= 0 || rows%PackRows != 0 {
		return false
	}
	bs, _, ok := dotLayout(wt)
	if !ok || cols <= 0 || cols%bs != 0 {
		return false
	}
	return packedSizeC(k.isa, wt, rows, cols) > 0
}

// Pack returns a packed copy of a rows×cols matrix of type wt whose row r
// starts at w[r*rowBytes]. It fails if CanPack is false or w is too short.
func (k *Kernels) Pack(wt quant.Type, w []byte, rowBytes, rows, cols int) (*Packed, error) {
	if !k.CanPack(wt, rows, cols) {
		return nil, fmt.Errorf("cpu: pack: no packed form of a %d×%d %s matrix on %s", rows, cols, wt, k.isa)
	}
	wrb, err := quant.RowBytes(wt, cols)
	if err != nil {
		return nil, fmt.Errorf("cpu: pack: %w", err)
	}
	if rowBytes < wrb || len(w) < (rows-1)*rowBytes+wrb {
		return nil, fmt.Errorf("cpu: pack: %d rows of %d bytes (stride %d) need %d bytes, have %d", rows, wrb, rowBytes, (rows-1)*rowBytes+wrb, len(w))
	}
	p := &Packed{isa: k.isa, wt: wt, rows: rows, cols: cols, data: make([]byte, packedSizeC(k.isa, wt, rows, cols))}
	packC(k.isa, wt, w, rowBytes, rows, cols, p.data)
	return p, nil
}

// PackedSize returns the size of Pack's output for a rows×cols matrix of
// type wt, 0 if CanPack is false.
func (k *Kernels) PackedSize(wt quant.Type, rows, cols int) int {
	if !k.CanPack(wt, rows, cols) {
		return 0
	}
	return packedSizeC(k.isa, wt, rows, cols)
}

// PackInto is Pack into dst (at least PackedSize bytes, which it keeps:
// the caller owns the memory, e.g. a slot of the weight path's expert
// cache). The result is byte-identical to Pack's.
func (k *Kernels) PackInto(dst []byte, wt quant.Type, w []byte, rowBytes, rows, cols int) (*Packed, error) {
	size := k.PackedSize(wt, rows, cols)
	if size == 0 {
		return nil, fmt.Errorf("cpu: pack: no packed form of a %d×%d %s matrix on %s", rows, cols, wt, k.isa)
	}
	wrb, err := quant.RowBytes(wt, cols)
	if err != nil {
		return nil, fmt.Errorf("cpu: pack: %w", err)
	}
	if rowBytes < wrb || len(w) < (rows-1)*rowBytes+wrb {
		return nil, fmt.Errorf("cpu: pack: %d rows of %d bytes (stride %d) need %d bytes, have %d", rows, wrb, rowBytes, (rows-1)*rowBytes+wrb, len(w))
	}
	if len(dst) < size {
		return nil, fmt.Errorf("cpu: pack: destination of %d bytes, need %d", len(dst), size)
	}
	packC(k.isa, wt, w, rowBytes, rows, cols, dst[:size])
	return &Packed{isa: k.isa, wt: wt, rows: rows, cols: cols, data: dst[:size]}, nil
}

// DotRowsPacked is DotRows on packed weights: out[r] = dot(row r, a) for r
// in [r0, r1), r0 and r1 multiples of PackRows (or r1 = p.Rows()).
func (k *Kernels) DotRowsPacked(p *Packed, r0, r1 int, a []byte, out []float32) {
	k.GemmRowsPacked(p, r0, r1, a, 1, out, r1)
}

// GemmRowsPacked is GemmRows on packed weights: out[t*outStride+r] for r
// in [r0, r1) (multiples of PackRows) and t in [0, nAct).
func (k *Kernels) GemmRowsPacked(p *Packed, r0, r1 int, a []byte, nAct int, out []float32, outStride int) {
	const op = "GemmRowsPacked"
	arb := layoutBytes(op, quant.VecDotType(p.wt), p.cols, actLayout)
	switch {
	case p.isa != k.isa:
		panic(fmt.Sprintf("cpu: %s: weights packed for %s, kernels are %s", op, p.isa, k.isa))
	case r0 < 0 || r1 < r0 || r1 > p.rows || r0%PackRows != 0 || r1%PackRows != 0:
		panic(fmt.Sprintf("cpu: %s: bad row range [%d, %d) of %d packed rows (ends must be multiples of %d)", op, r0, r1, p.rows, PackRows))
	case nAct < 0:
		panic(fmt.Sprintf("cpu: %s: %d activation rows", op, nAct))
	case r1 == r0 || nAct == 0:
		return
	case len(a) < nAct*arb:
		panic(fmt.Sprintf("cpu: %s: %d activation rows of %d need %d bytes, have %d", op, nAct, p.cols, nAct*arb, len(a)))
	case nAct > 1 && outStride < r1:
		panic(fmt.Sprintf("cpu: %s: output stride %d < row end %d", op, outStride, r1))
	case len(out) < (nAct-1)*outStride+r1:
		panic(fmt.Sprintf("cpu: %s: output needs %d floats, has %d", op, (nAct-1)*outStride+r1, len(out)))
	}
	gemmPackedC(k.isa, p.wt, p.data, p.cols, r0, r1, a, arb, nAct, out, outStride)
}
