package main

// benchgpu.go: `flowinfer bench --backend vulkan`: the same tests on the
// Vulkan backend, with the layers openGPU places on the device (-ngl,
// --vram, or every weight, as llama-bench -ngl 99) and the rest on the
// CPU backend, reported with backend "Vulkan". --roofline, --cpuprofile,
// --isa and --no-pack are the CPU path's and are refused here by name.

import (
	"context"
	"fmt"

	"github.com/flowinfer/flowinfer/bench"
	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/stages"
)

// runGPU measures on the Vulkan backend when --backend asks for it (or
// auto finds a GPU): done reports that it did.
func (c *BenchCmd) runGPU(ctx context.Context, g *Globals, b *model.Bundle, path string, cb *cpu.Backend, combos []model.KVTypes, nCtx, maxBatch int) (done bool, err error) {
	p := g.Config.Pipeline
	if p.Backend == "cpu" {
		return false, nil
	}
	if p.Backend == "vulkan" {
		switch {
		case c.Roofline:
			return true, fmt.Errorf("bench --backend vulkan: --roofline measures the CPU's memory bandwidth; not on the GPU")
		case c.CPUProfile != "":
			return true, fmt.Errorf("bench --backend vulkan: --cpuprofile profiles the CPU kernels; not on the GPU")
		case c.ISA != "" || c.NoPack:
			return true, fmt.Errorf("bench --backend vulkan: --isa and --no-pack choose CPU kernels; not on the GPU")
		}
	}
	fp := stages.Footprint{Cells: nCtx, Running: 1, MaxBatch: maxBatch}
	ops, closeGPU, err := openGPU(&loaded{Bundle: b, path: path}, &p, cb, c.NGL, configs.PolicySLRU, fp, g.Log)
	if err != nil || ops == nil {
		return err != nil, err // nil ops: auto computes on the CPU
	}
	defer closeGPU()
	bos := int32(-1)
	if b.Tokenizer.AddBOS() {
		bos = b.Tokenizer.BOS()
	}
	var tests []bench.Test
	var testKV []model.KVTypes
	ubatch := 0
	for _, kv := range combos {
		mctx, err := b.Model.NewContextOf(ops, kv, nCtx, 1, maxBatch)
		if err != nil {
			return true, err
		}
		n0 := len(tests)
		if err := c.testLoop(ctx, mctx, bos, nil, &tests); err != nil {
			return true, err
		}
		for range len(tests) - n0 {
			testKV = append(testKV, kv)
		}
		ubatch = mctx.MaxBatch
	}
	info := bench.DescribeModel(c.Model, b.File)
	if info.Filename == "" {
		info.Filename = path
	}
	// one host goroutine records the device's work: threads 1, unless
	// the placement left layers to the CPU backend's threads
	threads := 1
	if _, split := ops.(*model.Split); split {
		threads = cb.Threads()
	}
	rs := make([]bench.Result, len(tests))
	for i, t := range tests {
		rs[i] = bench.Result{Model: info, Backend: "Vulkan", ISA: "vulkan", Threads: threads, NBatch: p.BatchSize, NUBatch: ubatch,
			TypeK: testKV[i].K.String(), TypeV: testKV[i].V.String(), Build: version, CPUInfo: bench.CPUName(), Test: t}
	}
	return true, c.write(rs, combos)
}
