// This file holds edges and their two ends, the typed ports stages use.
// An edge is a buffered channel of fixed capacity plus a "gone" signal for a
// consumer that has returned. Ports record blocking time only when they
// actually block: the fast paths take no timestamp and touch no recorder.

package graph

import (
	"context"
	"fmt"
	"io"
)

// edge is a bounded, typed channel between two stages.
type edge[T any] struct {
	name string        // "from->to", for errors and traces
	ch   chan T        // closed by the runtime when the producer returns
	gone chan struct{} // closed by the runtime when the consumer returns

	waitName  string // trace span names, built once
	blockName string
}

// Out is the producing end of an edge, owned by one stage.
type Out[T any] struct {
	e *edge[T]
	s *Stage
}

// In is the consuming end of an edge, owned by one stage.
type In[T any] struct {
	e *edge[T]
	s *Stage
}

// Connect makes an edge of the given capacity from stage from to stage to and
// returns its two ends. from and to must belong to the same graph and may be
// the same stage; capacity must be >= 0 (0 is a synchronous hand-over).
// Violations are reported by Run.
func Connect[T any](from, to *Stage, capacity int) (*Out[T], *In[T]) {
	g := from.g
	name := from.name + "->" + to.name
	if to.g != g {
		g.errs = append(g.errs, fmt.Errorf("graph: edge %s: stages belong to different graphs", name))
	}
	if capacity < 0 {
		g.errs = append(g.errs, fmt.Errorf("graph: edge %s: negative capacity %d", name, capacity))
		capacity = 0
	}
	e := &edge[T]{
		name:      name,
		ch:        make(chan T, capacity),
		gone:      make(chan struct{}),
		waitName:  "wait <- " + from.name,
		blockName: "blocked -> " + to.name,
	}
	o, i := &Out[T]{e: e, s: from}, &In[T]{e: e, s: to}
	from.outs = append(from.outs, o)
	to.ins = append(to.ins, i)
	return o, i
}

// Send puts v on the edge, blocking while the edge is full. It returns
// ctx.Err() if ctx is cancelled first, and an error matching ErrConsumerGone if
// the consuming stage has returned.
func (o *Out[T]) Send(ctx context.Context, v T) error {
	done := ctx.Done()
	select {
	case <-done:
		return ctx.Err()
	default:
	}
	select {
	case <-o.e.gone:
		return o.closed()
	default:
	}
	select {
	case o.e.ch <- v:
		return nil
	default:
	}
	return o.sendSlow(ctx, done, v)
}

func (o *Out[T]) sendSlow(ctx context.Context, done <-chan struct{}, v T) error {
	r := o.s.rec
	var t0 int64
	if r != nil {
		t0 = r.now()
		r.waitBegins(evBlocked, t0)
	}
	var err error
	select {
	case o.e.ch <- v:
	case <-o.e.gone:
		err = o.closed()
	case <-done:
		err = ctx.Err()
	}
	if r != nil {
		r.span(evBlocked, o.e.blockName, t0, r.now())
	}
	return err
}

func (o *Out[T]) closed() error {
	return fmt.Errorf("edge %s: %w", o.e.name, ErrConsumerGone)
}

// Len returns the number of items queued on the edge.
func (o *Out[T]) Len() int { return len(o.e.ch) }

// Stage returns the stage that owns this port.
func (o *Out[T]) Stage() *Stage { return o.s }

func (o *Out[T]) close() { close(o.e.ch) }

// Recv takes the next item from the edge, blocking while it is empty. It
// returns io.EOF once the producing stage has returned and every item it
// sent has been received, and ctx.Err() if ctx is cancelled first.
func (in *In[T]) Recv(ctx context.Context) (T, error) {
	done := ctx.Done()
	select {
	case <-done:
		var zero T
		return zero, ctx.Err()
	default:
	}
	select {
	case v, ok := <-in.e.ch:
		if ok {
			return v, nil
		}
		return in.eof(ctx)
	default:
	}
	return in.recvSlow(ctx, done)
}

func (in *In[T]) recvSlow(ctx context.Context, done <-chan struct{}) (T, error) {
	r := in.s.rec
	var t0 int64
	if r != nil {
		t0 = r.now()
		r.waitBegins(evWait, t0)
	}
	var (
		v   T
		ok  bool
		err error
	)
	select {
	case v, ok = <-in.e.ch:
		if !ok {
			v, err = in.eof(ctx)
		}
	case <-done:
		err = ctx.Err()
	}
	if r != nil {
		r.span(evWait, in.e.waitName, t0, r.now())
	}
	return v, err
}

// TryRecv takes the next item if one is queued, without blocking: ok reports
// whether v is an item. err is io.EOF once the edge is closed and drained,
// or ctx.Err() if ctx is cancelled.
func (in *In[T]) TryRecv(ctx context.Context) (v T, ok bool, err error) {
	select {
	case <-ctx.Done():
		return v, false, ctx.Err()
	default:
	}
	select {
	case v, ok = <-in.e.ch:
		if ok {
			return v, true, nil
		}
		v, err = in.eof(ctx)
		return v, false, err
	default:
		return v, false, nil
	}
}

// eof reports the end of the edge, unless the graph is being cancelled: a
// failed producer cancels the graph before its outputs close, so consumers
// never mistake a failure for a clean end of input.
func (in *In[T]) eof(ctx context.Context) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	return zero, io.EOF
}

// Len returns the number of items queued on the edge.
func (in *In[T]) Len() int { return len(in.e.ch) }

// Stage returns the stage that owns this port.
func (in *In[T]) Stage() *Stage { return in.s }

func (in *In[T]) close() { close(in.e.gone) }
