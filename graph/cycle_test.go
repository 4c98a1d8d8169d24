// Tests of a feedback cycle shaped like flowinfer's request path:
// source -> scheduler -> compute -> sampler -> scheduler (the cycle of three),
// and sampler -> sink for finished jobs. A job goes round the cycle `steps`
// times, like a sequence generating tokens.

package graph

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"
)

type job struct{ id, step int }

type cycle struct {
	g        *Graph
	finished []int        // job ids in the order the sink saw them
	computed atomic.Int64 // compute steps done
	sunk     atomic.Int64 // jobs the sink saw
}

// newCycle wires the graph. jobs < 0 means the source never stops;
// maxInFlight bounds the jobs the scheduler has inside the cycle.
func newCycle(rec *Recorder, jobs, steps, maxInFlight, capacity int) *cycle {
	c := &cycle{g: New(rec)}
	src, sched := c.g.Stage("source"), c.g.Stage("scheduler")
	comp, samp, sink := c.g.Stage("compute"), c.g.Stage("sampler"), c.g.Stage("sink")
	admitOut, admitIn := Connect[job](src, sched, capacity)
	stepOut, stepIn := Connect[job](sched, comp, capacity)
	logitOut, logitIn := Connect[job](comp, samp, capacity)
	fbOut, fbIn := Connect[job](samp, sched, capacity) // the feedback edge
	doneOut, doneIn := Connect[job](samp, sink, capacity)

	src.Do(func(ctx context.Context) error {
		for i := 0; jobs < 0 || i < jobs; i++ {
			if err := admitOut.Send(ctx, job{id: i}); err != nil {
				return err
			}
		}
		return nil
	})
	sched.Do(func(ctx context.Context) error {
		open, inFlight := true, 0
		for open || inFlight > 0 {
			if inFlight == 0 { // idle: block for the next admission
				j, err := admitIn.Recv(ctx)
				if err == io.EOF {
					open = false
					continue
				}
				if err != nil {
					return err
				}
				if err := stepOut.Send(ctx, j); err != nil {
					return err
				}
				inFlight++
			}
			for open && inFlight < maxInFlight { // admit more without blocking
				j, ok, err := admitIn.TryRecv(ctx)
				if err == io.EOF {
					open = false
					break
				}
				if err != nil {
					return err
				}
				if !ok {
					break
				}
				if err := stepOut.Send(ctx, j); err != nil {
					return err
				}
				inFlight++
			}
			j, err := fbIn.Recv(ctx) // one step of one job comes back
			if err != nil {
				return fmt.Errorf("feedback with %d in flight: %w", inFlight, err)
			}
			if j.step < steps {
				if err := stepOut.Send(ctx, j); err != nil {
					return err
				}
			} else {
				inFlight--
			}
		}
		return nil
	})
	comp.Do(func(ctx context.Context) error {
		for {
			j, err := stepIn.Recv(ctx)
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			j.step++
			c.computed.Add(1)
			if err := logitOut.Send(ctx, j); err != nil {
				return err
			}
		}
	})
	samp.Do(func(ctx context.Context) error {
		for {
			j, err := logitIn.Recv(ctx)
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			if j.step == steps {
				if err := doneOut.Send(ctx, j); err != nil {
					return err
				}
			}
			if err := fbOut.Send(ctx, j); err != nil {
				return err
			}
		}
	})
	sink.Do(func(ctx context.Context) error {
		for {
			j, err := doneIn.Recv(ctx)
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			c.finished = append(c.finished, j.id)
			c.sunk.Add(1)
		}
	})
	return c
}

func TestCycleDrain(t *testing.T) {
	const jobs, steps = 300, 5
	tests := []struct{ maxInFlight, capacity int }{
		{1, 1}, {4, 2}, {16, 8},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("inflight=%d/cap=%d", tt.maxInFlight, tt.capacity), func(t *testing.T) {
			noLeak(t)
			c := newCycle(NewRecorder(0), jobs, steps, tt.maxInFlight, tt.capacity)
			if err := waitRun(t, runAsync(context.Background(), c.g)); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if got := c.computed.Load(); got != jobs*steps {
				t.Errorf("compute ran %d steps, want %d", got, jobs*steps)
			}
			seen := make([]bool, jobs)
			for _, id := range c.finished {
				if seen[id] {
					t.Fatalf("job %d finished twice", id)
				}
				seen[id] = true
			}
			if len(c.finished) != jobs {
				t.Errorf("%d jobs finished, want %d", len(c.finished), jobs)
			}
		})
	}
}

func TestCycleAbort(t *testing.T) {
	tests := []struct {
		name                  string
		maxInFlight, capacity int
	}{
		{"running", 4, 2},
		// More jobs in flight than the cycle can hold: it deadlocks with
		// every stage blocked in Send, and only abort ends it.
		{"deadlocked", 1000, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			noLeak(t)
			c := newCycle(nil, -1, 5, tt.maxInFlight, tt.capacity)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := runAsync(ctx, c.g)
			deadline := time.Now().Add(200 * time.Millisecond)
			for c.sunk.Load() < 100 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			start := time.Now()
			cancel()
			err := waitRun(t, done)
			t.Logf("Run returned after %v (%d jobs finished)", time.Since(start), c.sunk.Load())
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Run = %v, want context.Canceled", err)
			}
		})
	}
}
