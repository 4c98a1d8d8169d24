package stages

import "testing"

// TestDiskBusy: the disk's busy time is the time at least one read was in
// flight (the union of the reads), not their summed durations; reset
// zeroes the counters.
func TestDiskBusy(t *testing.T) {
	var d diskBusy
	// reads [0,30), [10,20) overlapping, then [50,60) alone, then
	// [70,90) and [80,100) overlapping: in flight 30 + 10 + 30 = 70
	for _, ev := range []struct {
		t     int64
		start bool
	}{{0, true}, {10, true}, {20, false}, {30, false}, {50, true}, {60, false}, {70, true}, {80, true}, {90, false}, {100, false}} {
		if ev.start {
			d.start(ev.t)
		} else {
			d.stop(ev.t)
		}
	}
	if got := d.nanos.Load(); got != 70 {
		t.Errorf("busy %d ns, want 70", got)
	}
	var r readStats
	t0 := r.begin()
	r.end(t0)
	r.experts.Add(1)
	var s WeightStats
	r.stats(&s)
	if s.Reads != 1 || s.ExpertsRead != 1 || s.ReadNanos < 0 || s.DiskBusyNanos != s.ReadNanos {
		t.Errorf("one read: %+v", s)
	}
	r.reset()
	s = WeightStats{}
	r.stats(&s)
	if s.Reads != 0 || s.ExpertsRead != 0 || s.ReadNanos != 0 || s.DiskBusyNanos != 0 {
		t.Errorf("after reset: %+v", s)
	}
}
