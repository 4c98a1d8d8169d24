// Package vk binds the compute subset of Vulkan that flowinfer's GPU
// backend needs: instance and physical-device queries, a device with a
// compute queue (and a transfer queue where the device has a separate one),
// buffers carved out of budgeted device memory, compute pipelines with
// specialization and push constants, descriptor sets, command buffers that
// are recorded once and replayed, fences, timeline semaphores and timestamp
// queries.
//
// Nothing links against libvulkan: NewInstance dlopens libvulkan.so.1 and
// resolves every function through vkGetInstanceProcAddr and
// vkGetDeviceProcAddr (as volk does), so a binary built with cgo starts on a
// machine without a Vulkan loader and NewInstance returns ErrNoLoader. A
// build without cgo has the same API surface for discovery and returns
// ErrNoCgo.
//
// It deliberately has no surfaces, swapchains, images, graphics pipelines
// or sparse memory. Errors name the Vulkan call and its VkResult; a
// feature the device lacks is an error wrapping ErrUnsupported, never a
// panic.
package vk

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrNoLoader: the Vulkan loader (libvulkan.so.1) could not be loaded.
	ErrNoLoader = errors.New("vk: no Vulkan loader")
	// ErrNoCgo: this binary was built without cgo, so it cannot load Vulkan.
	ErrNoCgo = errors.New("vk: built without cgo")
	// ErrNoDevice: the loader found no Vulkan physical device.
	ErrNoDevice = errors.New("vk: no Vulkan device")
	// ErrUnsupported: the device or driver lacks a feature the call needs.
	ErrUnsupported = errors.New("vk: unsupported")
	// ErrBudget: an allocation would exceed the device-memory budget.
	ErrBudget = errors.New("vk: device-memory budget exceeded")
	// ErrClosed: the object was used after Close or Free.
	ErrClosed = errors.New("vk: use after close")
)

// Config selects how the instance is created.
type Config struct {
	// AppName is reported to the driver (VkApplicationInfo).
	AppName string
	// Validation enables VK_LAYER_KHRONOS_validation; NewInstance fails
	// naming the layer when it is not installed.
	Validation bool

	// loader is the loader's file name; empty means libvulkan.so.1. Tests
	// point it at a missing file to exercise the no-loader path.
	loader string
}

// Result is a VkResult.
type Result int32

var resultNames = map[Result]string{
	0: "VK_SUCCESS", 1: "VK_NOT_READY", 2: "VK_TIMEOUT", 3: "VK_EVENT_SET", 4: "VK_EVENT_RESET", 5: "VK_INCOMPLETE",
	-1: "VK_ERROR_OUT_OF_HOST_MEMORY", -2: "VK_ERROR_OUT_OF_DEVICE_MEMORY", -3: "VK_ERROR_INITIALIZATION_FAILED",
	-4: "VK_ERROR_DEVICE_LOST", -5: "VK_ERROR_MEMORY_MAP_FAILED", -6: "VK_ERROR_LAYER_NOT_PRESENT",
	-7: "VK_ERROR_EXTENSION_NOT_PRESENT", -8: "VK_ERROR_FEATURE_NOT_PRESENT", -9: "VK_ERROR_INCOMPATIBLE_DRIVER",
	-10: "VK_ERROR_TOO_MANY_OBJECTS", -11: "VK_ERROR_FORMAT_NOT_SUPPORTED", -12: "VK_ERROR_FRAGMENTED_POOL",
	-13: "VK_ERROR_UNKNOWN", -1000069000: "VK_ERROR_OUT_OF_POOL_MEMORY", -1000072003: "VK_ERROR_INVALID_EXTERNAL_HANDLE",
	-1000161000: "VK_ERROR_FRAGMENTATION", -1000257000: "VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS",
}

func (r Result) String() string {
	if s, ok := resultNames[r]; ok {
		return s
	}
	return fmt.Sprintf("VkResult(%d)", int32(r))
}

// Error is a failed Vulkan call.
type Error struct {
	Call   string // the Vulkan function, e.g. "vkAllocateMemory"
	Result Result
}

func (e *Error) Error() string { return fmt.Sprintf("vk: %s: %s", e.Call, e.Result) }

// check turns a VkResult into an error naming the call (nil on success).
func check(call string, r Result) error {
	if r == 0 {
		return nil
	}
	return &Error{Call: call, Result: r}
}

// DeviceType is VkPhysicalDeviceType.
type DeviceType uint32

func (t DeviceType) String() string {
	switch t {
	case 0:
		return "other"
	case 1:
		return "integrated-gpu"
	case 2:
		return "discrete-gpu"
	case 3:
		return "virtual-gpu"
	case 4:
		return "cpu"
	}
	return fmt.Sprintf("type-%d", uint32(t))
}

// Version is a Vulkan packed version (VK_MAKE_API_VERSION).
type Version uint32

func (v Version) String() string {
	return fmt.Sprintf("%d.%d.%d", uint32(v)>>22&0x7f, uint32(v)>>12&0x3ff, uint32(v)&0xfff)
}

// QueueFlags is VkQueueFlags.
type QueueFlags uint32

const (
	QueueGraphics QueueFlags = 1
	QueueCompute  QueueFlags = 2
	QueueTransfer QueueFlags = 4
)

func (f QueueFlags) String() string {
	var s []string
	if f&QueueGraphics != 0 {
		s = append(s, "graphics")
	}
	if f&QueueCompute != 0 {
		s = append(s, "compute")
	}
	if f&QueueTransfer != 0 {
		s = append(s, "transfer")
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, "|")
}

// QueueFamily describes one VkQueueFamilyProperties.
type QueueFamily struct {
	Flags              QueueFlags
	Count              uint32
	TimestampValidBits uint32
}

// Heap is one memory heap.
type Heap struct {
	Size        uint64
	DeviceLocal bool
}

// Limits are the VkPhysicalDeviceLimits a compute backend sizes work by.
type Limits struct {
	MaxStorageBufferRange           uint32
	MaxPushConstantsSize            uint32
	MaxComputeSharedMemorySize      uint32
	MaxComputeWorkGroupCount        [3]uint32
	MaxComputeWorkGroupSize         [3]uint32
	MaxComputeWorkGroupInvocations  uint32
	MinStorageBufferOffsetAlignment uint64
	NonCoherentAtomSize             uint64
}

// DeviceInfo describes a physical device.
type DeviceInfo struct {
	Index         int
	Name          string
	Type          DeviceType
	VendorID      uint32
	DeviceID      uint32
	APIVersion    Version
	DriverVersion uint32
	DriverName    string // empty before Vulkan 1.2
	DriverInfo    string
	Heaps         []Heap
	// SubgroupSize is 0 when the device does not report it (Vulkan 1.0).
	SubgroupSize uint32
	// TimestampPeriod is nanoseconds per timestamp tick.
	TimestampPeriod   float32
	QueueFamilies     []QueueFamily
	Limits            Limits
	TimelineSemaphore bool
}

// DeviceLocalBytes is the total size of the device-local heaps.
func (d *DeviceInfo) DeviceLocalBytes() uint64 {
	var n uint64
	for _, h := range d.Heaps {
		if h.DeviceLocal {
			n += h.Size
		}
	}
	return n
}
