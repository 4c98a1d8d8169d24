package main

// placement.go: the vulkan backend's placement of a model between the
// device and the CPU (--n-gpu-layers, --vram), planned from the model's
// shapes alone: printed at load and by --dry-run.

import (
	"cmp"
	"fmt"
	"os"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/gpu"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/stages"
)

// gpuPlan returns the placement of m for the run of footprint fp: -ngl
// ngl when it is given (≥ 0), else fitted to the --vram budget when there
// is one, else everything on the device.
func gpuPlan(m *model.Model, p *configs.Pipeline, ngl int, fp stages.Footprint) (gpu.Plan, error) {
	kv, err := model.KVCacheBytes(&m.Hyper, kvTypes(p), fp.Cells, fp.Running, fp.NCtx, fp.MaxBatch)
	if err != nil {
		return gpu.Plan{}, err
	}
	kvLayer := kv / int64(max(m.NLayer, 1))
	switch {
	case ngl >= 0:
		return gpu.PlanLayers(m, ngl, kvLayer), nil
	case p.VRAM > 0 && m.NExpert > 0:
		// the expert slots take what is left to the last byte: keep a
		// chunk per memory kind (device-local, upload, readback) for the
		// allocator's partly used chunks (gpu.go chunkBytes)
		slack := 3 * int64(cmp.Or(chunkBytes(p.VRAM), 64<<20))
		return gpu.PlanVRAM(m, int64(p.VRAM), kvLayer, gpu.Reserve(m, fp.MaxBatch)+slack), nil
	case p.VRAM > 0:
		return gpu.PlanVRAM(m, int64(p.VRAM), kvLayer, gpu.Reserve(m, fp.MaxBatch)), nil
	}
	plan := gpu.PlanLayers(m, -1, kvLayer)
	plan.Why = "all"
	return plan, nil
}

// gpuPlaceable reports why l's model or its KV cache for the run of
// footprint fp cannot be on the device (nil if they can).
func gpuPlaceable(l *loaded, p *configs.Pipeline, fp stages.Footprint) error {
	if err := gpu.Placeable(l.Model); err != nil {
		return err
	}
	return gpu.PlaceableKV(l.Model, kvTypes(p), fp.NCtx, fp.MaxBatch)
}

// checkNGL refuses --n-gpu-layers where no placement happens: the cpu
// backend, or a command that computes only on the CPU.
func checkNGL(p *configs.Pipeline, ngl int, gpuOK bool) error {
	if ngl < 0 {
		return nil
	}
	if p.Backend == "cpu" {
		return fmt.Errorf("--n-gpu-layers %d: the cpu backend places nothing on a GPU (use --backend vulkan or auto)", ngl)
	}
	if !gpuOK {
		return fmt.Errorf("--n-gpu-layers %d: this command computes on the CPU only (run, chat, trace, bench, serve and batch compute on the vulkan backend)", ngl)
	}
	return nil
}

// printGPUPlan prints the placement --dry-run would make on the device
// and reports whether the device computes: auto probes for a device as a
// run would (probeGPU), and without one, or with a model the device does
// not run, prints why the CPU computes instead (false: the CPU's weight
// plan follows). A placement with nothing on the device computes on the
// CPU too.
func printGPUPlan(l *loaded, p *configs.Pipeline, ngl int, fp stages.Footprint) (bool, error) {
	why, err := probeGPU(p)
	if err != nil {
		return false, err
	}
	if why == "" {
		err = gpuPlaceable(l, p, fp)
		if err != nil && p.Backend != "auto" {
			return false, fmt.Errorf("--backend %s: %w", p.Backend, err)
		}
		if err != nil {
			why = err.Error()
		}
	}
	if why != "" {
		fmt.Fprintf(os.Stderr, "flowinfer: backend auto: the CPU computes (%s)\n", why)
		return false, nil
	}
	plan, err := gpuPlan(l.Model, p, ngl, fp)
	if err != nil {
		return false, err
	}
	fmt.Fprintf(os.Stderr, "flowinfer: vulkan: %s\n", &plan)
	return !plan.NoGPU(), nil
}

// chunkBytes is the device allocator's chunk under a --vram budget: the
// default (64 MiB) unless the budget is under 512 MiB, then an eighth of
// it, since every memory kind (device-local, upload, readback; on a CPU
// device such as lavapipe all of them count against the budget) starts a
// chunk of its own, and a first chunk of the whole budget would leave the
// other kinds nothing.
func chunkBytes(vram configs.ByteSize) uint64 {
	if vram <= 0 || vram >= 512<<20 {
		return 0
	}
	return uint64(vram) / 8
}
