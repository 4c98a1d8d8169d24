//go:build cgo

package gpu

import (
	"path/filepath"
	"testing"

	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model"
)

// BenchmarkExpertUpload: the misses' path into the device expert slots,
// end to end: every expert of the golden F32 qwen3moe (16 experts of 786
// KiB) copied into the staging ring and by vkCmdCopyBuffer into its slot,
// then the submission waited for; GB/s of expert bytes.
func BenchmarkExpertUpload(b *testing.B) {
	r := benchRig(b)
	f, err := gguf.Open(filepath.Join(golden.Dir(b), "models/synth-qwen3moe-F32.gguf"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	m, err := model.Load(f, SupportsMatVec)
	if err != nil {
		b.Fatal(err)
	}
	be, err := newBackendOf(r.d, m, r.k)
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	s := be.experts
	var bytes int64
	for b.Loop() {
		i := int32(0)
		for il := range m.Layers {
			L := &m.Layers[il]
			for e := range L.GateExps {
				if err := be.fillSlot(i, [3]*model.Weight{&L.GateExps[e], &L.UpExps[e], &L.DownExps[e]}); err != nil {
					b.Fatal(err)
				}
				for _, w := range []*model.Weight{&L.GateExps[e], &L.UpExps[e], &L.DownExps[e]} {
					bytes += int64(w.Rows * w.RowBytes)
				}
				i = (i + 1) % int32(len(s.slots))
			}
		}
		if err := be.flush(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(bytes)/b.Elapsed().Seconds()/1e9, "GB/s")
}
