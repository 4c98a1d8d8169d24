//go:build cgo

package main

// gpu.go: choosing and opening the Vulkan backend (pipeline.backend /
// --backend): vulkan asks for it (a CPU-type device such as lavapipe only
// then), auto takes a discrete or integrated GPU when there is one and the
// model runs on it, else the CPU.

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/gpu"
	"github.com/flowinfer/flowinfer/gpu/vk"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/stages"
)

// openGPU returns the Vulkan backend of l's model and what releases it, or
// nil ops when the CPU computes (backend cpu, auto without a GPU, or a
// placement with nothing on the device). The placement (placement.go:
// -ngl ngl, --vram, or everything) is printed; the layers it leaves to
// the CPU compute on cb (a model.Split). A MoE model runs whole on the
// device, its routed experts resident or, under --vram, in device slots
// evicted by policy.
func openGPU(l *loaded, p *configs.Pipeline, cb *cpu.Backend, ngl int, policy configs.CachePolicy, fp stages.Footprint, log *zap.Logger) (model.Ops, func(), error) {
	if p.Backend == "cpu" {
		return nil, nil, nil
	}
	auto := p.Backend == "auto"
	in, pick, why, err := pickDevice(p)
	if err != nil {
		return nil, nil, err
	}
	if in == nil {
		cpuFallback(p, log, why)
		return nil, nil, nil
	}
	if err := gpuPlaceable(l, p, fp); err != nil {
		in.Close()
		if auto {
			cpuFallback(p, log, err.Error())
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("--backend %s: %w", p.Backend, err)
	}
	plan, err := gpuPlan(l.Model, p, ngl, fp)
	if err == nil && !plan.AllGPU() && !plan.NoGPU() {
		err = gpu.SplitPlaceable(l.Model)
	}
	if err != nil {
		in.Close()
		return nil, nil, err
	}
	plan.ExpertPolicy = policy
	fmt.Fprintf(os.Stderr, "flowinfer: vulkan: %s\n", &plan)
	if plan.NoGPU() {
		in.Close()
		return nil, nil, nil
	}
	dev, err := in.OpenDevice(pick, vk.DeviceConfig{Budget: uint64(p.VRAM), ChunkBytes: chunkBytes(p.VRAM)})
	if err != nil {
		in.Close()
		return nil, nil, fmt.Errorf("--backend %s: %w", p.Backend, err)
	}
	be, err := gpu.NewBackendPlaced(dev, l.Model, &plan)
	if err != nil {
		dev.Close()
		in.Close()
		if auto && errors.Is(err, vk.ErrUnsupported) {
			cpuFallback(p, log, err.Error())
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("--backend %s: %w", p.Backend, err)
	}
	info := dev.Info()
	used, budget := dev.MemoryUsed()
	fmt.Fprintf(os.Stderr, "flowinfer: vulkan: computing on GPU%d %s (type %s); device memory %v of a budget of %v\n",
		info.Index, info.Name, info.Type, configs.ByteSize(used), configs.ByteSize(budget))
	return gpu.SplitOps(&plan, be, cb), func() { be.Close(); dev.Close(); in.Close() }, nil
}

// pickDevice opens a Vulkan instance and picks the device p.Backend
// computes on: the one p.Device names (namedDevice; one not found is an
// error, for auto too: it was asked for), else vulkan takes the first
// discrete or integrated GPU, else the first device (such as lavapipe);
// auto takes a discrete or integrated GPU only, and without one returns a
// nil instance and why the CPU computes instead. The caller closes the
// instance.
func pickDevice(p *configs.Pipeline) (*vk.Instance, int, string, error) {
	auto := p.Backend == "auto" && p.Device == ""
	in, err := vk.NewInstance(vk.Config{})
	if err != nil {
		if auto {
			return nil, -1, err.Error(), nil
		}
		return nil, -1, "", fmt.Errorf("--backend %s: %w", p.Backend, err)
	}
	if p.Device != "" {
		pick, err := namedDevice(in.Devices(), p.Device)
		if err != nil {
			in.Close()
			return nil, -1, "", err
		}
		return in, pick, "", nil
	}
	pick := -1
	for _, d := range in.Devices() {
		gpuType := d.Type.String() == "discrete-gpu" || d.Type.String() == "integrated-gpu"
		if gpuType || !auto && pick < 0 {
			pick = d.Index
			if gpuType {
				break
			}
		}
	}
	if pick < 0 {
		in.Close()
		if auto {
			return nil, -1, "no discrete or integrated Vulkan GPU", nil
		}
		return nil, -1, "", fmt.Errorf("--backend vulkan: %w", vk.ErrNoDevice)
	}
	return in, pick, "", nil
}

// namedDevice returns the index of the device that dev names: an index
// among devs, or a part of exactly one device's name (case-insensitive).
// None, or several, is an error naming dev and listing the devices.
func namedDevice(devs []vk.DeviceInfo, dev string) (int, error) {
	list := make([]string, len(devs))
	for i, d := range devs {
		list[i] = fmt.Sprintf("GPU%d %s (%s)", d.Index, d.Name, d.Type)
	}
	have := strings.Join(list, ", ")
	if have == "" {
		have = "none"
	}
	if n, err := strconv.Atoi(dev); err == nil {
		for _, d := range devs {
			if d.Index == n {
				return n, nil
			}
		}
		return -1, fmt.Errorf("pipeline.device / --device %s: no Vulkan device of that index (devices: %s)", dev, have)
	}
	pick := -1
	var matched []string
	for i, d := range devs {
		if strings.Contains(strings.ToLower(d.Name), strings.ToLower(dev)) {
			pick = d.Index
			matched = append(matched, list[i])
		}
	}
	switch len(matched) {
	case 0:
		return -1, fmt.Errorf("pipeline.device / --device %q: no Vulkan device of that name (devices: %s)", dev, have)
	case 1:
		return pick, nil
	}
	return -1, fmt.Errorf("pipeline.device / --device %q: names %d Vulkan devices (%s): give its index or more of its name", dev, len(matched), strings.Join(matched, ", "))
}

// probeGPU reports why p.Backend computes on the CPU (empty: a device
// computes; pickDevice), opening nothing it does not close.
func probeGPU(p *configs.Pipeline) (string, error) {
	in, _, why, err := pickDevice(p)
	if in != nil {
		in.Close()
	}
	return why, err
}
