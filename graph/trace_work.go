// This file holds the interval arithmetic behind work spans (BeginWork):
// the time at least one was open (the union of their intervals), the split
// of a stage's wall time into busy, starved and blocked when its workers'
// spans overlap its own goroutine's waits, and the lanes the Chrome trace
// draws overlapping work spans on.
//
// It does not guess at concurrency it was not told about: only spans opened
// with BeginWork count as work done while the stage's goroutine waits.

package graph

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"time"
)

// ival is an interval [t0, t1) in ns since the recorder's epoch.
type ival struct{ t0, t1 int64 }

// unionLen returns the length of the union of iv, which it sorts.
func unionLen(iv []ival) int64 {
	slices.SortFunc(iv, func(a, b ival) int { return cmp.Compare(a.t0, b.t0) })
	var n int64
	end := int64(math.MinInt64)
	for _, v := range iv {
		if v.t1 <= end {
			continue
		}
		n += v.t1 - max(v.t0, end)
		end = v.t1
	}
	return n
}

// WorkStats totals the work spans (BeginWork) of one name on a stage.
type WorkStats struct {
	Count int64
	// Sum adds up the spans' durations: with several in flight at once it
	// exceeds the wall time. InFlight is the time at least one was open
	// (the union of their intervals), what a busy share is made of.
	Sum, InFlight, Max time.Duration
}

// workStats returns the work spans of s by name, nil when it has none;
// with byGroup, a name "group:detail" counts under group (a device's
// per-layer spans "gpu:attn-3" make one line of the stall report).
func workStats(s snapshot, byGroup bool) map[string]WorkStats {
	var byName map[string][]ival
	for _, c := range s.chunks {
		for _, e := range c {
			if e.kind != evWork {
				continue
			}
			if byName == nil {
				byName = map[string][]ival{}
			}
			name := e.name
			if i := strings.IndexByte(name, ':'); byGroup && i > 0 {
				name = name[:i]
			}
			byName[name] = append(byName[name], ival{e.t0, e.t1})
		}
	}
	if byName == nil {
		return nil
	}
	out := make(map[string]WorkStats, len(byName))
	for name, iv := range byName {
		var w WorkStats
		for _, v := range iv {
			d := time.Duration(v.t1 - v.t0)
			w.Count++
			w.Sum += d
			w.Max = max(w.Max, d)
		}
		w.InFlight = time.Duration(unionLen(iv))
		out[name] = w
	}
	return out
}

// wallSplit is a stage's wall time split by splitWall.
type wallSplit struct {
	busy, starved, blocked int64
	starvedOn, blockedOn   map[string]int64 // by producer / consumer stage
	inFlight               int64            // covered by a work span
}

// splitWall splits the wall time [begin, end) of a stage that has work
// spans: an instant is busy when a work span covers it; else blocked when
// one of the stage's goroutines was blocked on an output then; else
// starved when one was waiting for input; else busy (its own goroutine
// worked). Overlapping waits (workers blocked while the stage's goroutine
// waits) are counted once, on the edge of the earliest-recorded of them.
// The parts add up to the wall time; they come from stored events and
// miss dropped ones.
func splitWall(s snapshot) wallSplit {
	const (
		clWork = iota
		clBlocked
		clWait
	)
	type label struct {
		class int
		name  string
	}
	type edgePt struct {
		t     int64
		delta int
		label int
	}
	var labels []label
	index := map[label]int{}
	var pts []edgePt
	for _, c := range s.chunks {
		for _, e := range c {
			var l label
			switch e.kind {
			case evWork:
				l = label{clWork, ""}
			case evBlocked:
				l = label{clBlocked, trimEdge(e.name, "blocked -> ")}
			case evWait:
				l = label{clWait, trimEdge(e.name, "wait <- ")}
			default:
				continue
			}
			t0, t1 := max(e.t0, s.begin), min(e.t1, s.end)
			if t1 <= t0 {
				continue
			}
			i, ok := index[l]
			if !ok {
				i = len(labels)
				index[l] = i
				labels = append(labels, l)
			}
			pts = append(pts, edgePt{t0, 1, i}, edgePt{t1, -1, i})
		}
	}
	slices.SortFunc(pts, func(a, b edgePt) int { return cmp.Compare(a.t, b.t) })
	ws := wallSplit{starvedOn: map[string]int64{}, blockedOn: map[string]int64{}}
	open := make([]int, len(labels))
	var byClass [3]int
	// first names the earliest-recorded open interval of class cl
	first := func(cl int) string {
		for i, n := range open {
			if n > 0 && labels[i].class == cl {
				return labels[i].name
			}
		}
		return ""
	}
	t := s.begin
	credit := func(to int64) {
		d := to - t
		if d <= 0 {
			return
		}
		switch {
		case byClass[clWork] > 0:
			ws.busy += d
			ws.inFlight += d
		case byClass[clBlocked] > 0:
			ws.blocked += d
			ws.blockedOn[first(clBlocked)] += d
		case byClass[clWait] > 0:
			ws.starved += d
			ws.starvedOn[first(clWait)] += d
		default:
			ws.busy += d
		}
		t = to
	}
	for _, p := range pts {
		credit(p.t)
		open[p.label] += p.delta
		byClass[labels[p.label].class] += p.delta
	}
	credit(s.end)
	return ws
}

// trimEdge strips a port's span prefix ("wait <- ", "blocked -> ") from
// name, leaving the stage at the edge's other end.
func trimEdge(name, prefix string) string { return strings.TrimPrefix(name, prefix) }
