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
// (hardware, server) reach commands through the loaded profile itself
// (settings.go settles the effective configuration).

package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/alecthomas/kong"

	"github.com/flowinfer/flowinfer/configs"
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
		{"device", "pipeline.device", func(c *configs.Config) string { return c.Pipeline.Device }, nil},
		{"cache-type-k", "pipeline.kv_cache.type_k", func(c *configs.Config) string { return c.Pipeline.KVCache.TypeK }, nil},
		{"cache-type-v", "pipeline.kv_cache.type_v", func(c *configs.Config) string { return c.Pipeline.KVCache.TypeV }, nil},
		{"kv-protect", "pipeline.kv_cache.protect", func(c *configs.Config) string { return itoa(c.Pipeline.KVCache.Protect) }, nil},
		{"kv-recent", "pipeline.kv_cache.recent", func(c *configs.Config) string { return itoa(c.Pipeline.KVCache.Recent) }, nil},
		{"swa-full", "pipeline.kv_cache.swa_full", func(c *configs.Config) string { return strconv.FormatBool(c.Pipeline.KVCache.SWAFull) }, nil},
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
