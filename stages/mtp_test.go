package stages_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/model/synth"
	"github.com/flowinfer/flowinfer/quant"
	"github.com/flowinfer/flowinfer/stages"
)

// TestWeightPathMTPFused: a qwen35moe file with a multi-token-prediction
// block and fused ffn_gate_up_exps (synth's qwen35moe-small-mtp-fused:
// qwen35moe-small's weights, the block added and gate and up fused) plans
// the resident bytes and routed experts of the same file without them,
// says the block's tensors are skipped, and, its fused experts streamed
// from disk through the expert cache at the smallest budget and at no
// limit, gives the plain file's resident logits bit for bit. With the MTP
// block alone, OwnResident owns exactly the bytes the plain file's path
// owns, none of the block's (never read), and the logits are the same too.
func TestWeightPathMTPFused(t *testing.T) {
	o := synth.Options{Type: quant.Q8_0, Seed: 1}
	plainPath := presetFile(t, "qwen35moe-small", o)
	path := presetFile(t, "qwen35moe-small-mtp-fused", o)
	plain, tok := openModel(t, plainPath)
	m, _ := openModel(t, path)
	ref := residentRef(t, plain)
	want, _ := runLogits(t, plain, tok, ref, nil, 64)

	pPlain := probePlan(t, plain, plainPath, ref)
	p := probePlan(t, m, path, ref)
	if p.Resident != pPlain.Resident || p.ExpertFile != pPlain.ExpertFile || p.Experts != pPlain.Experts || p.SlotBytes != pPlain.SlotBytes {
		t.Errorf("plan: resident %d, experts %d (%d bytes, slot %d); without the MTP block and fused: %d, %d (%d, %d)",
			p.Resident, p.Experts, p.ExpertFile, p.SlotBytes, pPlain.Resident, pPlain.Experts, pPlain.ExpertFile, pPlain.SlotBytes)
	}
	if p.Skipped != len(m.Skipped) || p.Skipped == 0 || p.SkippedBytes != m.SkippedBytes() || pPlain.Skipped != 0 {
		t.Errorf("plan skips %d tensors (%d bytes); the model skips %d (%d bytes)", p.Skipped, p.SkippedBytes, len(m.Skipped), m.SkippedBytes())
	}
	if s := p.String(); !strings.Contains(s, fmt.Sprintf("skipped %d tensors", p.Skipped)) || !strings.Contains(s, "multi-token-prediction") {
		t.Errorf("the plan does not say what it skips:\n%s", s)
	}
	t.Logf("%s", p)

	owned := func(t *testing.T, mPath string, budget int64) ([][]float32, int64) {
		mm, tk := openModel(t, mPath)
		be := cpu.NewBackend(2, nil)
		defer be.Close()
		wp, err := stages.NewWeightPath(mm, mPath, be, stages.WeightConfig{Budget: budget, QueueDepth: 3})
		if err != nil {
			t.Fatal(err)
		}
		defer wp.Close()
		if !wp.Plan().Streaming() {
			t.Fatal("the weight path does not stream")
		}
		if _, err := be.PackModel(mm, false, wp.StreamsLayer); err != nil {
			t.Fatal(err)
		}
		// the ranges owned: none inside a skipped tensor; their bytes
		var n int64
		for _, r := range wp.OwnRanges(packedBy(be)) {
			n += r.N
			for _, tn := range mm.Skipped {
				off := int64(mm.File.DataOffset + tn.Offset)
				if r.Off < off+int64(tn.Size) && off < r.Off+r.N {
					t.Errorf("owns [%d, %d), which overlaps skipped %s", r.Off, r.Off+r.N, tn.Name)
				}
			}
		}
		if _, err := wp.OwnResident(packedBy(be)); err != nil {
			t.Fatal(err)
		}
		got, _ := runLogits(t, mm, tk, be, wp, 64)
		if st := wp.Stats(); st.BytesRead == 0 {
			t.Error("no expert was read")
		}
		return got, n
	}
	// the MTP block alone (gate and up split): the same trunk tensors
	spec, err := synth.Preset("qwen35moe-small")
	if err != nil {
		t.Fatal(err)
	}
	spec.Hybrid.NextN = 1
	mtpPath := filepath.Join(t.TempDir(), "qwen35moe-small-mtp.gguf")
	if err := synth.WriteFile(mtpPath, spec, o); err != nil {
		t.Fatal(err)
	}
	for _, budget := range []int64{tokenBudget(p, m, 0), 0} {
		t.Run(fmt.Sprintf("budget=%d", budget), func(t *testing.T) {
			got, _ := owned(t, path, budget)
			sameLogits(t, got, want, m.NVocab)
			got, n := owned(t, mtpPath, budget)
			sameLogits(t, got, want, m.NVocab)
			_, nPlain := owned(t, plainPath, budget)
			if n != nPlain {
				t.Errorf("owned %d bytes, %d without the MTP block (its %d bytes must not be read)", n, nPlain, m.SkippedBytes())
			}
		})
	}
}
