package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/gpu/vk"
)

// vulkanGPUs lists the Vulkan devices through the gpu/vk binding, printing
// one line per device (name, type, heaps, driver) to w. No loader, or a
// build without cgo, is an error saying so.
func vulkanGPUs(w io.Writer) ([]configs.GPU, error) {
	in, err := vk.NewInstance(vk.Config{})
	if err != nil {
		return nil, err
	}
	defer in.Close()
	var gpus []configs.GPU
	for _, d := range in.Devices() {
		var heaps []string
		var vram uint64
		for _, h := range d.Heaps {
			kind := "host"
			if h.DeviceLocal {
				kind = "device-local"
				vram = max(vram, h.Size)
			}
			heaps = append(heaps, fmt.Sprintf("%v %s", configs.ByteSize(h.Size), kind))
		}
		driver := d.DriverName
		if d.DriverInfo != "" {
			driver += " (" + d.DriverInfo + ")"
		}
		if driver == "" {
			driver = fmt.Sprintf("version %#x", d.DriverVersion)
		}
		fmt.Fprintf(w, "flowinfer: vulkan: GPU%d: %s, type %s, driver %s, Vulkan %s, heaps: %s\n",
			d.Index, d.Name, d.Type, driver, d.APIVersion, strings.Join(heaps, ", "))
		gpus = append(gpus, configs.GPU{Name: d.Name, Type: gpuType(d.Type), VRAM: configs.ByteSize(vram)})
	}
	return gpus, nil
}

// gpuType maps a Vulkan device type to hardware.gpus[].type.
func gpuType(t vk.DeviceType) string {
	switch t.String() {
	case "discrete-gpu":
		return "discrete"
	case "integrated-gpu":
		return "integrated"
	case "virtual-gpu":
		return "virtual"
	case "cpu":
		return "cpu"
	}
	return "other"
}
