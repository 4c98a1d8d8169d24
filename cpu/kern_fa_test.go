package cpu_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/model"
)

// flashTol is the NMSE against Ref's plain softmax that prefill attention
// (FlashTile's online softmax, every path) must stay within: the one
// TestBackendAttention holds every form of Attention to.
const flashTol = 1e-11

// TestAttentionPrefillShapes compares Backend.Attention with Ref's on
// prefill chunks of odd lengths starting at positions on both sides of
// tile (64) and block boundaries, one sequence or two in one batch, for
// group sizes 1 to 6 and head dimensions whose V does not fill a 16-wide
// column block (8, 40, 72) or a vector (20, which the SIMD paths leave to
// Go), on a contiguous and a paged cache whose blocks are scattered.
func TestAttentionPrefillShapes(t *testing.T) {
	type shape struct{ nHead, nKV, dk, dv int }
	shapes := []shape{{8, 2, 64, 64}, {6, 6, 40, 40}, {12, 2, 72, 72}, {9, 3, 8, 8}, {4, 4, 20, 20}, {4, 1, 32, 16}}
	type chunk struct{ p0, n int } // positions [p0, p0+n) of one sequence
	batches := [][]chunk{
		{{0, 1}}, {{0, 2}}, {{0, 37}}, {{0, 200}}, {{63, 2}}, {{64, 65}}, {{65, 130}}, {{127, 33}}, {{190, 67}},
		{{0, 33}, {100, 99}}, // two sequences in one batch
		{{250, 1}, {0, 70}},  // a decode row and a prefill chunk
	}
	const nCtx = 320
	for _, sh := range shapes {
		h := model.Hyper{NHead: sh.nHead, NHeadKV: sh.nKV, HeadDimK: sh.dk, HeadDimV: sh.dv, NLayer: 1}
		flat := model.NewKVCache(&h, nCtx, 2)
		paged, err := model.NewPagedKVCache(&h, model.KVTypes{}, 16, 2*nCtx/16, 2, nCtx)
		if err != nil {
			t.Fatal(err)
		}
		for s := range 2 {
			for i := range nCtx / 16 { // scrambled pairs of adjacent blocks
				paged.Tables[s] = append(paged.Tables[s], int32(s*nCtx/16+(i/2*7)%10*2+i%2))
			}
			for p := range nCtx {
				k, v := randomF32(flat.KDim, uint64(1000*s+p)), randomF32(flat.VDim, uint64(1000*s+p+500000))
				flat.SetK(0, s, p, k)
				flat.SetV(0, s, p, v)
				paged.SetK(0, s, p, k)
				paged.SetV(0, s, p, v)
			}
		}
		scale := float32(1 / math.Sqrt(float64(sh.dk)))
		for bi, chunks := range batches {
			var seq, pos []int32
			for s, c := range chunks {
				for p := c.p0; p < c.p0+c.n; p++ {
					seq, pos = append(seq, int32(s)), append(pos, int32(p))
				}
			}
			n := len(seq)
			q := randomF32(n*h.NHead*h.HeadDimK, uint64(17+bi))
			// large scores too: the online max moves between tiles
			for i := range q {
				q[i] *= 4
			}
			want := make([]float32, n*h.NHead*h.HeadDimV)
			cpu.NewRef().Attention(want, q, flat, 0, seq, pos, &h, model.Attn{Scale: scale})
			for _, isa := range cpu.Available() {
				for _, kv := range []*model.KVCache{flat, paged} {
					for _, threads := range []int{1, 3} {
						name := fmt.Sprintf("heads=%d/%d/dims=%d/%d/batch=%v/isa=%s/paged=%v/threads=%d",
							sh.nHead, sh.nKV, sh.dk, sh.dv, chunks, isa, kv.Paged(), threads)
						be := cpu.NewBackend(threads, cpu.KernelsFor(isa))
						got, check := guarded(len(want))
						be.Attention(got, q, kv, 0, seq, pos, &h, model.Attn{Scale: scale})
						be.Close()
						check(t)
						if e := nmse(got, want); !(e <= flashTol) {
							t.Errorf("%s: NMSE %.3g > %g", name, e, flashTol)
						}
					}
				}
			}
		}
	}
}

// TestFlashTileMask runs FlashTile on a tile where some query rows see no
// position yet (m stays -Inf, nothing NaN) and where the max grows by
// more than exp's range between tiles (the old sum and accumulator scale
// to zero), per path, against float64 arithmetic.
func TestFlashTileMask(t *testing.T) {
	const rp, R, dk, dv, L = 16, 5, 8, 8, 4
	for _, isa := range cpu.Available() {
		k := cpu.KernelsFor(isa)
		qt := make([]float32, rp*dk)
		for r := range R {
			qt[r] = 1 // q_r = (1, 0, ...): the score is K's first element
		}
		// two tiles of 4 positions; rows at positions 1, 2, 5, 6, 7
		pos := []int32{1, 2, 5, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7}
		kp := make([]float32, 2*L*dk)
		score := []float32{0, 1, 2, 3, 200, 201, 202, 203} // second tile: max jumps by ~200
		for j, s := range score {
			kp[j*dk] = s
		}
		vrows := make([]float32, 2*L*dv)
		for j := range 2 * L {
			for d := range dv {
				vrows[j*dv+d] = float32(j*10 + d)
			}
		}
		vp := make([]float32, 2*L*dv)
		cpu.FlashPackV(vp, 2*L, 0, vrows, dv, dv, 2*L)
		m, l, acc := make([]float32, rp), make([]float64, rp), make([]float32, R*dv)
		for i := range m {
			m[i] = float32(math.Inf(-1))
		}
		scratch := make([]float32, cpu.FlashScratch(rp, L))
		// a tile [4, 8) first: rows at 1 and 2 see none of it
		k.FlashTile(qt, rp, R, dk, dv, kp[L*dk:], vp, 2*L, L, L, pos, true, 0, m, l, acc, scratch)
		for r := range 2 {
			if !math.IsInf(float64(m[r]), -1) || l[r] != 0 || acc[r*dv] != 0 {
				t.Errorf("isa=%s: row %d with nothing visible: m %g, l %g, acc %g", isa, r, m[r], l[r], acc[r*dv])
			}
		}
		k.FlashTile(qt, rp, R, dk, dv, kp, vp, 2*L, L, 0, pos, true, 0, m, l, acc, scratch)
		for r := range R {
			var sum, w float64
			wv := make([]float64, dv)
			mx := math.Inf(-1)
			for j := 0; j <= int(pos[r]); j++ {
				mx = max(mx, float64(score[j]))
			}
			for j := 0; j <= int(pos[r]); j++ {
				w = math.Exp(float64(score[j]) - mx)
				sum += w
				for d := range dv {
					wv[d] += w * float64(vrows[j*dv+d])
				}
			}
			for d := range dv {
				got := float64(acc[r*dv+d]) / l[r]
				if want := wv[d] / sum; math.Abs(got-want) > 1e-5*(1+math.Abs(want)) {
					t.Errorf("isa=%s: row %d (position %d) column %d: %g, want %g", isa, r, pos[r], d, got, want)
				}
			}
		}
	}
}
