//go:build cgo

package vk

/*
#include <stdlib.h>
#include "fivk_calls.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// QueueKind picks the queue a command buffer is submitted to.
type QueueKind int

const (
	// Compute is the queue compute pipelines run on.
	Compute QueueKind = iota
	// Transfer is a dedicated transfer queue where the device has one, or
	// the compute queue.
	Transfer
)

func (k QueueKind) String() string {
	if k == Transfer {
		return "transfer"
	}
	return "compute"
}

// queue is a VkQueue with the lock Vulkan requires around vkQueueSubmit
// and the command pool its command buffers come from.
type queue struct {
	h      C.VkQueue
	family uint32
	mu     *sync.Mutex
	pool   C.VkCommandPool
	poolMu sync.Mutex // vkAllocate/FreeCommandBuffers on the pool
}

// DeviceConfig sets how a device is opened.
type DeviceConfig struct {
	// Budget caps the bytes of device-local memory the device allocates
	// from Vulkan; 0 means the size of the device-local heaps.
	Budget uint64
	// ChunkBytes is the size of one device-memory allocation the buffers
	// are carved from; 0 means 64 MiB. Larger buffers get their own.
	ChunkBytes uint64
}

// Device is a logical device with its queues and memory.
type Device struct {
	inst *Instance
	info DeviceInfo
	d    *C.fiDevice // C memory: the device dispatch table
	mem  C.VkPhysicalDeviceMemoryProperties

	compute, transfer *queue

	liveMu sync.Mutex
	live   map[any]func() // objects made from the device: Close destroys what is left

	memMu   sync.Mutex
	heaps   [numKinds]*heap
	budget  uint64
	devUsed uint64 // device-local bytes allocated from Vulkan
	chunk   uint64
}

// OpenDevice creates a logical device on physical device index.
func (i *Instance) OpenDevice(index int, cfg DeviceConfig) (*Device, error) {
	if i.in == nil {
		return nil, ErrClosed
	}
	if index < 0 || index >= len(i.phys) {
		if len(i.phys) == 0 {
			return nil, ErrNoDevice
		}
		return nil, fmt.Errorf("vk: device %d out of range (%d devices)", index, len(i.phys))
	}
	info := i.info[index]
	cf, tf, ok := pickQueues(info.QueueFamilies)
	if !ok {
		return nil, fmt.Errorf("%w: device %q has no compute queue", ErrUnsupported, info.Name)
	}
	timeline := C.int(0)
	if info.TimelineSemaphore {
		timeline = 1
	}
	d := &Device{
		inst:   i,
		info:   info,
		d:      (*C.fiDevice)(C.calloc(1, C.size_t(unsafe.Sizeof(C.fiDevice{})))),
		mem:    i.mem[index],
		budget: cfg.Budget,
		chunk:  cfg.ChunkBytes,
		live:   map[any]func(){},
	}
	if d.budget == 0 {
		d.budget = info.DeviceLocalBytes()
	}
	if d.chunk == 0 {
		d.chunk = 64 << 20
	}
	if err := check("vkCreateDevice", Result(C.fi_create_device(i.in, i.phys[index], d.d, C.uint32_t(cf), C.uint32_t(tf), timeline))); err != nil {
		C.free(unsafe.Pointer(d.d))
		return nil, err
	}
	if missing := d.missingFuncs(); missing != "" {
		d.Close()
		return nil, fmt.Errorf("%w: driver gives no %s", ErrUnsupported, missing)
	}
	cmu := new(sync.Mutex)
	d.compute = &queue{h: C.fi_get_queue(d.d, C.uint32_t(cf)), family: cf, mu: cmu}
	if tf == cf {
		d.transfer = d.compute
	} else {
		d.transfer = &queue{h: C.fi_get_queue(d.d, C.uint32_t(tf)), family: tf, mu: new(sync.Mutex)}
	}
	for _, q := range d.queues() {
		if err := check("vkCreateCommandPool", Result(C.fi_create_command_pool(d.d, C.uint32_t(q.family), &q.pool))); err != nil {
			d.Close()
			return nil, err
		}
	}
	return d, nil
}

// pickQueues chooses the compute family (the first with compute) and the
// transfer family: one with transfer but neither compute nor graphics (a
// DMA engine), else any other family with transfer, else the compute one.
func pickQueues(fams []QueueFamily) (compute, transfer uint32, ok bool) {
	c := -1
	for k, f := range fams {
		if f.Flags&QueueCompute != 0 && f.Count > 0 {
			c = k
			break
		}
	}
	if c < 0 {
		return 0, 0, false
	}
	t := -1
	for k, f := range fams {
		if k != c && f.Count > 0 && f.Flags&QueueTransfer != 0 && f.Flags&(QueueCompute|QueueGraphics) == 0 {
			t = k
			break
		}
	}
	if t < 0 {
		for k, f := range fams {
			if k != c && f.Count > 0 && f.Flags&QueueTransfer != 0 {
				t = k
				break
			}
		}
	}
	if t < 0 {
		t = c
	}
	return uint32(c), uint32(t), true
}

// missingFuncs names the first Vulkan 1.0 device function the driver did
// not give (the 1.2 timeline-semaphore calls are checked where they are
// used).
func (d *Device) missingFuncs() string {
	if p := C.fi_missing_device_func(d.d); p != nil {
		return C.GoString(p)
	}
	return ""
}

func (d *Device) queues() []*queue {
	if d.transfer == nil || d.transfer == d.compute {
		return []*queue{d.compute}
	}
	return []*queue{d.compute, d.transfer}
}

func (d *Device) queue(k QueueKind) *queue {
	if k == Transfer {
		return d.transfer
	}
	return d.compute
}

// Info describes the physical device.
func (d *Device) Info() DeviceInfo { return d.info }

// SeparateTransfer reports whether transfers have a queue of their own.
func (d *Device) SeparateTransfer() bool { return d.transfer != d.compute }

// WaitIdle waits until the device has finished all submitted work.
func (d *Device) WaitIdle() error {
	if d.d == nil {
		return ErrClosed
	}
	return check("vkDeviceWaitIdle", Result(C.fi_device_wait_idle(d.d)))
}

// Close waits for the device to go idle and destroys it with the memory
// it still holds. Objects made from it must not be used afterwards.
func (d *Device) Close() {
	if d.d == nil {
		return
	}
	if d.d.h != nil {
		C.fi_device_wait_idle(d.d)
		// Vulkan requires every child object destroyed before the device.
		d.liveMu.Lock()
		left := make([]func(), 0, len(d.live))
		for _, destroy := range d.live {
			left = append(left, destroy)
		}
		d.liveMu.Unlock()
		for _, destroy := range left {
			destroy()
		}
		for _, q := range d.queues() {
			if q != nil && q.pool != 0 {
				C.fi_destroy_command_pool(d.d, q.pool)
			}
		}
		d.freeHeaps()
		C.fi_destroy_device(d.d)
	}
	C.free(unsafe.Pointer(d.d))
	d.d = nil
}

// track records an object Close must destroy if its owner did not.
func (d *Device) track(o any, destroy func()) {
	d.liveMu.Lock()
	d.live[o] = destroy
	d.liveMu.Unlock()
}

// untrack forgets an object destroyed by its owner.
func (d *Device) untrack(o any) {
	d.liveMu.Lock()
	delete(d.live, o)
	d.liveMu.Unlock()
}
