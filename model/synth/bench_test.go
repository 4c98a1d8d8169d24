// Benchmarks of writing large models. Not part of the default test run:
// go test -run '^$' -bench . -benchtime=1x ./model/synth/

package synth_test

import (
	"cmp"
	"io"
	"path/filepath"
	"testing"

	"github.com/flowinfer/flowinfer/model/synth"
	"github.com/flowinfer/flowinfer/quant"
)

// BenchmarkWrite writes whole preset models with the built-in vocabulary:
// "file" through WriteFile into a temporary directory (including the
// fsync), "discard" to io.Discard (generation alone).
func BenchmarkWrite(b *testing.B) {
	for _, c := range []struct{ preset, mix, sink string }{
		{"llama-1b", "Q4_K_M", "file"},
		{"llama-1b", "Q4_K_M", "discard"},
		{"llama-1b", "Q8_0", "discard"},
		{"llama-1b", "F16", "discard"},
		{"demo", "Q8_0", "file"},
		{"gpt-oss-small", "", "discard"}, // MXFP4 experts (quantized from floats), Q8_0 elsewhere
	} {
		b.Run("preset="+c.preset+"/mix="+cmp.Or(c.mix, "pure-Q8_0")+"/to="+c.sink, func(b *testing.B) {
			s, err := synth.Preset(c.preset)
			if err != nil {
				b.Fatal(err)
			}
			o := synth.Options{Mix: c.mix, Seed: 1}
			if c.mix == "" {
				o.Type = quant.Q8_0 // gpt-oss: one type for the non-expert weights
			}
			plan, err := synth.Plan(s, o)
			if err != nil {
				b.Fatal(err)
			}
			var size uint64
			for _, t := range plan {
				size += t.Bytes
			}
			path := filepath.Join(b.TempDir(), "model.gguf")
			b.SetBytes(int64(size))
			for b.Loop() {
				if c.sink == "file" {
					err = synth.WriteFile(path, s, o)
				} else {
					err = synth.Write(io.Discard, s, o)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/model")
		})
	}
}
