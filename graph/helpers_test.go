// Test helpers: a goroutine-leak check and a configurable 3-stage pipeline
// (source -> square -> sink) the tests and benchmarks share.

package graph

import (
	"bytes"
	"context"
	"io"
	"runtime"
	"testing"
	"time"
)

// noLeak fails t if, by the end of the test, more goroutines run than at
// its start. It polls, since goroutines finish shortly after Run returns.
// Tests using it must not run in parallel.
func noLeak(t *testing.T) {
	t.Helper()
	base := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > base {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("goroutines: %d at start, %d now:\n%s", base, runtime.NumGoroutine(), buf)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

// pipeline is source -> square -> sink over int edges.
type pipeline struct {
	g             *Graph
	src, sq, sink *Stage
	srcOut, sqOut *Out[int]
	sqIn, sinkIn  *In[int]
}

func newPipeline(rec *Recorder, capacity int) *pipeline {
	p := &pipeline{g: New(rec)}
	p.src, p.sq, p.sink = p.g.Stage("source"), p.g.Stage("square"), p.g.Stage("sink")
	p.srcOut, p.sqIn = Connect[int](p.src, p.sq, capacity)
	p.sqOut, p.sinkIn = Connect[int](p.sq, p.sink, capacity)
	return p
}

// count sends 0..n-1 (forever if n < 0).
func count(ctx context.Context, out *Out[int], n int) error {
	for i := 0; n < 0 || i < n; i++ {
		if err := out.Send(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// square sends v*v for every v it receives.
func square(ctx context.Context, in *In[int], out *Out[int]) error {
	for {
		v, err := in.Recv(ctx)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := out.Send(ctx, v*v); err != nil {
			return err
		}
	}
}

// drain calls f on every item until end of input.
func drain(ctx context.Context, in *In[int], f func(int) error) error {
	for {
		v, err := in.Recv(ctx)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := f(v); err != nil {
			return err
		}
	}
}

// runAsync runs g in the background; the result arrives on the channel.
func runAsync(ctx context.Context, g *Graph) <-chan error {
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	return done
}

// waitRun waits for a run's result, failing t after a generous deadline.
func waitRun(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("graph did not return within 10s:\n%s", bytes.TrimSpace(buf))
		return nil
	}
}
