package stages

// readstats.go: the reader's counters (readStats, in reader.go): what was
// read, and for how long the disk was busy. Several reads are in flight
// at once, so their summed durations (ReadNanos) exceed the wall time; the
// disk's busy time is the time at least one read was in flight, kept by
// diskBusy as the reads start and end.

import (
	"sync"
	"sync/atomic"
)

// diskBusy adds up the time at least one read was in flight.
type diskBusy struct {
	mu       sync.Mutex
	inFlight int
	since    int64 // when inFlight last went from 0 to 1
	nanos    atomic.Int64
}

func (d *diskBusy) start(t int64) {
	d.mu.Lock()
	if d.inFlight == 0 {
		d.since = t
	}
	d.inFlight++
	d.mu.Unlock()
}

func (d *diskBusy) stop(t int64) {
	d.mu.Lock()
	if d.inFlight--; d.inFlight == 0 {
		d.nanos.Add(t - d.since)
	}
	d.mu.Unlock()
}

// begin counts a read issued now and returns its start.
func (r *readStats) begin() int64 {
	t := nanotime()
	r.reads.Add(1)
	r.busy.start(t)
	return t
}

// end records the end of a read that began at t0.
func (r *readStats) end(t0 int64) {
	t := nanotime()
	r.nanos.Add(t - t0)
	r.busy.stop(t)
}

// stats copies the counters into s.
func (r *readStats) stats(s *WeightStats) {
	s.BytesRead, s.Reads, s.ExpertsRead, s.MatricesRead = r.bytes.Load(), r.reads.Load(), r.experts.Load(), r.matrices.Load()
	s.ReadNanos, s.DiskBusyNanos = r.nanos.Load(), r.busy.nanos.Load()
}

// reset zeroes the counters; reads in flight keep counting busy time from
// their start.
func (r *readStats) reset() {
	for _, c := range []*atomic.Int64{&r.bytes, &r.nanos, &r.reads, &r.experts, &r.matrices, &r.busy.nanos} {
		c.Store(0)
	}
}
