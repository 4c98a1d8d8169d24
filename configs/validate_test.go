package configs

import (
	"errors"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestValidate: each refused value is one Problem naming its key, the value
// as written and the reason; ValidateRun also refuses what this build
// cannot run, where Validate accepts a GPU machine's profile.
func TestValidate(t *testing.T) {
	tests := []struct {
		name     string
		edit     func(c *Config)
		validate []Problem // nil: valid
		run      []Problem // nil: runnable
	}{
		{"default", func(*Config) {}, nil, nil},
		{"prefetch deeper than implemented", func(c *Config) { c.Pipeline.PrefetchDepth = 2 },
			[]Problem{{Key: "pipeline.prefetch_depth", Value: "2", Msg: "not implemented (supported: 0, the experts the router picked; 1, also the next layer's guessed experts)"}}, asValidate},
		{"kv type in any case", func(c *Config) { c.Pipeline.KVCache.TypeK = "Q8_0" }, nil, nil},
		{"unknown kv type", func(c *Config) { c.Pipeline.KVCache.TypeV = "q4_1" },
			[]Problem{{Key: "pipeline.kv_cache.type_v", Value: `"q4_1"`, Msg: "not supported", Known: KVTypes()}}, asValidate},
		{"unknown io engine", func(c *Config) { c.Pipeline.IOEngine = "aio" },
			[]Problem{{Key: "pipeline.io_engine", Value: `"aio"`, Msg: "unknown", Known: []string{"pread", "io_uring", "mmap"}}}, asValidate},
		{"slabs", func(c *Config) { c.Pipeline.Edges.Slabs = 0 },
			[]Problem{{Key: "pipeline.edges.slabs", Value: "0", Msg: "must be between 1 and 1024"}}, asValidate},
		{"not finite", func(c *Config) {
			c.Sampling.Temperature = float32(math.NaN())
			c.Sampling.FrequencyPenalty = float32(math.Inf(1))
		},
			[]Problem{{Key: "sampling.temperature", Value: "NaN", Msg: "must be finite and >= 0"}, {Key: "sampling.frequency_penalty", Value: "+Inf", Msg: "must be finite"}}, asValidate},
		{"repeat_last_n -1 is not implemented", func(c *Config) { c.Sampling.RepeatLastN = -1 },
			[]Problem{{Key: "sampling.repeat_last_n", Value: "-1", Msg: "must be between 0 and 1048576"}}, asValidate},
		{"gpu machine", func(c *Config) {
			c.Hardware.GPUs = []GPU{{Name: "g", VRAM: 8 * GiB}}
			c.Pipeline.Backend, c.Pipeline.VRAM = "vulkan", 8*GiB
		}, nil, nil},
		{"vulkan without vram", func(c *Config) { c.Pipeline.Backend = "vulkan" },
			[]Problem{{Key: "pipeline.vram", Msg: "the vulkan backend needs a VRAM budget"}}, nil},
		{"cpu with vram", func(c *Config) { c.Pipeline.Backend, c.Pipeline.VRAM = "cpu", GiB }, nil,
			[]Problem{{Key: "pipeline.vram", Value: "1GiB", Msg: "only a GPU backend uses VRAM (backend vulkan or auto)"}}},
		{"auto leaves vram unused", func(c *Config) { c.Pipeline.VRAM = GiB }, nil, nil},
		{"unknown backend", func(c *Config) { c.Pipeline.Backend = "gpu" },
			[]Problem{{Key: "pipeline.backend", Value: `"gpu"`, Msg: "unknown", Known: Backends()}},
			[]Problem{{Key: "pipeline.backend", Value: `"gpu"`, Msg: "unknown", Known: Backends()}}},
		{"ram pool beyond the machine", func(c *Config) { c.Hardware.RAM, c.Pipeline.RAMPool = 8*GiB, 9*GiB },
			[]Problem{{Key: "pipeline.ram_pool", Value: "9GiB", Msg: "exceeds the machine's RAM (8GiB)"}}, asValidate},
		{"threads beyond the logical cpus", func(c *Config) { c.Hardware.LogicalCPUs, c.Pipeline.Threads = 4, 5 },
			[]Problem{{Key: "pipeline.threads", Value: "5", Msg: "more threads than the machine's logical CPUs (hardware.logical_cpus 4)"}}, asValidate},
		{"more cores than logical cpus", func(c *Config) { c.Hardware.Cores, c.Hardware.LogicalCPUs = 8, 4 },
			[]Problem{{Key: "hardware.cores", Value: "8", Msg: "more physical cores than logical CPUs (hardware.logical_cpus 4)"}}, asValidate},
		{"unknown isa", func(c *Config) { c.Hardware.ISA = []string{"avx2", "avx3"} },
			[]Problem{{Key: "hardware.isa", Value: `"avx3"`, Msg: "unknown", Known: ISAExtensions()}}, asValidate},
		{"unknown gpu type", func(c *Config) { c.Hardware.GPUs = []GPU{{Name: "g", Type: "tpu"}} },
			[]Problem{{Key: "hardware.gpus[0].type", Value: `"tpu"`, Msg: "unknown", Known: GPUTypes()}}, asValidate},
		{"infinite bandwidth", func(c *Config) { c.Hardware.DiskRead = math.Inf(1) },
			[]Problem{{Key: "hardware.disk_read_gbps", Value: "+Inf", Msg: "must be finite and >= 0"}}, asValidate},
	}
	check := func(t *testing.T, what string, err error, want []Problem) {
		t.Helper()
		if want == nil {
			if err != nil {
				t.Errorf("%s: %v", what, err)
			}
			return
		}
		var ps Problems
		if !errors.As(err, &ps) || !errors.Is(err, ErrInvalid) {
			t.Fatalf("%s: %v is not Problems matching ErrInvalid", what, err)
		}
		if d := cmp.Diff(Problems(want), ps); d != "" {
			t.Errorf("%s (-want +got):\n%s", what, d)
		}
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.edit(&c)
			check(t, "Validate", c.Validate(), tc.validate)
			run := tc.run
			if len(run) == 1 && run[0].Key == asValidate[0].Key {
				run = tc.validate
			}
			check(t, "ValidateRun", c.ValidateRun(), run)
		})
	}
}

// asValidate as a TestValidate case's run: ValidateRun reports what
// Validate does.
var asValidate = []Problem{{Key: "asValidate"}}

// TestProblemString: a profile's error lines.
func TestProblemString(t *testing.T) {
	for _, tc := range []struct {
		p    Problem
		want string
	}{
		{Problem{Key: "pipeline.parallel", Value: "0", Msg: "must be between 1 and 4096"}, "pipeline.parallel: must be between 1 and 4096, got 0"},
		{Problem{Key: "pipeline.kv_cache.type_v", Value: `"q4_1"`, Msg: "not supported", Known: []string{"f32", "f16"}}, `pipeline.kv_cache.type_v: "q4_1" is not one of f32, f16`},
		{Problem{Key: "hardware", Msg: "measured bandwidths must not be negative"}, "hardware: measured bandwidths must not be negative"},
	} {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("%q, want %q", got, tc.want)
		}
	}
}

// TestCheckHost: a computing command refuses each hardware claim beyond
// this machine, naming the key, the profile's value and the machine's; a
// smaller machine, or a figure the machine does not know, passes.
func TestCheckHost(t *testing.T) {
	host := Hardware{Cores: 2, LogicalCPUs: 4, RAM: 24 * GiB, ISA: []string{"sse4_2", "avx", "avx2", "fma"}}
	withGPU := host
	withGPU.GPUs = []GPU{{Name: "llvmpipe (x)", Type: "cpu", VRAM: 2 * GiB}}
	tests := []struct {
		name string
		hw   Hardware
		host Hardware
		want []Problem
	}{
		{"nothing claimed", Hardware{}, host, nil},
		{"the same machine", host, host, nil},
		{"a smaller machine", Hardware{Cores: 1, LogicalCPUs: 1, RAM: 8 * GiB, ISA: []string{"avx2"}}, host, nil},
		{"more of everything", Hardware{Cores: 4, LogicalCPUs: 8, RAM: 64 * GiB, ISA: []string{"avx2", "avx512f", "amx_tile"}}, host, []Problem{
			{Key: "hardware.cores", Value: "4", Msg: "more physical cores than this machine has (2)"},
			{Key: "hardware.logical_cpus", Value: "8", Msg: "more logical CPUs than this machine has (4)"},
			{Key: "hardware.ram", Value: "64GiB", Msg: "more RAM than this machine has (24GiB, MemTotal)"},
			{Key: "hardware.isa", Value: "avx512f, amx_tile", Msg: "this CPU lacks it (it has: sse4_2, avx, avx2, fma)"},
		}},
		{"a gpu", Hardware{GPUs: []GPU{{Name: "g", VRAM: 12 * GiB}}}, host, []Problem{
			{Key: "hardware.gpus[0].name", Value: `"g"`, Msg: "no Vulkan device of that name on this machine (devices: none)"},
		}},
		{"this machine's gpu", Hardware{GPUs: []GPU{{Name: "LLVMPIPE (x)", VRAM: 2 * GiB}}}, withGPU, nil},
		{"more vram", Hardware{GPUs: []GPU{{Name: "llvmpipe (x)", VRAM: 12 * GiB}}}, withGPU, []Problem{
			{Key: "hardware.gpus[0].vram", Value: "12GiB", Msg: `more VRAM than this machine's "llvmpipe (x)" has (2GiB)`},
		}},
		{"unknown machine", Hardware{Cores: 64, RAM: TiB}, Hardware{}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.Hardware = tc.hw
			err := c.CheckHost(tc.host)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ps Problems
			if !errors.As(err, &ps) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want Problems", err)
			}
			if d := cmp.Diff(tc.want, []Problem(ps)); d != "" {
				t.Errorf("problems (-want +got):\n%s", d)
			}
		})
	}
}

// TestDerive: threads 0 takes the profile's cores and says so; a thread
// count set, or no cores given, is left alone.
func TestDerive(t *testing.T) {
	for _, tc := range []struct{ cores, threads, want int }{{4, 0, 4}, {4, 3, 3}, {0, 0, 0}} {
		l := Loaded{Config: Default()}
		l.Hardware.Cores, l.Pipeline.Threads = tc.cores, tc.threads
		l.Derive()
		if l.Pipeline.Threads != tc.want || (l.Derived["pipeline.threads"] == "hardware.cores") != (tc.threads == 0 && tc.cores > 0) {
			t.Errorf("cores %d threads %d: threads %d, derived %v", tc.cores, tc.threads, l.Pipeline.Threads, l.Derived)
		}
	}
}
