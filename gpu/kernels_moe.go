//go:build cgo

package gpu

// kernels_moe.go: the row moves of a MoE layer on the device (moe_*.comp):
// gathering an expert's tokens' rows, scattering its weighted outputs into
// their (token, slot) entries, and summing each token's entries. The
// experts' products themselves are MatMul on expert weights at their slot
// offsets (expertstore.go).

import (
	"fmt"
	"math"

	"github.com/flowinfer/flowinfer/gpu/shaders"
	"github.com/flowinfer/flowinfer/gpu/vk"
	"github.com/flowinfer/flowinfer/quant"
)

// rowsOp checks a row move of rows rows of d floats and returns the
// dispatch grid over its rows·d floats.
func (k *Kernels) rowsOp(what string, rows, d int) (gx, gy uint32, err error) {
	if rows <= 0 || d <= 0 || rows*d > math.MaxUint32 {
		return 0, 0, fmt.Errorf("gpu: %s: %d rows of %d", what, rows, d)
	}
	return k.grid((rows*d + ewThreads - 1) / ewThreads)
}

// GatherRows records row i of dst = row idx[i]/kk of src for i < rows
// (rows of d floats); idx holds rows uint32 entries, each < srcRows·kk.
// The entries are not checked on the device: the caller checks them.
func (k *Kernels) GatherRows(cb *vk.CommandBuffer, dst, src, idx F32, rows, srcRows, kk, d int) error {
	gx, gy, err := k.rowsOp("GatherRows", rows, d)
	if err != nil {
		return err
	}
	if kk <= 0 || srcRows <= 0 {
		return fmt.Errorf("gpu: GatherRows: %d source rows, %d entries per row", srcRows, kk)
	}
	so, err := floats("GatherRows src", src, srcRows*d)
	if err != nil {
		return err
	}
	do, err := floats("GatherRows dst", dst, rows*d)
	if err != nil {
		return err
	}
	io, err := floats("GatherRows entries", idx, rows)
	if err != nil {
		return err
	}
	p, set, err := k.bind(shaders.MoEGather, 24, []uint32{ewThreads}, src.Buf, idx.Buf, dst.Buf)
	if err != nil {
		return err
	}
	cb.Dispatch(p, set, push(uint32(rows*d), uint32(d), uint32(kk), so, io, do), gx, gy, 1)
	return nil
}

// ScatterRows records row idx[i] of dst = w[i]·(row i of src) for i <
// rows (rows of d floats): idx holds rows uint32 entries, each <
// dstRows, followed by their rows weights' float32 bits.
func (k *Kernels) ScatterRows(cb *vk.CommandBuffer, dst, src, idx F32, rows, dstRows, d int) error {
	gx, gy, err := k.rowsOp("ScatterRows", rows, d)
	if err != nil {
		return err
	}
	so, err := floats("ScatterRows src", src, rows*d)
	if err != nil {
		return err
	}
	do, err := floats("ScatterRows dst", dst, dstRows*d)
	if err != nil {
		return err
	}
	io, err := floats("ScatterRows entries", idx, 2*rows)
	if err != nil {
		return err
	}
	p, set, err := k.bind(shaders.MoEScatter, 24, []uint32{ewThreads}, src.Buf, idx.Buf, dst.Buf)
	if err != nil {
		return err
	}
	cb.Dispatch(p, set, push(uint32(rows*d), uint32(d), uint32(rows), so, io, do), gx, gy, 1)
	return nil
}

// SumRows records row t of dst = Σ_{j<kk} row t·kk+j of src for t < n
// (rows of d floats), added in the order of j.
func (k *Kernels) SumRows(cb *vk.CommandBuffer, dst, src F32, n, kk, d int) error {
	gx, gy, err := k.rowsOp("SumRows", n, d)
	if err != nil {
		return err
	}
	if kk <= 0 {
		return fmt.Errorf("gpu: SumRows: %d rows per sum", kk)
	}
	so, err := floats("SumRows src", src, n*kk*d)
	if err != nil {
		return err
	}
	do, err := floats("SumRows dst", dst, n*d)
	if err != nil {
		return err
	}
	p, set, err := k.bind(shaders.MoESum, 20, []uint32{ewThreads}, src.Buf, dst.Buf)
	if err != nil {
		return err
	}
	cb.Dispatch(p, set, push(uint32(n*d), uint32(d), uint32(kk), so, do), gx, gy, 1)
	return nil
}

// MatVecByID records y_z = W_{ids[idOff+z]} · x_z for z < k: w is the
// matrix of expert 0 and the matrix of expert e is w's rows at
// w.Off + e·stride bytes of w.Buf (a layer's resident experts, one slot
// apart); x_z is the cols floats at x + z·xStride (xStride 0: one vector
// for all), y_z the rows floats at y + z·w.Rows. ids holds uint32 expert
// ids below nExpert, not checked on the device (the device's top-k writes
// them). It runs the shader and variant MatVec runs on one vector, so
// each product is bit for bit MatVec's.
func (k *Kernels) MatVecByID(cb *vk.CommandBuffer, y F32, w Weight, x F32, ids F32, kk, nExpert, stride, xStride int) error {
	sh, ok := matVecShaders[w.Type]
	if !ok {
		return fmt.Errorf("gpu: MatVecByID: %w: weights of type %s", vk.ErrUnsupported, w.Type)
	}
	if w.Rows <= 0 || w.Cols <= 0 || kk <= 0 || nExpert <= 0 || stride < 0 || xStride < 0 {
		return fmt.Errorf("gpu: MatVecByID: shape %dx%d, %d of %d experts %d bytes apart, vectors %d floats apart", w.Rows, w.Cols, kk, nExpert, stride, xStride)
	}
	rb, err := quant.RowBytes(w.Type, w.Cols)
	if err != nil {
		return fmt.Errorf("gpu: MatVecByID: %w", err)
	}
	end := uint64(w.Off) + uint64(nExpert-1)*uint64(stride) + uint64(w.Rows)*uint64(rb)
	if w.Buf == nil || w.Off < 0 || w.Off%4 != 0 || stride%4 != 0 || end > w.Buf.Size() || end > math.MaxUint32 {
		return fmt.Errorf("gpu: MatVecByID: %d experts of %d rows of %d bytes, %d apart, at offset %d overrun the weight buffer", nExpert, w.Rows, rb, stride, w.Off)
	}
	xo, err := floats("MatVecByID x", x, (kk-1)*xStride+w.Cols)
	if err != nil {
		return err
	}
	yo, err := floats("MatVecByID y", y, kk*w.Rows)
	if err != nil {
		return err
	}
	io, err := floats("MatVecByID ids", ids, kk)
	if err != nil {
		return err
	}
	spec := sh.spec
	k.mu.Lock()
	if v, ok := k.mv[w.Type]; ok {
		spec = v[:]
	}
	k.mu.Unlock()
	p, set, err := k.bind(sh.name+shaders.ByID, 40, []uint32{spec[0], spec[1], 1}, w.Buf, x.Buf, y.Buf, ids.Buf)
	if err != nil {
		return err
	}
	gx, gy, err := k.grid((w.Rows + int(spec[1]) - 1) / int(spec[1]))
	if err != nil {
		return err
	}
	cb.Dispatch(p, set, push(uint32(w.Rows), uint32(w.Cols), uint32(rb), uint32(w.Off), xo, yo, 1, io, uint32(stride), uint32(xStride)), gx, gy, uint32(kk))
	return nil
}

// Route records the routing row of one token's kk experts from their
// ranked values v (kk floats): kk entries 0 .. kk-1 then the weights'
// bits, each value divided by their sum when norm (moe_route.comp), the
// layout ScatterRows reads.
func (k *Kernels) Route(cb *vk.CommandBuffer, dst, v F32, kk int, norm bool) error {
	if kk <= 0 || kk > MaxTopK {
		return fmt.Errorf("gpu: Route: %d experts (1 to %d)", kk, MaxTopK)
	}
	vo, err := floats("Route values", v, kk)
	if err != nil {
		return err
	}
	do, err := floats("Route dst", dst, 2*kk)
	if err != nil {
		return err
	}
	if vo != 0 || do != 0 {
		return fmt.Errorf("gpu: Route: values and routing at offsets %d and %d (0 only)", vo, do)
	}
	p, set, err := k.bind(shaders.MoERoute, 8, nil, v.Buf, dst.Buf)
	if err != nil {
		return err
	}
	n := uint32(0)
	if norm {
		n = 1
	}
	cb.Dispatch(p, set, push(uint32(kk), n), 1, 1, 1)
	return nil
}
