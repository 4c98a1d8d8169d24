// The one rule for tensor shapes, shared by the reader and the writer so
// that what one accepts the other does too.

package gguf

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/flowinfer/flowinfer/quant"
)

// TensorBytes checks a tensor shape (dims[0] the row length, fastest
// varying) of type typ and returns its size in bytes. The rule, as
// llama.cpp's gguf.cpp and ggml's strides: at most MaxDims dimensions, each
// at most math.MaxInt64; a row is a whole number of blocks (a 0-dim scalar
// only of a type with block size 1); and every partial product of the
// dimensions, counted in elements (dims[0]*...*dims[j]) and in bytes (row
// bytes*dims[1]*...*dims[j], ggml's stride nb[j+1]), fits in an int64. A
// zero dimension does not excuse an overflow before it: the shape
// [77872 65584 808464432 0] is rejected although it holds no element,
// because its strides do not fit.
func TensorBytes(typ quant.Type, dims []uint64) (uint64, error) {
	if !typ.Known() {
		return 0, fmt.Errorf("unknown tensor type %d", uint32(typ))
	}
	if len(dims) > MaxDims {
		return 0, fmt.Errorf("%d dimensions, at most %d allowed", len(dims), MaxDims)
	}
	bs := uint64(typ.BlockSize())
	if len(dims) == 0 {
		if bs != 1 {
			return 0, fmt.Errorf("scalar of block type %s", typ)
		}
		return uint64(typ.BlockBytes()), nil
	}
	elems := uint64(1)
	for j, d := range dims {
		if d > math.MaxInt64 {
			return 0, fmt.Errorf("dimension %d is %d (negative as int64)", j, d)
		}
		hi, lo := bits.Mul64(elems, d)
		if hi != 0 || lo > math.MaxInt64 {
			return 0, fmt.Errorf("element count overflows with shape %v", dims)
		}
		elems = lo
	}
	if dims[0]%bs != 0 {
		return 0, fmt.Errorf("row of %d elements is not a whole number of %s blocks of %d", dims[0], typ, bs)
	}
	hi, size := bits.Mul64(dims[0]/bs, uint64(typ.BlockBytes()))
	if hi != 0 || size > math.MaxInt64 {
		return 0, fmt.Errorf("size in bytes overflows with shape %v (row)", dims)
	}
	for _, d := range dims[1:] {
		hi, lo := bits.Mul64(size, d)
		if hi != 0 || lo > math.MaxInt64 {
			return 0, fmt.Errorf("size in bytes overflows with shape %v", dims)
		}
		size = lo
	}
	return size, nil
}
