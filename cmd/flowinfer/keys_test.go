package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// labels are the keys that only name things: the profile, its machine
// (config show and config list print them). flags: is checked entry by
// entry against the flags that exist (TestConfigPrecedence,
// profileResolver.Validate).
func labels(key string) bool {
	return key == "profile" || key == "description" || key == "hardware.cpu" || key == "flags"
}

// yamlKeys lists the dotted keys of t's leaves: a struct field is a leaf
// unless it is a struct of keys itself; the fields of a list of structs
// are keys under "list[]." (hardware.gpus[].vram).
func yamlKeys(t reflect.Type, prefix string) []string {
	var keys []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		key := prefix + name
		ft := f.Type
		switch {
		case ft.Kind() == reflect.Struct:
			keys = append(keys, yamlKeys(ft, key+".")...)
			continue
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			keys = append(keys, key)
			keys = append(keys, yamlKeys(ft.Elem(), key+"[].")...)
			continue
		}
		keys = append(keys, key)
	}
	return keys
}

// effect is one observation of a key that has no flag: a command run with
// a profile that sets it, and what its output (stdout and stderr) shows.
type effect struct {
	profile string
	args    []string // after --config PROFILE; "MODEL" is the test model
	want    string
	refused bool // the command must fail
}

// notReadYet are the keys no command reads yet, each with the reason; the
// configs README names each one as the exception to "every key takes
// effect or is refused" (TestEveryConfigKey checks it does).
var notReadYet = map[string]string{}

// hardwareEffects returns how each key without a flag takes effect or is
// refused. lacking is an ISA extension this CPU lacks ("" if it has them
// all).
func hardwareEffects(lacking string) map[string][]effect {
	run := []string{"run", "-m", "MODEL", "-p", "Once", "-n", "1"}
	show := []string{"config", "show"}
	gpu := "hardware:\n  gpus:\n    - {name: test-gpu, type: discrete, vram: 1GiB}\n"
	e := map[string][]effect{
		"hardware.cores": {
			{"hardware: {cores: 1}\n", show, "threads: 1 # from hardware.cores", false},
			{"hardware: {cores: 1}\n", run, "", false},
			{"hardware: {cores: 65536}\n", run, "hardware.cores 65536: more physical cores than this machine has", true},
		},
		"hardware.logical_cpus": {
			{"hardware: {logical_cpus: 1}\n", append(show, "--threads", "2"), "pipeline.threads / --threads 2: more threads than the machine's logical CPUs (hardware.logical_cpus 1)", true},
			{"hardware: {logical_cpus: 65536}\n", run, "hardware.logical_cpus 65536: more logical CPUs than this machine has", true},
		},
		"hardware.ram": {
			{"hardware: {ram: 1MiB}\n", append(show, "--ram-budget", "2MiB"), "pipeline.ram_pool / --ram-budget 2MiB: exceeds the machine's RAM (1MiB)", true},
			{"hardware: {ram: 4096TiB}\n", run, "hardware.ram 4096TiB: more RAM than this machine has", true},
		},
		"hardware.isa": {
			{"hardware: {isa: [avx3]}\n", show, `hardware.isa: "avx3" is not one of sse4_2`, true},
		},
		"hardware.gpus":        {{gpu, run, `hardware.gpus[0].name "test-gpu": no Vulkan device of that name on this machine`, true}},
		"hardware.gpus[].name": {{"hardware:\n  gpus: [{vram: 1GiB}]\n", show, "hardware.gpus[0].name: must be set", true}},
		"hardware.gpus[].type": {{"hardware:\n  gpus: [{name: g, type: tpu}]\n", show, `hardware.gpus[0].type: "tpu" is not one of discrete`, true}},
		"hardware.gpus[].vram": {{gpu + "pipeline: {vram: 2GiB}\n", show, "pipeline.vram: exceeds the GPUs' VRAM (1GiB), got 2GiB", true}},
		"hardware.mem_bandwidth_gbps": {
			{"hardware: {mem_bandwidth_gbps: 12.5}\n", []string{"trace", "-m", "MODEL", "-n", "2", "--no-measure", "-o", "TRACE"}, "of 12.5 GB/s (memory bandwidth, from the profile)", false},
		},
		"hardware.disk_read_gbps": {
			{"hardware: {disk_read_gbps: 0.5}\n", []string{"trace", "-m", "MODEL", "-n", "2", "--no-measure", "--ram-budget", "800KiB", "-o", "TRACE"}, "of 0.5 GB/s (disk bandwidth, from the profile)", false},
		},
		"profile":      {{"profile: my-box\n", show, "profile: my-box # file", false}},
		"description":  {{"description: my box\n", show, "description: my box # file", false}},
		"hardware.cpu": {{"hardware: {cpu: My CPU}\n", show, "cpu: My CPU # file", false}},
		"flags":        {{"flags: {top-k: 9}\n", show, "top_k: 9 # file (flags.top-k)", false}},
	}
	if lacking != "" {
		e["hardware.isa"] = append(e["hardware.isa"], effect{"hardware: {isa: [" + lacking + "]}\n", run, "hardware.isa " + lacking + ": this CPU lacks it", true})
	}
	return e
}

// testValues are valid, non-default values of every key that has one (vram
// has none in this build: it is refused).
var testValues = map[string]string{
	"pipeline.backend": "cpu", "pipeline.threads": "3", "pipeline.batch_size": "77", "pipeline.parallel": "3",
	"pipeline.queue": "9", "pipeline.edges.tokens": "5", "pipeline.edges.slabs": "3", "pipeline.ram_pool": "1GiB",
	"pipeline.kv_cache.ctx_size": "99", "pipeline.kv_cache.type_k": "f32", "pipeline.kv_cache.type_v": "bf16", "pipeline.kv_cache.protect": "1", "pipeline.kv_cache.swa_full": "true", "pipeline.prefetch_depth": "0", "pipeline.io_engine": "mmap",
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

// TestEveryConfigKey walks every key of a profile. Each one reaches the
// flag of every computing command it applies to (checked by parsing that
// command with a profile that sets the key), or names why a command does
// not take it; values this build cannot honour are refused by every
// computing command, naming the key and the value (TestRefusedSettings). A
// key without a flag shows its effect or its refusal in a command's output
// (hardwareEffects), or is one of notReadYet, which the configs README
// names.
func TestEveryConfigKey(t *testing.T) {
	model, _ := goldenModel(t, "stories260K.gguf")
	host, err := configs.DetectHost("")
	if err != nil {
		t.Fatal(err)
	}
	lacking := ""
	for _, x := range configs.ISAExtensions() {
		if !slices.Contains(host.ISA, x) {
			lacking = x
			break
		}
	}
	effects := hardwareEffects(lacking)
	readme, err := os.ReadFile("../../configs/README.md")
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]profileKey{}
	for _, k := range profileKeys() {
		byKey[k.key] = k
	}
	for _, key := range yamlKeys(reflect.TypeFor[configs.Config](), "") {
		if why, ok := notReadYet[key]; ok {
			if !strings.Contains(string(readme), "`"+strings.TrimPrefix(key, "hardware.")+"`, which no command reads yet") {
				t.Errorf("%s is read by no command (%s), and the configs README does not say so", key, why)
			}
		}
		if es, ok := effects[key]; ok {
			for _, e := range es {
				checkEffect(t, key, e, model)
			}
			continue
		}
		if labels(key) {
			t.Errorf("label %s: no observation in hardwareEffects", key)
			continue
		}
		k, ok := byKey[key]
		if !ok {
			t.Errorf("profile key %s has no flag in profileKeys and no effect in hardwareEffects: it would be parsed and ignored", key)
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
	for key := range effects {
		if !slices.Contains(yamlKeys(reflect.TypeFor[configs.Config](), ""), key) {
			t.Errorf("hardwareEffects names %s, which is not a profile key", key)
		}
	}
}

// checkEffect runs e and checks its outcome.
func checkEffect(t *testing.T, key string, e effect, model string) {
	t.Helper()
	args := slices.Clone(e.args)
	for i, a := range args {
		switch a {
		case "MODEL":
			args[i] = model
		case "TRACE":
			args[i] = filepath.Join(t.TempDir(), "trace.json")
		}
	}
	out, stderr, err := flowinfer(t, append([]string{"--config", writeProfile(t, e.profile)}, args...)...)
	switch {
	case e.refused && err == nil:
		t.Errorf("%s: %q with %v succeeded, want it refused with %q", key, e.profile, e.args, e.want)
	case !e.refused && err != nil:
		t.Errorf("%s: %q with %v: %v\n%s", key, e.profile, e.args, err, stderr)
	case !strings.Contains(out+stderr, e.want):
		t.Errorf("%s: %q with %v: output lacks %q:\n%s%s", key, e.profile, e.args, e.want, out, stderr)
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
		{"pipeline:\n  backend: cpu\n  vram: 1GiB\n", `pipeline.vram / --vram 1GiB: only a GPU backend uses VRAM (backend vulkan or auto)`},
		{"pipeline:\n  backend: cpu\n  device: \"0\"\n", `pipeline.device / --device 0: only a GPU backend computes on a device (backend vulkan or auto)`},
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
	_, stderr, err := flowinfer(t, "run", "-m", model, "-p", "x", "--backend", "cpu", "--vram", "1GiB", "-ctk", "q4_1")
	if err == nil || !strings.Contains(stderr, "--vram 1GiB") || !strings.Contains(stderr, `--cache-type-k (-ctk) "q4_1": not supported`) {
		t.Errorf("run --backend cpu --vram 1GiB -ctk q4_1: err %v, stderr %q", err, stderr)
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

// TestBuiltinProfiles: every built-in profile either runs or names the
// key it cannot honour: the GPU ones hardware.gpus (profiles' GPUs are not
// matched to Vulkan devices yet; config show shows them), and those
// describing a bigger machine than this one the hardware key that exceeds
// it (config show shows them, with a note).
func TestBuiltinProfiles(t *testing.T) {
	model, _ := goldenModel(t, "stories260K.gguf")
	host, err := configs.DetectHost("")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"cpu-2core", "laptop-8gb", "desktop-12gb-gpu", "server-80gb"} {
		l, err := configs.LoadFile("builtin:" + name)
		if err != nil {
			t.Fatal(err)
		}
		gpu := l.Pipeline.Backend == "vulkan"
		var bigger configs.Problems
		errors.As(l.CheckHost(host), &bigger)
		for _, args := range [][]string{{"config", "show"}, {"run", "-m", model, "-p", "Once", "-n", "2"}} {
			out, stderr, err := flowinfer(t, append([]string{"--config", "builtin:" + name}, args...)...)
			run := args[0] == "run"
			switch {
			case gpu && run && (err == nil || !strings.Contains(stderr, "hardware.gpus")):
				t.Errorf("%s %v: err %v, stderr %q: want the profile's GPUs refused", name, args, err, stderr)
			case gpu && !run && (err != nil || out == ""):
				t.Errorf("%s %v: err %v, stderr %q", name, args, err, stderr)
			case run && len(bigger) > 0 && err == nil:
				t.Errorf("%s %v: ran on a machine smaller than it describes (%v)", name, args, bigger)
			case run && len(bigger) > 0:
				for _, p := range bigger {
					if !strings.Contains(stderr, p.Key+" "+p.Value+": ") {
						t.Errorf("%s %v: stderr %q does not name %s", name, args, stderr, p)
					}
				}
			case gpu:
			case err != nil || out == "":
				t.Errorf("%s %v: err %v, stderr %q", name, args, err, stderr)
			case !run && len(bigger) > 0 && !strings.Contains(out, "# not this machine: the computing commands refuse "+bigger[0].Key):
				t.Errorf("%s config show: no note that this machine is smaller:\n%s", name, out)
			}
		}
	}
}
