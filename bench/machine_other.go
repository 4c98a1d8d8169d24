//go:build !linux

package bench

// readCPUTimes: no machine-wide CPU accounting read here.
func readCPUTimes() cpuTimes { return cpuTimes{} }
