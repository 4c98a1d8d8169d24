package main

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/flowinfer/flowinfer/configs"
)

// computing are the commands that load a model and compute: every profile
// key either reaches a flag of each of them or says why it does not apply.
var computing = map[string][]string{ // command path -> arguments it needs to parse
	"run":         {"-m", "x.gguf"},
	"chat":        {"-m", "x.gguf"},
	"serve":       {"-m", "x.gguf"},
	"bench":       {"-m", "x.gguf"},
	"batch":       {"-m", "x.gguf", "-i", "main.go", "-o", "out.jsonl"},
	"trace":       {"-m", "x.gguf"},
	"perplexity":  {"-m", "x.gguf", "-f", "main.go"},
	"config show": nil,
}

// describing are the keys that describe rather than configure: the machine
// (hardware.*: mem_bandwidth_gbps is trace's ceiling, ram and the GPUs'
// vram bound ram_pool and vram in validation), the profile's name, and the
// flags: section (each entry is checked against the flags that exist).
func describing(key string) bool {
	return strings.HasPrefix(key, "hardware.") || key == "profile" || key == "description" || key == "flags"
}

// yamlKeys lists the dotted keys of t's leaves (a struct field is a leaf
// unless it is a struct of keys itself).
func yamlKeys(t reflect.Type, prefix string) []string {
	var keys []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		key := prefix + name
		ft := f.Type
		if ft.Kind() == reflect.Struct && !describing(key) {
			keys = append(keys, yamlKeys(ft, key+".")...)
			continue
		}
		keys = append(keys, key)
	}
	return keys
}

// testValues are valid, non-default values of every key that has one (vram
// has none in this build: it is refused).
var testValues = map[string]string{
	"pipeline.backend": "cpu", "pipeline.threads": "3", "pipeline.batch_size": "77", "pipeline.parallel": "3",
	"pipeline.queue": "9", "pipeline.edges.tokens": "5", "pipeline.edges.slabs": "3", "pipeline.ram_pool": "1GiB",
	"pipeline.kv_cache.ctx_size": "99", "pipeline.kv_cache.type_k": "f32", "pipeline.kv_cache.type_v": "bf16", "pipeline.kv_cache.protect": "1", "pipeline.prefetch_depth": "0", "pipeline.io_engine": "mmap",
	"sampling.temperature": "0.5", "sampling.top_k": "7", "sampling.top_p": "0.5", "sampling.min_p": "0.2",
	"sampling.repeat_penalty": "1.1", "sampling.repeat_last_n": "32", "sampling.presence_penalty": "0.3",
	"sampling.frequency_penalty": "0.4", "sampling.seed": "7", "sampling.max_tokens": "9",
	"server.host": "0.0.0.0", "server.port": "9999",
}

// profileText writes key: value as nested YAML.
func profileText(key, value string) string {
	parts := strings.Split(key, ".")
	var b strings.Builder
	for i, p := range parts {
		b.WriteString(strings.Repeat("  ", i) + p + ":")
		if i == len(parts)-1 {
			b.WriteString(" " + value)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// TestEveryConfigKey walks every key of a profile. Each one describes the
// machine, or reaches the flag of every computing command it applies to
// (checked by parsing that command with a profile that sets the key), or
// names why a command does not take it; values this build cannot honour
// are refused by every computing command, naming the key and the value.
func TestEveryConfigKey(t *testing.T) {
	byKey := map[string]profileKey{}
	for _, k := range profileKeys() {
		byKey[k.key] = k
	}
	for _, key := range yamlKeys(reflect.TypeFor[configs.Config](), "") {
		if describing(key) {
			continue
		}
		k, ok := byKey[key]
		if !ok {
			t.Errorf("profile key %s has no flag in profileKeys: it would be parsed and ignored", key)
			continue
		}
		for cmd, args := range computing {
			cmdArgs := append(strings.Fields(cmd), args...)
			if why, na := k.notFor[cmd]; na {
				if why == "" {
					t.Errorf("%s: %s does not take it and says no reason", key, cmd)
				}
				// not fed to it, even where it has a flag of that name
				if v, ok := testValues[key]; ok {
					if got, has := parseFlag(t, writeProfile(t, profileText(key, v)), cmdArgs, k.flag); has && got == v {
						t.Errorf("%s: %s takes its value %s through --%s, but notFor says %q", key, cmd, v, k.flag, why)
					}
				}
				continue
			}
			v, ok := testValues[key]
			if !ok {
				continue // refused values only: checked below
			}
			got, has := parseFlag(t, writeProfile(t, profileText(key, v)), cmdArgs, k.flag)
			if !has {
				t.Errorf("%s: %s has no flag --%s and does not say why the key does not apply", key, cmd, k.flag)
			} else if got != v {
				t.Errorf("%s: %v: --%s = %q from a profile that sets %s", key, cmd, k.flag, got, v)
			}
		}
	}
}

// parseFlag parses args (a command line after --config profile) in-process
// and returns the named flag's value as text, and whether the command has
// that flag.
func parseFlag(t *testing.T, profile string, args []string, flag string) (string, bool) {
	t.Helper()
	var cli CLI
	parser, err := kong.New(&cli, kong.Name("flowinfer"), vars(), kong.Exit(func(int) { t.Fatalf("kong exited on %v", args) }))
	if err != nil {
		t.Fatal(err)
	}
	kctx, err := parser.Parse(append([]string{"--config", profile}, args...))
	if err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	for _, f := range kctx.Flags() {
		if f.Name == flag {
			v := kctx.FlagValue(f)
			if b, ok := v.(configs.ByteSize); ok {
				return b.String(), true
			}
			return fmt.Sprint(v), true
		}
	}
	return "", false
}

// TestRefusedSettings: a value this build cannot honour stops every
// computing command before it loads anything, with the key, the value and
// what is supported; so does a GPU profile on this CPU-only build.
func TestRefusedSettings(t *testing.T) {
	model, _ := goldenModel(t, "stories260K.gguf")
	cases := []struct{ profile, want string }{
		{"pipeline:\n  backend: vulkan\n  vram: 1GiB\n", `pipeline.backend / --backend vulkan: this build has no Vulkan backend yet (supported: cpu`},
		{"pipeline:\n  backend: cpu\n  vram: 1GiB\n", `pipeline.vram / --vram 1GiB: only a GPU backend uses VRAM and this build has none (supported: 0)`},
		{"pipeline:\n  kv_cache:\n    type: q8_0\n", `pipeline.kv_cache.type was replaced by type_k and type_v`},
		{"pipeline:\n  kv_cache:\n    type_v: q4_1\n", `pipeline.kv_cache.type_v: "q4_1" is not one of f32, f16, bf16, q8_0, q4_0, tq4, tq3`},
	}
	for _, tc := range cases {
		file := writeProfile(t, tc.profile)
		for cmd, args := range computing {
			args := slices.Clone(args)
			if len(args) > 1 && args[0] == "-m" {
				args[1] = model
			}
			_, stderr, err := flowinfer(t, append(append([]string{"--config", file}, strings.Fields(cmd)...), args...)...)
			if err == nil || !strings.Contains(stderr, tc.want) {
				t.Errorf("%s with %q: err %v, stderr %q; want the refusal %q", cmd, tc.profile, err, stderr, tc.want)
			}
		}
	}
	// the same values as flags
	_, stderr, err := flowinfer(t, "run", "-m", model, "-p", "x", "--backend", "vulkan", "-ctk", "q4_1")
	if err == nil || !strings.Contains(stderr, "--backend vulkan") || !strings.Contains(stderr, `--cache-type-k (-ctk) "q4_1": not supported`) {
		t.Errorf("run --backend vulkan -ctk q4_1: err %v, stderr %q", err, stderr)
	}
	// a block type the model's heads cannot hold (stories260K's are 8 wide)
	_, stderr, err = flowinfer(t, "run", "-m", model, "-p", "x", "-ctv=q8_0")
	if err == nil || !strings.Contains(stderr, "-ctv: KV cache type q8_0 stores heads in blocks of 32 values; this model's heads have 8") {
		t.Errorf("run -ctv=q8_0 on 8-wide heads: err %v, stderr %q", err, stderr)
	}
	// auto falls back to the CPU, saying that the VRAM budget is unused
	out, stderr, err := flowinfer(t, "run", "-m", model, "-p", "Once", "-n", "2", "--backend", "auto", "--vram", "1GiB")
	if err != nil || out == "" || !strings.Contains(stderr, "VRAM budget is unused") {
		t.Errorf("run --backend auto --vram 1GiB: err %v, out %q, stderr %q", err, out, stderr)
	}
}

// TestBuiltinProfiles: on this CPU-only build every built-in profile either
// runs or names the key it cannot honour (the GPU ones: pipeline.backend).
func TestBuiltinProfiles(t *testing.T) {
	model, _ := goldenModel(t, "stories260K.gguf")
	for _, name := range []string{"cpu-2core", "laptop-8gb", "desktop-12gb-gpu", "server-80gb"} {
		data, err := os.ReadFile("../../configs/" + name + ".yaml")
		if err != nil {
			t.Fatal(err)
		}
		gpu := strings.Contains(string(data), "backend: vulkan")
		for _, args := range [][]string{{"config", "show"}, {"run", "-m", model, "-p", "Once", "-n", "2"}} {
			out, stderr, err := flowinfer(t, append([]string{"--config", "builtin:" + name}, args...)...)
			switch {
			case gpu && (err == nil || !strings.Contains(stderr, "pipeline.backend / --backend vulkan")):
				t.Errorf("%s %v: err %v, stderr %q: want the vulkan backend refused", name, args, err, stderr)
			case !gpu && (err != nil || out == ""):
				t.Errorf("%s %v: err %v, stderr %q", name, args, err, stderr)
			}
		}
	}
}
