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
