// This file holds what a profile's hardware section means to a command
// that computes here. A profile may describe another machine: Load and
// `config show` take it as written (to read it, or to plan for that
// machine). A computing command takes it as a claim about this one, and
// the hardware keys then act as the machine's limits: hardware.cores is
// the default thread count, hardware.logical_cpus bounds the threads,
// hardware.ram bounds pipeline.ram_pool, hardware.isa lists extensions
// the CPU must have. So a claim beyond what this machine has is refused
// (CheckHost), as is a GPU that is not one of this machine's Vulkan devices
// (matched by name) or claims more VRAM than it has; the first GPU listed
// is the one the GPU backends compute on unless pipeline.device names
// another.

package configs

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// DetectHost reads what `flowinfer config detect` reads of this machine
// without measuring anything or running vulkaninfo (fast enough for every
// command's start): the CPU model, physical cores, logical CPUs and SIMD
// extensions from cpuinfo, and MemTotal. procDir is the proc filesystem
// ["/proc"].
func DetectHost(procDir string) (Hardware, error) {
	if procDir == "" {
		procDir = "/proc"
	}
	var h Hardware
	f, err := os.Open(filepath.Join(procDir, "cpuinfo"))
	if err != nil {
		return h, fmt.Errorf("configs: detect: %w", err)
	}
	ci := ParseCPUInfo(f)
	f.Close()
	h.CPU, h.Cores, h.LogicalCPUs, h.ISA = ci.Model, ci.Cores, ci.Logical, ci.ISA
	if f, err := os.Open(filepath.Join(procDir, "meminfo")); err == nil {
		h.RAM = ParseMemTotal(f)
		f.Close()
	}
	return h, nil
}

// CheckHost reports every hardware key of c that claims more than host
// (DetectHost's description of this machine) has, each with the profile's
// value and this machine's: more physical cores, logical CPUs or RAM, an
// ISA extension the CPU lacks, and a GPU that host.GPUs (this machine's
// Vulkan devices) does not list by name (case-insensitive), or lists with
// less VRAM. A figure host does not know (0) is not compared. The error
// is Problems, matching ErrInvalid.
func (c *Config) CheckHost(host Hardware) error {
	h := &c.Hardware
	var v validation
	more := func(key string, got, have int, what string) {
		if got > 0 && have > 0 && got > have {
			v.bad(key, strconv.Itoa(got), "more %s than this machine has (%d)", what, have)
		}
	}
	more("hardware.cores", h.Cores, host.Cores, "physical cores")
	more("hardware.logical_cpus", h.LogicalCPUs, host.LogicalCPUs, "logical CPUs")
	if h.RAM > 0 && host.RAM > 0 && h.RAM > host.RAM {
		v.bad("hardware.ram", h.RAM.String(), "more RAM than this machine has (%s, MemTotal)", host.RAM)
	}
	if len(host.ISA) > 0 || host.Cores > 0 {
		var lacks []string
		for _, x := range h.ISA {
			if !slices.Contains(host.ISA, x) {
				lacks = append(lacks, x)
			}
		}
		if len(lacks) > 0 {
			has := strings.Join(host.ISA, ", ")
			if has == "" {
				has = "none of " + strings.Join(isaFlags, ", ")
			}
			v.bad("hardware.isa", strings.Join(lacks, ", "), "this CPU lacks it (it has: %s)", has)
		}
	}
	have := make([]string, len(host.GPUs))
	for i, g := range host.GPUs {
		have[i] = fmt.Sprintf("%q", g.Name)
	}
	devices := strings.Join(have, ", ")
	if devices == "" {
		devices = "none"
	}
	for i, g := range h.GPUs {
		j := slices.IndexFunc(host.GPUs, func(d GPU) bool { return strings.EqualFold(d.Name, g.Name) })
		switch {
		case j < 0:
			v.bad(fmt.Sprintf("hardware.gpus[%d].name", i), strconv.Quote(g.Name), "no Vulkan device of that name on this machine (devices: %s)", devices)
		case g.VRAM > 0 && host.GPUs[j].VRAM > 0 && g.VRAM > host.GPUs[j].VRAM:
			v.bad(fmt.Sprintf("hardware.gpus[%d].vram", i), g.VRAM.String(), "more VRAM than this machine's %q has (%v)", g.Name, host.GPUs[j].VRAM)
		}
	}
	if len(v.ps) == 0 {
		return nil
	}
	return v.ps
}

// Derive fills the settings a profile's hardware section gives a default
// to, and records where each came from in Derived: pipeline.threads 0
// (the machine's physical cores) becomes hardware.cores when the profile
// gives the cores.
func (l *Loaded) Derive() {
	if l.Pipeline.Threads == 0 && l.Hardware.Cores > 0 {
		l.Pipeline.Threads = l.Hardware.Cores
		if l.Derived == nil {
			l.Derived = map[string]string{}
		}
		l.Derived["pipeline.threads"] = "hardware.cores"
	}
}
