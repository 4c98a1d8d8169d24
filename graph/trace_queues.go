// This file samples the depth of every edge while a recorded graph runs,
// for the queue-depth counter tracks of the trace. It is off unless the
// recorder asks for it (SampleQueues), and the ports stay untouched: a
// stage calls Stage.SampleQueues at a natural beat (compute after each
// step), which reads every edge's length, at most once per interval, and
// records a gauge on the producing stage's track when it changed.
//
// There is deliberately no sampling goroutine: measured on the stage
// engine, a goroutine waiting on a ticker during a run cost 15-25% of
// decode throughput at 3,000 tokens/s (an armed timer changes how the Go
// runtime parks and wakes idle processors, and every token is a handful of
// goroutine hand-offs), while a goroutine blocked on a channel cost nothing.

package graph

import (
	"strconv"
	"sync"
	"time"
)

// SampleQueues makes graphs started afterwards sample every edge's queue
// depth, at most once per interval, whenever a stage calls
// Stage.SampleQueues (0 turns sampling off). Each edge becomes a gauge
// named "queue FROM->TO (cap N)" on its producer's track, recorded when it
// changes. A nil recorder ignores it.
func (r *Recorder) SampleQueues(every time.Duration) {
	if r == nil {
		return
	}
	r.queueEvery.Store(int64(max(every, 0)))
}

// queuePort is what the sampler needs of an Out.
type queuePort interface {
	Len() int
	edgeName() string
	edgeCap() int
}

func (o *Out[T]) edgeName() string { return o.e.name }
func (o *Out[T]) edgeCap() int     { return cap(o.e.ch) }

type watchedEdge struct {
	p    queuePort
	sr   *stageRec
	name string
	last int
}

// queueWatch is a running graph's sampling state.
type queueWatch struct {
	mu    sync.Mutex
	every int64
	next  int64 // ns since the epoch
	clock *stageRec
	edges []watchedEdge
}

// watchQueues arms sampling for a run if the recorder asks for it; the
// returned function disarms it.
func (g *Graph) watchQueues() (stop func()) {
	every := g.rec.queueEvery.Load()
	if every <= 0 {
		return func() {}
	}
	q := &queueWatch{every: every}
	for _, s := range g.stages {
		for _, p := range s.outs {
			e, ok := p.(queuePort)
			if !ok || s.rec == nil {
				continue
			}
			q.clock = s.rec
			name := "queue " + e.edgeName() + " (cap " + strconv.Itoa(e.edgeCap()) + ")"
			q.edges = append(q.edges, watchedEdge{p: e, sr: s.rec, name: name, last: -1}) // the first sample always records
		}
	}
	if len(q.edges) == 0 {
		return func() {}
	}
	g.queues = q
	return func() { g.queues = nil }
}

// SampleQueues records the depth of every edge of the stage's graph if
// queue sampling is on and the interval has passed since the last sample.
// With sampling off it returns at once and allocates nothing.
func (s *Stage) SampleQueues() {
	q := s.g.queues
	if q == nil {
		return
	}
	now := q.clock.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	if now < q.next {
		return
	}
	q.next = now + q.every
	for i := range q.edges {
		e := &q.edges[i]
		if n := e.p.Len(); n != e.last {
			e.last = n
			e.sr.counter(evSample, e.name, int64(n))
		}
	}
}
