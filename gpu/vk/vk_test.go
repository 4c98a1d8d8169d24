//go:build cgo

package vk

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/gpu/shaders"
)

// openTestDevice opens device 0, skipping the test when this machine has
// no Vulkan loader or no device. FLOWINFER_VK_VALIDATION=1 enables the
// validation layer.
func openTestDevice(t *testing.T, cfg DeviceConfig) *Device {
	t.Helper()
	in, err := NewInstance(Config{Validation: os.Getenv("FLOWINFER_VK_VALIDATION") == "1"})
	if errors.Is(err, ErrNoLoader) {
		t.Skipf("no Vulkan loader (install libvulkan1 and mesa-vulkan-drivers for lavapipe): %v", err)
	}
	if errors.Is(err, ErrNoDevice) {
		t.Skipf("no Vulkan device (install mesa-vulkan-drivers for lavapipe): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Close)
	if len(in.Devices()) == 0 {
		t.Skip("Vulkan loader present but no Vulkan device (install mesa-vulkan-drivers for lavapipe)")
	}
	d, err := in.OpenDevice(0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// TestNoLoader: a missing loader is ErrNoLoader naming the file, not a crash.
func TestNoLoader(t *testing.T) {
	_, err := NewInstance(Config{loader: "libvulkan-missing-for-test.so.1"})
	if !errors.Is(err, ErrNoLoader) {
		t.Fatalf("err = %v, want ErrNoLoader", err)
	}
	if !strings.Contains(err.Error(), "no Vulkan loader") || !strings.Contains(err.Error(), "libvulkan-missing-for-test.so.1") {
		t.Fatalf("error %q does not say no loader and name the file", err)
	}
}

func TestDeviceInfo(t *testing.T) {
	d := openTestDevice(t, DeviceConfig{})
	info := d.Info()
	if info.Name == "" || len(info.Heaps) == 0 || len(info.QueueFamilies) == 0 {
		t.Fatalf("incomplete device info: %+v", info)
	}
	if info.APIVersion < 1<<22 {
		t.Errorf("api version %s", info.APIVersion)
	}
	if info.Limits.MaxComputeWorkGroupCount[0] == 0 || info.Limits.MaxStorageBufferRange == 0 {
		t.Errorf("limits not read: %+v", info.Limits)
	}
	t.Logf("%s (%s) driver %s %s, api %s, subgroup %d, timestamp %.3g ns/tick, heaps %+v, queues %+v, separate transfer %v",
		info.Name, info.Type, info.DriverName, info.DriverInfo, info.APIVersion, info.SubgroupSize, info.TimestampPeriod,
		info.Heaps, info.QueueFamilies, d.SeparateTransfer())
}

func TestPickQueues(t *testing.T) {
	c, tr, ok := pickQueues([]QueueFamily{{QueueGraphics | QueueCompute | QueueTransfer, 1, 64}, {QueueCompute | QueueTransfer, 2, 64}, {QueueTransfer, 1, 64}})
	if !ok || c != 0 || tr != 2 {
		t.Errorf("got compute %d transfer %d ok %v, want 0, 2 (the DMA-only family)", c, tr, ok)
	}
	c, tr, ok = pickQueues([]QueueFamily{{QueueGraphics | QueueCompute | QueueTransfer, 1, 64}})
	if !ok || c != 0 || tr != 0 {
		t.Errorf("single family: got %d %d %v", c, tr, ok)
	}
	if _, _, ok := pickQueues([]QueueFamily{{QueueGraphics, 1, 64}}); ok {
		t.Error("a device without compute got a compute queue")
	}
}

// TestBudget: device-local allocations stop at the budget with ErrBudget
// and succeed again once buffers are freed.
func TestBudget(t *testing.T) {
	const budget = 1 << 20
	d := openTestDevice(t, DeviceConfig{Budget: budget, ChunkBytes: 256 << 10})
	var bufs []*Buffer
	for {
		b, err := d.NewBuffer(100<<10, DeviceLocal)
		if errors.Is(err, ErrBudget) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		bufs = append(bufs, b)
		if len(bufs) > 20 {
			t.Fatal("budget never enforced")
		}
	}
	used, _ := d.MemoryUsed()
	if used > budget || len(bufs) < 8 {
		t.Fatalf("%d buffers of 100 KiB, %d bytes used of a %d budget", len(bufs), used, budget)
	}
	if _, err := d.NewBuffer(2*budget, DeviceLocal); !errors.Is(err, ErrBudget) {
		t.Fatalf("buffer larger than the budget: err %v", err)
	}
	for _, b := range bufs {
		b.Free()
	}
	if used, _ := d.MemoryUsed(); used > 256<<10 {
		t.Errorf("after freeing all buffers %d bytes still allocated (one chunk is kept)", used)
	}
	b, err := d.NewBuffer(900<<10, DeviceLocal)
	if err != nil {
		t.Fatalf("allocation after freeing: %v", err)
	}
	b.Free()
}

func putU32(b []byte, v ...uint32) []byte {
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, x)
	}
	return b
}

// TestTransferThenCompute uploads through a staging buffer on the transfer
// queue, has a compute submission wait for it on a timeline semaphore, runs
// the add shader from a command buffer recorded once and replayed twice,
// and reads back through a readback buffer; timestamps bracket the compute.
func TestTransferThenCompute(t *testing.T) {
	d := openTestDevice(t, DeviceConfig{})
	if !d.Info().TimelineSemaphore {
		t.Skip("device has no timeline semaphores")
	}
	const n = 1000
	up, err := d.NewBuffer(8*n, Upload)
	if err != nil {
		t.Fatal(err)
	}
	defer up.Free()
	dev, err := d.NewBuffer(8*n, DeviceLocal)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Free()
	rb, err := d.NewBuffer(4*n, Readback)
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Free()
	for i := range 2 * n { // dst = i, src = 0.5
		v := float32(i)
		if i >= n {
			v = 0.5
		}
		binary.LittleEndian.PutUint32(up.Bytes()[4*i:], math.Float32bits(v))
	}
	code, err := shaders.SPIRV(shaders.Add)
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.NewPipeline(PipelineSpec{Name: "add", SPIRV: code, Bindings: 2, PushBytes: 12, Spec: []uint32{64}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Destroy()
	set, err := p.NewDescriptorSet(Range{Buf: dev, Size: 4 * n}, Range{Buf: dev, Off: 4 * n})
	if err != nil {
		t.Fatal(err)
	}
	qp, err := d.NewQueryPool(2)
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Destroy()
	tl, err := d.NewTimeline(0)
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Destroy()

	xfer, err := d.NewCommandBuffer(Transfer)
	if err != nil {
		t.Fatal(err)
	}
	defer xfer.Free()
	if err := xfer.Begin(); err != nil {
		t.Fatal(err)
	}
	xfer.Copy(dev, 0, up, 0, 8*n)
	xfer.ReleaseToCompute(dev, 0, 8*n)
	if err := xfer.End(); err != nil {
		t.Fatal(err)
	}
	comp, err := d.NewCommandBuffer(Compute)
	if err != nil {
		t.Fatal(err)
	}
	defer comp.Free()
	if err := comp.Begin(); err != nil {
		t.Fatal(err)
	}
	comp.AcquireFromTransfer(dev, 0, 8*n)
	comp.ResetQueries(qp, 0, 2)
	comp.Timestamp(qp, 0)
	comp.Dispatch(p, set, putU32(nil, n, 0, 0), (n+63)/64, 1, 1)
	comp.Barrier()
	comp.Copy(rb, 0, dev, 0, 4*n)
	comp.Timestamp(qp, 1)
	comp.HostBarrier()
	if err := comp.End(); err != nil {
		t.Fatal(err)
	}

	if err := d.Submit(xfer, nil, []SemaphoreValue{{tl, 1}}, nil); err != nil {
		t.Fatal(err)
	}
	// Replayed twice: the second run adds src again to the result.
	for run := range 2 {
		v := uint64(2 + run)
		if err := d.Submit(comp, []SemaphoreValue{{tl, v - 1}}, []SemaphoreValue{{tl, v}}, nil); err != nil {
			t.Fatal(err)
		}
		if err := tl.Wait(v, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			got := math.Float32frombits(binary.LittleEndian.Uint32(rb.Bytes()[4*i:]))
			if want := float32(i) + 0.5*float32(run+1); got != want {
				t.Fatalf("run %d: out[%d] = %v, want %v", run, i, got, want)
			}
		}
	}
	if v, err := tl.Value(); err != nil || v != 3 {
		t.Fatalf("timeline value %d (%v), want 3", v, err)
	}
	ticks, err := qp.Ticks(0, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("add of %d floats + copy: %v by timestamps", n, d.Elapsed(Compute, ticks[0], ticks[1]))
}

// TestOwnershipBarrier: the two halves of a queue-family ownership
// transfer (a range copied on a transfer family of its own, read by
// compute shaders) name the same families, transfer to compute, the
// release with the copies' writes as its access and the acquire with the
// shaders' reads (each with no access on the other side, as the spec
// ignores it), the release waiting on copies and the acquire blocking the
// shaders; with one family the release records nothing and the acquire is
// a plain barrier from the copies' writes to the shaders' reads, families
// ignored. ReleaseToCompute on a compute command buffer, AcquireFromTransfer
// on a transfer one and ranges past the buffer are errors from End.
func TestOwnershipBarrier(t *testing.T) {
	const tf, cf = 2, 0
	rel, acq := ownershipBarrier(true, tf, cf), ownershipBarrier(false, tf, cf)
	if !rel.record || !acq.record || uint32(rel.srcFamily) != tf || uint32(rel.dstFamily) != cf ||
		rel.srcFamily != acq.srcFamily || rel.dstFamily != acq.dstFamily {
		t.Errorf("separate families: release %+v, acquire %+v", rel, acq)
	}
	one := ownershipBarrier(false, cf, cf)
	if rel.srcAccess == 0 || rel.dstAccess != 0 || acq.srcAccess != 0 || acq.dstAccess == 0 ||
		rel.srcAccess != one.srcAccess || acq.dstAccess != one.dstAccess || rel.srcStage != one.srcStage || acq.dstStage != one.dstStage {
		t.Errorf("accesses or stages: release %+v, acquire %+v, one family %+v", rel, acq, one)
	}
	if r := ownershipBarrier(true, cf, cf); r.record {
		t.Errorf("one family: release records %+v", r)
	}
	if !one.record || uint32(one.srcFamily) != ^uint32(0) || uint32(one.dstFamily) != ^uint32(0) {
		t.Errorf("one family: acquire %+v, want VK_QUEUE_FAMILY_IGNORED on both sides", one)
	}

	d := openTestDevice(t, DeviceConfig{})
	buf, err := d.NewBuffer(256, DeviceLocal)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	for _, c := range []struct {
		kind QueueKind
		rec  func(*CommandBuffer)
		want string
	}{
		{Compute, func(c *CommandBuffer) { c.ReleaseToCompute(buf, 0, 256) }, "ReleaseToCompute on the compute queue"},
		{Transfer, func(c *CommandBuffer) { c.AcquireFromTransfer(buf, 0, 256) }, "AcquireFromTransfer on the transfer queue"},
		{Compute, func(c *CommandBuffer) { c.AcquireFromTransfer(buf, 128, 256) }, "256 bytes at offset 128 of 256"},
		{Transfer, func(c *CommandBuffer) { c.ReleaseToCompute(buf, 0, 0) }, "0 bytes at offset 0"},
	} {
		cb, err := d.NewCommandBuffer(c.kind)
		if err != nil {
			t.Fatal(err)
		}
		if err := cb.Begin(); err != nil {
			t.Fatal(err)
		}
		c.rec(cb)
		if err := cb.End(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("End: %v, want an error saying %q", err, c.want)
		}
		cb.Free()
	}
}

// TestMisuseIsError: recording mistakes come back from End as errors.
func TestMisuseIsError(t *testing.T) {
	d := openTestDevice(t, DeviceConfig{})
	code, err := shaders.SPIRV(shaders.Add)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.NewPipeline(PipelineSpec{Name: "bad", SPIRV: code[:len(code)-2], Bindings: 2}); err == nil {
		t.Error("SPIR-V of a partial word accepted")
	}
	p, err := d.NewPipeline(PipelineSpec{Name: "add", SPIRV: code, Bindings: 2, PushBytes: 12, Spec: []uint32{64}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Destroy()
	b, err := d.NewBuffer(64, DeviceLocal)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	if _, err := p.NewDescriptorSet(Range{Buf: b}); err == nil {
		t.Error("descriptor set with 1 of 2 buffers accepted")
	}
	if _, err := p.NewDescriptorSet(Range{Buf: b}, Range{Buf: b, Off: 32, Size: 64}); err == nil {
		t.Error("range past the end of the buffer accepted")
	}
	set, err := p.NewDescriptorSet(Range{Buf: b}, Range{Buf: b})
	if err != nil {
		t.Fatal(err)
	}
	c, err := d.NewCommandBuffer(Compute)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Free()
	if err := c.Begin(); err != nil {
		t.Fatal(err)
	}
	c.Dispatch(p, set, make([]byte, 8), 1, 1, 1)
	if err := c.End(); err == nil || !strings.Contains(err.Error(), "push constants") {
		t.Errorf("End after a dispatch with wrong push constants: %v", err)
	}
	if err := d.Submit(c, nil, nil, nil); err == nil {
		t.Error("submitting a command buffer whose recording failed succeeded")
	}
}
