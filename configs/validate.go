// This file validates a Config, once, for every command: Load checks a
// profile with Validate, and cmd checks the effective configuration (the
// profile, the environment and the flags merged) with ValidateRun, which
// also refuses what this build cannot run. The ranges are the ones the
// runtime implements: a value outside them is refused, never clamped or
// ignored. cmd checks nothing again; it only names the flag of a refused
// key (each Problem carries the key, the value and the reason apart).

package configs

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// ErrInvalid matches every validation error.
var ErrInvalid = errors.New("configs: invalid configuration")

// Problem is one refused value.
type Problem struct {
	// Key is the dotted key path ("pipeline.prefetch_depth"), or the
	// section of a rule between keys ("hardware").
	Key string
	// Value is the refused value as it is written ("5", `"aio"`, "1GiB");
	// "" when the problem is not one value's.
	Value string
	// Msg says what is wrong and what is supported.
	Msg string
	// Known lists the supported names when Value is none of them.
	Known []string
}

// String is the problem as a profile's error line: "key: reason, got
// value", or `key: "value" is not one of a, b` for an unknown name.
func (p Problem) String() string {
	switch {
	case p.Known != nil:
		return fmt.Sprintf("%s: %s is not one of %s", p.Key, p.Value, strings.Join(p.Known, ", "))
	case p.Value != "":
		return fmt.Sprintf("%s: %s, got %s", p.Key, p.Msg, p.Value)
	}
	return p.Key + ": " + p.Msg
}

// Problems is the error of Validate and ValidateRun: every problem found,
// in the order of the keys. It matches ErrInvalid.
type Problems []Problem

func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.String()
	}
	return fmt.Sprintf("%v:\n  %s", ErrInvalid, strings.Join(lines, "\n  "))
}

// Is makes errors.Is(err, ErrInvalid) true.
func (ps Problems) Is(target error) bool { return target == ErrInvalid }

// Validate reports every out-of-range or unknown value, each with its key
// path (e.g. "pipeline.parallel: must be between 1 and 4096, got 0"). A
// profile describing a GPU machine is valid: Load accepts it, and
// ValidateRun says what this build cannot run of it.
func (c *Config) Validate() error { return c.validate(false) }

// ValidateRun is Validate for a configuration about to run: it also
// refuses what this build cannot honour: an unknown backend, and a VRAM
// budget for the cpu backend.
func (c *Config) ValidateRun() error { return c.validate(true) }

func (c *Config) validate(run bool) error {
	var v validation
	v.hardware(&c.Hardware)
	v.pipeline(&c.Pipeline, &c.Hardware, run)
	v.sampling(&c.Sampling)
	v.between("server.port", c.Server.Port, 0, 65535)
	if len(v.ps) == 0 {
		return nil
	}
	return v.ps
}

// validation collects problems.
type validation struct{ ps Problems }

func (v *validation) bad(key, value, format string, args ...any) {
	v.ps = append(v.ps, Problem{Key: key, Value: value, Msg: fmt.Sprintf(format, args...)})
}

func (v *validation) between(key string, x, lo, hi int) {
	if x < lo || x > hi {
		v.bad(key, strconv.Itoa(x), "must be between %d and %d", lo, hi)
	}
}

// oneOf refuses x unless it is one of known (any case when fold).
func (v *validation) oneOf(key, x, msg string, known []string, fold bool) {
	if !slices.ContainsFunc(known, func(k string) bool { return k == x || fold && strings.EqualFold(k, x) }) {
		v.ps = append(v.ps, Problem{Key: key, Value: strconv.Quote(x), Msg: msg, Known: known})
	}
}

func (v *validation) hardware(h *Hardware) {
	v.between("hardware.cores", h.Cores, 0, 1<<16)
	v.between("hardware.logical_cpus", h.LogicalCPUs, 0, 1<<16)
	if h.Cores > 0 && h.LogicalCPUs > 0 && h.Cores > h.LogicalCPUs {
		v.bad("hardware.cores", strconv.Itoa(h.Cores), "more physical cores than logical CPUs (hardware.logical_cpus %d)", h.LogicalCPUs)
	}
	if h.RAM < 0 {
		v.bad("hardware.ram", h.RAM.String(), "must not be negative")
	}
	for _, x := range h.ISA {
		v.oneOf("hardware.isa", x, "unknown", ISAExtensions(), false)
	}
	g := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	if !(h.MemBandwidth >= 0 && !math.IsInf(h.MemBandwidth, 0)) {
		v.bad("hardware.mem_bandwidth_gbps", g(h.MemBandwidth), "must be finite and >= 0")
	}
	if !(h.DiskRead >= 0 && !math.IsInf(h.DiskRead, 0)) {
		v.bad("hardware.disk_read_gbps", g(h.DiskRead), "must be finite and >= 0")
	}
	for i, gpu := range h.GPUs {
		if gpu.Name == "" {
			v.bad(fmt.Sprintf("hardware.gpus[%d].name", i), "", "must be set")
		}
		if gpu.Type != "" {
			v.oneOf(fmt.Sprintf("hardware.gpus[%d].type", i), gpu.Type, "unknown", GPUTypes(), false)
		}
		if gpu.VRAM < 0 {
			v.bad(fmt.Sprintf("hardware.gpus[%d].vram", i), gpu.VRAM.String(), "must not be negative")
		}
	}
}

func (v *validation) pipeline(p *Pipeline, h *Hardware, run bool) {
	v.backend(p, h, run)
	v.between("pipeline.threads", p.Threads, 0, 1024)
	if h.LogicalCPUs > 0 && p.Threads > h.LogicalCPUs {
		v.bad("pipeline.threads", strconv.Itoa(p.Threads), "more threads than the machine's logical CPUs (hardware.logical_cpus %d)", h.LogicalCPUs)
	}
	v.between("pipeline.batch_size", p.BatchSize, 1, 1<<16)
	v.between("pipeline.parallel", p.Parallel, 1, 4096)
	v.between("pipeline.queue", p.Queue, 1, 1<<20)
	v.between("pipeline.edges.tokens", p.Edges.Tokens, 1, 1<<20)
	v.between("pipeline.edges.slabs", p.Edges.Slabs, 1, 1024)
	if p.PrefetchDepth != 0 && p.PrefetchDepth != 1 {
		v.bad("pipeline.prefetch_depth", strconv.Itoa(p.PrefetchDepth),
			"not implemented (supported: 0, the experts the router picked; 1, also the next layer's guessed experts)")
	}
	kv := &p.KVCache
	v.between("pipeline.kv_cache.ctx_size", kv.CtxSize, 0, 1<<24)
	v.oneOf("pipeline.kv_cache.type_k", kv.TypeK, "not supported", KVTypes(), true)
	v.oneOf("pipeline.kv_cache.type_v", kv.TypeV, "not supported", KVTypes(), true)
	v.between("pipeline.kv_cache.protect", kv.Protect, 0, 1<<16)
	v.between("pipeline.kv_cache.recent", kv.Recent, -1, 1<<24)
	v.oneOf("pipeline.io_engine", string(p.IOEngine), "unknown", names(IOEngines()), false)
	switch {
	case p.RAMPool < 0:
		v.bad("pipeline.ram_pool", p.RAMPool.String(), "must not be negative")
	case h.RAM > 0 && p.RAMPool > h.RAM:
		v.bad("pipeline.ram_pool", p.RAMPool.String(), "exceeds the machine's RAM (%v)", h.RAM)
	}
}

// backend checks pipeline.backend and pipeline.vram: against the GPUs a
// profile describes, or (run) against this build: vulkan computes on a
// Vulkan device (vram 0: the device's device-local heaps), auto on the
// CPU unless a discrete or integrated GPU is present, cpu uses no VRAM.
func (v *validation) backend(p *Pipeline, h *Hardware, run bool) {
	if run {
		v.oneOf("pipeline.backend", p.Backend, "unknown", Backends(), false)
		switch {
		case p.VRAM < 0:
			v.bad("pipeline.vram", p.VRAM.String(), "must not be negative")
		case p.VRAM > 0 && p.Backend == "cpu":
			v.bad("pipeline.vram", p.VRAM.String(), "only a GPU backend uses VRAM (backend vulkan or auto)")
		}
		if p.Device != "" && p.Backend == "cpu" {
			v.bad("pipeline.device", p.Device, "only a GPU backend computes on a device (backend vulkan or auto)")
		}
		return
	}
	v.oneOf("pipeline.backend", p.Backend, "unknown", Backends(), false)
	var vram ByteSize
	for _, g := range h.GPUs {
		vram += g.VRAM
	}
	switch {
	case p.VRAM < 0:
		v.bad("pipeline.vram", p.VRAM.String(), "must not be negative")
	case len(h.GPUs) > 0 && p.VRAM > vram:
		v.bad("pipeline.vram", p.VRAM.String(), "exceeds the GPUs' VRAM (%v)", vram)
	case p.Backend == "vulkan" && p.VRAM == 0:
		v.bad("pipeline.vram", "", "the vulkan backend needs a VRAM budget")
	}
}

// sampling checks the ranges the sampler (stages/sample) implements.
func (v *validation) sampling(s *Sampling) {
	g := func(x float32) string { return strconv.FormatFloat(float64(x), 'g', -1, 32) }
	if !finite(s.Temperature) || s.Temperature < 0 {
		v.bad("sampling.temperature", g(s.Temperature), "must be finite and >= 0")
	}
	v.between("sampling.top_k", s.TopK, 0, 1<<24)
	if !(s.TopP >= 0 && s.TopP <= 1) {
		v.bad("sampling.top_p", g(s.TopP), "must be in [0, 1]")
	}
	if !(s.MinP >= 0 && s.MinP <= 1) {
		v.bad("sampling.min_p", g(s.MinP), "must be in [0, 1]")
	}
	if !finite(s.RepeatPenalty) || s.RepeatPenalty <= 0 {
		v.bad("sampling.repeat_penalty", g(s.RepeatPenalty), "must be finite and > 0")
	}
	// the sampler's window is at most 1<<20 tokens; llama.cpp's -1 (the
	// context size) is not implemented
	v.between("sampling.repeat_last_n", s.RepeatLastN, 0, 1<<20)
	if !finite(s.PresencePenalty) {
		v.bad("sampling.presence_penalty", g(s.PresencePenalty), "must be finite")
	}
	if !finite(s.FrequencyPenalty) {
		v.bad("sampling.frequency_penalty", g(s.FrequencyPenalty), "must be finite")
	}
	if s.Seed < -1 {
		v.bad("sampling.seed", strconv.FormatInt(s.Seed, 10), "must be >= -1 (-1 = random)")
	}
	v.between("sampling.max_tokens", s.MaxTokens, -1, 1<<24)
}

func finite(x float32) bool { return !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0) }
