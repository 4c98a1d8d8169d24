//go:build cgo

package gpu

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/gpu/vk"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/quant"
)

// The activations gemma3 and gpt-oss add to the Backend (GeGLU, Scale,
// SwiGLUOAI) against cpu.Ref on the same inputs, between guard floats.

// geluInputs returns gates: every float16 value below 10 in magnitude
// (each entry of the GELU table, subnormals and both zeros included), the
// cut-offs ±10 and beyond, values halfway between two float16s (ties to
// even) and just off them, then random ones up to n; fewer than those
// (shuffled) when n is smaller.
func geluInputs(r *rig, n int) []float32 {
	var x []float32
	for h := range 1 << 16 {
		if v := quant.FP16ToFP32(uint16(h)); !math.IsNaN(float64(v)) && math.Abs(float64(v)) < 10 {
			x = append(x, v)
		}
	}
	x = append(x, -10, 10, -10.5, 12, -1e30, 1e30, float32(math.Nextafter32(-10, 0)), float32(math.Nextafter32(10, 0)))
	for _, h := range []uint16{0x0001, 0x0003, 0x03ff, 0x0400, 0x3c00, 0x3c01, 0x4000, 0x47ff, 0x8001, 0xbc00, 0xc8ff} {
		a, b := quant.FP16ToFP32(h), quant.FP16ToFP32(h+1)
		mid := (a + b) / 2 // exact: one more bit than float16 has
		x = append(x, mid, math.Nextafter32(mid, a), math.Nextafter32(mid, b))
	}
	if n < len(x) {
		r.rng.Shuffle(len(x), func(i, j int) { x[i], x[j] = x[j], x[i] })
	}
	for len(x) < n {
		x = append(x, 8*(2*r.rng.Float32()-1))
	}
	return x[:n]
}

// TestBackendGeGLU: the device's GeGLU equals cpu.Ref's bit for bit (a
// lookup in the same table and one product) on every float16 input, the
// cut-offs, rounding ties and random gates; and the table equals package
// cpu's through it.
func TestBackendGeGLU(t *testing.T) {
	r, be := newOpsBackend(t)
	ref := cpu.NewRef()
	for _, n := range []int{1, 7, 1000, 1 << 17} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			gate, up := geluInputs(r, n), r.floats(n)
			want := make([]float32, n)
			ref.GeGLU(want, gate, up)
			full, mid := guardedOut(be, n, nil)
			be.GeGLU(mid, gate, up)
			got := checkGuarded(t, be, full, n)
			bad := 0
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					if bad++; bad <= 5 {
						t.Errorf("gelu(%g)·%g = %g, Ref %g", gate[i], up[i], got[i], want[i])
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d outputs differ from Ref's", bad, n)
			}
		})
	}
}

// TestBackendScale: x *= s is one float32 product per value, as Ref's.
func TestBackendScale(t *testing.T) {
	r, be := newOpsBackend(t)
	ref := cpu.NewRef()
	for _, n := range []int{1, 5, 256, 70001} {
		for _, s := range []float32{16, -0.37, 0} {
			t.Run(fmt.Sprintf("n=%d/s=%g", n, s), func(t *testing.T) {
				x := r.floats(n)
				want := slices.Clone(x)
				ref.Scale(want, s)
				full, mid := guardedOut(be, n, x)
				be.Scale(mid, s)
				got := checkGuarded(t, be, full, n)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("value %d: %g·%g = %g, Ref %g", i, x[i], s, got[i], want[i])
					}
				}
			})
		}
	}
}

// TestBackendSwiGLUOAI: gpt-oss's clamped SwiGLU on gates and ups
// spread past the limit on both sides, NMSE against Ref at the default
// 1e-7 (the shader's exp against float64's).
func TestBackendSwiGLUOAI(t *testing.T) {
	r, be := newOpsBackend(t)
	ref := cpu.NewRef()
	for _, n := range []int{1, 3, 1000, 65537} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			gate, up := r.floats(n), r.floats(n)
			for i := range gate {
				gate[i] *= 12 // past the limit of 7 both ways
				up[i] *= 12
			}
			want := make([]float32, n)
			ref.SwiGLUOAI(want, gate, up, model.SwiGLUOAIAlpha, model.SwiGLUOAILimit)
			full, mid := guardedOut(be, n, nil)
			be.SwiGLUOAI(mid, gate, up, model.SwiGLUOAIAlpha, model.SwiGLUOAILimit)
			got := checkGuarded(t, be, full, n)
			if e := nmse(got, want); e > nmseDefault {
				t.Errorf("NMSE %.3g > %g", e, nmseDefault)
			}
		})
	}
}

// TestBackendRefusesSWARing: a KV cache whose sliding-window layers keep
// rings is refused by name (ErrUnsupported) at the first store; with
// SWAFull it is taken.
func TestBackendRefusesSWARing(t *testing.T) {
	r, be := newOpsBackend(t)
	h := model.Hyper{NLayer: 2, NHead: 2, NHeadKV: 1, HeadDimK: 16, HeadDimV: 16, Window: []int{8, 0}}
	for _, full := range []bool{false, true} {
		kv, err := model.NewKVCacheOf(&h, model.KVTypes{K: model.KVF32, V: model.KVF32, SWAFull: full}, 4096, 1)
		if err != nil {
			t.Fatal(err)
		}
		kv.ReserveSWA(4)
		k, v := r.floats(h.KDim()), r.floats(h.VDim())
		be.StoreKV(kv, 0, []int32{0}, []int32{0}, k, v)
		err = be.ToHost(nil)
		if full && err != nil {
			t.Errorf("SWAFull: %v", err)
		}
		if !full && (!errors.Is(err, vk.ErrUnsupported) || !strings.Contains(fmt.Sprint(err), "--swa-full")) {
			t.Errorf("ring cache: error %v, want ErrUnsupported naming --swa-full", err)
		}
	}
}
