//go:build cgo

package gpu

import (
	"fmt"
	"testing"

	"github.com/flowinfer/flowinfer/quant"
)

// The lattice types' shaders (iq_dequant.glsl) against cpu.Ref, as
// test-backend-ops's test_mul_mat runs every type_a: weights quantized
// from random floats by our quantizers (QuantizeRow: llama-quantize's
// quantizer without an importance matrix; all ones for IQ2_XXS, IQ2_XS
// and IQ1_S, as model/synth does), then checkProduct's checks. The
// thresholds are the same for every type, as in test-backend-ops (5e-4
// for mul_mat whatever type_a is): against the native reference, which
// rounds the activations to Q8_K (the lattice types' dot type), 5e-4;
// against the Exact one (the dequantized weights in float32), 1e-7, as
// the shaders decode each weight with the CPU's float32 operations and
// only the summation order differs. NaN/Inf fail; guard floats catch
// writes out of bounds.

var iqTypes = []quant.Type{quant.IQ2_XXS, quant.IQ2_XS, quant.IQ2_S, quant.IQ3_XXS, quant.IQ3_S, quant.IQ1_S, quant.IQ1_M}

// TestMatMulIQ: each lattice type through the mat-vec shader (1, 2 and 7
// vectors: one workgroup of vectors) and the matrix-matrix one (2, 7 and
// 65 vectors: one vector past a 64-vector tile), on an aligned shape and
// on odd ones: rows that fill no workgroup or tile, rows of 3
// super-blocks (which start 2 bytes off a word: 3·66, 3·74, ... bytes).
func TestMatMulIQ(t *testing.T) {
	r := newRig(t)
	shapes := [][2]int{{64, 512}, {7, 256}, {33, 768}}
	for _, typ := range iqTypes {
		for _, s := range shapes {
			for _, n := range []int{1, 2, 7} {
				t.Run(fmt.Sprintf("type=%s/op=matvec/rows=%d/cols=%d/n=%d", typ, s[0], s[1], n), func(t *testing.T) {
					r.t = t
					r.checkProduct(r.k.MatVec, typ, s[0], s[1], n)
				})
			}
			for _, n := range []int{2, 7, 65} {
				t.Run(fmt.Sprintf("type=%s/op=matmat/rows=%d/cols=%d/n=%d", typ, s[0], s[1], n), func(t *testing.T) {
					r.t = t
					r.checkProduct(r.k.MatMat, typ, s[0], s[1], n)
				})
			}
		}
	}
}

// TestIQSupported: both kinds of shader exist for every lattice type, so
// Backend.Supports (SupportsMatVec) reports them and MatMul takes the
// matrix-matrix path for a prompt.
func TestIQSupported(t *testing.T) {
	for _, typ := range iqTypes {
		if !SupportsMatVec(typ) || !SupportsMatMat(typ) {
			t.Errorf("%s: mat-vec %v, mat-mat %v", typ, SupportsMatVec(typ), SupportsMatMat(typ))
		}
	}
}
