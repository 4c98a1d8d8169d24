// Command flowinfer runs GGUF language models: generate (run), converse
// (chat), and the debug tools tests and users share (tokenize, perplexity).
//
// It only wires things together: flags and config files (kong, kong-yaml)
// are decoded here into the packages' typed settings; the model, backend
// and stage graph do the work. Configuration precedence: flag > config
// file (--config) > environment > default.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/alecthomas/kong"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/flowinfer/flowinfer/configs"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// CLI is the command line.
type CLI struct {
	Config   ProfileFlag `help:"Profile: a YAML file (see configs/) or builtin:NAME. Precedence: flag > config file > environment > default." placeholder:"FILE"`
	LogLevel string      `name:"log-level" default:"warn" enum:"debug,info,warn,error" help:"Log level on stderr (${enum})." env:"FLOWINFER_LOG_LEVEL"`

	Run        RunCmd        `cmd:"" help:"Generate text from a prompt (streams to stdout, timings to stderr)."`
	Chat       ChatCmd       `cmd:"" help:"Interactive multi-turn chat with the model's chat template."`
	Serve      ServeCmd      `cmd:"" help:"HTTP server with OpenAI-, Anthropic- and Ollama-compatible APIs (continuous batching)."`
	Tokenize   TokenizeCmd   `cmd:"" help:"Print the token ids of a text (like llama-tokenize --ids)."`
	Perplexity PerplexityCmd `cmd:"" help:"Perplexity of a text file, computed as llama-perplexity does."`
	Bench      BenchCmd      `cmd:"" help:"Prompt and generation throughput as llama-bench measures it (pp/tg t/s)."`
	Gen        GenCmd        `cmd:"" help:"Write a random-weight GGUF of a preset shape (for benchmarks)."`
	Version    VersionCmd    `cmd:"" help:"Print the version."`
	Trace      TraceCmd      `cmd:"" help:"Run a generation with the recorder on: Chrome trace (ui.perfetto.dev), SVG timeline, stall summary."`
	Batch      BatchCmd      `cmd:"" help:"Answer a JSONL file of requests (OpenAI batch format or {id, messages|prompt}) offline; resumable, shardable."`
	ConfigCmd  ConfigCmd     `cmd:"" name:"config" help:"Show the effective configuration, detect this machine's profile, list built-in profiles."`
}

// Globals is what every command receives.
type Globals struct {
	Log *zap.Logger
	// Config is a computing command's effective configuration: the
	// profile, the environment and its flags, validated (settle); zero for
	// the other commands.
	Config configs.Loaded
}

// VersionCmd prints the version.
type VersionCmd struct{}

func (VersionCmd) Run(*Globals) error {
	fmt.Println("flowinfer", version)
	return nil
}

func newLogger(level string) *zap.Logger {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		lvl = zapcore.WarnLevel
	}
	cfg := zap.NewDevelopmentConfig()
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.DisableStacktrace = true
	cfg.DisableCaller = true
	cfg.EncoderConfig.TimeKey = ""
	log, err := cfg.Build()
	if err != nil {
		return zap.NewNop()
	}
	return log
}

// vars are the kong variables the flags' tags use: lists of names that
// configs owns.
func vars() kong.Vars {
	policies := make([]string, len(configs.CachePolicies()))
	for i, p := range configs.CachePolicies() {
		policies[i] = string(p)
	}
	return kong.Vars{"version": version, "cache_policies": strings.Join(policies, ",")}
}

func main() {
	var cli CLI
	os.Args = llamaFlags(os.Args)
	ctx := kong.Parse(&cli,
		kong.Name("flowinfer"),
		kong.Description("Local LLM inference as a graph of pipelined stages. Models are GGUF files (llama.cpp's format)."),
		kong.UsageOnError(),
		vars(),
	)
	log := newLogger(cli.LogLevel)
	defer log.Sync()
	g := &Globals{Log: log}
	var err error
	if g.Config, err = settle(ctx, cli.Config, log); err == nil {
		err = ctx.Run(g)
	}
	if errors.Is(err, errDryRun) { // --dry-run printed the plan
		err = nil
	}
	if err != nil {
		// One clear line, no stack trace.
		fmt.Fprintf(os.Stderr, "flowinfer: error: %v\n", err)
		os.Exit(1)
	}
}

// llamaFlags rewrites llama.cpp's multi-letter single-dash flags, which
// kong cannot declare (its short flags are one letter), to their long
// names: -ctk and -ctv (with a separate or "=" value).
func llamaFlags(args []string) []string {
	long := llamaShort()
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if a == "--" {
			copy(out[i:], args[i:])
			break
		}
		name, val, eq := strings.Cut(a, "=")
		if l, ok := long[name]; ok {
			out[i] = l
			if eq {
				out[i] = l + "=" + val
			}
		}
	}
	return out
}

// llamaShort maps llama.cpp's multi-letter flags to their long names.
func llamaShort() map[string]string {
	return map[string]string{"-ctk": "--cache-type-k", "-ctv": "--cache-type-v", "-ngl": "--n-gpu-layers"}
}
