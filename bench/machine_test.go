package bench

import (
	"math"
	"runtime"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	const stat = "cpu  100 20 30 800 5 1 2 40 7 0\ncpu0 50 10 15 400 2 0 1 20 3 0\nintr 1\n"
	total, busy, steal, err := parseProcStat(stat)
	if err != nil {
		t.Fatal(err)
	}
	// total = 100+20+30+800+5+1+2+40 (guest is inside user), busy = user
	// nice system irq softirq
	if total != 998*clockTick || busy != 153*clockTick || steal != 40*clockTick {
		t.Fatalf("total %v busy %v steal %v", total, busy, steal)
	}
	for _, bad := range []string{"", "cpu 1 2 3", "intr 1 2 3 4 5 6 7 8 9", "cpu 1 2 3 x 5 6 7 8 9", "cpu 1 2 3 4 5 6 7 -8"} {
		if _, _, _, err := parseProcStat(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestLoadBetween(t *testing.T) {
	a := cpuTimes{total: 1000 * clockTick, busy: 100 * clockTick, steal: 10 * clockTick, self: time.Second, ok: true}
	// 200 ticks pass: 20 stolen, 120 busy of which 1 s (100 ticks) ours
	b := cpuTimes{total: 1200 * clockTick, busy: 220 * clockTick, steal: 30 * clockTick, self: 2 * time.Second, ok: true}
	l := loadBetween(a, b)
	if !l.Valid || math.Abs(l.Steal-0.1) > 1e-12 || math.Abs(l.Other-0.1) > 1e-12 {
		t.Fatalf("load %+v, want steal 0.1 other 0.1", l)
	}
	if got := l.String(); got != "steal 10.0%, other processes 10.0% of CPU time" {
		t.Errorf("String() = %q", got)
	}
	// our own time counted more exactly than the kernel's ticks: no negative share
	b.self = 3 * time.Second
	if l := loadBetween(a, b); l.Other != 0 {
		t.Errorf("other %v, want 0", l.Other)
	}
	if l := loadBetween(a, cpuTimes{}); l.Valid {
		t.Error("valid load from a failed reading")
	}
	if l := loadBetween(a, a); l.Valid {
		t.Error("valid load from no elapsed time")
	}
}

// TestReadCPUTimes checks the live reading where the kernel has it: shares
// within [0, 1] and our own CPU time counted across a busy loop.
func TestReadCPUTimes(t *testing.T) {
	a := readCPUTimes()
	if !a.ok {
		if runtime.GOOS == "linux" {
			t.Fatal("no /proc/stat reading on linux")
		}
		t.Skip("no CPU accounting on " + runtime.GOOS)
	}
	x := 0
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
		x++
	}
	b := readCPUTimes()
	l := loadBetween(a, b)
	if !l.Valid || l.Steal < 0 || l.Steal > 1 || l.Other < 0 || l.Other > 1 || b.self <= a.self {
		t.Fatalf("load %+v, self %v -> %v (x %d)", l, a.self, b.self, x)
	}
}
