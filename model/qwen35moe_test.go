package model_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/model/synth"
	"github.com/flowinfer/flowinfer/quant"
)

// hybridMoEWrite, when set, makes TestHybridMoEGolden write its models and
// prompt to that directory (the inputs of llama.cpp in
// testdata/qwen35moe/README.md) instead of testing.
var hybridMoEWrite = flag.String("hybridmoe-write", "", "write the qwen35moe and qwen3next goldens' models and prompt to this directory and skip the test")

// hybridMoEFiles are the goldens' model files: each preset, seed 1, as a
// file named <preset>-<name>.gguf; testdata/<arch>/<name>.* hold
// llama.cpp's numbers. f32-split is qwen3next-small with attn_qkv and
// attn_gate in place of its fused ssm_in (llama.cpp's current layout).
var hybridMoEFiles = []struct {
	preset, arch, name string
	o                  synth.Options
}{
	{"qwen3next-small", "qwen3next", "f32-split", synth.Options{Type: quant.F32, Seed: 1}},
	{"qwen35moe-small", "qwen35moe", "f32", synth.Options{Type: quant.F32, Seed: 1}},
	{"qwen35moe-small", "qwen35moe", "q4km", synth.Options{Mix: "Q4_K_M", Seed: 1}},
	{"qwen3next-small", "qwen3next", "f32", synth.Options{Type: quant.F32, Seed: 1}},
	{"qwen3next-small", "qwen3next", "q4km", synth.Options{Mix: "Q4_K_M", Seed: 1}},
}

// writePreset writes preset with options o as dir/<preset>-<name>.gguf
// (a name ending in -split: without FusedQKVZ).
func writePreset(t *testing.T, dir, preset, name string, o synth.Options) string {
	t.Helper()
	s, err := synth.Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(name, "-split") {
		s.Hybrid.FusedQKVZ = false
	}
	path := filepath.Join(dir, preset+"-"+name+".gguf")
	if err := synth.WriteFile(path, s, o); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestHybridMoEGolden: qwen35moe-small and qwen3next-small (F32 and
// Q4_K_M, regenerated here) give llama.cpp's last-position logits of a
// 1531-token prompt, its 64-token greedy continuation and
// llama-perplexity's running values, within TestQwen35Golden's bounds
// (checkHybridGolden; testdata/qwen35moe/README.md says how the numbers
// were made).
func TestHybridMoEGolden(t *testing.T) {
	prompt, text := qwen35Prompt(t)
	dir := t.TempDir()
	if *hybridMoEWrite != "" {
		dir = *hybridMoEWrite
		for _, f := range hybridMoEFiles {
			writePreset(t, dir, f.preset, f.name, f.o)
		}
		if err := os.WriteFile(filepath.Join(dir, "prompt.txt"), []byte(prompt), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Skipf("wrote %s", dir)
	}
	be := cpu.NewBackend(0, cpu.Best())
	defer be.Close()
	for _, f := range hybridMoEFiles {
		t.Run(f.arch+"/"+f.name, func(t *testing.T) {
			path := writePreset(t, dir, f.preset, f.name, f.o)
			checkHybridGolden(t, be, path, filepath.Join("testdata", f.arch, f.name), f.name == "f32", prompt, text)
		})
	}
}

// openPreset writes preset (F32, seed 1) and loads it on be.
func openPreset(t *testing.T, be model.Ops, preset string) *model.Bundle {
	t.Helper()
	b, err := model.Open(writePreset(t, t.TempDir(), preset, "f32", synth.Options{Type: quant.F32, Seed: 1}), be.Supports, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestHybridMoEChunkedPrefill: on qwen35moe-small and qwen3next-small, a
// prompt fed in one batch, in uneven chunks, token by token or interleaved
// with a second sequence leaves the same recurrent state and gives the same
// logits within 1e-5 (checkHybridChunks: batch sizes change the products'
// summation order, not the recurrence or the routing), and the routed
// experts run once per step, not once per token.
func TestHybridMoEChunkedPrefill(t *testing.T) {
	be := cpu.NewBackend(0, cpu.Best())
	defer be.Close()
	for _, preset := range []string{"qwen35moe-small", "qwen3next-small"} {
		t.Run(preset, func(t *testing.T) {
			checkHybridChunks(t, be, openPreset(t, be, preset))
		})
	}
}

// TestHybridMoEDecodeAllocs: a decode step of qwen35moe and qwen3next
// (delta net and attention layers, routed and shared experts, qwen3next's
// fused projections) allocates nothing once the Context exists, with the
// weights resident and F32 K/V, and with every hook installed (the weight
// path's experts, prefetch and layers, a KV deferrer for a TurboQuant cache
// keeping recent rows, spans).
func TestHybridMoEDecodeAllocs(t *testing.T) {
	be := cpu.NewBackend(1, nil)
	defer be.Close()
	for _, tc := range []struct {
		preset string
		hooks  bool
	}{{"qwen35moe-small", false}, {"qwen35moe-small", true}, {"qwen3next-small", false}, {"qwen3next-small", true}} {
		t.Run(fmt.Sprintf("%s/hooks=%v", tc.preset, tc.hooks), func(t *testing.T) {
			m := openPreset(t, be, tc.preset).Model
			types := model.KVTypes{}
			if tc.hooks { // a quantized cache keeping recent rows: the deferrer gets them
				types = model.KVTypes{K: model.KVTQ4, V: model.KVTQ4, Recent: 64}
			}
			c, err := m.NewContextOf(be, types, 128, 1, 8)
			if err != nil {
				t.Fatal(err)
			}
			deferrer := &storeNow{kv: c.KV}
			if tc.hooks {
				c.SetHooks(model.Hooks{Experts: newMappedExperts(m), PrefetchNext: true, Layers: mappedLayers{m},
					KVDefer: deferrer, Span: func(string, int, bool) {}})
			}
			if allocs := decodeAllocs(t, c); allocs != 0 {
				t.Errorf("%v allocations per decode step, want 0", allocs)
			}
			if tc.hooks && deferrer.rows == 0 {
				t.Error("no row was deferred")
			}
		})
	}
}

// TestHybridMoELoadErrors: a qwen35moe or qwen3next file missing a tensor
// the family needs, with no delta-net input projection, without experts,
// or asking for what llama.cpp does not do (unnormalized expert weights)
// is refused with an error naming what is wrong.
func TestHybridMoELoadErrors(t *testing.T) {
	ref := cpu.NewRef()
	for _, c := range []struct {
		preset, name, drop string
		set                map[string]gguf.Value
		want               string
	}{
		{"qwen35moe-small", "no shared gate", "blk.0.ffn_gate_inp_shexp.weight", nil, `missing required tensor "blk.0.ffn_gate_inp_shexp.weight"`},
		{"qwen35moe-small", "no shared down", "blk.3.ffn_down_shexp.weight", nil, `missing required tensor "blk.3.ffn_down_shexp.weight"`},
		{"qwen35moe-small", "no gate experts", "blk.1.ffn_gate_exps.weight", nil, `missing required tensor "blk.1.ffn_gate_exps.weight"`},
		{"qwen35moe-small", "no beta", "blk.2.ssm_beta.weight", nil, `missing required tensor "blk.2.ssm_beta.weight"`},
		{"qwen35moe-small", "weights not normalized", "", map[string]gguf.Value{"qwen35moe.expert_weights_norm": gguf.Bool(false)}, "expert_weights_norm false"},
		{"qwen35moe-small", "no shared width", "", map[string]gguf.Value{"qwen35moe.expert_shared_feed_forward_length": gguf.Uint32(0)}, "shared expert width 0"},
		{"qwen3next-small", "no ssm_in", "blk.0.ssm_in.weight", nil, `has neither "blk.0.attn_qkv.weight"`},
		{"qwen3next-small", "no ssm_ba", "blk.1.ssm_ba.weight", nil, `missing required tensor "blk.1.ssm_ba.weight"`},
		{"qwen3next-small", "no experts", "", map[string]gguf.Value{"qwen3next.expert_count": gguf.Uint32(0), "qwen3next.expert_used_count": gguf.Uint32(0)}, "needs expert_count"},
	} {
		t.Run(c.preset+"/"+c.name, func(t *testing.T) {
			s, err := synth.Preset(c.preset)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := synth.Write(&buf, s, synth.Options{Type: quant.Q8_0, Seed: 1}); err != nil {
				t.Fatal(err)
			}
			base, err := gguf.Parse(buf.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := model.Load(base, ref.Supports); err != nil {
				t.Fatalf("the unedited file: %v", err)
			}
			_, err = model.Load(edited(t, base, c.drop, c.set), ref.Supports)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}
