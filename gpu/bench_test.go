//go:build cgo

package gpu

import (
	"fmt"
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/gpu/shaders"
	"github.com/flowinfer/flowinfer/gpu/vk"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/quant"
)

// benchRig is newRig for benchmarks.
func benchRig(b *testing.B) *rig {
	in, err := vk.NewInstance(vk.Config{})
	if err != nil {
		b.Skipf("no Vulkan: %v", err)
	}
	b.Cleanup(in.Close)
	if len(in.Devices()) == 0 {
		b.Skip("no Vulkan device")
	}
	d, err := in.OpenDevice(0, vk.DeviceConfig{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(d.Close)
	r := &rig{d: d, k: NewKernels(d)}
	b.Cleanup(r.k.Close)
	if r.cb, err = d.NewCommandBuffer(vk.Compute); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(r.cb.Free)
	if r.f, err = d.NewFence(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(r.f.Destroy)
	return r
}

// replay submits the recorded r.cb and waits for its fence, b.N times.
func (r *rig) replay(b *testing.B) {
	for b.Loop() {
		if err := r.d.Submit(r.cb, nil, nil, r.f); err != nil {
			b.Fatal(err)
		}
		if err := r.f.Wait(time.Minute); err != nil {
			b.Fatal(err)
		}
		if err := r.f.Reset(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDispatch: one empty dispatch (the noop shader, one workgroup)
// recorded once, then submit + fence wait + fence reset per iteration:
// the fixed cost every GPU step pays per submission.
func BenchmarkDispatch(b *testing.B) {
	r := benchRig(b)
	code, err := shaders.SPIRV(shaders.Noop)
	if err != nil {
		b.Fatal(err)
	}
	p, err := r.d.NewPipeline(vk.PipelineSpec{Name: "noop", SPIRV: code, Bindings: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Destroy()
	buf, err := r.d.NewBuffer(16, vk.DeviceLocal)
	if err != nil {
		b.Fatal(err)
	}
	defer buf.Free()
	set, err := p.NewDescriptorSet(vk.Range{Buf: buf})
	if err != nil {
		b.Fatal(err)
	}
	if err := r.cb.Begin(); err != nil {
		b.Fatal(err)
	}
	r.cb.Dispatch(p, set, nil, 1, 1, 1)
	if err := r.cb.End(); err != nil {
		b.Fatal(err)
	}
	r.replay(b)
}

const benchDim = 2048

// BenchmarkMatVecF32: y = W·x for a 2048×2048 F32 W already on the device,
// recorded once; each iteration is submit + fence wait, reporting the
// weight bytes read per second.
func BenchmarkMatVecF32(b *testing.B) {
	r := benchRig(b)
	mk := func(n uint64) *vk.Buffer {
		buf, err := r.d.NewBuffer(n, vk.DeviceLocal)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(buf.Free)
		return buf
	}
	w := Weight{Buf: mk(4 * benchDim * benchDim), Type: quant.F32, Rows: benchDim, Cols: benchDim}
	x, y := F32{Buf: mk(4 * benchDim)}, F32{Buf: mk(4 * benchDim)}
	qp, err := r.d.NewQueryPool(2)
	if err != nil {
		b.Fatal(err)
	}
	defer qp.Destroy()
	if err := r.cb.Begin(); err != nil {
		b.Fatal(err)
	}
	r.cb.ResetQueries(qp, 0, 2)
	r.cb.Timestamp(qp, 0)
	if err := r.k.MatVec(r.cb, y, w, x, 1); err != nil {
		b.Fatal(err)
	}
	r.cb.Timestamp(qp, 1)
	if err := r.cb.End(); err != nil {
		b.Fatal(err)
	}
	r.replay(b)
	b.ReportMetric(4*benchDim*benchDim/(b.Elapsed().Seconds()/float64(b.N))/1e9, "GB/s")
	ts, err := qp.Ticks(0, 2)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(r.d.Elapsed(vk.Compute, ts[0], ts[1]).Microseconds()), "device-µs/last")
}

// BenchmarkMatVecF32CPU is the same product on package cpu's backend
// (C SIMD kernels) with 1 and 2 threads, for comparison.
func BenchmarkMatVecF32CPU(b *testing.B) {
	wd := make([]byte, 4*benchDim*benchDim)
	for i := range wd {
		wd[i] = byte(i * 7 % 61) // finite floats
	}
	w := &model.Weight{Name: "w", Type: quant.F32, Rows: benchDim, Cols: benchDim, RowBytes: 4 * benchDim, Data: wd}
	x := make([]float32, benchDim)
	out := make([]float32, benchDim)
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			be := cpu.NewBackend(threads, nil)
			defer be.Close()
			be.MatMul(out, w, x, 1)
			for b.Loop() {
				be.MatMul(out, w, x, 1)
			}
			b.ReportMetric(4*benchDim*benchDim/(b.Elapsed().Seconds()/float64(b.N))/1e9, "GB/s")
		})
	}
}
