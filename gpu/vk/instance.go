//go:build cgo

package vk

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "fivk_calls.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

const validationLayer = "VK_LAYER_KHRONOS_validation"

// Instance is a loaded Vulkan loader and a VkInstance.
type Instance struct {
	l    *C.fiLoader   // C memory: the global dispatch table
	in   *C.fiInstance // C memory: the instance dispatch table
	phys []C.VkPhysicalDevice
	info []DeviceInfo
	mem  []C.VkPhysicalDeviceMemoryProperties
}

// NewInstance loads the Vulkan loader and creates an instance. Without a
// loader it returns an error wrapping ErrNoLoader; an instance with no
// device is not an error (Devices is empty).
func NewInstance(cfg Config) (*Instance, error) {
	name := cfg.loader
	if name == "" {
		name = "libvulkan.so.1"
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	i := &Instance{
		l:  (*C.fiLoader)(C.calloc(1, C.size_t(unsafe.Sizeof(C.fiLoader{})))),
		in: (*C.fiInstance)(C.calloc(1, C.size_t(unsafe.Sizeof(C.fiInstance{})))),
	}
	var errBuf [512]C.char
	if C.fi_load(cname, i.l, &errBuf[0], C.int(len(errBuf))) != 0 {
		i.free()
		return nil, fmt.Errorf("%w: %s", ErrNoLoader, C.GoString(&errBuf[0]))
	}
	// Ask for Vulkan 1.3, or what a pre-1.1 loader (no
	// vkEnumerateInstanceVersion) can give.
	api := C.uint32_t(C.VK_API_VERSION_1_0)
	if i.l.vkEnumerateInstanceVersion != nil {
		api = C.VK_API_VERSION_1_3
	}
	validation := C.int(0)
	if cfg.Validation {
		cl := C.CString(validationLayer)
		ok := C.fi_has_layer(i.l, cl) != 0
		C.free(unsafe.Pointer(cl))
		if !ok {
			i.free()
			return nil, fmt.Errorf("%w: validation requested but layer %s is not installed", ErrUnsupported, validationLayer)
		}
		validation = 1
	}
	app := cfg.AppName
	if app == "" {
		app = "flowinfer"
	}
	capp := C.CString(app)
	defer C.free(unsafe.Pointer(capp))
	if err := check("vkCreateInstance", Result(C.fi_create_instance(i.l, i.in, api, capp, validation))); err != nil {
		i.free()
		if err.(*Error).Result == -9 { // VK_ERROR_INCOMPATIBLE_DRIVER: the loader found no driver
			return nil, fmt.Errorf("%w: the loader found no driver (%w)", ErrNoDevice, err)
		}
		return nil, err
	}
	if err := i.enumerate(); err != nil {
		i.Close()
		return nil, err
	}
	return i, nil
}

func (i *Instance) enumerate() error {
	for _, f := range []struct {
		name string
		p    unsafe.Pointer
	}{
		{"vkEnumeratePhysicalDevices", unsafe.Pointer(i.in.vkEnumeratePhysicalDevices)},
		{"vkGetPhysicalDeviceProperties", unsafe.Pointer(i.in.vkGetPhysicalDeviceProperties)},
		{"vkGetPhysicalDeviceMemoryProperties", unsafe.Pointer(i.in.vkGetPhysicalDeviceMemoryProperties)},
		{"vkGetPhysicalDeviceQueueFamilyProperties", unsafe.Pointer(i.in.vkGetPhysicalDeviceQueueFamilyProperties)},
		{"vkCreateDevice", unsafe.Pointer(i.in.vkCreateDevice)},
		{"vkGetDeviceProcAddr", unsafe.Pointer(i.in.vkGetDeviceProcAddr)},
	} {
		if f.p == nil {
			return fmt.Errorf("%w: loader gives no %s", ErrUnsupported, f.name)
		}
	}
	var n C.uint32_t
	if err := check("vkEnumeratePhysicalDevices", Result(C.fi_physical_devices(i.in, &n, nil))); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	// C memory for the handles the call writes.
	buf := (*C.VkPhysicalDevice)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(C.VkPhysicalDevice(nil)))))
	defer C.free(unsafe.Pointer(buf))
	r := Result(C.fi_physical_devices(i.in, &n, buf))
	if r != 0 && r != 5 { // VK_INCOMPLETE still lists n devices
		return check("vkEnumeratePhysicalDevices", r)
	}
	i.phys = append(i.phys, unsafe.Slice(buf, int(n))...)
	props := (*C.fiProps)(C.calloc(1, C.size_t(unsafe.Sizeof(C.fiProps{}))))
	defer C.free(unsafe.Pointer(props))
	for k, pd := range i.phys {
		C.fi_props(i.in, pd, props)
		i.info = append(i.info, deviceInfo(k, props))
		i.mem = append(i.mem, props.mem)
	}
	return nil
}

func deviceInfo(k int, p *C.fiProps) DeviceInfo {
	lim := &p.p.limits
	d := DeviceInfo{
		Index:           k,
		Name:            C.GoString(&p.p.deviceName[0]),
		Type:            DeviceType(p.p.deviceType),
		VendorID:        uint32(p.p.vendorID),
		DeviceID:        uint32(p.p.deviceID),
		APIVersion:      Version(p.p.apiVersion),
		DriverVersion:   uint32(p.p.driverVersion),
		SubgroupSize:    uint32(p.subgroupSize),
		TimestampPeriod: float32(lim.timestampPeriod),
		Limits: Limits{
			MaxStorageBufferRange:           uint32(lim.maxStorageBufferRange),
			MaxPushConstantsSize:            uint32(lim.maxPushConstantsSize),
			MaxComputeSharedMemorySize:      uint32(lim.maxComputeSharedMemorySize),
			MaxComputeWorkGroupInvocations:  uint32(lim.maxComputeWorkGroupInvocations),
			MinStorageBufferOffsetAlignment: uint64(lim.minStorageBufferOffsetAlignment),
			NonCoherentAtomSize:             uint64(lim.nonCoherentAtomSize),
		},
		TimelineSemaphore: p.timelineSemaphore != 0,
	}
	for j := range 3 {
		d.Limits.MaxComputeWorkGroupCount[j] = uint32(lim.maxComputeWorkGroupCount[j])
		d.Limits.MaxComputeWorkGroupSize[j] = uint32(lim.maxComputeWorkGroupSize[j])
	}
	if p.hasDriverProps != 0 {
		d.DriverName = C.GoString(&p.driverName[0])
		d.DriverInfo = C.GoString(&p.driverInfo[0])
	}
	for j := range int(p.mem.memoryHeapCount) {
		h := p.mem.memoryHeaps[j]
		d.Heaps = append(d.Heaps, Heap{Size: uint64(h.size), DeviceLocal: h.flags&C.VK_MEMORY_HEAP_DEVICE_LOCAL_BIT != 0})
	}
	for j := range int(p.nQueueFamilies) {
		q := p.queueFamilies[j]
		d.QueueFamilies = append(d.QueueFamilies, QueueFamily{
			Flags:              QueueFlags(q.queueFlags),
			Count:              uint32(q.queueCount),
			TimestampValidBits: uint32(q.timestampValidBits),
		})
	}
	return d
}

// Devices lists the physical devices.
func (i *Instance) Devices() []DeviceInfo { return i.info }

// Close destroys the instance and unloads the loader. Devices opened from
// it must be closed first.
func (i *Instance) Close() {
	if i.in != nil {
		C.fi_destroy_instance(i.in)
	}
	i.free()
}

func (i *Instance) free() {
	if i.l != nil {
		C.fi_unload(i.l)
		C.free(unsafe.Pointer(i.l))
		i.l = nil
	}
	if i.in != nil {
		C.free(unsafe.Pointer(i.in))
		i.in = nil
	}
}
