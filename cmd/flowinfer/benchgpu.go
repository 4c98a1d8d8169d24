package main

// benchgpu.go: `flowinfer bench --backend vulkan`: the same tests on the
// Vulkan backend (every weight uploaded to the device, as llama-bench
// -ngl 99), reported with backend "Vulkan". The weight path, --roofline
// and --cpuprofile are the CPU's and are refused here by name.

import (
	"context"
	"fmt"
	"os"

	"github.com/flowinfer/flowinfer/bench"
	"github.com/flowinfer/flowinfer/model"
)

// runGPU measures on the Vulkan backend when --backend asks for it (or
// auto finds a GPU): done reports that it did.
func (c *BenchCmd) runGPU(ctx context.Context, g *Globals, b *model.Bundle, path string, combos []model.KVTypes, nCtx, maxBatch int) (done bool, err error) {
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
	ops, closeGPU, err := openGPU(&loaded{Bundle: b, path: path}, &p, g.Log)
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
	rs := make([]bench.Result, len(tests))
	for i, t := range tests {
		// one host goroutine records the device's work: threads 1
		rs[i] = bench.Result{Model: info, Backend: "Vulkan", ISA: "vulkan", Threads: 1, NBatch: p.BatchSize, NUBatch: ubatch,
			TypeK: testKV[i].K.String(), TypeV: testKV[i].V.String(), Build: version, CPUInfo: bench.CPUName(), Test: t}
	}
	if err := c.write(rs, combos); err != nil {
		return true, err
	}
	fmt.Fprintln(os.Stderr, "bench: every weight on the device (llama-bench -ngl 99)")
	return true, nil
}
