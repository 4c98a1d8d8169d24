// Gemma 4 chunked prefill against one pass (TestGemma4Chunked).

package model_test

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/model/synth"
	"github.com/flowinfer/flowinfer/quant"
)

// TestGemma4Chunked: a prompt of 400 tokens (past the window of 128 three
// times) fed in one pass, in chunks of 37, and as 300 tokens then one at a
// time gives the same logits at every position: bit for bit on Ref; on
// the Backend within gemma4ChunkedExactMaxAbs when GELU is computed
// without ggml's float16 table (exactGELU), and within
// gemma4ChunkedMaxAbs as it ships (see both constants for why they
// differ). The shared KV layers read rings their source layers wrote in
// the same step.
//
// The same holds for gemma4-mixed-small (sliding layers with heads of 64
// and 2 KV heads, global ones of 128 and 1, double-wide FFNs in the shared
// layers) and for 256-wide copies of the gemma-4-e4b and gemma-4-26b-a4b
// presets (gemma4Narrow: their real layer counts, head sizes, KV heads
// per layer, windows and shared layers), 64 positions, on the reference
// ops only (exact; the reference is too slow for their windows).
func TestGemma4Chunked(t *testing.T) {
	for _, c := range []struct {
		preset string
		narrow bool
		n      int
	}{{"gemma4-small", false, 400}, {"gemma4-mixed-small", false, 400}, {"gemma-4-e4b", true, 64}, {"gemma-4-26b-a4b", true, 64}} {
		t.Run(c.preset, func(t *testing.T) {
			spec, err := synth.Preset(c.preset)
			if err != nil {
				t.Fatal(err)
			}
			if c.narrow {
				spec = gemma4Narrow(spec)
			}
			gemma4Chunked(t, spec, c.n)
		})
	}
}

// The Backend's bounds in TestGemma4Chunked: max |Δlogit| over all 400
// positions between one pass and chunks of 37, or a prefill of 300 then
// decode. The Backend's attention sums in float32 per tile of attnTile
// positions on a grid that starts at the first position a block of rows
// sees (its lowest position's window edge) and ends at its last row, so
// cutting the prompt differently moves the tiles and changes the order of
// the sums: in layer 0, where Q, K and V are still bit-identical, kqv_out
// differs by 1 ulp (2.7e-7 at |x| 2.2). From there:
//
//   - with GELU computed without the float16 table (exactGELU), those
//     rounding differences stay rounding-sized: measured on gemma4-small
//     and gemma4-mixed-small, seeds 1 to 8, both splits (32 runs), at
//     most 2.0e-6 (gemma4ChunkedExactMaxAbs leaves 5x). This is the check
//     that the chunked path (rings, per-layer KV layout, windows, shared
//     layers) computes the same function: a sliding window one row too
//     wide in the chunked steps only (a mutation tried on
//     gemma4-mixed-small) moves the logits by 0.39 to 0.60, which both
//     bounds catch.
//   - with ggml's table (what the Backend ships, as llama.cpp), a 1e-6
//     difference in a GELU input sometimes crosses a float16 rounding
//     boundary, a step of up to 2^-11 of the activation: layer 0's
//     ffn_out (|x| ≤ 0.18) then differs by 1e-5, and post_ffw_norm,
//     which rescales it to RMS 1, makes that 2.6e-4 (gemma4-mixed-small,
//     seed 3, chunks of 37); the per-layer input's gate is a second table
//     GELU per layer. Measured over the same 32 runs: 3.6e-4 to 7.0e-4
//     (gemma4-small seed 4, prefill then decode; seed 3, the one tested,
//     4.65e-4 and 5.13e-4 on the two presets with chunks of 37).
//     gemma3-small, with the same table and post-norms but one GELU per
//     layer, measures 2.3e-4 to 4.0e-4 the same way. These are not
//     gemma4F32MaxAbs's quantity (one position against llama.cpp), so
//     gemma4ChunkedMaxAbs is its own: 2e-3, about 3x the largest seen.
const (
	gemma4ChunkedExactMaxAbs = 1e-5
	gemma4ChunkedMaxAbs      = 2e-3
)

// exactGELU is the Backend with GeGLU computed in float64 from the tanh
// formula instead of ggml's float16 table (TestGemma4Chunked's check that
// chunking changes only rounding).
type exactGELU struct{ *cpu.Backend }

// GeGLU implements model.Ops.
func (e exactGELU) GeGLU(out, gate, up []float32) {
	for i, g := range gate {
		x := float64(g)
		out[i] = float32(0.5*x*(1+math.Tanh(math.Sqrt(2/math.Pi)*x*(1+0.044715*x*x)))) * up[i]
	}
}

// gemma4Narrow returns a 256-wide copy of a real gemma4 shape: its layer
// count, heads, head sizes, KV heads per layer, windows and shared KV
// layers, with NEmbd 256, an FFN of 512, per-layer embeddings of 64 (if
// it has them) and 16 experts of 128 (4 used, if it has experts).
func gemma4Narrow(s synth.Spec) synth.Spec {
	s.NEmbd, s.NFF, s.NCtx = 256, 512, 4096
	if s.Gemma4.NEmbdPerLayer > 0 {
		s.Gemma4.NEmbdPerLayer = 64
	}
	if s.NExpert > 0 {
		s.NExpert, s.NExpertUsed, s.NFFExp = 16, 4, 128
	}
	s.Name += "-narrow"
	return s
}

// gemma4Chunked is TestGemma4Chunked for one shape and n positions.
func gemma4Chunked(t *testing.T, spec synth.Spec, n int) {
	var buf bytes.Buffer
	if err := synth.Write(&buf, spec, synth.Options{Type: quant.F32, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(f, cpu.NewRef().Supports)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32((i*7919 + 13) % m.NVocab)
	}
	be := cpu.NewBackend(2, cpu.Best())
	defer be.Close()
	for _, c := range []struct {
		name string
		ops  model.Ops
		tol  float64
	}{{"ref", cpu.NewRef(), 0}, {"backend-exact-gelu", exactGELU{be}, gemma4ChunkedExactMaxAbs}, {"backend", be, gemma4ChunkedMaxAbs}} {
		if c.name != "ref" && strings.HasSuffix(spec.Name, "-narrow") {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			run := func(split func(at int) int) []float32 {
				mctx, err := m.NewContext(c.ops, n, 1, n)
				if err != nil {
					t.Fatal(err)
				}
				var chunks []int
				for at := 0; at < n; {
					k := split(at)
					chunks = append(chunks, k)
					at += k
				}
				return chunkLogits(t, mctx, ids, chunks)
			}
			one := run(func(at int) int { return n - at })
			for _, alt := range []struct {
				name  string
				split func(at int) int
			}{
				{"chunks-37", func(at int) int { return min(37, n-at) }},
				{"prefill-300-decode", func(at int) int {
					if at == 0 {
						return min(300, n)
					}
					return 1
				}},
			} {
				got := run(alt.split)
				var worst float64
				for i := range one {
					worst = max(worst, math.Abs(float64(got[i]-one[i])))
				}
				if worst > c.tol {
					t.Errorf("%s: max |Δlogit| %.3g against one pass (limit %g)", alt.name, worst, c.tol)
				}
			}
		})
	}
}
