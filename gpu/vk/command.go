//go:build cgo

package vk

/*
#include <stdlib.h>
#include "fivk_calls.h"
*/
import "C"

import (
	"fmt"
	"time"
	"unsafe"
)

// CommandBuffer is a primary command buffer for one queue. Record it once
// (Begin, commands, End) and submit it as often as needed; recording again
// resets it. Recording commands report no error themselves: the first
// misuse is kept and returned by End. Vulkan requires that one goroutine
// at a time records into the command buffers of one queue (they share a
// command pool); Submit may be called from any goroutine.
type CommandBuffer struct {
	dev       *Device
	q         *queue
	kind      QueueKind
	h         C.VkCommandBuffer
	recording bool
	recorded  bool
	err       error
	push      unsafe.Pointer // C memory for push constants, 256 bytes
}

// NewCommandBuffer allocates a command buffer for the queue of kind k.
func (d *Device) NewCommandBuffer(k QueueKind) (*CommandBuffer, error) {
	if d.d == nil {
		return nil, ErrClosed
	}
	q := d.queue(k)
	c := &CommandBuffer{dev: d, q: q, kind: k}
	q.poolMu.Lock()
	r := Result(C.fi_allocate_command_buffer(d.d, q.pool, &c.h))
	q.poolMu.Unlock()
	if err := check("vkAllocateCommandBuffers", r); err != nil {
		return nil, err
	}
	c.push = C.malloc(256)
	d.track(c, c.Free)
	return c, nil
}

// Free returns the command buffer to its pool; it must not be pending.
func (c *CommandBuffer) Free() {
	if c.h == nil || c.dev.d == nil {
		return
	}
	c.dev.untrack(c)
	c.q.poolMu.Lock()
	C.fi_free_command_buffer(c.dev.d, c.q.pool, c.h)
	c.q.poolMu.Unlock()
	c.h = nil
	C.free(c.push)
	c.push = nil
}

// Begin starts recording (resetting what was recorded before).
func (c *CommandBuffer) Begin() error {
	if c.h == nil {
		return ErrClosed
	}
	c.err = nil
	c.recorded = false
	if err := check("vkBeginCommandBuffer", Result(C.fi_begin(c.dev.d, c.h))); err != nil {
		return err
	}
	c.recording = true
	return nil
}

// End finishes recording and returns the first recording error.
func (c *CommandBuffer) End() error {
	if !c.recording {
		return errNotRecording
	}
	c.recording = false
	if err := check("vkEndCommandBuffer", Result(C.fi_end(c.dev.d, c.h))); err != nil && c.err == nil {
		c.err = err
	}
	c.recorded = c.err == nil
	return c.err
}

func (c *CommandBuffer) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

func (c *CommandBuffer) ready() bool {
	if !c.recording {
		c.fail(errNotRecording)
		return false
	}
	return c.err == nil
}

// Dispatch records one dispatch of p over x·y·z workgroups with the
// buffers of set and push constants push (len must equal p's PushBytes).
func (c *CommandBuffer) Dispatch(p *Pipeline, set *DescriptorSet, push []byte, x, y, z uint32) {
	if !c.ready() {
		return
	}
	switch {
	case c.kind != Compute:
		c.fail(fmt.Errorf("vk: Dispatch on the %s queue", c.kind))
		return
	case set == nil || set.p != p:
		c.fail(fmt.Errorf("vk: Dispatch %s: descriptor set of another pipeline", p.name))
		return
	case len(push) != p.pushBytes:
		c.fail(fmt.Errorf("vk: Dispatch %s: %d bytes of push constants, pipeline takes %d", p.name, len(push), p.pushBytes))
		return
	}
	lim := c.dev.info.Limits.MaxComputeWorkGroupCount
	if x == 0 || y == 0 || z == 0 || x > lim[0] || y > lim[1] || z > lim[2] {
		c.fail(fmt.Errorf("vk: Dispatch %s: %dx%dx%d workgroups (limits %v)", p.name, x, y, z, lim))
		return
	}
	C.fi_cmd_bind_compute(c.dev.d, c.h, p.pipe, p.layout, set.h)
	if len(push) > 0 {
		copy(unsafe.Slice((*byte)(c.push), 256), push)
		C.fi_cmd_push(c.dev.d, c.h, p.layout, C.uint32_t(len(push)), c.push)
	}
	C.fi_cmd_dispatch(c.dev.d, c.h, C.uint32_t(x), C.uint32_t(y), C.uint32_t(z))
}

// Barrier makes the writes of earlier commands (shaders and copies)
// visible to later ones in the same submission.
func (c *CommandBuffer) Barrier() {
	if !c.ready() {
		return
	}
	stages := C.VkPipelineStageFlags(C.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | C.VK_PIPELINE_STAGE_TRANSFER_BIT)
	if c.kind == Transfer && c.dev.SeparateTransfer() {
		stages = C.VK_PIPELINE_STAGE_TRANSFER_BIT
	}
	access := C.VkAccessFlags(C.VK_ACCESS_SHADER_READ_BIT | C.VK_ACCESS_SHADER_WRITE_BIT | C.VK_ACCESS_TRANSFER_READ_BIT | C.VK_ACCESS_TRANSFER_WRITE_BIT)
	if c.kind == Transfer && c.dev.SeparateTransfer() {
		access = C.VK_ACCESS_TRANSFER_READ_BIT | C.VK_ACCESS_TRANSFER_WRITE_BIT
	}
	C.fi_cmd_barrier(c.dev.d, c.h, stages, stages, access, access)
}

// HostBarrier makes device writes visible to host reads after the
// submission's fence or semaphore signals.
func (c *CommandBuffer) HostBarrier() {
	if !c.ready() {
		return
	}
	src := C.VkPipelineStageFlags(C.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | C.VK_PIPELINE_STAGE_TRANSFER_BIT)
	if c.kind == Transfer && c.dev.SeparateTransfer() {
		src = C.VK_PIPELINE_STAGE_TRANSFER_BIT
	}
	C.fi_cmd_barrier(c.dev.d, c.h, src, C.VK_PIPELINE_STAGE_HOST_BIT,
		C.VK_ACCESS_SHADER_WRITE_BIT|C.VK_ACCESS_TRANSFER_WRITE_BIT, C.VK_ACCESS_HOST_READ_BIT)
}

// Copy records a copy of size bytes from src at srcOff to dst at dstOff.
func (c *CommandBuffer) Copy(dst *Buffer, dstOff uint64, src *Buffer, srcOff, size uint64) {
	if !c.ready() {
		return
	}
	if src == nil || dst == nil || src.h == 0 || dst.h == 0 {
		c.fail(fmt.Errorf("vk: Copy: freed or nil buffer"))
		return
	}
	if size == 0 || srcOff+size > src.size || dstOff+size > dst.size {
		c.fail(fmt.Errorf("vk: Copy: %d bytes from offset %d of %d to offset %d of %d", size, srcOff, src.size, dstOff, dst.size))
		return
	}
	C.fi_cmd_copy(c.dev.d, c.h, src.h, C.VkDeviceSize(srcOff), dst.h, C.VkDeviceSize(dstOff), C.VkDeviceSize(size))
}

// ResetQueries resets queries [first, first+n) of q (before writing them).
func (c *CommandBuffer) ResetQueries(q *QueryPool, first, n uint32) {
	if !c.ready() {
		return
	}
	if first+n > q.n {
		c.fail(fmt.Errorf("vk: ResetQueries [%d,%d) of a pool of %d", first, first+n, q.n))
		return
	}
	C.fi_cmd_reset_queries(c.dev.d, c.h, q.h, C.uint32_t(first), C.uint32_t(n))
}

// Timestamp writes query i of q when all earlier commands have completed.
func (c *CommandBuffer) Timestamp(q *QueryPool, i uint32) {
	if !c.ready() {
		return
	}
	if i >= q.n {
		c.fail(fmt.Errorf("vk: Timestamp %d of a pool of %d", i, q.n))
		return
	}
	if c.dev.info.QueueFamilies[c.q.family].TimestampValidBits == 0 {
		c.fail(fmt.Errorf("%w: the %s queue family has no timestamps", ErrUnsupported, c.kind))
		return
	}
	C.fi_cmd_timestamp(c.dev.d, c.h, q.h, C.uint32_t(i))
}

// SemaphoreValue is a timeline semaphore and a value on it.
type SemaphoreValue struct {
	Sem   *Timeline
	Value uint64
}

// Submit runs c on its queue after every Wait value is reached, then sets
// every Signal value and signals fence (either may be empty or nil).
func (d *Device) Submit(c *CommandBuffer, wait, signal []SemaphoreValue, fence *Fence) error {
	if d.d == nil {
		return ErrClosed
	}
	if c == nil || c.h == nil || !c.recorded {
		return fmt.Errorf("vk: Submit: command buffer not recorded")
	}
	if len(wait) > 8 || len(signal) > 8 {
		return fmt.Errorf("vk: Submit: %d waits and %d signals (at most 8 each)", len(wait), len(signal))
	}
	// Semaphore handles and values in C memory.
	mem := C.calloc(32, 8)
	defer C.free(mem)
	ws := unsafe.Slice((*C.VkSemaphore)(mem), 8)
	wv := unsafe.Slice((*C.uint64_t)(unsafe.Add(mem, 64)), 8)
	ss := unsafe.Slice((*C.VkSemaphore)(unsafe.Add(mem, 128)), 8)
	sv := unsafe.Slice((*C.uint64_t)(unsafe.Add(mem, 192)), 8)
	for i, w := range wait {
		if w.Sem == nil || w.Sem.h == 0 {
			return fmt.Errorf("vk: Submit: wait %d: no semaphore", i)
		}
		ws[i], wv[i] = w.Sem.h, C.uint64_t(w.Value)
	}
	for i, s := range signal {
		if s.Sem == nil || s.Sem.h == 0 {
			return fmt.Errorf("vk: Submit: signal %d: no semaphore", i)
		}
		ss[i], sv[i] = s.Sem.h, C.uint64_t(s.Value)
	}
	var f C.VkFence
	if fence != nil {
		f = fence.h
	}
	c.q.mu.Lock()
	r := Result(C.fi_submit(d.d, c.q.h, c.h, C.uint32_t(len(wait)), &ws[0], &wv[0], C.uint32_t(len(signal)), &ss[0], &sv[0], f))
	c.q.mu.Unlock()
	return check("vkQueueSubmit", r)
}

// Fence is a VkFence.
type Fence struct {
	dev *Device
	h   C.VkFence
}

// NewFence creates an unsignalled fence.
func (d *Device) NewFence() (*Fence, error) {
	if d.d == nil {
		return nil, ErrClosed
	}
	f := &Fence{dev: d}
	if err := check("vkCreateFence", Result(C.fi_create_fence(d.d, &f.h))); err != nil {
		return nil, err
	}
	d.track(f, f.Destroy)
	return f, nil
}

// Wait waits up to timeout for the fence; a timeout is an error naming
// VK_TIMEOUT.
func (f *Fence) Wait(timeout time.Duration) error {
	return check("vkWaitForFences", Result(C.fi_wait_fence(f.dev.d, f.h, C.uint64_t(timeout.Nanoseconds()))))
}

// Reset unsignals the fence for its next submission.
func (f *Fence) Reset() error { return check("vkResetFences", Result(C.fi_reset_fence(f.dev.d, f.h))) }

// Destroy frees the fence.
func (f *Fence) Destroy() {
	if f.h != 0 && f.dev.d != nil {
		f.dev.untrack(f)
		C.fi_destroy_fence(f.dev.d, f.h)
	}
	f.h = 0
}

// Timeline is a timeline semaphore (Vulkan 1.2): a counter that
// submissions wait for and advance, and the host can wait on.
type Timeline struct {
	dev *Device
	h   C.VkSemaphore
}

// NewTimeline creates a timeline semaphore starting at initial; devices
// without timeline semaphores give ErrUnsupported.
func (d *Device) NewTimeline(initial uint64) (*Timeline, error) {
	if d.d == nil {
		return nil, ErrClosed
	}
	if !d.info.TimelineSemaphore || d.d.vkWaitSemaphores == nil || d.d.vkGetSemaphoreCounterValue == nil {
		return nil, fmt.Errorf("%w: device %q has no timeline semaphores", ErrUnsupported, d.info.Name)
	}
	t := &Timeline{dev: d}
	if err := check("vkCreateSemaphore", Result(C.fi_create_timeline(d.d, C.uint64_t(initial), &t.h))); err != nil {
		return nil, err
	}
	d.track(t, t.Destroy)
	return t, nil
}

// Wait waits up to timeout for the counter to reach value.
func (t *Timeline) Wait(value uint64, timeout time.Duration) error {
	return check("vkWaitSemaphores", Result(C.fi_wait_semaphore(t.dev.d, t.h, C.uint64_t(value), C.uint64_t(timeout.Nanoseconds()))))
}

// Value reads the counter.
func (t *Timeline) Value() (uint64, error) {
	var v C.uint64_t
	err := check("vkGetSemaphoreCounterValue", Result(C.fi_semaphore_value(t.dev.d, t.h, &v)))
	return uint64(v), err
}

// Destroy frees the semaphore; no submission may still use it.
func (t *Timeline) Destroy() {
	if t.h != 0 && t.dev.d != nil {
		t.dev.untrack(t)
		C.fi_destroy_semaphore(t.dev.d, t.h)
	}
	t.h = 0
}

// QueryPool is a pool of n timestamp queries.
type QueryPool struct {
	dev *Device
	h   C.VkQueryPool
	n   uint32
}

// NewQueryPool creates n timestamp queries.
func (d *Device) NewQueryPool(n uint32) (*QueryPool, error) {
	if d.d == nil {
		return nil, ErrClosed
	}
	if n == 0 {
		return nil, fmt.Errorf("vk: NewQueryPool: 0 queries")
	}
	q := &QueryPool{dev: d, n: n}
	if err := check("vkCreateQueryPool", Result(C.fi_create_query_pool(d.d, C.uint32_t(n), &q.h))); err != nil {
		return nil, err
	}
	d.track(q, q.Destroy)
	return q, nil
}

// Ticks waits for queries [first, first+n) and returns their raw values;
// multiply differences by the device's TimestampPeriod for nanoseconds.
func (q *QueryPool) Ticks(first, n uint32) ([]uint64, error) {
	if n == 0 || first+n > q.n {
		return nil, fmt.Errorf("vk: Ticks [%d,%d) of a pool of %d", first, first+n, q.n)
	}
	buf := (*C.uint64_t)(C.calloc(C.size_t(n), 8))
	defer C.free(unsafe.Pointer(buf))
	if err := check("vkGetQueryPoolResults", Result(C.fi_query_results(q.dev.d, q.h, C.uint32_t(first), C.uint32_t(n), buf))); err != nil {
		return nil, err
	}
	out := make([]uint64, n)
	for i, v := range unsafe.Slice(buf, n) {
		out[i] = uint64(v)
	}
	return out, nil
}

// Elapsed converts the tick difference between queries a and b (read by
// Ticks) to a duration, masking to the queue family's valid bits.
func (d *Device) Elapsed(k QueueKind, a, b uint64) time.Duration {
	bits := d.info.QueueFamilies[d.queue(k).family].TimestampValidBits
	if bits < 64 {
		mask := uint64(1)<<bits - 1
		a, b = a&mask, b&mask
	}
	return time.Duration(float64(b-a) * float64(d.info.TimestampPeriod))
}

// TimestampBits returns the valid bits of timestamps written on the queue
// of kind k (0: that queue family has no timestamps).
func (d *Device) TimestampBits(k QueueKind) uint32 {
	return d.info.QueueFamilies[d.queue(k).family].TimestampValidBits
}

// Destroy frees the query pool.
func (q *QueryPool) Destroy() {
	if q.h != 0 && q.dev.d != nil {
		q.dev.untrack(q)
		C.fi_destroy_query_pool(q.dev.d, q.h)
	}
	q.h = 0
}

// ownership is the buffer barrier of one half of a queue-family ownership
// transfer of a range copied on the transfer queue and read by compute
// shaders: the release (recorded on the transfer queue) or the acquire
// (on the compute queue). record is false when nothing is to be recorded.
type ownership struct {
	record               bool
	srcStage, dstStage   C.VkPipelineStageFlags
	srcAccess, dstAccess C.VkAccessFlags
	srcFamily, dstFamily C.uint32_t
}

// ownershipBarrier returns the barrier of the release (release) or the
// acquire half for transfer family tf and compute family cf. With one
// family (tf == cf) there is no ownership to transfer: the release records
// nothing, and the acquire is a plain barrier from copies to shader reads
// (the semaphore wait between the submissions orders them; the barrier
// makes the copies' writes visible). With two, both halves name the same
// families, the release's access is the copies' writes and the acquire's
// the shaders' reads (the spec ignores the release's destination and the
// acquire's source access).
func ownershipBarrier(release bool, tf, cf uint32) ownership {
	if tf == cf {
		if release {
			return ownership{}
		}
		return ownership{record: true, srcStage: C.VK_PIPELINE_STAGE_TRANSFER_BIT, dstStage: C.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
			srcAccess: C.VK_ACCESS_TRANSFER_WRITE_BIT, dstAccess: C.VK_ACCESS_SHADER_READ_BIT,
			srcFamily: C.VK_QUEUE_FAMILY_IGNORED, dstFamily: C.VK_QUEUE_FAMILY_IGNORED}
	}
	o := ownership{record: true, srcFamily: C.uint32_t(tf), dstFamily: C.uint32_t(cf)}
	if release {
		o.srcStage, o.dstStage, o.srcAccess = C.VK_PIPELINE_STAGE_TRANSFER_BIT, C.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, C.VK_ACCESS_TRANSFER_WRITE_BIT
	} else {
		o.srcStage, o.dstStage, o.dstAccess = C.VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, C.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, C.VK_ACCESS_SHADER_READ_BIT
	}
	return o
}

// ReleaseToCompute records, on a transfer command buffer, the release half
// of a queue-family ownership transfer of dst's bytes [off, off+size),
// just written by copies, to the compute queue's family
// (ownershipBarrier). The compute command buffer that reads them records
// AcquireFromTransfer with the same range, and its submission waits (a
// semaphore) for this one's.
func (c *CommandBuffer) ReleaseToCompute(dst *Buffer, off, size uint64) {
	if !c.ready() {
		return
	}
	if c.kind != Transfer {
		c.fail(fmt.Errorf("vk: ReleaseToCompute on the %s queue", c.kind))
		return
	}
	c.ownership("ReleaseToCompute", true, dst, off, size)
}

// AcquireFromTransfer records, on a compute command buffer, the acquire
// half of ReleaseToCompute for the same range, making the copies' writes
// visible to the shaders after it.
func (c *CommandBuffer) AcquireFromTransfer(dst *Buffer, off, size uint64) {
	if !c.ready() {
		return
	}
	if c.kind != Compute {
		c.fail(fmt.Errorf("vk: AcquireFromTransfer on the %s queue", c.kind))
		return
	}
	c.ownership("AcquireFromTransfer", false, dst, off, size)
}

func (c *CommandBuffer) ownership(what string, release bool, b *Buffer, off, size uint64) {
	if b == nil || b.h == 0 {
		c.fail(fmt.Errorf("vk: %s: freed or nil buffer", what))
		return
	}
	if size == 0 || off+size > b.size {
		c.fail(fmt.Errorf("vk: %s: %d bytes at offset %d of %d", what, size, off, b.size))
		return
	}
	o := ownershipBarrier(release, c.dev.transfer.family, c.dev.compute.family)
	if !o.record {
		return
	}
	C.fi_cmd_buffer_barrier(c.dev.d, c.h, o.srcStage, o.dstStage, o.srcAccess, o.dstAccess, o.srcFamily, o.dstFamily,
		b.h, C.VkDeviceSize(off), C.VkDeviceSize(size))
}
