// Weights packed at load time: a copy of a weight matrix in a layout only
// these kernels read, for the types and paths where that makes decode
// faster (Q4_0, Q4_K, Q5_K, Q6_K, Q8_0, IQ4_NL, IQ4_XS and MXFP4 on AVX2 and
// AVX-512: rows interleaved in groups of 8, so vector lanes are rows; a
// third to a half of the instructions per weight byte; AVX-512 takes two
// groups per vector, but for the last three, whose products are AVX2's on
// both paths). The file's bytes are not changed and the packed products no
// longer read them; the copy has the file's size (Q4_0, Q6_K, Q8_0,
// IQ4_NL, MXFP4) or 2-4 bytes more per 256 weights (Q4_K 148 instead of
// 144, Q5_K 180 instead of 176, IQ4_XS 138 instead of 136). llama.cpp's
// CPU_REPACK buffers do the same for Q4_0, Q4_K, Q2_K, IQ4_NL and MXFP4.
//
// A matrix whose rows are not a multiple of PackRows (an output matrix of
// 32001 or 50257 rows) is packed but for its last rows, which the packed
// copy keeps in the file's layout and the products take with the
// matrix-vector kernel one activation row at a time, as a lone row: a row
// gets the same bits whatever the batch, and the rest of the matrix the
// packed kernels' speed.

package cpu

import (
	"fmt"

	"github.com/flowinfer/flowinfer/quant"
)

// PackRows is the row granularity of packed weights: a packed matrix holds
// its rows up to the last multiple of PackRows (its body) in the kernels'
// layout and the rest (its tail) as the file's rows, and packed products
// take row ranges whose ends are multiples of PackRows or the last row.
const PackRows = 8

// Packed is a weight matrix in a kernel layout, made by Kernels.Pack. It is
// read-only and safe for concurrent use.
type Packed struct {
	isa        ISA
	wt         quant.Type
	rows, cols int
	body       int    // rows in the kernels' layout: rows rounded down to PackRows
	wrb        int    // bytes of a row of the tail
	data       []byte // the body's packed bytes, then the tail's rows back to back
}

// set makes p the Packed of a rows×cols wt matrix whose packed bytes
// (packedSize of them) are data, and returns p.
func (p *Packed) set(isa ISA, wt quant.Type, rows, cols int, data []byte) *Packed {
	wrb, _ := quant.RowBytes(wt, cols)
	*p = Packed{isa: isa, wt: wt, rows: rows, cols: cols, body: rows / PackRows * PackRows, wrb: wrb, data: data}
	return p
}

// tail returns the tail's rows.
func (p *Packed) tail() []byte { return p.data[len(p.data)-(p.rows-p.body)*p.wrb:] }

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
	if k.isa == ISAScalarGo || rows <= 0 {
		return false
	}
	bs, _, ok := dotLayout(wt)
	if !ok || cols <= 0 || cols%bs != 0 {
		return false
	}
	return packedSizeC(k.isa, wt, PackRows, cols) > 0
}

// packedSize is PackedSize once CanPack holds: the body's packed bytes and
// the tail's rows.
func (k *Kernels) packedSize(wt quant.Type, rows, cols int) int {
	body := rows / PackRows * PackRows
	n := 0
	if body > 0 {
		n = packedSizeC(k.isa, wt, body, cols)
	}
	wrb, _ := quant.RowBytes(wt, cols)
	return n + (rows-body)*wrb
}

// pack writes the packed form of w (packedSize bytes) to dst.
func (k *Kernels) pack(wt quant.Type, w []byte, rowBytes, rows, cols int, dst []byte) {
	body := rows / PackRows * PackRows
	if body > 0 {
		packC(k.isa, wt, w, rowBytes, body, cols, dst)
	}
	wrb, _ := quant.RowBytes(wt, cols)
	t := dst[len(dst)-(rows-body)*wrb:]
	for r := body; r < rows; r++ {
		copy(t[(r-body)*wrb:(r-body+1)*wrb], w[r*rowBytes:])
	}
}

// Pack returns a packed copy of a rows×cols matrix of type wt whose row r
// starts at w[r*rowBytes]. It fails if CanPack is false or w is too short.
func (k *Kernels) Pack(wt quant.Type, w []byte, rowBytes, rows, cols int) (*Packed, error) {
	size, err := k.checkPack(wt, w, rowBytes, rows, cols)
	if err != nil {
		return nil, err
	}
	p := new(Packed).set(k.isa, wt, rows, cols, make([]byte, size))
	k.pack(wt, w, rowBytes, rows, cols, p.data)
	return p, nil
}

// checkPack returns PackedSize of the rows×cols matrix of type wt whose
// row r starts at w[r*rowBytes], or an error if CanPack is false or w is
// too short.
func (k *Kernels) checkPack(wt quant.Type, w []byte, rowBytes, rows, cols int) (int, error) {
	size := k.PackedSize(wt, rows, cols)
	if size == 0 {
		return 0, fmt.Errorf("cpu: pack: no packed form of a %d×%d %s matrix on %s", rows, cols, wt, k.isa)
	}
	wrb, err := quant.RowBytes(wt, cols)
	if err != nil {
		return 0, fmt.Errorf("cpu: pack: %w", err)
	}
	if rowBytes < wrb || len(w) < (rows-1)*rowBytes+wrb {
		return 0, fmt.Errorf("cpu: pack: %d rows of %d bytes (stride %d) need %d bytes, have %d", rows, wrb, rowBytes, (rows-1)*rowBytes+wrb, len(w))
	}
	return size, nil
}

// PackedSize returns the size of Pack's output for a rows×cols matrix of
// type wt, 0 if CanPack is false.
func (k *Kernels) PackedSize(wt quant.Type, rows, cols int) int {
	if !k.CanPack(wt, rows, cols) {
		return 0
	}
	return k.packedSize(wt, rows, cols)
}

// PackInto is Pack into dst (at least PackedSize bytes, which it keeps:
// the caller owns the memory, e.g. a slot of the weight path's expert
// cache). The result is byte-identical to Pack's.
func (k *Kernels) PackInto(dst []byte, wt quant.Type, w []byte, rowBytes, rows, cols int) (*Packed, error) {
	size, err := k.checkPack(wt, w, rowBytes, rows, cols)
	if err != nil {
		return nil, err
	}
	if len(dst) < size {
		return nil, fmt.Errorf("cpu: pack: destination of %d bytes, need %d", len(dst), size)
	}
	k.pack(wt, w, rowBytes, rows, cols, dst[:size])
	return new(Packed).set(k.isa, wt, rows, cols, dst[:size]), nil
}

// DotRowsPacked is DotRows on packed weights: out[r] = dot(row r, a) for r
// in [r0, r1), r0 a multiple of PackRows, r1 one too or p.Rows().
func (k *Kernels) DotRowsPacked(p *Packed, r0, r1 int, a []byte, out []float32) {
	k.GemmRowsPacked(p, r0, r1, a, 1, out, r1)
}

// GemmRowsPacked is GemmRows on packed weights: out[t*outStride+r] for r
// in [r0, r1) (r0 a multiple of PackRows, r1 one too or p.Rows()) and t in
// [0, nAct). The tail's rows take DotRows, one activation row at a time.
func (k *Kernels) GemmRowsPacked(p *Packed, r0, r1 int, a []byte, nAct int, out []float32, outStride int) {
	const op = "GemmRowsPacked"
	arb := layoutBytes(op, quant.VecDotType(p.wt), p.cols, actLayout)
	switch {
	case p.isa != k.isa:
		panic(fmt.Sprintf("cpu: %s: weights packed for %s, kernels are %s", op, p.isa, k.isa))
	case r0 < 0 || r1 < r0 || r1 > p.rows || r0%PackRows != 0 || r1%PackRows != 0 && r1 != p.rows:
		panic(fmt.Sprintf("cpu: %s: bad row range [%d, %d) of %d packed rows (ends must be multiples of %d or the last row)", op, r0, r1, p.rows, PackRows))
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
	if b1 := min(r1, p.body); r0 < b1 {
		gemmPackedC(k.isa, p.wt, p.data, p.cols, r0, b1, a, arb, nAct, out, outStride)
	}
	if r1 > p.body { // r0 ≤ p.body: r0 is a multiple of PackRows
		for t := range nAct {
			k.DotRows(p.wt, p.tail(), p.wrb, p.cols, 0, r1-p.body, a[t*arb:(t+1)*arb], out[t*outStride+p.body:])
		}
	}
}
