// This file samples the depth of every edge while a recorded graph runs,
// for the queue-depth counter tracks of the trace. It is off unless the
// recorder asks for it (SampleQueues): the ports themselves stay untouched,
// and a sampler goroutine reads each edge's length at a fixed interval and
// records a gauge on the producing stage's track whenever it changed.

package graph

import (
	"context"
	"strconv"
	"sync"
	"time"
)

// SampleQueues makes graphs started afterwards sample every edge's queue
// depth each interval (0 turns sampling off; values below 100µs are
// raised to 100µs). Each edge becomes a gauge named "queue FROM->TO
// (cap N)" on its producer's track, recorded when it changes. A nil
// recorder ignores it.
func (r *Recorder) SampleQueues(every time.Duration) {
	if r == nil {
		return
	}
	if every > 0 {
		every = max(every, 100*time.Microsecond)
	}
	r.queueEvery.Store(int64(every))
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

// watchQueues starts the sampler if the recorder asks for one; the
// returned function stops it and waits for it to end.
func (g *Graph) watchQueues() (stop func()) {
	every := time.Duration(g.rec.queueEvery.Load())
	if every <= 0 {
		return func() {}
	}
	var edges []watchedEdge
	for _, s := range g.stages {
		for _, p := range s.outs {
			q, ok := p.(queuePort)
			if !ok || s.rec == nil {
				continue
			}
			name := "queue " + q.edgeName() + " (cap " + strconv.Itoa(q.edgeCap()) + ")"
			edges = append(edges, watchedEdge{p: q, sr: s.rec, name: name})
		}
	}
	if len(edges) == 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			for i := range edges {
				e := &edges[i]
				if n := e.p.Len(); n != e.last {
					e.last = n
					e.sr.counter(evSample, e.name, int64(n))
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	return func() {
		cancel()
		wg.Wait()
	}
}
