// This file turns a recording into a stall report: for each stage, the
// share of its wall time spent busy, starved (waiting for input, broken
// down by the producer it waited on) and blocked (on output, by consumer);
// the stage that bounds throughput; and the achieved bandwidth of every
// byte counter (a transfer edge) against a machine limit.

package graph

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// StageStall is where one stage's wall time went. Busy + Starved + Blocked
// = Wall exactly; the per-edge breakdowns come from stored events and miss
// Dropped ones.
type StageStall struct {
	Stage                        string
	Wall, Busy, Starved, Blocked time.Duration
	StarvedOn                    map[string]time.Duration // producer stage -> time waiting for its input
	BlockedOn                    map[string]time.Duration // consumer stage -> time blocked on it
	Events                       int64                    // events stored (spans, waits, counters)
	Dropped                      int64
}

// Transfer is one byte counter: bytes a stage moved, and how fast.
type Transfer struct {
	Stage, Counter string
	Bytes          int64
	Wall, Busy     time.Duration // the stage's
	GBps           float64       // Bytes over the stage's wall time
	BusyGBps       float64       // Bytes over its busy time: the rate while it worked
}

// Stalls is the stall report of a recording.
type Stalls struct {
	// Wall runs from the first stage's start to the last stage's end.
	Wall   time.Duration
	Stages []StageStall
	// Bounding is the stage with the most busy time: the one the others
	// wait for, whose speed sets the pipeline's throughput.
	Bounding string
	// WaitedOn is the producer stages spent the most time waiting for
	// (usually Bounding, or the stage feeding it).
	WaitedOn  string
	Transfers []Transfer
}

// Stalls returns the stall report of everything recorded so far.
func (r *Recorder) Stalls() Stalls {
	snaps := r.snapshots()
	var st Stalls
	var first, last int64
	waitedOn := map[string]time.Duration{}
	var bestBusy time.Duration
	for i, s := range snaps {
		if i == 0 || s.begin < first {
			first = s.begin
		}
		last = max(last, s.end)
		ss := StageStall{
			Stage: s.name, Wall: time.Duration(s.end - s.begin),
			Starved: time.Duration(s.waiting), Blocked: time.Duration(s.blocked),
			StarvedOn: map[string]time.Duration{}, BlockedOn: map[string]time.Duration{},
			Dropped: s.dropped,
		}
		ss.Busy = ss.Wall - ss.Starved - ss.Blocked
		bytes := map[string]int64{}
		var order []string
		for _, c := range s.chunks {
			ss.Events += int64(len(c))
			for _, e := range c {
				d := time.Duration(e.t1 - e.t0)
				switch e.kind {
				case evWait:
					p := strings.TrimPrefix(e.name, "wait <- ")
					ss.StarvedOn[p] += d
					waitedOn[p] += d
				case evBlocked:
					ss.BlockedOn[strings.TrimPrefix(e.name, "blocked -> ")] += d
				case evAdd:
					if IsByteCounter(e.name) {
						if _, ok := bytes[e.name]; !ok {
							order = append(order, e.name)
						}
						bytes[e.name] += e.t1
					}
				}
			}
		}
		for _, name := range order {
			t := Transfer{Stage: s.name, Counter: name, Bytes: bytes[name], Wall: ss.Wall, Busy: ss.Busy}
			if ss.Wall > 0 {
				t.GBps = float64(t.Bytes) / float64(ss.Wall)
			}
			if ss.Busy > 0 {
				t.BusyGBps = float64(t.Bytes) / float64(ss.Busy)
			}
			st.Transfers = append(st.Transfers, t)
		}
		if ss.Busy > bestBusy {
			bestBusy, st.Bounding = ss.Busy, ss.Stage
		}
		st.Stages = append(st.Stages, ss)
	}
	st.Wall = time.Duration(last - first)
	var most time.Duration
	for _, p := range slices.Sorted(maps.Keys(waitedOn)) {
		if waitedOn[p] > most {
			most, st.WaitedOn = waitedOn[p], p
		}
	}
	return st
}

// Limit is a bandwidth ceiling to compare transfers with.
type Limit struct {
	GBps   float64 // 0: unknown
	Source string  // "memory, measured now", "disk, from the profile", ...
	// Counters overrides the limit for some transfers, keyed by
	// "stage/counter" (the disk's bandwidth for the reader's bytes read).
	Counters map[string]Limit
}

// Format writes the report as text: a table of stages, the bounding stage,
// and the transfers against limit (which may be the zero Limit).
func (st Stalls) Format(w io.Writer, limit Limit) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	pct := func(d, wall time.Duration) string {
		if wall <= 0 {
			return "-"
		}
		return fmt.Sprintf("%5.1f%%", 100*float64(d)/float64(wall))
	}
	fmt.Fprintf(tw, "stage\twall\tbusy\tstarved\tblocked\tmostly waiting on\t\n")
	for _, s := range st.Stages {
		fmt.Fprintf(tw, "%s\t%v\t%s\t%s\t%s\t%s\t\n", s.Stage, s.Wall.Round(time.Microsecond),
			pct(s.Busy, s.Wall), pct(s.Starved, s.Wall), pct(s.Blocked, s.Wall), s.mostlyOn())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if st.Bounding != "" {
		var b StageStall
		for _, s := range st.Stages {
			if s.Stage == st.Bounding {
				b = s
			}
		}
		fmt.Fprintf(w, "bounding stage: %s (busy %.1f%% of the %v run", st.Bounding, 100*float64(b.Busy)/float64(max(st.Wall, 1)), st.Wall.Round(time.Microsecond))
		if st.WaitedOn != "" {
			fmt.Fprintf(w, "; the stage others waited on most: %s", st.WaitedOn)
		}
		fmt.Fprintln(w, ")")
	}
	for _, t := range st.Transfers {
		fmt.Fprintf(w, "transfer %s/%s: %s in %v = %.3f GB/s", t.Stage, t.Counter,
			formatBytes(t.Bytes), t.Wall.Round(time.Microsecond), t.GBps)
		l := limit
		if o, ok := limit.Counters[t.Stage+"/"+t.Counter]; ok {
			l = o
		}
		if l.GBps > 0 {
			fmt.Fprintf(w, " = %.1f%% of %.1f GB/s (%s)", 100*t.GBps/l.GBps, l.GBps, l.Source)
		}
		if t.Wall > 0 && t.Busy*20 >= t.Wall { // a rate over a sliver of busy time means nothing
			fmt.Fprintf(w, "; %.3f GB/s while the stage was busy", t.BusyGBps)
		}
		if _, err := fmt.Fprintln(w); err != nil {
			return err
		}
	}
	return nil
}

// mostlyOn names the edge a stage lost the most time on, if any.
func (s StageStall) mostlyOn() string {
	type kv struct {
		what string
		d    time.Duration
	}
	var all []kv
	for p, d := range s.StarvedOn {
		all = append(all, kv{"input from " + p, d})
	}
	for c, d := range s.BlockedOn {
		all = append(all, kv{"output to " + c, d})
	}
	if len(all) == 0 {
		return "-"
	}
	slices.SortFunc(all, func(a, b kv) int { return cmp.Or(cmp.Compare(b.d, a.d), strings.Compare(a.what, b.what)) })
	return fmt.Sprintf("%s (%v)", all[0].what, all[0].d.Round(time.Microsecond))
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.2f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
