//go:build !cgo

package vk

// Instance is unavailable without cgo: NewInstance always fails.
type Instance struct{}

// NewInstance returns ErrNoCgo: loading Vulkan needs cgo (dlopen).
func NewInstance(cfg Config) (*Instance, error) { return nil, ErrNoCgo }

// Devices lists no devices.
func (i *Instance) Devices() []DeviceInfo { return nil }

// Close does nothing.
func (i *Instance) Close() {}
