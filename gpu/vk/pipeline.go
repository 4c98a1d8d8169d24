//go:build cgo

package vk

/*
#include <stdlib.h>
#include <string.h>
#include "fivk_calls.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"
)

// PipelineSpec describes one compute pipeline: a SPIR-V module whose
// bindings 0..Bindings-1 of set 0 are storage buffers, PushBytes of push
// constants, and specialization constants 0..len(Spec)-1 (32-bit each).
type PipelineSpec struct {
	Name      string // for errors
	SPIRV     []byte
	Bindings  int
	PushBytes int
	Spec      []uint32
}

// Pipeline is a compute pipeline with its layouts and the descriptor pools
// its sets come from.
type Pipeline struct {
	dev       *Device
	name      string
	bindings  int
	pushBytes int
	dsl       C.VkDescriptorSetLayout
	layout    C.VkPipelineLayout
	pipe      C.VkPipeline
	poolMu    sync.Mutex
	pools     []C.VkDescriptorPool
}

const setsPerPool = 64

// NewPipeline builds a compute pipeline. Build one per shader variant and
// keep it: creation compiles the shader in the driver.
func (d *Device) NewPipeline(s PipelineSpec) (*Pipeline, error) {
	if d.d == nil {
		return nil, ErrClosed
	}
	if len(s.SPIRV) == 0 || len(s.SPIRV)%4 != 0 {
		return nil, fmt.Errorf("vk: pipeline %s: SPIR-V of %d bytes is not a whole number of words", s.Name, len(s.SPIRV))
	}
	if s.Bindings < 1 || s.Bindings > 16 || len(s.Spec) > 16 {
		return nil, fmt.Errorf("vk: pipeline %s: %d bindings and %d specialization constants (at most 16 each)", s.Name, s.Bindings, len(s.Spec))
	}
	if s.PushBytes < 0 || s.PushBytes%4 != 0 || uint32(s.PushBytes) > d.info.Limits.MaxPushConstantsSize {
		return nil, fmt.Errorf("vk: pipeline %s: %d bytes of push constants (multiple of 4, at most %d)", s.Name, s.PushBytes, d.info.Limits.MaxPushConstantsSize)
	}
	// The code and constants go to C memory: the driver reads them during
	// the call only.
	code := C.CBytes(s.SPIRV)
	defer C.free(code)
	var spec unsafe.Pointer
	if len(s.Spec) > 0 {
		spec = C.malloc(C.size_t(4 * len(s.Spec)))
		defer C.free(spec)
		copy(unsafe.Slice((*uint32)(spec), len(s.Spec)), s.Spec)
	}
	p := &Pipeline{dev: d, name: s.Name, bindings: s.Bindings, pushBytes: s.PushBytes}
	r := Result(C.fi_create_compute_pipeline(d.d, (*C.uint32_t)(code), C.size_t(len(s.SPIRV)),
		C.uint32_t(s.Bindings), C.uint32_t(s.PushBytes), (*C.uint32_t)(spec), C.uint32_t(len(s.Spec)),
		&p.dsl, &p.layout, &p.pipe))
	if r != 0 {
		C.fi_destroy_pipeline(d.d, p.dsl, p.layout, p.pipe)
		return nil, fmt.Errorf("pipeline %s: %w", s.Name, check("vkCreateComputePipelines", r))
	}
	d.track(p, p.Destroy)
	return p, nil
}

// Name is the pipeline's name from its spec.
func (p *Pipeline) Name() string { return p.name }

// Destroy frees the pipeline, its layouts and descriptor sets.
func (p *Pipeline) Destroy() {
	if p.pipe == 0 || p.dev.d == nil {
		return
	}
	p.dev.untrack(p)
	for _, pool := range p.pools {
		C.fi_destroy_descriptor_pool(p.dev.d, pool)
	}
	p.pools = nil
	C.fi_destroy_pipeline(p.dev.d, p.dsl, p.layout, p.pipe)
	p.pipe, p.layout, p.dsl = 0, 0, 0
}

// Range is a byte range of a buffer bound to one binding; Size 0 means to
// the end of the buffer.
type Range struct {
	Buf  *Buffer
	Off  uint64
	Size uint64
}

// DescriptorSet binds buffers to a pipeline's bindings. Sets live until
// their pipeline is destroyed.
type DescriptorSet struct {
	p *Pipeline
	h C.VkDescriptorSet
}

// NewDescriptorSet allocates a set for p binding ranges[i] to binding i.
func (p *Pipeline) NewDescriptorSet(ranges ...Range) (*DescriptorSet, error) {
	d := p.dev
	if p.pipe == 0 || d.d == nil {
		return nil, ErrClosed
	}
	if len(ranges) != p.bindings {
		return nil, fmt.Errorf("vk: pipeline %s: %d buffers for %d bindings", p.name, len(ranges), p.bindings)
	}
	align := d.info.Limits.MinStorageBufferOffsetAlignment
	n := len(ranges)
	arr := C.calloc(C.size_t(3*n), 8)
	defer C.free(arr)
	bufs := unsafe.Slice((*C.VkBuffer)(arr), n)
	offs := unsafe.Slice((*C.VkDeviceSize)(unsafe.Add(arr, 8*n)), n)
	sizes := unsafe.Slice((*C.VkDeviceSize)(unsafe.Add(arr, 16*n)), n)
	for i, r := range ranges {
		if r.Buf == nil || r.Buf.h == 0 {
			return nil, fmt.Errorf("vk: pipeline %s: binding %d: no buffer", p.name, i)
		}
		if r.Off >= r.Buf.size || r.Off+r.Size > r.Buf.size {
			return nil, fmt.Errorf("vk: pipeline %s: binding %d: range [%d,+%d) outside a buffer of %d bytes", p.name, i, r.Off, r.Size, r.Buf.size)
		}
		if align > 0 && r.Off%align != 0 {
			return nil, fmt.Errorf("vk: pipeline %s: binding %d: offset %d not a multiple of %d", p.name, i, r.Off, align)
		}
		size := r.Size
		if size == 0 {
			size = r.Buf.size - r.Off
		}
		if size > uint64(d.info.Limits.MaxStorageBufferRange) {
			return nil, fmt.Errorf("%w: pipeline %s: binding %d: %d bytes exceed maxStorageBufferRange %d", ErrUnsupported, p.name, i, size, d.info.Limits.MaxStorageBufferRange)
		}
		bufs[i], offs[i], sizes[i] = r.Buf.h, C.VkDeviceSize(r.Off), C.VkDeviceSize(size)
	}
	set, err := p.allocSet()
	if err != nil {
		return nil, err
	}
	C.fi_write_storage_buffers(d.d, set, C.uint32_t(n), &bufs[0], &offs[0], &sizes[0])
	return &DescriptorSet{p: p, h: set}, nil
}

// allocSet takes a set from the newest pool, adding a pool when it is full.
func (p *Pipeline) allocSet() (C.VkDescriptorSet, error) {
	p.poolMu.Lock()
	defer p.poolMu.Unlock()
	d := p.dev
	var set C.VkDescriptorSet
	if len(p.pools) > 0 {
		r := Result(C.fi_alloc_descriptor_set(d.d, p.pools[len(p.pools)-1], p.dsl, &set))
		if r == 0 {
			return set, nil
		}
		// Out of pool memory (or fragmented): start a new pool.
		if r != -1000069000 && r != -12 {
			return 0, check("vkAllocateDescriptorSets", r)
		}
	}
	var pool C.VkDescriptorPool
	if err := check("vkCreateDescriptorPool", Result(C.fi_create_descriptor_pool(d.d, setsPerPool, C.uint32_t(setsPerPool*p.bindings), &pool))); err != nil {
		return 0, err
	}
	p.pools = append(p.pools, pool)
	if err := check("vkAllocateDescriptorSets", Result(C.fi_alloc_descriptor_set(d.d, pool, p.dsl, &set))); err != nil {
		return 0, err
	}
	return set, nil
}

var errNotRecording = errors.New("vk: command buffer is not recording (Begin first)")
