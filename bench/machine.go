package bench

// machine.go: what the rest of the machine did while a test ran. On a
// shared VM the same binary's t/s moves by a third between minutes; a
// round that comes out slow is only explained if we know whether the
// hypervisor ran other guests on our CPUs (steal) or another process of
// this machine was busy. Both come from the kernel's CPU accounting
// (/proc/stat), so they cost nothing while the test runs.

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MachineLoad is the share of all CPUs' time, while a test ran, that went
// to other guests of the hypervisor (Steal) and to processes other than
// this one (Other). Valid is false where the kernel does not report it.
type MachineLoad struct {
	Steal, Other float64
	Valid        bool
}

// String reads "steal 1.2%, other processes 0.4% of CPU time".
func (l MachineLoad) String() string {
	if !l.Valid {
		return "not measured"
	}
	return fmt.Sprintf("steal %.1f%%, other processes %.1f%% of CPU time", 100*l.Steal, 100*l.Other)
}

// cpuTimes is one reading of the machine's CPU accounting and of this
// process's own CPU time.
type cpuTimes struct {
	total, busy, steal time.Duration // all CPUs
	self               time.Duration // this process, user + system
	ok                 bool
}

// clockTick is the unit of /proc/stat (USER_HZ, 100 on every Linux ABI).
const clockTick = 10 * time.Millisecond

// parseProcStat reads the aggregate "cpu" line of /proc/stat: user nice
// system idle iowait irq softirq steal [guest guest_nice], in clock ticks.
// Guest time is already part of user time and is not added again.
func parseProcStat(data string) (total, busy, steal time.Duration, err error) {
	line, _, _ := strings.Cut(data, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, 0, fmt.Errorf("bench: /proc/stat: no aggregate cpu line with 8 fields")
	}
	var v [8]uint64
	for i := range v {
		if v[i], err = strconv.ParseUint(f[i+1], 10, 64); err != nil {
			return 0, 0, 0, fmt.Errorf("bench: /proc/stat: %w", err)
		}
	}
	var sum uint64
	for _, x := range v {
		sum += x
	}
	ticks := func(n uint64) time.Duration { return time.Duration(n) * clockTick }
	// user + nice + system + irq + softirq
	return ticks(sum), ticks(v[0] + v[1] + v[2] + v[5] + v[6]), ticks(v[7]), nil
}

// loadBetween is the machine's load from reading a to reading b.
func loadBetween(a, b cpuTimes) MachineLoad {
	if !a.ok || !b.ok || b.total <= a.total {
		return MachineLoad{}
	}
	total := float64(b.total - a.total)
	other := float64((b.busy - a.busy) - (b.self - a.self))
	// the kernel counts whole ticks and our own time exactly: a few ticks
	// of our work may show as negative other time
	other = max(other, 0)
	return MachineLoad{Steal: float64(b.steal-a.steal) / total, Other: other / total, Valid: true}
}
