// This file connects profiles (package configs) to the command line.
//
// --config FILE (or builtin:NAME) is a typed profile, decoded strictly.
// Each typed key that corresponds to a flag supplies that flag's value
// through a kong resolver (pipeline.threads -> --threads, sampling.top_k ->
// --top-k, ...), and the profile's `flags:` section supplies any other flag
// by name. kong applies values in this order, each overriding the one
// before: default, environment variable (the flag's env tag), resolver
// (the profile), command line. Hence the precedence
//
//	flag > config file > environment > default
//
// A profile only resolves the keys it writes, so an environment variable
// still beats the default of a key the file leaves out. Keys without a flag
// (hardware, server) reach commands through the loaded profile itself.
//
// `config show` prints the effective configuration with each value's
// source; `config detect` writes a profile for this machine.

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kong"
	"go.uber.org/zap"
	"go.yaml.in/yaml/v3"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/stages"
)

// ProfileFlag is the --config flag: a profile file or builtin:NAME.
type ProfileFlag string

// BeforeResolve loads the profile and adds its resolver before kong
// resolves the other flags.
func (p ProfileFlag) BeforeResolve(ctx *kong.Context, trace *kong.Path) error {
	path, _ := ctx.FlagValue(trace.Flag).(ProfileFlag)
	if path == "" {
		return nil
	}
	l, err := configs.LoadFile(string(path))
	if err != nil {
		return err
	}
	ctx.AddResolver(&profileResolver{l: l})
	return nil
}

// loadProfile returns the profile named by --config, or the defaults.
func loadProfile(path ProfileFlag) (configs.Loaded, error) {
	if path == "" {
		return configs.Loaded{Config: configs.Default(), Set: map[string]bool{}}, nil
	}
	return configs.LoadFile(string(path))
}

// profileKey maps a flag to the typed profile key that supplies it.
type profileKey struct {
	flag, key string
	get       func(c *configs.Config) string
	// notFor names the computing commands the key does not apply to, with
	// the reason; the resolver does not feed the key to them (where one has
	// a flag of the same name, it means something else). Every other
	// computing command has the flag and honours it or refuses the value:
	// TestEveryConfigKey checks both.
	notFor map[string]string
}

func itoa(v int) string { return strconv.Itoa(v) }

func ftoa(v float32) string { return strconv.FormatFloat(float64(v), 'g', -1, 32) }

// Reasons a key does not apply to a command.
var (
	oneSequence = map[string]string{
		"run": "generates one sequence", "chat": "converses in one sequence",
		"bench": "measures one sequence, as llama-bench", "perplexity": "evaluates one chunk at a time",
	}
	noSampling = map[string]string{
		"bench":      "measures greedy decoding of random tokens (its --seed seeds those tokens)",
		"perplexity": "scores the text, samples nothing",
	}
	noTokenStream = map[string]string{
		"bench": "streams no tokens", "perplexity": "streams no tokens",
	}
	notServing = map[string]string{
		"run": "does not listen", "chat": "does not listen", "bench": "does not listen", "batch": "does not listen",
		"trace": "does not listen", "perplexity": "does not listen", "config show": "prints the pipeline and sampling settings",
	}
	// perplexity is llama-perplexity's reference path: the whole file
	// mapped, weights unpacked, no weight path
	mappedFile = map[string]string{"perplexity": "reads the weights through the mapped file, as the reference path"}
)

// profileKeys lists every flag a typed profile key supplies.
func profileKeys() []profileKey {
	return []profileKey{
		{"backend", "pipeline.backend", func(c *configs.Config) string { return c.Pipeline.Backend }, nil},
		{"threads", "pipeline.threads", func(c *configs.Config) string { return itoa(c.Pipeline.Threads) }, nil},
		{"batch-size", "pipeline.batch_size", func(c *configs.Config) string { return itoa(c.Pipeline.BatchSize) }, map[string]string{"perplexity": "evaluates each -c chunk in one forward step"}},
		{"parallel", "pipeline.parallel", func(c *configs.Config) string { return itoa(c.Pipeline.Parallel) }, oneSequence},
		{"queue", "pipeline.queue", func(c *configs.Config) string { return itoa(c.Pipeline.Queue) }, oneSequence},
		{"edge-tokens", "pipeline.edges.tokens", func(c *configs.Config) string { return itoa(c.Pipeline.Edges.Tokens) }, noTokenStream},
		{"slabs", "pipeline.edges.slabs", func(c *configs.Config) string { return itoa(c.Pipeline.Edges.Slabs) }, mappedFile},
		{"ram-budget", "pipeline.ram_pool", func(c *configs.Config) string { return c.Pipeline.RAMPool.String() }, mappedFile},
		{"vram", "pipeline.vram", func(c *configs.Config) string { return c.Pipeline.VRAM.String() }, nil},
		{"cache-type-k", "pipeline.kv_cache.type_k", func(c *configs.Config) string { return c.Pipeline.KVCache.TypeK }, nil},
		{"cache-type-v", "pipeline.kv_cache.type_v", func(c *configs.Config) string { return c.Pipeline.KVCache.TypeV }, nil},
		{"kv-protect", "pipeline.kv_cache.protect", func(c *configs.Config) string { return itoa(c.Pipeline.KVCache.Protect) }, nil},
		{"kv-recent", "pipeline.kv_cache.recent", func(c *configs.Config) string { return itoa(c.Pipeline.KVCache.Recent) }, nil},
		{"ctx-size", "pipeline.kv_cache.ctx_size", func(c *configs.Config) string { return itoa(c.Pipeline.KVCache.CtxSize) }, map[string]string{"bench": "sizes the context from -p and -n, as llama-bench"}},
		{"prefetch-depth", "pipeline.prefetch_depth", func(c *configs.Config) string { return itoa(c.Pipeline.PrefetchDepth) }, mappedFile},
		{"io-engine", "pipeline.io_engine", func(c *configs.Config) string { return string(c.Pipeline.IOEngine) }, mappedFile},
		{"temp", "sampling.temperature", func(c *configs.Config) string { return ftoa(c.Sampling.Temperature) }, noSampling},
		{"top-k", "sampling.top_k", func(c *configs.Config) string { return itoa(c.Sampling.TopK) }, noSampling},
		{"top-p", "sampling.top_p", func(c *configs.Config) string { return ftoa(c.Sampling.TopP) }, noSampling},
		{"min-p", "sampling.min_p", func(c *configs.Config) string { return ftoa(c.Sampling.MinP) }, noSampling},
		{"repeat-penalty", "sampling.repeat_penalty", func(c *configs.Config) string { return ftoa(c.Sampling.RepeatPenalty) }, noSampling},
		{"repeat-last-n", "sampling.repeat_last_n", func(c *configs.Config) string { return itoa(c.Sampling.RepeatLastN) }, noSampling},
		{"presence-penalty", "sampling.presence_penalty", func(c *configs.Config) string { return ftoa(c.Sampling.PresencePenalty) }, noSampling},
		{"frequency-penalty", "sampling.frequency_penalty", func(c *configs.Config) string { return ftoa(c.Sampling.FrequencyPenalty) }, noSampling},
		{"seed", "sampling.seed", func(c *configs.Config) string { return strconv.FormatInt(c.Sampling.Seed, 10) }, noSampling},
		{"n-predict", "sampling.max_tokens", func(c *configs.Config) string { return itoa(c.Sampling.MaxTokens) }, noSampling},
		{"host", "server.host", func(c *configs.Config) string { return c.Server.Host }, notServing},
		{"port", "server.port", func(c *configs.Config) string { return itoa(c.Server.Port) }, notServing},
	}
}

// profileResolver supplies flag values from a loaded profile.
type profileResolver struct {
	l configs.Loaded
}

// Validate rejects `flags:` entries no command knows, and entries that
// repeat a typed key.
func (r *profileResolver) Validate(app *kong.Application) error {
	known := map[string]bool{}
	kong.Visit(app.Node, func(n kong.Visitable, next kong.Next) error {
		if f, ok := n.(*kong.Flag); ok {
			known[f.Name] = true
		}
		return next(nil)
	})
	typed := map[string]string{}
	for _, k := range profileKeys() {
		typed[k.flag] = k.key
	}
	var errs []string
	for name := range r.l.Flags {
		switch {
		case !known[name]:
			errs = append(errs, fmt.Sprintf("flags.%s: no command has a flag --%s", name, name))
		case r.l.IsSet(typed[name]):
			errs = append(errs, fmt.Sprintf("flags.%s: also set as %s", name, typed[name]))
		case name == "config":
			errs = append(errs, "flags.config: a profile cannot name another profile")
		}
	}
	if len(errs) == 0 {
		return nil
	}
	slices.Sort(errs)
	return fmt.Errorf("%s: %s", r.l.Source, strings.Join(errs, "; "))
}

// Resolve returns the profile's value for flag, or nil when the profile
// does not set it.
func (r *profileResolver) Resolve(_ *kong.Context, parent *kong.Path, flag *kong.Flag) (any, error) {
	cmd := ""
	if parent != nil && parent.Node() != nil {
		cmd = parent.Node().Path()
	}
	for _, k := range profileKeys() {
		if k.flag == flag.Name && r.l.IsSet(k.key) {
			if _, na := k.notFor[cmd]; na {
				return nil, nil
			}
			return k.get(&r.l.Config), nil
		}
	}
	if v, ok := r.l.Flags[flag.Name]; ok {
		return v, nil
	}
	return nil, nil
}

// PipelineFlags size the stage graph. Their defaults are configs.Default's.
type PipelineFlags struct {
	Threads    int `short:"t" default:"0" env:"FLOWINFER_THREADS" help:"Threads (0 = physical cores)."`
	CtxSize    int `short:"c" name:"ctx-size" default:"0" env:"FLOWINFER_CTX_SIZE" help:"KV cells per sequence (0 = the model's context, at most 4096)."`
	BatchSize  int `short:"b" name:"batch-size" default:"512" env:"FLOWINFER_BATCH_SIZE" help:"Tokens per forward step (prompt chunk)."`
	Parallel   int `name:"parallel" default:"1" env:"FLOWINFER_PARALLEL" help:"Sequences decoded together (continuous batching)."`
	Queue      int `name:"queue" default:"64" env:"FLOWINFER_QUEUE" help:"Admission queue length."`
	EdgeTokens int `name:"edge-tokens" default:"64" env:"FLOWINFER_EDGE_TOKENS" help:"Capacity of the sampler->streamer edge."`
	WeightFlags
}

func (f *PipelineFlags) apply(c *configs.Config) {
	p := &c.Pipeline
	p.Threads, p.KVCache.CtxSize, p.BatchSize, p.Parallel, p.Queue = f.Threads, f.CtxSize, f.BatchSize, f.Parallel, f.Queue
	p.Edges.Tokens, p.Edges.Slabs = f.EdgeTokens, f.Slabs
	p.KVCache.TypeK, p.KVCache.TypeV, p.KVCache.Protect, p.IOEngine, p.PrefetchDepth = f.CacheTypeK, f.CacheTypeV, f.KVProtect, configs.IOEngine(f.IOEngine), f.PrefetchDepth
	p.KVCache.Recent = f.KVRecent
	p.RAMPool, p.VRAM, p.Backend = f.RAMBudget, f.VRAM, f.Backend
}

// applySampling copies the sampling flags into c.
func applySampling(f *SamplingFlags, c *configs.Config) {
	s := &c.Sampling
	s.Temperature, s.TopK, s.TopP, s.MinP = f.Temp, f.TopK, f.TopP, f.MinP
	s.RepeatPenalty, s.RepeatLastN = f.RepeatPenalty, f.RepeatLastN
	s.PresencePenalty, s.FrequencyPenalty, s.Seed = f.PresencePenalty, f.FrequencyPenalty, f.Seed
}

// effective returns the profile with the (already resolved) flags on top,
// validated.
func effective(path ProfileFlag, pf *PipelineFlags, sf *SamplingFlags, nPredict *int) (configs.Loaded, error) {
	l, err := loadProfile(path)
	if err != nil {
		return l, err
	}
	if pf != nil {
		pf.apply(&l.Config)
	}
	if sf != nil {
		applySampling(sf, &l.Config)
	}
	if nPredict != nil {
		l.Sampling.MaxTokens = *nPredict
	}
	if err := l.Validate(); err != nil {
		return l, err
	}
	return l, nil
}

// engineConfig maps a configuration onto the engine's settings (the
// backend and KV type were checked by checkCompute).
func engineConfig(c *configs.Config, nCtx int) stages.Config {
	p := &c.Pipeline
	k, _ := model.ParseKVType(p.KVCache.TypeK)
	v, _ := model.ParseKVType(p.KVCache.TypeV)
	return stages.Config{NCtx: nCtx, NSeq: p.Parallel, MaxBatch: p.BatchSize, Queue: p.Queue, EdgeCap: p.Edges.Tokens, KVTypes: model.KVTypes{K: k, V: v, Protect: p.KVCache.Protect, Recent: model.KVRecentFor(k, v, p.KVCache.Recent)}}
}

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

func (c *ConfigShowCmd) Run(kctx *kong.Context, cli *CLI) error {
	l, err := effective(cli.Config, &c.PipelineFlags, &c.SamplingFlags, &c.NPredict)
	if err != nil {
		return err
	}
	out, err := annotate(l, sources(kctx, l))
	if err != nil {
		return err
	}
	if l.Source != "" {
		fmt.Printf("# profile: %s\n", l.Source)
	}
	fmt.Print("# precedence: flag > config file > environment > default\n")
	if _, err := os.Stdout.Write(out); err != nil {
		return err
	}
	if c.Model == "" {
		return nil
	}
	// the plan, as run would make it: same budget, context and batch
	log := zap.NewNop()
	mf := ModelFlags{Model: c.Model}
	lm, err := mf.open(context.Background(), log)
	if err != nil {
		return err
	}
	defer lm.Close()
	be := cpu.NewBackend(c.Threads, nil)
	defer be.Close()
	wf := c.WeightFlags
	wf.DryRun = true
	nCtx := ctxSize(lm, c.CtxSize, log)
	_, err = openWeights(&wf, lm, be, weightSetup{nCtx: nCtx, nSeq: 1, maxBatch: c.BatchSize}, log)
	if errors.Is(err, errDryRun) {
		return nil
	}
	return err
}

// sources says where each typed key's value came from: "flag", "env NAME",
// "file" (keys without a flag too) or nothing for a default.
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
	return src
}

// annotate marshals l with a line comment naming each value's source.
func annotate(l configs.Loaded, src map[string]string) ([]byte, error) {
	var root yaml.Node
	if err := root.Encode(l.Config); err != nil {
		return nil, err
	}
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i].Value
			if prefix != "" {
				key = prefix + "." + key
			}
			v := n.Content[i+1]
			if s := src[key]; s != "" && v.Kind != yaml.MappingNode {
				v.LineComment = s
			}
			walk(v, key)
		}
	}
	walk(&root, "")
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
	})
	if err != nil {
		return err
	}
	if len(h.GPUs) > 0 {
		notes = append(notes, fmt.Sprintf("%d GPU(s) found; backend cpu: this build has no GPU backend yet", len(h.GPUs)))
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
