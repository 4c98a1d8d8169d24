package configs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDefaultIsValid(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestBuiltins: every shipped profile decodes strictly, validates, names
// itself after its file and survives a Marshal/Load round trip.
func TestBuiltins(t *testing.T) {
	names := Builtins()
	for _, want := range []string{"cpu-2core", "desktop-12gb-gpu", "laptop-8gb", "server-80gb"} {
		found := false
		for _, n := range names {
			found = found || n == want
		}
		if !found {
			t.Errorf("built-in profile %s missing (have %v)", want, names)
		}
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			l, err := LoadFile("builtin:" + name)
			if err != nil {
				t.Fatal(err)
			}
			if l.Profile != name {
				t.Errorf("profile: %q, want %q", l.Profile, name)
			}
			for _, k := range []string{"hardware.cores", "pipeline.threads", "pipeline.kv_cache.type_k", "pipeline.kv_cache.type_v", "pipeline.io_engine", "sampling.temperature"} {
				if !l.IsSet(k) {
					t.Errorf("profile does not set %s", k)
				}
			}
			data, err := Marshal(l.Config)
			if err != nil {
				t.Fatal(err)
			}
			back, err := Load(strings.NewReader(string(data)))
			if err != nil {
				t.Fatalf("%v\n%s", err, data)
			}
			if d := cmp.Diff(l.Config, back.Config); d != "" {
				t.Errorf("round trip (-file +back):\n%s", d)
			}
		})
	}
}

// TestLoadErrors: unknown keys, wrong types and bad values are errors that
// say which key (and line) is wrong.
func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"unknown top-level key", "pipeline:\n  threads: 2\nsampler:\n  temp: 1\n", []string{"line 3", "sampler"}},
		{"unknown nested key", "pipeline:\n  threads: 2\n  treads: 3\n", []string{"line 3", "treads"}},
		{"unknown kv key", "pipeline:\n  kv_cache:\n    typ: f16\n", []string{"line 3", "typ"}},
		{"wrong type", "pipeline:\n  parallel: many\n", []string{"line 2", "many"}},
		{"bad byte size", "pipeline:\n  vram: 12 bananas\n", []string{"line 2", "byte size"}},
		{"bad enum", "pipeline:\n  io_engine: aio\n", []string{"pipeline.io_engine", "pread, io_uring, mmap"}},
		{"out of range", "pipeline:\n  parallel: 0\n  batch_size: -1\n", []string{"pipeline.parallel", "pipeline.batch_size"}},
		{"sampling", "sampling:\n  top_p: 1.5\n  temperature: -1\n", []string{"sampling.top_p", "sampling.temperature"}},
		{"vram beyond gpu", "hardware:\n  gpus: [{name: g, vram: 8GiB}]\npipeline:\n  backend: vulkan\n  vram: 9GiB\n", []string{"pipeline.vram", "exceeds"}},
		{"flags mapping", "flags:\n  run:\n    temp: 0\n", []string{"flags.run"}},
		{"two documents", "pipeline:\n  threads: 1\n---\npipeline:\n  threads: 2\n", []string{"single YAML document"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(strings.NewReader(tc.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	_, err := Load(strings.NewReader("pipeline:\n  parallel: 0\n"))
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("validation error %v does not match ErrInvalid", err)
	}
}

// TestLoadKeepsDefaults: a partial file changes only what it writes, and
// Set lists exactly those keys.
func TestLoadKeepsDefaults(t *testing.T) {
	l, err := Load(strings.NewReader("pipeline:\n  parallel: 3\n  kv_cache:\n    ctx_size: 2048\nflags:\n  ignore-eos: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Pipeline.Parallel = 3
	want.Pipeline.KVCache.CtxSize = 2048
	want.Flags = map[string]any{"ignore-eos": true}
	if d := cmp.Diff(want, l.Config); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	wantSet := map[string]bool{"pipeline": true, "pipeline.parallel": true, "pipeline.kv_cache": true,
		"pipeline.kv_cache.ctx_size": true, "flags": true, "flags.ignore-eos": true}
	if d := cmp.Diff(wantSet, l.Set); d != "" {
		t.Errorf("Set (-want +got):\n%s", d)
	}
	empty, err := Load(strings.NewReader(""))
	if err != nil || !cmp.Equal(empty.Config, Default()) {
		t.Errorf("empty profile: %v %+v", err, empty.Config)
	}
}

func TestByteSize(t *testing.T) {
	tests := []struct {
		in   string
		want ByteSize
		str  string
	}{
		{"0", 0, "0"},
		{"4096", 4096, "4KiB"},
		{"12GiB", 12 * GiB, "12GiB"},
		{"12 gib", 12 * GiB, "12GiB"},
		{"512MiB", 512 * MiB, "512MiB"},
		{"1.5GiB", 1536 * MiB, "1.50GiB"},
		{"8GB", 8e9, "7.45GiB"},
		{"2T", 2 * TiB, "2TiB"},
		{"100", 100, "100"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseByteSize(tc.in)
			if err != nil || got != tc.want {
				t.Fatalf("ParseByteSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
			if s := got.String(); s != tc.str {
				t.Errorf("String() = %q, want %q", s, tc.str)
			}
		})
	}
	for _, bad := range []string{"", "GiB", "-1GiB", "1e30TiB", "twelve", "NaN"} {
		if _, err := ParseByteSize(bad); err == nil {
			t.Errorf("ParseByteSize(%q): no error", bad)
		}
	}
}

func TestParseCPUInfo(t *testing.T) {
	tests := []struct {
		file          string
		model         string
		cores, logic  int
		isa           []string
		ram           ByteSize
		meminfoInPath bool
	}{
		{"testdata/cpuinfo-2core.txt", "AMD EPYC", 2, 2, []string{"sse4_2", "avx", "avx2", "fma", "f16c", "bmi2"}, 0, false},
		{"testdata/proc-ht/cpuinfo", "Intel Xeon", 1, 2, []string{"avx2", "fma", "avx512f", "avx512_vnni"}, 8048576 * 1024, true},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			f, err := os.Open(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			ci := ParseCPUInfo(f)
			want := CPUInfo{Model: tc.model, Cores: tc.cores, Logical: tc.logic, ISA: tc.isa}
			if d := cmp.Diff(want, ci); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
			if tc.meminfoInPath {
				m, _ := os.Open(filepath.Join(filepath.Dir(tc.file), "meminfo"))
				defer m.Close()
				if got := ParseMemTotal(m); got != tc.ram {
					t.Errorf("MemTotal %d, want %d", got, tc.ram)
				}
			}
		})
	}
}

func TestParseVulkanInfo(t *testing.T) {
	out, err := os.ReadFile("testdata/vulkaninfo-2gpu.txt")
	if err != nil {
		t.Fatal(err)
	}
	got := ParseVulkanInfo(out)
	want := []GPU{
		{Name: "NVIDIA GeForce RTX 3060", Type: "discrete", VRAM: 12 * GiB},
		{Name: "llvmpipe (LLVM 15.0.6, 256 bits)", Type: "cpu", VRAM: 2 * GiB},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if g := ParseVulkanInfo([]byte("ERROR: no devices\n")); len(g) != 0 {
		t.Errorf("garbage: %v", g)
	}
}

// TestDetect reads a fake /proc and a canned vulkaninfo, and the profile
// suggested for it validates.
func TestDetect(t *testing.T) {
	vk, _ := os.ReadFile("testdata/vulkaninfo-2gpu.txt")
	h, notes, err := Detect(context.Background(), DetectOptions{
		ProcDir:    "testdata/proc-ht",
		VulkanInfo: func(context.Context) ([]byte, error) { return vk, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if h.Cores != 1 || h.LogicalCPUs != 2 || h.RAM != 8048576*1024 || len(h.GPUs) != 2 || len(notes) != 0 {
		t.Errorf("hardware %+v, notes %v", h, notes)
	}
	c := Suggest(h)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	// GPUs found, but this build has no GPU backend: the suggestion writes
	// only settings that take effect (cpu, no VRAM, RAM budget derived at
	// run time)
	if c.Pipeline.Backend != "cpu" || c.Pipeline.VRAM != 0 || c.Pipeline.RAMPool != 0 || c.Pipeline.Threads != 1 {
		t.Errorf("suggested pipeline %+v", c.Pipeline)
	}
	// and no GPU in its hardware (CheckHost would refuse it), the rest as
	// detected, so that it fits the machine it was written on
	if len(c.Hardware.GPUs) != 0 || c.Hardware.Cores != h.Cores || c.Hardware.RAM != h.RAM {
		t.Errorf("suggested hardware %+v", c.Hardware)
	}
	if err := c.CheckHost(h); err != nil {
		t.Errorf("the suggested profile does not fit the machine it describes: %v", err)
	}
	// Without Vulkan: CPU backend and a note.
	h, notes, err = Detect(context.Background(), DetectOptions{
		ProcDir:    "testdata/proc-ht",
		VulkanInfo: func(context.Context) ([]byte, error) { return nil, errors.New("vulkaninfo not installed") },
	})
	if err != nil || len(h.GPUs) != 0 || len(notes) != 1 {
		t.Errorf("no vulkan: %+v %v %v", h, notes, err)
	}
	if c := Suggest(h); c.Pipeline.Backend != "cpu" || c.Validate() != nil {
		t.Errorf("suggested pipeline without GPU %+v", c.Pipeline)
	}
}

// TestMeasure runs both measurements small and fast: they must report
// plausible positive figures within their budgets.
func TestMeasure(t *testing.T) {
	ctx := context.Background()
	t0 := time.Now()
	bw, err := MeasureMemory(ctx, MemOptions{Threads: 2, Bytes: 32 << 20, Duration: 100 * time.Millisecond})
	if err != nil || bw <= 0.1 || bw > 10000 {
		t.Errorf("memory: %.2f GB/s, %v", bw, err)
	}
	dir := t.TempDir()
	d, err := MeasureDisk(ctx, DiskOptions{Dir: dir, Bytes: 16 << 20, Duration: time.Second})
	if err != nil || d.GBps <= 0 || d.Bytes != 16<<20 {
		t.Errorf("disk: %+v, %v", d, err)
	}
	if el := time.Since(t0); el > 20*time.Second {
		t.Errorf("measurements took %v", el)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("scratch file %s left behind", entries[0].Name())
	}
	// A cancelled context stops a measurement.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := MeasureMemory(cctx, MemOptions{Bytes: 8 << 20}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled memory measurement: %v", err)
	}
}

// TestDetectGPUs: a GPUs lister replaces vulkaninfo; its error becomes a
// note, its devices the hardware's GPUs.
func TestDetectGPUs(t *testing.T) {
	noRun := func(context.Context) ([]byte, error) { return nil, errors.New("vulkaninfo must not run") }
	h, notes, err := Detect(context.Background(), DetectOptions{
		ProcDir:    "testdata/proc-ht",
		VulkanInfo: noRun,
		GPUs:       func() ([]GPU, error) { return []GPU{{Name: "gpu0", Type: "discrete", VRAM: 8 << 30}}, nil },
	})
	if err != nil || len(notes) != 0 || len(h.GPUs) != 1 || h.GPUs[0].Name != "gpu0" {
		t.Errorf("with a device: %+v %v %v", h.GPUs, notes, err)
	}
	h, notes, err = Detect(context.Background(), DetectOptions{
		ProcDir:    "testdata/proc-ht",
		VulkanInfo: noRun,
		GPUs:       func() ([]GPU, error) { return nil, errors.New("vk: no Vulkan loader: libvulkan.so.1: cannot open") },
	})
	if err != nil || len(h.GPUs) != 0 || len(notes) != 1 || !strings.Contains(notes[0], "no Vulkan loader") {
		t.Errorf("without a loader: %+v %v %v", h.GPUs, notes, err)
	}
}
