package main

import (
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/model"
)

// TestComputingCommands: every command that takes the compute flags states
// its effective configuration (apply), so that settle validates it before
// anything loads; a command that forgot would run unvalidated.
func TestComputingCommands(t *testing.T) {
	var cli CLI
	parser, err := kong.New(&cli, kong.Name("flowinfer"), vars())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	kong.Visit(parser.Model.Node, func(v kong.Visitable, next kong.Next) error {
		node, ok := v.(*kong.Node)
		if !ok || node.Type != kong.CommandNode {
			return next(nil)
		}
		for _, f := range node.Flags {
			if f.Name != "backend" {
				continue
			}
			n++
			if _, ok := node.Target.Addr().Interface().(computer); !ok {
				t.Errorf("%s takes --backend but has no apply: its configuration is not validated", node.Path())
			}
		}
		return next(nil)
	})
	if n != len(computing) {
		t.Errorf("%d commands take --backend, keys_test's computing lists %d", n, len(computing))
	}
}

// TestKVTypeNames: configs lists model.ParseKVType's names by hand (it
// cannot import model); the two lists agree.
func TestKVTypeNames(t *testing.T) {
	if got, want := strings.Join(configs.KVTypes(), ", "), model.KVTypeNames(); got != want {
		t.Errorf("configs.KVTypes() %q, model's %q", got, want)
	}
	for _, n := range configs.KVTypes() {
		if _, err := model.ParseKVType(n); err != nil {
			t.Error(err)
		}
	}
}

// TestTypedFlags: kong decodes the flags of configs' named string types
// (configs.IOEngine, configs.CachePolicy, the latter's names from configs
// through a kong variable), and the resolver feeds a profile's io_engine.
func TestTypedFlags(t *testing.T) {
	var cli CLI
	parser, err := kong.New(&cli, kong.Name("flowinfer"), vars(), kong.Exit(func(int) { t.Fatal("kong exited") }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parser.Parse([]string{"run", "--io-engine", "mmap", "--expert-cache-policy", "lru"}); err != nil {
		t.Fatal(err)
	}
	if cli.Run.IOEngine != configs.EngineMmap || cli.Run.CachePolicy != configs.PolicyLRU {
		t.Errorf("--io-engine %q, --expert-cache-policy %q", cli.Run.IOEngine, cli.Run.CachePolicy)
	}
	if _, err := parser.Parse([]string{"run", "--expert-cache-policy", "fifo"}); err == nil || !strings.Contains(err.Error(), `"slru","lru"`) {
		t.Errorf("--expert-cache-policy fifo: %v", err)
	}
	if got, _ := parseFlag(t, writeProfile(t, "pipeline:\n  io_engine: io_uring\n"), []string{"trace"}, "io-engine"); got != "io_uring" {
		t.Errorf("io_engine from a profile: %q", got)
	}
}

// TestNamed: a refused key of the effective configuration is named with
// its flag and value, on one line.
func TestNamed(t *testing.T) {
	c := configs.Default()
	c.Pipeline.Backend, c.Pipeline.VRAM, c.Pipeline.KVCache.TypeK, c.Pipeline.PrefetchDepth = "cpu", configs.GiB, "q4_1", 3
	err := named(c.ValidateRun())
	want := []string{
		"pipeline.vram / --vram 1GiB: only a GPU backend uses VRAM (backend vulkan or auto)",
		"pipeline.prefetch_depth / --prefetch-depth 3: not implemented (supported: 0, the experts the router picked; 1, also the next layer's guessed experts)",
		`pipeline.kv_cache.type_k / --cache-type-k (-ctk) "q4_1": not supported (supported: f32, f16, bf16, q8_0, q4_0, tq4, tq3)`,
	}
	if err == nil || err.Error() != strings.Join(want, "; ") {
		t.Errorf("got\n%v\nwant\n%s", err, strings.Join(want, "; "))
	}
}
