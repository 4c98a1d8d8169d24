// This file settles a computing command's configuration before it runs:
// the profile (--config) over the defaults, the command's flags on top
// (kong has resolved them, so they already hold flag > config file >
// environment > default), validated once, by configs.ValidateRun, and,
// except for `config show` (which may describe another machine), checked
// against this machine (configs.CheckHost). A
// refused key is named with its flag ("pipeline.backend / --backend
// vulkan: ..."). Run receives the result in Globals.Config and takes every
// keyed setting from it; its own struct serves the flags no key covers.

package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/alecthomas/kong"
	"go.uber.org/zap"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/stages"
)

// computer is a command that loads a model and computes. Every command
// that embeds ComputeFlags is one (TestComputingCommands).
type computer interface {
	// apply copies the command's flags onto c: each key that applies to
	// the command (profileKeys' notFor names those that do not).
	apply(c *configs.Config)
}

// variants is bench's: its -ctk and -ctv are lists, and each combination
// is a configuration to validate.
type variants interface {
	variants(c configs.Config) []configs.Config
}

// settle returns the selected command's effective configuration,
// validated: the zero value for a command that computes nothing.
func settle(kctx *kong.Context, profile ProfileFlag, log *zap.Logger) (configs.Loaded, error) {
	n := kctx.Selected()
	if n == nil || !n.Target.CanAddr() {
		return configs.Loaded{}, nil
	}
	cmd, ok := n.Target.Addr().Interface().(computer)
	if !ok {
		return configs.Loaded{}, nil
	}
	l, err := loadProfile(profile)
	if err != nil {
		return l, err
	}
	cmd.apply(&l.Config)
	l.Derive()
	each := []configs.Config{l.Config}
	if v, ok := cmd.(variants); ok {
		each = v.variants(l.Config)
	}
	var ps configs.Problems
	for _, c := range each {
		if err := c.ValidateRun(); err != nil {
			if !errors.As(err, &ps) {
				return l, err
			}
			break
		}
	}
	// config show may describe another machine (to plan for it); the
	// other commands run here, so the profile's hardware must fit this
	// machine.
	if _, show := cmd.(*ConfigShowCmd); !show {
		var hps configs.Problems
		if err := checkHost(&l.Config); errors.As(err, &hps) {
			ps = append(ps, hps...)
		} else if err != nil {
			return l, err
		}
	}
	if len(ps) > 0 {
		return l, named(ps)
	}
	if _, show := cmd.(*ConfigShowCmd); !show && l.Pipeline.Backend != "cpu" && !gpuCommand(cmd) {
		p := &l.Pipeline
		if p.Backend == "vulkan" {
			return l, fmt.Errorf("pipeline.backend / --backend vulkan: only run, chat, trace, bench, serve and batch compute on the GPU yet")
		}
		if p.Device != "" {
			return l, fmt.Errorf("pipeline.device / --device %s: only run, chat, trace, bench, serve and batch compute on the GPU yet", p.Device)
		}
		cpuFallback(p, log, "only run, chat, trace, bench, serve and batch compute on the GPU yet")
	}
	return l, nil
}

// checkHost refuses a profile whose hardware section claims more than this
// machine has: configs.Problems from configs.CheckHost, or an error when
// the profile makes claims and this machine cannot be read. A profile
// that lists GPUs has them matched to this machine's Vulkan devices by
// name (none found: each is refused, naming it); the first one is the
// device the GPU backends compute on unless pipeline.device names one.
func checkHost(c *configs.Config) error {
	host, err := configs.DetectHost("")
	if err != nil {
		h := &c.Hardware
		if h.Cores > 0 || h.LogicalCPUs > 0 || h.RAM > 0 || len(h.ISA) > 0 {
			return fmt.Errorf("hardware: cannot read this machine to check the profile's hardware section against it: %w", err)
		}
		host = configs.Hardware{}
	}
	if len(c.Hardware.GPUs) > 0 {
		host.GPUs, _ = vulkanGPUs(io.Discard) // no Vulkan: no devices, and each GPU is refused
	}
	if err := c.CheckHost(host); err != nil {
		return err
	}
	if p := &c.Pipeline; len(c.Hardware.GPUs) > 0 && p.Device == "" && p.Backend != "cpu" {
		p.Device = c.Hardware.GPUs[0].Name
	}
	return nil
}

// named renders configs' problems on one line, each key with the flag
// that sets it and the value: "pipeline.kv_cache.type_k / --cache-type-k
// (-ctk) "q4_1": not supported (supported: f32, ...)".
func named(err error) error {
	var ps configs.Problems
	if !errors.As(err, &ps) {
		return err
	}
	flags := map[string]string{}
	for _, k := range profileKeys() {
		flags[k.key] = "--" + k.flag
	}
	for short, long := range llamaShort() {
		for key, f := range flags {
			if f == long {
				flags[key] += " (" + short + ")"
			}
		}
	}
	lines := make([]string, len(ps))
	for i, p := range ps {
		s := p.Key
		if f := flags[p.Key]; f != "" {
			s += " / " + f
		}
		if p.Value != "" {
			s += " " + p.Value
		}
		s += ": " + p.Msg
		if p.Known != nil {
			s += " (supported: " + strings.Join(p.Known, ", ") + ")"
		}
		lines[i] = s
	}
	return errors.New(strings.Join(lines, "; "))
}

// PipelineFlags size the stage graph (trace, batch, config show). Their
// defaults are configs.Default's.
type PipelineFlags struct {
	Threads    int `short:"t" default:"0" env:"FLOWINFER_THREADS" help:"Threads (0 = physical cores)."`
	CtxSize    int `short:"c" name:"ctx-size" default:"0" env:"FLOWINFER_CTX_SIZE" help:"KV cells per sequence (0 = the model's context, at most 4096)."`
	BatchSize  int `short:"b" name:"batch-size" default:"512" env:"FLOWINFER_BATCH_SIZE" help:"Tokens per forward step (prompt chunk)."`
	Parallel   int `name:"parallel" default:"1" env:"FLOWINFER_PARALLEL" help:"Sequences decoded together (continuous batching)."`
	Queue      int `name:"queue" default:"64" env:"FLOWINFER_QUEUE" help:"Admission queue length."`
	EdgeTokens int `name:"edge-tokens" default:"64" env:"FLOWINFER_EDGE_TOKENS" help:"Capacity of the sampler->streamer edge."`
	WeightFlags
}

// applyPipeline is the apply of the commands with PipelineFlags.
func applyPipeline(c *configs.Config, f *PipelineFlags, sf *SamplingFlags, nPredict int) {
	p := &c.Pipeline
	f.setPipeline(p)
	p.Threads, p.KVCache.CtxSize, p.BatchSize, p.Parallel, p.Queue = f.Threads, f.CtxSize, f.BatchSize, f.Parallel, f.Queue
	p.Edges.Tokens = f.EdgeTokens
	sf.setSampling(&c.Sampling)
	c.Sampling.MaxTokens = nPredict
}

// ownFlags are the pipeline flags run, chat and serve declare themselves
// (with help texts of their own, and no environment variables).
type ownFlags struct{ threads, ctxSize, batchSize, edgeTokens, nPredict int }

// apply copies them, the weight flags and the sampling flags onto c.
func (o ownFlags) apply(c *configs.Config, wf *WeightFlags, sf *SamplingFlags) {
	p := &c.Pipeline
	wf.setPipeline(p)
	p.Threads, p.KVCache.CtxSize, p.BatchSize, p.Edges.Tokens = o.threads, o.ctxSize, o.batchSize, o.edgeTokens
	sf.setSampling(&c.Sampling)
	c.Sampling.MaxTokens = o.nPredict
}

// kvTypes returns the KV cache types p names (ValidateRun has vetted the
// names).
func kvTypes(p *configs.Pipeline) model.KVTypes {
	k, _ := model.ParseKVType(p.KVCache.TypeK)
	v, _ := model.ParseKVType(p.KVCache.TypeV)
	return model.KVTypes{K: k, V: v, Protect: p.KVCache.Protect, Recent: model.KVRecentFor(k, v, p.KVCache.Recent), SWAFull: p.KVCache.SWAFull}
}

// engineConfig maps the pipeline onto the engine's settings, for nCtx
// cells per sequence.
func engineConfig(p *configs.Pipeline, nCtx int) stages.Config {
	return stages.Config{NCtx: nCtx, NSeq: p.Parallel, MaxBatch: p.BatchSize, Queue: p.Queue, EdgeCap: p.Edges.Tokens, KVTypes: kvTypes(p)}
}

// oneSequenceConfig is engineConfig for the commands that decode one sequence
// (run, chat: parallel and queue do not apply, the engine's defaults do)
// of a model of hyperparameters h. A model that is not hybrid keeps no
// prefix checkpoints: its one sequence's next turn extends it, so a
// sliding-window model's rings still hold what the turn needs, and window
// checkpoints would only cost memory (up to the 512 MiB default budget).
func oneSequenceConfig(p *configs.Pipeline, nCtx int, h *model.Hyper) stages.Config {
	c := stages.Config{NCtx: nCtx, MaxBatch: p.BatchSize, EdgeCap: p.Edges.Tokens, KVTypes: kvTypes(p)}
	if !h.Hybrid() {
		c.StateCheckpoints = -1
	}
	return c
}

// gpuCommand reports whether cmd can compute on the Vulkan backend (newRig
// with gpuOK).
func gpuCommand(cmd computer) bool {
	switch cmd.(type) {
	case *RunCmd, *ChatCmd, *TraceCmd, *BenchCmd, *ServeCmd, *BatchCmd:
		return true
	}
	return false
}
