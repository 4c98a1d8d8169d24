package cpu_test

import (
	"math"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/model"
)

// TestRopeYarnAngles checks Ref's YaRN against the formula of the YaRN
// paper (LlamaYaRNScaledRotaryEmbedding) in float64: pair i turns by
// p·θᵢ·((1-r)/s + r) with θᵢ = base^(-2i/d) and r the ramp between the
// correction dims (pairs at or below Corr[0] keep the original angle, those
// at or above Corr[1] are divided by the factor s), and its length is
// scaled by attn·(1 + 0.1·ln s). Positions go to 4·256, four times the
// original context; the tolerance (3e-4 absolute on unit vectors) covers
// ggml's float32 angle recurrence.
func TestRopeYarnAngles(t *testing.T) {
	const dim, nCtxOrig, factor, attn = 32, 256, 4, 1.25
	for _, typ := range []model.RopeType{model.RopeNorm, model.RopeNeox} {
		rp := model.Rope{Type: typ, Dim: dim, Base: 10000, Scale: 1.0 / factor, ExtFactor: 1, AttnFactor: attn,
			Corr: model.YarnCorrDims(dim, nCtxOrig, 10000, 32, 1)}
		if rp.Corr != [2]float32{0, 7} {
			t.Fatalf("corr dims %v", rp.Corr)
		}
		pos := []int32{0, 1, 255, 256, 700, 1023}
		x := make([]float32, len(pos)*dim)
		for t := range pos {
			for i := range dim / 2 {
				if typ == model.RopeNeox {
					x[t*dim+i] = 1
				} else {
					x[t*dim+2*i] = 1
				}
			}
		}
		cpu.NewRef().Rope(x, pos, len(pos), 1, dim, &rp)
		mscale := attn * (1 + 0.1*math.Log(factor))
		var worst float64
		for t, p := range pos {
			for i := range dim / 2 {
				r := 1 - math.Min(1, math.Max(0, (float64(i)-0)/7))
				theta := float64(p) * math.Pow(10000, -2*float64(i)/dim) * ((1-r)/factor + r)
				var c, s float32
				if typ == model.RopeNeox {
					c, s = x[t*dim+i], x[t*dim+i+dim/2]
				} else {
					c, s = x[t*dim+2*i], x[t*dim+2*i+1]
				}
				worst = max(worst, math.Abs(float64(c)/mscale-math.Cos(theta)), math.Abs(float64(s)/mscale-math.Sin(theta)))
			}
		}
		t.Logf("%s: worst deviation from the float64 formula %.2g", typ, worst)
		if worst > 3e-4 {
			t.Errorf("%s: YaRN rotation deviates %.2g from the formula (limit 3e-4)", typ, worst)
		}
	}
}
