// This file describes the current machine for `flowinfer config detect`:
// cores, RAM and SIMD extensions from /proc, Vulkan devices and their VRAM
// from vulkaninfo when it is installed, and the measured bandwidths; and it
// turns a Hardware description into a suggested profile.

package configs

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DetectOptions say where to look and what to measure.
type DetectOptions struct {
	// ProcDir is the proc filesystem ["/proc"].
	ProcDir string
	// VulkanInfo returns the full text output of vulkaninfo; nil runs
	// vulkaninfo from PATH (if present) with a 10 s timeout.
	VulkanInfo func(ctx context.Context) ([]byte, error)
	// GPUs lists the Vulkan devices directly (cmd passes the gpu/vk
	// binding's enumeration); when set, vulkaninfo is not run.
	GPUs func() ([]GPU, error)
	// Measure runs the memory and disk bandwidth measurements.
	Measure bool
	Mem     MemOptions
	Disk    DiskOptions
}

// Detect describes this machine. Notes are human-readable remarks (no GPU
// found, a measurement that could not bypass the page cache, ...); a
// measurement that fails becomes a note, not an error.
func Detect(ctx context.Context, o DetectOptions) (h Hardware, notes []string, err error) {
	if h, err = DetectHost(o.ProcDir); err != nil {
		return h, nil, err
	}
	if h.RAM == 0 {
		notes = append(notes, "RAM size unknown (no MemTotal in meminfo)")
	}

	if o.GPUs != nil {
		switch gpus, err := o.GPUs(); {
		case err != nil:
			notes = append(notes, "no Vulkan devices: "+err.Error())
		default:
			h.GPUs = gpus
			if len(h.GPUs) == 0 {
				notes = append(notes, "the Vulkan loader lists no devices")
			}
		}
	} else {
		run := o.VulkanInfo
		if run == nil {
			run = runVulkanInfo
		}
		switch out, err := run(ctx); {
		case err != nil:
			notes = append(notes, "no Vulkan devices: "+err.Error())
		default:
			h.GPUs = ParseVulkanInfo(out)
			if len(h.GPUs) == 0 {
				notes = append(notes, "vulkaninfo lists no devices")
			}
		}
	}

	if o.Measure {
		mo := o.Mem
		if mo.Threads <= 0 {
			mo.Threads = max(h.Cores, 1)
		}
		if bw, err := MeasureMemory(ctx, mo); err != nil {
			notes = append(notes, "memory bandwidth not measured: "+err.Error())
		} else {
			h.MemBandwidth = round2(bw)
		}
		if d, err := MeasureDisk(ctx, o.Disk); err != nil {
			notes = append(notes, "disk bandwidth not measured: "+err.Error())
		} else {
			h.DiskRead = round2(d.GBps)
			if !d.Direct {
				notes = append(notes, "disk read measured without O_DIRECT (page cache dropped with fadvise): may be optimistic")
			}
		}
	}
	return h, notes, nil
}

func round2(v float64) float64 { return float64(int64(v*100+0.5)) / 100 }

func runVulkanInfo(ctx context.Context) ([]byte, error) {
	path, err := exec.LookPath("vulkaninfo")
	if err != nil {
		return nil, fmt.Errorf("vulkaninfo not installed")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path).Output()
	if err != nil && len(out) == 0 {
		return nil, fmt.Errorf("vulkaninfo: %w", err)
	}
	return out, nil
}

// CPUInfo is what /proc/cpuinfo says.
type CPUInfo struct {
	Model   string
	Cores   int // physical cores: distinct (physical id, core id) pairs
	Logical int // processors
	ISA     []string
}

// isaFlags are the cpuinfo flags that matter to the kernels, in the order
// they are reported.
var isaFlags = []string{
	"sse4_2", "avx", "avx2", "fma", "f16c", "bmi2",
	"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx512vbmi",
	"avx_vnni", "amx_tile", "amx_int8", "amx_bf16",
}

// ISAExtensions returns the known values of hardware.isa: the cpuinfo
// flags that matter to the kernels.
func ISAExtensions() []string { return slices.Clone(isaFlags) }

// GPUTypes returns the known values of hardware.gpus[].type (vulkaninfo's
// device types).
func GPUTypes() []string { return []string{"discrete", "integrated", "virtual", "cpu", "other"} }

// ParseCPUInfo reads a Linux /proc/cpuinfo.
func ParseCPUInfo(r io.Reader) CPUInfo {
	var ci CPUInfo
	cores := map[[2]string]bool{}
	var phys, core string
	flags := map[string]bool{}
	flush := func() {
		if core != "" {
			cores[[2]string{phys, core}] = true
		}
		phys, core = "", ""
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "processor":
			flush()
			ci.Logical++
		case "model name":
			if ci.Model == "" {
				ci.Model = v
			}
		case "physical id":
			phys = v
		case "core id":
			core = v
		case "flags":
			for _, f := range strings.Fields(v) {
				flags[f] = true
			}
		}
	}
	flush()
	ci.Cores = len(cores)
	if ci.Cores == 0 {
		ci.Cores = ci.Logical // no topology (some VMs, non-x86): count processors
	}
	for _, f := range isaFlags {
		if flags[f] {
			ci.ISA = append(ci.ISA, f)
		}
	}
	return ci
}

// ParseMemTotal returns MemTotal from a /proc/meminfo, or 0.
func ParseMemTotal(r io.Reader) ByteSize { return parseMeminfo(r, "MemTotal:") }

// ParseMemAvailable returns MemAvailable from a /proc/meminfo (the kernel's
// estimate of what can be allocated without swapping: free memory plus the
// reclaimable page cache), or 0.
func ParseMemAvailable(r io.Reader) ByteSize { return parseMeminfo(r, "MemAvailable:") }

// parseMeminfo returns the field key ("MemTotal:") of a /proc/meminfo in
// bytes, or 0.
func parseMeminfo(r io.Reader, key string) ByteSize {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == key {
			v, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0
			}
			if len(f) >= 3 && strings.EqualFold(f[2], "kB") {
				v *= 1024
			}
			return ByteSize(v)
		}
	}
	return 0
}

// ParseVulkanInfo reads the full text output of vulkaninfo: one GPU per
// "GPU<n>:" section with its deviceName, deviceType and the largest
// device-local memory heap as its VRAM.
func ParseVulkanInfo(out []byte) []GPU {
	var gpus []GPU
	cur := -1
	seen := map[int]int{} // GPU<n> -> index in gpus
	var heapSize int64
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if n, ok := gpuHeader(line); ok {
			i, dup := seen[n]
			if !dup {
				i = len(gpus)
				seen[n] = i
				gpus = append(gpus, GPU{})
			}
			cur, heapSize = i, 0
			continue
		}
		if cur < 0 {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case ok && k == "deviceName" && gpus[cur].Name == "":
			gpus[cur].Name = v
		case ok && k == "deviceType" && gpus[cur].Type == "":
			t := strings.ToLower(strings.TrimPrefix(v, "PHYSICAL_DEVICE_TYPE_"))
			gpus[cur].Type = strings.TrimSuffix(t, "_gpu")
		case ok && k == "size":
			f := strings.Fields(v)
			if len(f) > 0 {
				heapSize, _ = strconv.ParseInt(f[0], 10, 64)
			}
		case strings.Contains(line, "MEMORY_HEAP_DEVICE_LOCAL_BIT"):
			if ByteSize(heapSize) > gpus[cur].VRAM {
				gpus[cur].VRAM = ByteSize(heapSize)
			}
			heapSize = 0
		}
	}
	return slices.DeleteFunc(gpus, func(g GPU) bool { return g.Name == "" })
}

// gpuHeader matches "GPU0:" (vulkaninfo's per-device section header).
func gpuHeader(line string) (int, bool) {
	rest, ok := strings.CutPrefix(line, "GPU")
	if !ok {
		return 0, false
	}
	num, ok := strings.CutSuffix(rest, ":")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(num)
	return n, err == nil
}

// Suggest returns a profile for hardware h: threads and parallelism
// derived from the machine, everything else at its default. It writes only
// settings this build honours: the backend is cpu and h's GPUs are left
// out (a profile listing a GPU computes on it, so a suggested profile
// stays on the CPU unless its user lists one), and the RAM budget
// is left at 0, which derives it at run time from the machine's or the
// cgroup's memory after the KV cache and activations.
func Suggest(h Hardware) Config {
	c := Default()
	c.Hardware = h
	c.Hardware.GPUs = nil
	p := &c.Pipeline
	p.Threads = h.Cores
	p.Backend = "cpu"
	switch {
	case h.RAM >= 128*GiB:
		p.Parallel, p.Queue, p.Edges.Tokens = 16, 256, 256
	case h.RAM >= 32*GiB:
		p.Parallel = 4
	case h.RAM > 0 && h.RAM < 12*GiB:
		p.BatchSize = 256
	}
	if h.Cores > 0 && h.Cores <= 2 {
		p.Parallel = min(p.Parallel, 4)
	}
	return c
}
