package synth_test

// lowmix_test.go: the Q2_K, Q2_K_S and Q3_K_S/M/L mixtures (and gemma4's
// Q4_K_M) checked tensor by tensor against llama-quantize's output for
// small F32 models of each family (testdata/lowmix, README.md there).

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model/synth"
	"github.com/flowinfer/flowinfer/quant"
)

var (
	lowMixWrite  = flag.String("lowmix-write", "", "write the F32 models of TestLowMixtures to this directory and skip the test")
	lowMixRecord = flag.String("lowmix-record", "", "record testdata/lowmix from llama-quantize's files and dry-run logs in this directory (see testdata/lowmix/README.md)")
)

// lowMixModels are the models of TestLowMixtures: presets, and variants
// that reach the rules the presets do not (n_gqa >= 4, eight experts,
// layers enough for n_layer/16, rows that are not a whole number of
// 256-blocks, tied embeddings).
func lowMixModels(t *testing.T) []struct {
	name string
	s    synth.Spec
	mix  []string
} {
	preset := func(name string) synth.Spec {
		s, err := synth.Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	low := []string{"Q2_K", "Q2_K_S", "Q3_K_S", "Q3_K_M", "Q3_K_L"}
	withQ4KM := append(slices.Clone(low), "Q4_K_M")
	// llama: 16 layers, 8 heads / 2 KV heads (n_gqa 4), FFN 288 (ffn_down
	// rows of 288: the K-quant fallback), tied embeddings
	llama16 := synth.Spec{Arch: "llama", Name: "lowmix-llama16", NCtx: 2048, NEmbd: 256, NLayer: 16, NHead: 8, NHeadKV: 2,
		HeadDim: 32, NFF: 288, RopeBase: 10000, RMSEps: 1e-5, Tied: true}
	// llama with 80 layers and grouped-query attention: llama.cpp's
	// LLM_TYPE_70B (attn_v's Q3_K and Q4_K become Q5_K)
	llama80 := synth.Spec{Arch: "llama", Name: "lowmix-llama80", NCtx: 2048, NEmbd: 256, NLayer: 80, NHead: 8, NHeadKV: 4,
		HeadDim: 32, NFF: 256, RopeBase: 10000, RMSEps: 1e-5}
	// qwen3moe: 8 experts (llama-quantize's Mixtral rules), n_gqa 2
	moe8 := synth.Spec{Arch: "qwen3moe", Name: "lowmix-qwen3moe8", NCtx: 2048, NEmbd: 256, NLayer: 8, NHead: 4, NHeadKV: 2,
		HeadDim: 64, NFF: 512, NExpert: 8, NExpertUsed: 2, NFFExp: 256, RopeBase: 1e6, RMSEps: 1e-6}
	// qwen3moe: 16 experts, 16 layers, 8 heads / 1 KV head (n_gqa 8)
	moe16 := synth.Spec{Arch: "qwen3moe", Name: "lowmix-qwen3moe16", NCtx: 2048, NEmbd: 256, NLayer: 16, NHead: 8, NHeadKV: 1,
		HeadDim: 32, NFF: 512, NExpert: 16, NExpertUsed: 4, NFFExp: 128, RopeBase: 1e6, RMSEps: 1e-6}
	// qwen35moe as Qwen3.5-122B-A10B in the points the rules look at:
	// n_gqa >= 4 (the real model's 32 / 2), 16 layers (the real one 48)
	q35 := preset("qwen35moe-small")
	q35.Name, q35.NLayer, q35.NHeadKV = "lowmix-qwen35moe16", 16, 1
	return []struct {
		name string
		s    synth.Spec
		mix  []string
	}{
		{"demo", preset("demo"), low},
		{"llama16", llama16, low},
		{"llama80", llama80, low},
		{"qwen3moe8", moe8, low},
		{"qwen3moe16", moe16, low},
		{"qwen35moe-small", preset("qwen35moe-small"), low},
		{"qwen35moe16", q35, low},
		{"gemma4-mixed-small", preset("gemma4-mixed-small"), withQ4KM},
		{"gemma4-moe-small", preset("gemma4-moe-small"), withQ4KM},
		{"nemotronh-moe-small", preset("nemotronh-moe-small"), low},
		{"qwen35-small", preset("qwen35-small"), low},
		{"qwen3next-small", preset("qwen3next-small"), low},
		{"gemma3-small", preset("gemma3-small"), low},
		{"mistral3-small", preset("mistral3-small"), low},
	}
}

// TestLowMixtures: for every model and mixture of lowMixModels, our plan
// gives each tensor (name, dimensions, in file order) the type
// llama-quantize gave it (testdata/lowmix/NAME.types: one column per
// mixture, from llama.cpp's files, Q2_K_S from its --dry-run).
func TestLowMixtures(t *testing.T) {
	models := lowMixModels(t)
	if *lowMixWrite != "" {
		for _, m := range models {
			path := filepath.Join(*lowMixWrite, m.name+"-f32.gguf")
			if err := synth.WriteFile(path, m.s, synth.Options{Type: quant.F32, Seed: 1}); err != nil {
				t.Fatal(err)
			}
			t.Logf("wrote %s", path)
		}
		t.Skip("wrote the models")
	}
	if *lowMixRecord != "" {
		for _, m := range models {
			recordLowMix(t, *lowMixRecord, m.name, m.mix)
		}
	}
	for _, m := range models {
		t.Run(m.name, func(t *testing.T) {
			path := filepath.Join("testdata", "lowmix", m.name+".types")
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			head := strings.Fields(strings.TrimPrefix(lines[0], "#"))
			if len(head) != 2+len(m.mix) || !slices.Equal(head[2:], m.mix) {
				t.Fatalf("%s: header %q, want tensor dims %s", path, lines[0], strings.Join(m.mix, " "))
			}
			rows := lines[1:]
			for k, mix := range m.mix {
				ts, err := synth.Plan(m.s, synth.Options{Mix: mix})
				if err != nil {
					t.Fatalf("%s: %v", mix, err)
				}
				if len(ts) != len(rows) {
					t.Fatalf("%s: %d tensors, llama-quantize's file has %d", mix, len(ts), len(rows))
				}
				diff := 0
				for i, tn := range ts {
					f := strings.Fields(rows[i])
					dims := strings.ReplaceAll(strings.Trim(fmt.Sprint(tn.Dims), "[]"), " ", ",")
					if len(f) != 2+len(m.mix) || f[0] != tn.Name || f[1] != dims {
						t.Fatalf("%s: tensor %d is %s [%s], llama-quantize's %q", mix, i, tn.Name, dims, rows[i])
					}
					if got := tn.Type.String(); got != f[2+k] {
						t.Errorf("%s: %s: %s, llama-quantize %s", mix, tn.Name, got, f[2+k])
						diff++
					}
				}
				if diff == 0 {
					t.Logf("%s: %d tensors as llama-quantize", mix, len(ts))
				}
			}
		})
	}
}

// recordLowMix writes testdata/lowmix/NAME.types from dir's NAME-MIX.gguf
// (llama-quantize's files) and, for Q2_K_S, NAME-Q2_K_S.log (its --dry-run
// log: Q2_K_S needs an importance matrix to write a file).
func recordLowMix(t *testing.T, dir, name string, mixes []string) {
	var names, dims []string
	cols := make([][]string, len(mixes))
	for k, mix := range mixes {
		var got [][3]string // name, dims, type
		if mix == "Q2_K_S" {
			got = dryRunTypes(t, filepath.Join(dir, name+"-"+mix+".log"))
		} else {
			f, err := gguf.Open(filepath.Join(dir, name+"-"+mix+".gguf"))
			if err != nil {
				t.Fatal(err)
			}
			for _, tn := range f.Tensors {
				d := strings.ReplaceAll(strings.Trim(fmt.Sprint(tn.Dims), "[]"), " ", ",")
				got = append(got, [3]string{tn.Name, d, tn.Type.String()})
			}
			f.Close()
		}
		if k == 0 {
			for _, g := range got {
				names, dims = append(names, g[0]), append(dims, g[1])
			}
		}
		if len(got) != len(names) {
			t.Fatalf("%s %s: %d tensors, %s has %d", name, mix, len(got), mixes[0], len(names))
		}
		for i, g := range got {
			if g[0] != names[i] || g[1] != dims[i] {
				t.Fatalf("%s %s: tensor %d is %s [%s], in %s %s [%s]", name, mix, i, g[0], g[1], mixes[0], names[i], dims[i])
			}
			cols[k] = append(cols[k], g[2])
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "# tensor dims %s\n", strings.Join(mixes, " "))
	for i := range names {
		fmt.Fprintf(&sb, "%s %s", names[i], dims[i])
		for k := range mixes {
			fmt.Fprintf(&sb, " %s", cols[k][i])
		}
		sb.WriteString("\n")
	}
	path := filepath.Join("testdata", "lowmix", name+".types")
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("recorded %s", path)
}

// dryRunLine is one tensor of llama-quantize --dry-run's log:
// "[  3/ 41]  blk.0.attn_k.weight  - [  256,  128,  1,  1], type =  f32, size = ... (q4_K)"
// (the type in parentheses only when it changes).
var dryRunLine = regexp.MustCompile(`^\[\s*\d+/\s*\d+\]\s+(\S+)\s+- \[([^\]]*)\], type =\s+(\S+), size =[^(]*(?:\((\S+)\))?\s*$`)

func dryRunTypes(t *testing.T, path string) [][3]string {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][3]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := dryRunLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		var d []string
		for _, x := range strings.Split(m[2], ",") {
			d = append(d, strings.TrimSpace(x))
		}
		for len(d) > 1 && d[len(d)-1] == "1" { // ggml pads the shape to 4 dims
			d = d[:len(d)-1]
		}
		typ := m[3]
		if m[4] != "" {
			typ = m[4]
		}
		out = append(out, [3]string{m[1], strings.Join(d, ","), typ})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no tensor lines", path)
	}
	return out
}

// TestLowMixtureFiles: files written in the low mixtures have
// llama-quantize's general.file_type (LLAMA_FTYPE_MOSTLY_Q2_K 10, Q3_K_S
// 11, Q3_K_M 12, Q3_K_L 13, Q2_K_S 21), the planned type for every tensor,
// and load and decode with finite logits (qwen35moe-small: its Q2_K and
// Q3_K experts, delta net and shared expert; llama16: the Q4_0 fallback
// and the tied Q6_K embeddings).
func TestLowMixtureFiles(t *testing.T) {
	llama16 := synth.Spec{Arch: "llama", Name: "lowmix-llama16", NCtx: 2048, NEmbd: 256, NLayer: 16, NHead: 8, NHeadKV: 2,
		HeadDim: 32, NFF: 288, RopeBase: 10000, RMSEps: 1e-5, Tied: true}
	q35, err := synth.Preset("qwen35moe-small")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mix   string
		ftype uint64
	}{{"Q2_K", 10}, {"Q3_K_S", 11}, {"Q3_K_M", 12}, {"Q3_K_L", 13}, {"Q2_K_S", 21}} {
		for _, s := range []synth.Spec{q35, llama16} {
			t.Run(c.mix+"/"+s.Arch, func(t *testing.T) {
				f, _ := write(t, s, synth.Options{Mix: c.mix, Seed: 1})
				if got, _ := f.GetUint("general.file_type"); got != c.ftype {
					t.Errorf("general.file_type = %d, want %d", got, c.ftype)
				}
				plan, err := synth.Plan(s, synth.Options{Mix: c.mix})
				if err != nil {
					t.Fatal(err)
				}
				if len(plan) != len(f.Tensors) {
					t.Fatalf("%d tensors, planned %d", len(f.Tensors), len(plan))
				}
				for i, p := range plan {
					if tn := f.Tensors[i]; tn.Name != p.Name || tn.Type != p.Type || uint64(len(tn.Data)) != p.Bytes {
						t.Errorf("tensor %d: %s %s (%d bytes), planned %s %s (%d bytes)", i, tn.Name, tn.Type, len(tn.Data), p.Name, p.Type, p.Bytes)
					}
				}
				run(t, f)
			})
		}
	}
}

// TestLowKPure: Q2_K and Q3_K given as mixtures' names are refused with an
// error naming their mixtures and --pure; --pure files of them have
// llama-quantize --pure's file types (Q2_K 10; Q3_K 12: its "Q3_K" is
// Q3_K_M), every 2-D weight of the type, and load and decode.
func TestLowKPure(t *testing.T) {
	s := synth.Spec{Arch: "llama", NEmbd: 256, NLayer: 2, NHead: 4, NHeadKV: 2, NFF: 512}
	for _, c := range []struct {
		typ   quant.Type
		ftype uint64
		mixes string
	}{{quant.Q2_K, 10, "Q2_K, Q2_K_S"}, {quant.Q3_K, 12, "Q3_K_S, Q3_K_M, Q3_K_L"}} {
		if c.typ == quant.Q3_K { // "Q2_K" is a mixture's name too
			_, err := synth.Plan(s, synth.Options{Mix: c.typ.String()})
			if err == nil || !strings.Contains(err.Error(), c.mixes) || !strings.Contains(err.Error(), "--pure") {
				t.Errorf("mixture %s: error %v, want one naming %s and --pure", c.typ, err, c.mixes)
			}
		}
		f, _ := write(t, s, synth.Options{Type: c.typ, Seed: 1})
		if got, _ := f.GetUint("general.file_type"); got != c.ftype {
			t.Errorf("%s: general.file_type = %d, want %d", c.typ, got, c.ftype)
		}
		for _, tn := range f.Tensors {
			if want := c.typ; len(tn.Dims) >= 2 && tn.Type != want {
				t.Errorf("%s: %s is %s", c.typ, tn.Name, tn.Type)
			}
		}
		run(t, f)
	}
}
