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

// parsedSpec writes s with options o into memory and parses it.
func parsedSpec(t *testing.T, s synth.Spec, o synth.Options) *gguf.File {
	t.Helper()
	var buf bytes.Buffer
	if err := synth.Write(&buf, s, o); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// hybridLogits runs ids through m in one batch (F32 K/V) and returns the
// last row's logits and the cache's bytes.
func hybridLogits(t *testing.T, be model.Ops, m *model.Model, ids []int32) ([]float32, int64) {
	t.Helper()
	c, err := m.NewContextOf(be, model.KVTypes{K: model.KVF32, V: model.KVF32}, 128, 1, 64)
	if err != nil {
		t.Fatal(err)
	}
	return append([]float32(nil), decodeFrom(t, c, ids, 0, 64)...), c.KV.Bytes()
}

// sameBits fails t unless a and b are equal bit for bit.
func sameBits(t *testing.T, what string, a, b []float32) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d logits, want %d", what, len(a), len(b))
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			t.Fatalf("%s: logit %d is %v, want %v", what, i, a[i], b[i])
		}
	}
}

// TestHybridNextNSkipped: a qwen35, qwen35moe or qwen3next file with a
// multi-token-prediction block (nextn_predict_layers 1: a fifth block with
// nextn.* tensors) loads as llama.cpp loads it without --mtp: 4 layers run,
// the block's tensors are all in Model.Skipped and nothing else, the cache
// is the size of the file's without the block, and the logits are the
// same, bit for bit, as those of the same weights without it. (One type
// per file: a mixture's choices count the MTP block's tensors, as
// llama-quantize's do, so Q4_K_M would change a trunk tensor's type.)
func TestHybridNextNSkipped(t *testing.T) {
	be := cpu.NewBackend(1, nil)
	defer be.Close()
	ids := []int32{1, 17, 300, 42, 9, 511, 77, 8, 23}
	for _, tc := range []struct {
		preset string
		o      synth.Options
	}{{"qwen35-small", synth.Options{Type: quant.Q8_0, Seed: 2}}, {"qwen35moe-small", synth.Options{Type: quant.Q4_K, Seed: 2}},
		{"qwen3next-small", synth.Options{Type: quant.F32, Seed: 2}}} {
		t.Run(tc.preset, func(t *testing.T) {
			s, err := synth.Preset(tc.preset)
			if err != nil {
				t.Fatal(err)
			}
			plainF := parsedSpec(t, s, tc.o)
			s.Hybrid.NextN = 1
			mtpF := parsedSpec(t, s, tc.o)
			plain, err := model.Load(plainF, be.Supports)
			if err != nil {
				t.Fatal(err)
			}
			m, err := model.Load(mtpF, be.Supports)
			if err != nil {
				t.Fatal(err)
			}
			if m.NLayer != plain.NLayer || len(m.Layers) != plain.NLayer || m.NLayerNextN != 1 || plain.NLayerNextN != 0 {
				t.Fatalf("NLayer %d (%d layers), NLayerNextN %d; want %d layers and 1 MTP block", m.NLayer, len(m.Layers), m.NLayerNextN, plain.NLayer)
			}
			prefix := "blk." + string(rune('0'+plain.NLayer)) + "."
			var want []string
			var wantBytes int64
			for _, tn := range mtpF.Tensors {
				if strings.HasPrefix(tn.Name, prefix) {
					want = append(want, tn.Name)
					wantBytes += int64(len(tn.Data))
				}
			}
			if len(want) != len(mtpF.Tensors)-len(plainF.Tensors) || len(m.Skipped) != len(want) {
				t.Fatalf("%d skipped tensors; the file has %d in %s* (%d more tensors than without the block)", len(m.Skipped), len(want), prefix, len(mtpF.Tensors)-len(plainF.Tensors))
			}
			hasEh := false
			for i, tn := range m.Skipped {
				if tn.Name != want[i] {
					t.Errorf("skipped %s, want %s", tn.Name, want[i])
				}
				hasEh = hasEh || strings.HasSuffix(tn.Name, "nextn.eh_proj.weight")
			}
			if !hasEh || m.SkippedBytes() != wantBytes || wantBytes == 0 {
				t.Errorf("skipped bytes %d, want %d (eh_proj among them: %v)", m.SkippedBytes(), wantBytes, hasEh)
			}
			got, kvGot := hybridLogits(t, be, m, ids)
			ref, kvRef := hybridLogits(t, be, plain, ids)
			sameBits(t, "with the MTP block", got, ref)
			if kvGot != kvRef {
				t.Errorf("cache of %d bytes, %d without the MTP block", kvGot, kvRef)
			}
		})
	}
}

// TestHybridNextNErrors: an MTP block as many as the blocks, one whose
// nextn tensors are missing or misshapen, or a recurrent_layers array not
// covering every block is refused, naming what is wrong.
func TestHybridNextNErrors(t *testing.T) {
	ref := cpu.NewRef()
	s, err := synth.Preset("qwen35-small-mtp")
	if err != nil {
		t.Fatal(err)
	}
	base := parsedSpec(t, s, synth.Options{Type: quant.Q8_0, Seed: 1})
	if _, err := model.Load(base, ref.Supports); err != nil {
		t.Fatalf("the unedited file: %v", err)
	}
	recur := func(n int) gguf.Value {
		v := make([]gguf.Value, n)
		for i := range v {
			v[i] = gguf.Bool(i%4 != 3)
		}
		a, err := gguf.Array(gguf.TypeBool, v)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	for _, c := range []struct {
		name, drop string
		set        map[string]gguf.Value
		want       string
	}{
		{"all MTP", "", map[string]gguf.Value{"qwen35.nextn_predict_layers": gguf.Uint32(5)}, "nextn_predict_layers 5 must be below block_count 5"},
		{"no eh_proj", "blk.4.nextn.eh_proj.weight", nil, `missing required tensor "blk.4.nextn.eh_proj.weight"`},
		{"no hnorm", "blk.4.nextn.hnorm.weight", nil, `missing required tensor "blk.4.nextn.hnorm.weight"`},
		{"MTP block not in the file", "", map[string]gguf.Value{"qwen35.nextn_predict_layers": gguf.Uint32(2)}, `missing required tensor "blk.3.nextn.eh_proj.weight"`},
		{"short recurrent_layers", "", map[string]gguf.Value{"qwen35.attention.recurrent_layers": recur(4)}, "want an array of 5 booleans (block_count)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := model.Load(edited(t, base, c.drop, c.set), ref.Supports)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
	// a recurrent_layers array over every block, the MTP block's entry
	// ignored, loads
	m, err := model.Load(edited(t, base, "", map[string]gguf.Value{"qwen35.attention.recurrent_layers": recur(5)}), ref.Supports)
	if err != nil {
		t.Fatal(err)
	}
	if m.NLayer != 4 || !m.IsRecurrent(0) || m.IsRecurrent(3) {
		t.Errorf("NLayer %d, recurrent 0: %v, 3: %v", m.NLayer, m.IsRecurrent(0), m.IsRecurrent(3))
	}
}

// TestHybridMoEFusedGateUp: qwen35moe and qwen3next files whose routed gate
// and up experts are one ffn_gate_up_exps (synth's FusedGateUpExps: the
// bytes the split tensors hold) load into views equal byte for byte to the
// split file's and give the same logits, bit for bit.
func TestHybridMoEFusedGateUp(t *testing.T) {
	be := cpu.NewBackend(1, nil)
	defer be.Close()
	ids := []int32{5, 99, 1000, 3, 64, 250, 7}
	for _, tc := range []struct {
		preset string
		o      synth.Options
	}{{"qwen35moe-small", synth.Options{Mix: "Q4_K_M", Seed: 3}}, {"qwen35moe-small", synth.Options{Type: quant.F32, Seed: 3}},
		{"qwen3next-small", synth.Options{Type: quant.Q8_0, Seed: 3}}} {
		label := tc.o.Mix
		if label == "" {
			label = tc.o.Type.String()
		}
		t.Run(tc.preset+"/"+label, func(t *testing.T) {
			s, err := synth.Preset(tc.preset)
			if err != nil {
				t.Fatal(err)
			}
			split, err := model.Load(parsedSpec(t, s, tc.o), be.Supports)
			if err != nil {
				t.Fatal(err)
			}
			s.Hybrid.FusedGateUpExps = true
			fusedF := parsedSpec(t, s, tc.o)
			if _, ok := fusedF.Tensor("blk.0.ffn_gate_exps.weight"); ok {
				t.Fatal("the fused file has ffn_gate_exps")
			}
			if _, ok := fusedF.Tensor("blk.0.ffn_gate_up_exps.weight"); !ok {
				t.Fatal("the fused file has no ffn_gate_up_exps")
			}
			fused, err := model.Load(fusedF, be.Supports)
			if err != nil {
				t.Fatal(err)
			}
			for il := range split.Layers {
				a, b := split.Layers[il].Experts(), fused.Layers[il].Experts()
				for k := range a {
					for e := range a[k] {
						if !bytes.Equal(a[k][e].Data, b[k][e].Data) || a[k][e].Type != b[k][e].Type || a[k][e].Rows != b[k][e].Rows {
							t.Fatalf("layer %d %s expert %d differs from the split file's", il, model.ExpertNames[k], e)
						}
					}
				}
			}
			got, _ := hybridLogits(t, be, fused, ids)
			want, _ := hybridLogits(t, be, split, ids)
			sameBits(t, "fused", got, want)
		})
	}
}
