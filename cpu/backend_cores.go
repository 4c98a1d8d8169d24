package cpu

// backend_cores.go: the default thread count. Matrix products are limited
// by memory bandwidth and by the SIMD units a core's hyperthreads share, so
// like llama.cpp the default is one worker per physical core, not per
// logical CPU.

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// PhysicalCores returns the number of physical cores this process may use:
// distinct (package, core) pairs among the online CPUs in sysfs, capped by
// GOMAXPROCS; runtime.NumCPU() where sysfs does not tell.
func PhysicalCores() int {
	n := physicalCores("/sys/devices/system/cpu")
	if n <= 0 {
		n = runtime.NumCPU()
	}
	return max(1, min(n, runtime.GOMAXPROCS(0)))
}

func physicalCores(root string) int {
	dirs, err := filepath.Glob(filepath.Join(root, "cpu[0-9]*", "topology"))
	if err != nil || len(dirs) == 0 {
		return 0
	}
	seen := make(map[string]bool)
	for _, d := range dirs {
		core, err1 := os.ReadFile(filepath.Join(d, "core_id"))
		pkg, err2 := os.ReadFile(filepath.Join(d, "physical_package_id"))
		if err1 != nil || err2 != nil {
			continue // offline CPUs have no topology
		}
		seen[strings.TrimSpace(string(pkg))+"/"+strings.TrimSpace(string(core))] = true
	}
	return len(seen)
}
