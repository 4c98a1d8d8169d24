// This file turns a recording into a stall report: for each stage, the
// share of its wall time spent busy, starved (waiting for input, broken
// down by the producer it waited on) and blocked (on output, by consumer);
// the stage that bounds throughput; and the achieved bandwidth of every
// byte counter (a transfer edge) against a machine limit.

package graph

import (
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
// Dropped ones. A stage with work spans (BeginWork: a reader's reads in
// flight on its workers) is busy whenever one is open, whatever its own
// goroutine waits for then; its split comes from stored events too.
type StageStall struct {
	Stage                        string
	Wall, Busy, Starved, Blocked time.Duration
	StarvedOn                    map[string]time.Duration // producer stage -> time waiting for its input
	BlockedOn                    map[string]time.Duration // consumer stage -> time blocked on it
	Work                         map[string]WorkStats     // work spans by name ("group:x" by group); nil: none
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
	// Bounding is the stage the others wait on, found by following the
	// waits (see bound): the one whose speed sets the pipeline's
	// throughput. It may name a source outside the graph ("queue") that
	// the stages waited on for input.
	Bounding string
	// Chain is the longest chain of waits that ends at Bounding: each
	// stage spent more time waiting on the next than working.
	Chain     []string
	Transfers []Transfer
}

// Stalls returns the stall report of everything recorded so far.
func (r *Recorder) Stalls() Stalls {
	snaps := r.snapshots()
	var st Stalls
	var first, last int64
	for i, s := range snaps {
		if i == 0 || s.begin < first {
			first = s.begin
		}
		last = max(last, s.end)
		ss := StageStall{
			Stage: s.name, Wall: time.Duration(s.end - s.begin),
			Starved: time.Duration(s.waiting), Blocked: time.Duration(s.blocked),
			StarvedOn: map[string]time.Duration{}, BlockedOn: map[string]time.Duration{},
			Work:    workStats(s, true),
			Dropped: s.dropped,
		}
		bytes := map[string]int64{}
		var order []string
		for _, c := range s.chunks {
			ss.Events += int64(len(c))
			for _, e := range c {
				d := time.Duration(e.t1 - e.t0)
				switch e.kind {
				case evWait:
					ss.StarvedOn[trimEdge(e.name, "wait <- ")] += d
				case evBlocked:
					ss.BlockedOn[trimEdge(e.name, "blocked -> ")] += d
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
		if ss.Work != nil {
			// its workers' waits and work overlap its own waits: split
			// the wall time instead of subtracting summed waits
			ws := splitWall(s)
			ss.Starved, ss.Blocked = time.Duration(ws.starved), time.Duration(ws.blocked)
			clear(ss.StarvedOn)
			clear(ss.BlockedOn)
			for p, d := range ws.starvedOn {
				ss.StarvedOn[p] = time.Duration(d)
			}
			for c, d := range ws.blockedOn {
				ss.BlockedOn[c] = time.Duration(d)
			}
		}
		ss.Busy = ss.Wall - ss.Starved - ss.Blocked
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
		st.Stages = append(st.Stages, ss)
	}
	st.Wall = time.Duration(last - first)
	st.Bounding, st.Chain = bound(st.Stages)
	return st
}

// waitsOn returns the stage s lost the most time on, as producer (input)
// or consumer (output), and how long; a tie names the input edge, then
// the first stage by name. ok is false when s never waited.
func (s StageStall) waitsOn() (stage string, d time.Duration, input, ok bool) {
	for _, p := range slices.Sorted(maps.Keys(s.StarvedOn)) {
		if v := s.StarvedOn[p]; !ok || v > d {
			stage, d, input, ok = p, v, true, true
		}
	}
	for _, c := range slices.Sorted(maps.Keys(s.BlockedOn)) {
		if v := s.BlockedOn[c]; !ok || v > d {
			stage, d, input, ok = c, v, false, true
		}
	}
	return stage, d, input, ok
}

// bound names the stage the others wait on. Busy time alone does not say
// (a stage that hands its work to a disk, or to workers, can be the limit
// while its goroutine looks idle); the waits do. From every stage it
// follows the edge the stage lost the most time on, as long as that is
// more than the stage's busy time (it waited on that stage more than it
// worked), until it reaches a stage that worked more than it waited on any
// one edge (that stage bounds the chain), a stage already on the chain (a
// cycle of waits: the busiest stage of the cycle bounds it), or a source
// outside the graph (a wait outside the ports: "queue"). Each stage's
// stalled time, and the bounding stage's own busy time, counts for the end
// of its chain; the end with the most time is the bounding stage. It
// returns that stage and the longest chain of waits ending at it.
func bound(stages []StageStall) (string, []string) {
	idx := make(map[string]int, len(stages))
	for i, s := range stages {
		idx[s.Stage] = i
	}
	next := func(i int) (string, bool) {
		s := stages[i]
		to, d, _, ok := s.waitsOn()
		return to, ok && d > s.Busy
	}
	weight := map[string]time.Duration{}
	var ends []string // in the order first reached
	chains := map[string][]string{}
	for i, s := range stages {
		path := []string{s.Stage}
		end := ""
		for cur := i; ; {
			to, ok := next(cur)
			if !ok {
				end = stages[cur].Stage
				break
			}
			j, isStage := idx[to]
			if !isStage {
				end = to
				path = append(path, to)
				break
			}
			if k := slices.Index(path, to); k >= 0 {
				end = to
				for _, n := range path[k:] {
					if stages[idx[n]].Busy > stages[idx[end]].Busy {
						end = n
					}
				}
				path = path[:slices.Index(path, end)+1]
				break
			}
			path = append(path, to)
			cur = j
		}
		if _, seen := weight[end]; !seen {
			ends = append(ends, end)
		}
		weight[end] += s.Starved + s.Blocked
		if s.Stage == end {
			weight[end] += s.Busy
		}
		if len(path) > len(chains[end]) {
			chains[end] = path
		}
	}
	best := ""
	for _, e := range ends {
		if best == "" || weight[e] > weight[best] {
			best = e
		}
	}
	return best, chains[best]
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
	share := func(d, wall time.Duration) float64 { return 100 * float64(d) / float64(max(wall, 1)) }
	for _, s := range st.Stages {
		for _, name := range slices.Sorted(maps.Keys(s.Work)) {
			wk := s.Work[name]
			fmt.Fprintf(w, "%s busy counts the time at least one %s was in flight: %.1f%% of its wall time (the union of %d %s intervals; their durations sum to %.1f%%)\n",
				s.Stage, name, share(wk.InFlight, s.Wall), wk.Count, name, share(wk.Sum, s.Wall))
		}
	}
	if st.Bounding != "" {
		b, isStage := StageStall{}, false
		for _, s := range st.Stages {
			if s.Stage == st.Bounding {
				b, isStage = s, true
			}
		}
		if isStage {
			fmt.Fprintf(w, "bounding stage: %s (busy %.1f%% of the %v run", st.Bounding, share(b.Busy, st.Wall), st.Wall.Round(time.Microsecond))
		} else {
			fmt.Fprintf(w, "bounding: %s, outside the graph (the stages waited for its input", st.Bounding)
		}
		if len(st.Chain) > 1 {
			fmt.Fprintf(w, "; waits followed: %s", strings.Join(st.Chain, " -> "))
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
	to, d, input, ok := s.waitsOn()
	if !ok {
		return "-"
	}
	what := "output to "
	if input {
		what = "input from "
	}
	return fmt.Sprintf("%s%s (%v)", what, to, d.Round(time.Microsecond))
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
