// This file is the setup every command that generates shares, once: the
// CPU backend and the weight path of a loaded model (rig), the stage
// engine over them, the engine running in the background, and the model
// as the server's handler sees it.

package main

import (
	"context"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/graph"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/serve"
	"github.com/flowinfer/flowinfer/stages"
)

// rig is a loaded model ready to compute: the CPU backend and the weight
// path (plan printed, resident weights packed), or the Vulkan backend
// (gpu: weights uploaded to the device, no weight path).
type rig struct {
	*loaded
	be       *cpu.Backend
	wp       *stages.WeightPath // nil on the GPU
	gpu      model.Ops          // nil on the CPU
	gpuClose func()
}

// newRig makes the CPU backend of p's threads and opens l's weight path
// for a run of footprint fp; the time counts as loading. With --dry-run it
// prints the plan and returns errDryRun. When gpuOK (the command computes
// on a GPU) and p.Backend asks for one (openGPU), the Vulkan backend
// computes instead, with every weight uploaded to the device.
func newRig(l *loaded, p *configs.Pipeline, wf *WeightFlags, fp stages.Footprint, gpuOK bool, log *zap.Logger) (*rig, error) {
	if err := checkNGL(p, wf.NGL, gpuOK); err != nil {
		return nil, err
	}
	if gpuOK && wf.DryRun && p.Backend != "cpu" {
		onGPU, err := printGPUPlan(l, p, wf.NGL, fp)
		if err != nil {
			return nil, err
		}
		if onGPU { // no weight path: the device and the file mapping hold the weights
			return nil, errDryRun
		}
	}
	if gpuOK && !wf.DryRun {
		t0 := time.Now()
		be := cpu.NewBackend(p.Threads, nil) // the CPU's layers of a split placement too
		ops, closeGPU, err := openGPU(l, p, be, wf.NGL, wf.CachePolicy, fp, log)
		l.loadTime += time.Since(t0)
		if err != nil {
			be.Close()
			return nil, err
		}
		if ops != nil {
			return &rig{loaded: l, be: be, gpu: ops, gpuClose: closeGPU}, nil
		}
		if wf.NGL > 0 { // auto found no GPU that runs the model
			log.Warn("backend auto: computing on the CPU; --n-gpu-layers is unused", zap.Int("n-gpu-layers", wf.NGL))
		}
		be.Close()
	}
	be := cpu.NewBackend(p.Threads, nil)
	t0 := time.Now()
	wp, err := openWeights(l, be, p, wf, fp, log)
	l.loadTime += time.Since(t0) // planning and packing are part of loading
	if err != nil {
		be.Close()
		return nil, err
	}
	return &rig{loaded: l, be: be, wp: wp}, nil
}

// Close releases the weight path and the backend (not the model).
func (r *rig) Close() {
	if r.wp != nil {
		r.wp.Close()
	}
	if r.gpuClose != nil {
		r.gpuClose()
	}
	r.be.Close()
}

// streaming reports whether the weight path streams weights.
func (r *rig) streaming() bool { return r.wp != nil && r.wp.Plan().Streaming() }

// newEngine opens the rig of an engine of config sc (newRig) and makes
// the engine.
func newEngine(l *loaded, p *configs.Pipeline, wf *WeightFlags, sc stages.Config, rec *graph.Recorder, gpuOK bool, log *zap.Logger) (*rig, *stages.Engine, error) {
	r, err := newRig(l, p, wf, stages.EngineFootprint(sc), gpuOK, log)
	if err != nil {
		return nil, nil, err
	}
	e, err := r.engine(sc, rec)
	if err != nil {
		r.Close()
		return nil, nil, err
	}
	return r, e, nil
}

// engine makes the stage engine of sc over the rig's weights.
func (r *rig) engine(sc stages.Config, rec *graph.Recorder) (*stages.Engine, error) {
	if r.gpu != nil {
		return stages.NewEngine(r.Model, r.Tokenizer, r.gpu, sc, rec)
	}
	sc.Weights = r.wp
	return stages.NewEngine(r.Model, r.Tokenizer, r.be, sc, rec)
}

// running is an engine running in the background.
type running struct {
	done chan struct{} // closed when Run returned
	err  error         // Run's error, once done is closed
}

// start runs e until ctx ends or e is closed and drained.
func start(ctx context.Context, e *stages.Engine) *running {
	r := &running{done: make(chan struct{})}
	go func() {
		r.err = e.Run(ctx)
		close(r.done)
	}()
	return r
}

// backend is the running engine as the server's handler sees it: the
// model, its file (path, and its size) and the recorder.
func backend(e *stages.Engine, r *rig, rec *graph.Recorder, path string, run *running) *serve.Backend {
	var size int64
	if st, err := os.Stat(path); err == nil {
		size = st.Size()
	}
	return &serve.Backend{Engine: e, Bundle: r.Bundle, Recorder: rec, Path: path, Size: size, Done: run.done, DeviceExperts: r.deviceExperts()}
}

// deviceExperts returns what reads the device expert slots' counters for
// /metrics, or nil when no routed experts are in device slots.
func (r *rig) deviceExperts() func() serve.DeviceExperts {
	de, ok := r.gpu.(deviceExperts)
	if !ok || de.ExpertStats().Slots == 0 {
		return nil
	}
	return func() serve.DeviceExperts {
		st := de.ExpertStats()
		return serve.DeviceExperts{Hits: st.Hits, Misses: st.Misses, Evictions: st.Evictions, Cached: st.Cached, Slots: st.Slots}
	}
}

// cpuFallback says that backend auto computes on the CPU, and why.
func cpuFallback(p *configs.Pipeline, log *zap.Logger, why string) {
	if p.VRAM > 0 {
		log.Warn("backend auto: computing on the CPU; the VRAM budget is unused", zap.String("why", why), zap.String("vram", p.VRAM.String()))
		return
	}
	log.Debug("backend auto: computing on the CPU", zap.String("why", why))
}
