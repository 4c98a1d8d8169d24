// This file is `flowinfer config`: `config show` prints the effective
// configuration with each value's source (and with -m the placement plan
// of a model's weights); `config detect` writes a profile for this
// machine; `config list` lists the built-in profiles.

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/alecthomas/kong"
	"go.uber.org/zap"
	"go.yaml.in/yaml/v3"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/stages"
)

// ConfigCmd groups the configuration commands.
type ConfigCmd struct {
	Show   ConfigShowCmd   `cmd:"" help:"Print the effective configuration (profile, environment and flags merged) with each value's source."`
	Detect ConfigDetectCmd `cmd:"" help:"Write a profile for this machine: cores, RAM, ISA, Vulkan devices, measured memory and disk bandwidth."`
	List   ConfigListCmd   `cmd:"" help:"List the built-in profiles (use them as --config builtin:NAME)."`
}

// ConfigShowCmd prints the effective configuration.
type ConfigShowCmd struct {
	PipelineFlags
	SamplingFlags
	NPredict int    `short:"n" name:"n-predict" default:"-1" help:"Default token limit (-1 = none)."`
	Model    string `short:"m" help:"Also print the placement plan of this GGUF file's weights under the effective settings (what --dry-run prints)." type:"path" placeholder:"FILE"`
}

func (c *ConfigShowCmd) apply(cfg *configs.Config) {
	applyPipeline(cfg, &c.PipelineFlags, &c.SamplingFlags, c.NPredict)
}

func (c *ConfigShowCmd) Run(kctx *kong.Context, g *Globals) error {
	l := g.Config
	out, err := annotate(l, sources(kctx, l))
	if err != nil {
		return err
	}
	if l.Source != "" {
		fmt.Printf("# profile: %s\n", l.Source)
	}
	fmt.Print("# precedence: flag > config file > environment > default\n")
	// The profile may describe another machine: shown as written, and
	// what the computing commands would refuse here is said.
	if err := checkHost(&l.Config); err != nil {
		fmt.Printf("# not this machine: the computing commands refuse %v\n", named(err))
	}
	if _, err := os.Stdout.Write(out); err != nil {
		return err
	}
	if c.Model == "" {
		return nil
	}
	return c.plan(&l.Pipeline)
}

// plan prints the placement plan of -m's weights as run would make it
// (same budget, context and batch) and allocates nothing: it ends in
// errDryRun.
func (c *ConfigShowCmd) plan(p *configs.Pipeline) error {
	log := zap.NewNop()
	mf := ModelFlags{Model: c.Model}
	l, err := mf.open(context.Background(), log)
	if err != nil {
		return err
	}
	defer l.Close()
	wf := c.WeightFlags
	wf.DryRun = true
	_, err = newRig(l, p, &wf, stages.EngineFootprint(oneSequenceConfig(p, ctxSize(l, p.KVCache.CtxSize, log), &l.Model.Hyper)), false, log)
	return err
}

// sources says where each typed key's value came from: "flag", "env NAME",
// "file" (keys without a flag too), "from KEY" (Derive) or nothing for a
// default.
func sources(kctx *kong.Context, l configs.Loaded) map[string]string {
	src := map[string]string{}
	for k := range l.Set {
		src[k] = "file"
	}
	cmdline := map[string]bool{}
	for _, p := range kctx.Path {
		if p.Flag != nil && !p.Resolved {
			cmdline[p.Flag.Name] = true
		}
	}
	flags := map[string]*kong.Flag{}
	for _, f := range kctx.Flags() {
		flags[f.Name] = f
	}
	for _, k := range profileKeys() {
		f := flags[k.flag]
		switch {
		case f == nil:
		case cmdline[k.flag]:
			src[k.key] = "flag --" + k.flag
		case l.IsSet(k.key):
		case l.Flags[k.flag] != nil:
			src[k.key] = "file (flags." + k.flag + ")"
		default:
			for _, env := range f.Envs {
				if _, ok := os.LookupEnv(env); ok {
					src[k.key] = "env " + env
					break
				}
			}
		}
	}
	for k, from := range l.Derived { // a 0 that a hardware key filled in
		if src[k] == "" {
			src[k] = "from " + from
		} else {
			src[k] += ", 0: from " + from
		}
	}
	return src
}

// annotate marshals l with a line comment naming each value's source.
func annotate(l configs.Loaded, src map[string]string) ([]byte, error) {
	var root yaml.Node
	if err := root.Encode(l.Config); err != nil {
		return nil, err
	}
	configs.WalkKeys(&root, "", func(key string, v *yaml.Node) {
		if s := src[key]; s != "" && v.Kind != yaml.MappingNode {
			v.LineComment = s
		}
	})
	var b strings.Builder
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&root); err != nil {
		return nil, err
	}
	enc.Close()
	return []byte(b.String()), nil
}

// ConfigDetectCmd writes a profile for this machine.
type ConfigDetectCmd struct {
	Output    string           `short:"o" help:"Write the profile here instead of stdout." type:"path" placeholder:"FILE"`
	NoMeasure bool             `name:"no-measure" help:"Skip the bandwidth measurements."`
	MemSize   configs.ByteSize `name:"mem-size" default:"256MiB" help:"Buffer for the memory bandwidth test."`
	DiskDir   string           `name:"disk-dir" help:"Directory on the model disk for the disk test [the model cache directory]." type:"path"`
	DiskFile  string           `name:"disk-file" help:"Read this file (e.g. a model) for the disk test instead of writing a scratch file." type:"existingfile"`
	DiskSize  configs.ByteSize `name:"disk-size" default:"256MiB" help:"Bytes read by the disk test."`
	Name      string           `name:"name" default:"this-machine" help:"Profile name."`
	Cache     string           `name:"cache-dir" env:"FLOWINFER_CACHE" hidden:"" type:"path"`
}

func (c *ConfigDetectCmd) Run(g *Globals) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	dir := c.DiskDir
	if dir == "" && c.DiskFile == "" {
		mf := ModelFlags{Cache: c.Cache}
		if d, err := mf.cacheDir(); err == nil && os.MkdirAll(d, 0o755) == nil {
			dir = d
		}
	}
	if !c.NoMeasure {
		fmt.Fprintln(os.Stderr, "flowinfer: measuring memory and disk bandwidth (a few seconds)...")
	}
	t0 := time.Now()
	h, notes, err := configs.Detect(ctx, configs.DetectOptions{
		Measure: !c.NoMeasure,
		Mem:     configs.MemOptions{Bytes: int64(c.MemSize), Duration: time.Second},
		Disk:    configs.DiskOptions{Dir: dir, File: c.DiskFile, Bytes: int64(c.DiskSize), Duration: 3 * time.Second},
		GPUs:    func() ([]configs.GPU, error) { return vulkanGPUs(os.Stderr) },
	})
	if err != nil {
		return err
	}
	if len(h.GPUs) > 0 {
		names := make([]string, len(h.GPUs))
		for i, g := range h.GPUs {
			names[i] = fmt.Sprintf("%s (%v)", g.Name, g.VRAM)
		}
		notes = append(notes, fmt.Sprintf("GPU(s) found, not written (backend cpu): %s; to compute on one, list it under hardware.gpus with pipeline.backend vulkan (or pass --backend vulkan, and --device to pick one)", strings.Join(names, ", ")))
	}
	for _, n := range notes {
		fmt.Fprintln(os.Stderr, "flowinfer: note:", n)
	}
	cfg := configs.Suggest(h)
	cfg.Profile = c.Name
	cfg.Description = fmt.Sprintf("detected by flowinfer config detect on %s (%.1fs)", time.Now().Format("2006-01-02"), time.Since(t0).Seconds())
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("detected profile: %w", err)
	}
	data, err := configs.Marshal(cfg)
	if err != nil {
		return err
	}
	data = append([]byte("# Written by `flowinfer config detect`; edit freely. Use with --config FILE.\n"), data...)
	if c.Output == "" {
		_, err = os.Stdout.Write(data)
		return err
	}
	tmp := c.Output + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, c.Output); err != nil {
		return errors.Join(err, os.Remove(tmp))
	}
	fmt.Fprintln(os.Stderr, "flowinfer: wrote", c.Output)
	return nil
}

// ConfigListCmd lists the built-in profiles.
type ConfigListCmd struct{}

func (ConfigListCmd) Run() error {
	for _, n := range configs.Builtins() {
		l, err := configs.LoadFile("builtin:" + n)
		if err != nil {
			return err
		}
		fmt.Printf("builtin:%-20s %s\n", n, l.Description)
	}
	return nil
}
