//go:build !cgo

package main

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/gpu/vk"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/stages"
)

// openGPU: a build without cgo has no Vulkan; auto computes on the CPU.
func openGPU(l *loaded, p *configs.Pipeline, cb *cpu.Backend, ngl int, _ configs.CachePolicy, fp stages.Footprint, log *zap.Logger) (model.Ops, func(), error) {
	switch {
	case p.Device != "":
		return nil, nil, fmt.Errorf("pipeline.device / --device %s: %w", p.Device, vk.ErrNoCgo)
	case p.Backend == "vulkan":
		return nil, nil, fmt.Errorf("--backend vulkan: %w", vk.ErrNoCgo)
	case p.Backend == "auto":
		cpuFallback(p, log, vk.ErrNoCgo.Error())
	}
	return nil, nil, nil
}

// probeGPU reports why p.Backend computes on the CPU: a build without cgo
// has no Vulkan (vulkan is an error).
func probeGPU(p *configs.Pipeline) (string, error) {
	if p.Device != "" {
		return "", fmt.Errorf("pipeline.device / --device %s: %w", p.Device, vk.ErrNoCgo)
	}
	if p.Backend == "vulkan" {
		return "", fmt.Errorf("--backend vulkan: %w", vk.ErrNoCgo)
	}
	return vk.ErrNoCgo.Error(), nil
}
