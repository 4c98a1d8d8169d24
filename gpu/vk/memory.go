//go:build cgo

package vk

/*
#include "fivk_calls.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// MemoryKind is what a buffer's memory is for.
type MemoryKind int

const (
	// DeviceLocal memory is where weights and activations live (VRAM).
	DeviceLocal MemoryKind = iota
	// Upload memory is host-visible and coherent: staging for uploads.
	Upload
	// Readback memory is host-visible and coherent, host-cached where the
	// device offers it: staging for downloads.
	Readback
	numKinds
)

func (k MemoryKind) String() string {
	switch k {
	case DeviceLocal:
		return "device-local"
	case Upload:
		return "upload"
	case Readback:
		return "readback"
	}
	return fmt.Sprintf("kind-%d", int(k))
}

const (
	memDeviceLocal  = C.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
	memHostVisible  = C.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT
	memHostCoherent = C.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
	memHostCached   = C.VK_MEMORY_PROPERTY_HOST_CACHED_BIT
)

// chunk is one vkAllocateMemory, mapped for its whole life when host
// visible, carved up by a subAlloc.
type chunk struct {
	mem    C.VkDeviceMemory
	size   uint64
	sa     *subAlloc
	mapped unsafe.Pointer
}

// heap is the chunks of one memory type used for one kind.
type heap struct {
	typ     uint32
	vram    bool // the type's heap is device-local: counts against the budget
	visible bool
	chunks  []*chunk
}

// Buffer is a VkBuffer bound to a range of a chunk.
type Buffer struct {
	dev   *Device
	h     C.VkBuffer
	size  uint64
	kind  MemoryKind
	heap  *heap
	chunk *chunk
	start uint64 // start of the held range in the chunk (padding included)
	held  uint64
	off   uint64 // offset of the buffer in the chunk
	host  []byte // the mapped bytes; nil unless host visible
}

// Size is the buffer's size in bytes as requested.
func (b *Buffer) Size() uint64 { return b.size }

// Kind is the memory the buffer lives in.
func (b *Buffer) Kind() MemoryKind { return b.kind }

// Bytes is the buffer's mapped memory, or nil when it is not host visible
// (device-local memory on a discrete GPU). Coherent: no flush is needed,
// but the host must not touch it while a submission using it runs.
func (b *Buffer) Bytes() []byte { return b.host }

// MemoryUsed reports the device-local bytes allocated from Vulkan and the
// budget they are held to.
func (d *Device) MemoryUsed() (used, budget uint64) {
	d.memMu.Lock()
	defer d.memMu.Unlock()
	return d.devUsed, d.budget
}

// NewBuffer creates a buffer of size bytes usable as a storage buffer and
// as a copy source and destination, sub-allocated from chunks of memory
// suited to kind. Device-local bytes beyond the budget fail with ErrBudget.
func (d *Device) NewBuffer(size uint64, kind MemoryKind) (*Buffer, error) {
	if d.d == nil {
		return nil, ErrClosed
	}
	if size == 0 {
		return nil, fmt.Errorf("vk: NewBuffer: size 0")
	}
	if kind < 0 || kind >= numKinds {
		return nil, fmt.Errorf("vk: NewBuffer: unknown memory kind %d", int(kind))
	}
	usage := C.VkBufferUsageFlags(C.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | C.VK_BUFFER_USAGE_TRANSFER_SRC_BIT | C.VK_BUFFER_USAGE_TRANSFER_DST_BIT)
	b := &Buffer{dev: d, size: size, kind: kind}
	if err := check("vkCreateBuffer", Result(C.fi_create_buffer(d.d, C.VkDeviceSize(size), usage,
		C.uint32_t(d.compute.family), C.uint32_t(d.transfer.family), &b.h))); err != nil {
		return nil, err
	}
	var req C.VkMemoryRequirements
	C.fi_buffer_reqs(d.d, b.h, &req)
	d.memMu.Lock()
	err := d.place(b, uint64(req.size), uint64(req.alignment), uint32(req.memoryTypeBits))
	d.memMu.Unlock()
	if err != nil {
		C.fi_destroy_buffer(d.d, b.h)
		return nil, err
	}
	if err := check("vkBindBufferMemory", Result(C.fi_bind_buffer_memory(d.d, b.h, b.chunk.mem, C.VkDeviceSize(b.off)))); err != nil {
		b.Free()
		return nil, err
	}
	if b.chunk.mapped != nil {
		b.host = unsafe.Slice((*byte)(unsafe.Add(b.chunk.mapped, b.off)), size)
	}
	d.track(b, b.Free)
	return b, nil
}

// memoryType picks a memory type allowed by bits that has all of need,
// preferring one that also has want.
func (d *Device) memoryType(bits uint32, need, want uint32) (uint32, bool) {
	best, found := uint32(0), false
	for t := range uint32(d.mem.memoryTypeCount) {
		if bits&(1<<t) == 0 {
			continue
		}
		f := uint32(d.mem.memoryTypes[t].propertyFlags)
		if f&need != need {
			continue
		}
		if f&want == want {
			return t, true
		}
		if !found {
			best, found = t, true
		}
	}
	return best, found
}

// place finds or allocates memory for b (d.memMu held).
func (d *Device) place(b *Buffer, size, align uint64, bits uint32) error {
	var need, want uint32
	switch b.kind {
	case DeviceLocal:
		want = memDeviceLocal
	case Upload:
		need = memHostVisible | memHostCoherent
	case Readback:
		need = memHostVisible | memHostCoherent
		want = memHostCached
	}
	typ, ok := d.memoryType(bits, need, want)
	if !ok {
		return fmt.Errorf("%w: no memory type for %s buffers", ErrUnsupported, b.kind)
	}
	h := d.heaps[b.kind]
	if h == nil || h.typ != typ {
		if h != nil && len(h.chunks) > 0 {
			return fmt.Errorf("%w: %s buffers need memory type %d, earlier ones got %d", ErrUnsupported, b.kind, typ, h.typ)
		}
		mt := d.mem.memoryTypes[typ]
		h = &heap{
			typ:     typ,
			vram:    d.mem.memoryHeaps[mt.heapIndex].flags&C.VK_MEMORY_HEAP_DEVICE_LOCAL_BIT != 0,
			visible: uint32(mt.propertyFlags)&memHostVisible != 0,
		}
		d.heaps[b.kind] = h
	}
	for _, c := range h.chunks {
		if off, held, ok := c.sa.alloc(size, align); ok {
			b.heap, b.chunk, b.off, b.held, b.start = h, c, off, held, off+size-held
			return nil
		}
	}
	n := max(size, d.chunk)
	if h.vram {
		left := uint64(0)
		if d.budget > d.devUsed {
			left = d.budget - d.devUsed
		}
		if size > left {
			// Empty chunks kept for reuse give their bytes back first.
			d.releaseEmpty()
			left = 0
			if d.budget > d.devUsed {
				left = d.budget - d.devUsed
			}
		}
		if size > left {
			return fmt.Errorf("%w: %s buffer of %d bytes, %d of %d bytes in use", ErrBudget, b.kind, size, d.devUsed, d.budget)
		}
		n = min(n, left)
	}
	c := &chunk{size: n, sa: newSubAlloc(n)}
	if err := check("vkAllocateMemory", Result(C.fi_allocate_memory(d.d, C.VkDeviceSize(n), C.uint32_t(typ), &c.mem))); err != nil {
		return fmt.Errorf("%w (%d bytes of memory type %d for %s buffers)", err, n, typ, b.kind)
	}
	if h.visible {
		if err := check("vkMapMemory", Result(C.fi_map_memory(d.d, c.mem, &c.mapped))); err != nil {
			C.fi_free_memory(d.d, c.mem)
			return err
		}
	}
	if h.vram {
		d.devUsed += n
	}
	h.chunks = append(h.chunks, c)
	off, held, _ := c.sa.alloc(size, align)
	b.heap, b.chunk, b.off, b.held, b.start = h, c, off, held, off+size-held
	return nil
}

// Free destroys the buffer and returns its range; an emptied chunk other
// than a heap's last is freed back to Vulkan. The GPU must be done with it.
func (b *Buffer) Free() {
	d := b.dev
	if b.h == 0 || d.d == nil {
		return
	}
	d.untrack(b)
	C.fi_destroy_buffer(d.d, b.h)
	b.h = 0
	b.host = nil
	if b.chunk == nil {
		return
	}
	d.memMu.Lock()
	defer d.memMu.Unlock()
	b.chunk.sa.release(b.start, b.held)
	h := b.heap
	if b.chunk.sa.empty() && len(h.chunks) > 1 {
		for k, c := range h.chunks {
			if c == b.chunk {
				h.chunks = append(h.chunks[:k], h.chunks[k+1:]...)
				break
			}
		}
		d.freeChunk(h, b.chunk)
	}
	b.chunk = nil
}

func (d *Device) freeChunk(h *heap, c *chunk) {
	if c.mapped != nil {
		C.fi_unmap_memory(d.d, c.mem)
	}
	C.fi_free_memory(d.d, c.mem)
	if h.vram {
		d.devUsed -= c.size
	}
}

// releaseEmpty frees the empty chunks of device-local heaps (d.memMu held).
func (d *Device) releaseEmpty() {
	for _, h := range d.heaps {
		if h == nil || !h.vram {
			continue
		}
		kept := h.chunks[:0]
		for _, c := range h.chunks {
			if c.sa.empty() {
				d.freeChunk(h, c)
			} else {
				kept = append(kept, c)
			}
		}
		h.chunks = kept
	}
}

// freeHeaps frees every chunk (Close).
func (d *Device) freeHeaps() {
	for k, h := range d.heaps {
		if h == nil {
			continue
		}
		for _, c := range h.chunks {
			d.freeChunk(h, c)
		}
		d.heaps[k] = nil
	}
}
