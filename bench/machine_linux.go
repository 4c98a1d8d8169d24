//go:build linux

package bench

import (
	"os"
	"syscall"
	"time"
)

// readCPUTimes reads /proc/stat and this process's rusage.
func readCPUTimes() cpuTimes {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	total, busy, steal, err := parseProcStat(string(data))
	if err != nil {
		return cpuTimes{}
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuTimes{}
	}
	self := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return cpuTimes{total: total, busy: busy, steal: steal, self: self, ok: true}
}
