// Tests of running and stopping graphs: drain, errors, panics, abort,
// backpressure, a consumer that leaves early, and declaration errors.

package graph

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestDrainDeliversEveryItem(t *testing.T) {
	const n = 10000
	for _, capacity := range []int{0, 1, 64} {
		t.Run(fmt.Sprintf("cap=%d", capacity), func(t *testing.T) {
			noLeak(t)
			p := newPipeline(nil, capacity)
			var got []int
			p.src.Do(func(ctx context.Context) error { return count(ctx, p.srcOut, n) })
			p.sq.Do(func(ctx context.Context) error { return square(ctx, p.sqIn, p.sqOut) })
			p.sink.Do(func(ctx context.Context) error {
				return drain(ctx, p.sinkIn, func(v int) error { got = append(got, v); return nil })
			})
			if err := p.g.Run(context.Background()); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if len(got) != n {
				t.Fatalf("sink got %d items, want %d", len(got), n)
			}
			for i, v := range got {
				if v != i*i {
					t.Fatalf("item %d = %d, want %d", i, v, i*i)
				}
			}
		})
	}
}

func TestStageErrorCancelsOthers(t *testing.T) {
	errBoom := errors.New("boom")
	for _, failing := range []string{"source", "square", "sink"} {
		t.Run("failing="+failing, func(t *testing.T) {
			noLeak(t)
			p := newPipeline(nil, 4)
			// Every stage runs forever unless cancelled; one fails after 100 items.
			fail := func(name string, i int) error {
				if name == failing && i == 100 {
					return errBoom
				}
				return nil
			}
			p.src.Do(func(ctx context.Context) error {
				for i := 0; ; i++ {
					if err := fail("source", i); err != nil {
						return err
					}
					if err := p.srcOut.Send(ctx, i); err != nil {
						return err
					}
				}
			})
			p.sq.Do(func(ctx context.Context) error {
				i := 0
				return drain(ctx, p.sqIn, func(v int) error {
					i++
					if err := fail("square", i); err != nil {
						return err
					}
					return p.sqOut.Send(ctx, v)
				})
			})
			p.sink.Do(func(ctx context.Context) error {
				i := 0
				err := drain(ctx, p.sinkIn, func(int) error { i++; return fail("sink", i) })
				if err == nil { // end of input without cancellation: wait for it
					<-ctx.Done()
					return ctx.Err()
				}
				return err
			})
			err := waitRun(t, runAsync(context.Background(), p.g))
			if !errors.Is(err, errBoom) {
				t.Fatalf("Run = %v, want %v", err, errBoom)
			}
			if want := fmt.Sprintf("stage %q", failing); !strings.Contains(err.Error(), want) {
				t.Errorf("Run = %q, want it to name %s", err, want)
			}
		})
	}
}

// A failing stage must win over the errors of the stages that see its end:
// the downstream stage here fails on a short input, and must never be the
// error reported.
func TestErrorNotMasked(t *testing.T) {
	errBoom := errors.New("boom")
	errShort := errors.New("short input")
	for i := range 200 {
		p := newPipeline(nil, 2)
		p.src.Do(func(ctx context.Context) error {
			if err := count(ctx, p.srcOut, i%5); err != nil {
				return err
			}
			return errBoom
		})
		p.sq.Do(func(ctx context.Context) error { return square(ctx, p.sqIn, p.sqOut) })
		p.sink.Do(func(ctx context.Context) error {
			if err := drain(ctx, p.sinkIn, func(int) error { return nil }); err != nil {
				return err
			}
			return errShort // it expected more: a clean end here is an error
		})
		if err := p.g.Run(context.Background()); !errors.Is(err, errBoom) {
			t.Fatalf("run %d: Run = %v, want %v", i, err, errBoom)
		}
	}
}

func TestPanicBecomesError(t *testing.T) {
	errInner := errors.New("inner")
	tests := []struct {
		name  string
		value any
		match error
	}{
		{"string", "bad element", ErrPanic},
		{"error", errInner, errInner},
		{"nil map", nil, ErrPanic},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			noLeak(t)
			p := newPipeline(nil, 4)
			p.src.Do(func(ctx context.Context) error { return count(ctx, p.srcOut, -1) })
			p.sq.Do(func(ctx context.Context) error {
				return drain(ctx, p.sqIn, func(v int) error {
					if v == 10 {
						if tt.value == nil {
							var m map[int]int
							m[v] = v // runtime panic
						}
						panic(tt.value)
					}
					return p.sqOut.Send(ctx, v)
				})
			})
			p.sink.Do(func(ctx context.Context) error { return drain(ctx, p.sinkIn, func(int) error { return nil }) })
			err := waitRun(t, runAsync(context.Background(), p.g))
			if !errors.Is(err, ErrPanic) || !errors.Is(err, tt.match) {
				t.Fatalf("Run = %v, want errors matching ErrPanic and %v", err, tt.match)
			}
			if !strings.Contains(err.Error(), `stage "square"`) {
				t.Errorf("Run = %q, want it to name the stage", err)
			}
		})
	}
}

func TestAbortReturnsPromptly(t *testing.T) {
	tests := []struct {
		name string
		sink func(ctx context.Context, in *In[int], seen *atomic.Int64) error
	}{
		// Items flow: every stage is mid-stream when the context goes.
		{"flowing", func(ctx context.Context, in *In[int], seen *atomic.Int64) error {
			return drain(ctx, in, func(int) error { seen.Add(1); return nil })
		}},
		// The sink stops reading: source and square sit blocked in Send.
		{"blocked", func(ctx context.Context, in *In[int], seen *atomic.Int64) error {
			if err := drain(ctx, in, func(int) error {
				if seen.Add(1) == 1000 {
					<-ctx.Done()
					return ctx.Err()
				}
				return nil
			}); err != nil {
				return err
			}
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			noLeak(t)
			p := newPipeline(nil, 8)
			var seen atomic.Int64
			p.src.Do(func(ctx context.Context) error { return count(ctx, p.srcOut, -1) })
			p.sq.Do(func(ctx context.Context) error { return square(ctx, p.sqIn, p.sqOut) })
			p.sink.Do(func(ctx context.Context) error { return tt.sink(ctx, p.sinkIn, &seen) })

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := runAsync(ctx, p.g)
			for seen.Load() < 1000 {
				time.Sleep(time.Millisecond)
			}
			start := time.Now()
			cancel()
			err := waitRun(t, done)
			t.Logf("Run returned %v after cancel", time.Since(start))
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Run = %v, want context.Canceled", err)
			}
		})
	}
}

// A slow sink: items in flight (made by the source, not yet consumed by the
// sink) never exceed the edge capacities plus one item held by each stage.
func TestBackpressureBoundsInFlight(t *testing.T) {
	noLeak(t)
	const capacity, n = 4, 300
	p := newPipeline(nil, capacity)
	var produced, consumed atomic.Int64
	var maxInFlight int64
	p.src.Do(func(ctx context.Context) error {
		for i := range n {
			produced.Add(1)
			maxInFlight = max(maxInFlight, produced.Load()-consumed.Load())
			if err := p.srcOut.Send(ctx, i); err != nil {
				return err
			}
		}
		return nil
	})
	p.sq.Do(func(ctx context.Context) error { return square(ctx, p.sqIn, p.sqOut) })
	p.sink.Do(func(ctx context.Context) error {
		return drain(ctx, p.sinkIn, func(int) error {
			time.Sleep(20 * time.Microsecond)
			consumed.Add(1)
			return nil
		})
	})
	if err := p.g.Run(context.Background()); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if bound := int64(2*capacity + 3); maxInFlight > bound {
		t.Errorf("max items in flight = %d, want <= %d (2 edges of %d + 3 stages)", maxInFlight, bound, capacity)
	}
	if maxInFlight < 2*capacity {
		t.Errorf("max items in flight = %d: the edges never filled, the test measures nothing", maxInFlight)
	}
	t.Logf("max in flight %d (edges hold %d)", maxInFlight, 2*capacity)
}

// A sink that walks away after 10 items ends the run cleanly: the stages
// upstream get ErrConsumerGone instead of blocking forever.
func TestConsumerLeaves(t *testing.T) {
	noLeak(t)
	p := newPipeline(nil, 2)
	var srcErr error
	p.src.Do(func(ctx context.Context) error {
		srcErr = count(ctx, p.srcOut, -1)
		return srcErr
	})
	p.sq.Do(func(ctx context.Context) error { return square(ctx, p.sqIn, p.sqOut) })
	p.sink.Do(func(ctx context.Context) error {
		for range 10 {
			if _, err := p.sinkIn.Recv(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	if err := waitRun(t, runAsync(context.Background(), p.g)); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if !errors.Is(srcErr, ErrConsumerGone) {
		t.Errorf("source's Send = %v, want ErrConsumerGone", srcErr)
	}
}

func TestDeclarationErrors(t *testing.T) {
	nop := func(context.Context) error { return nil }
	tests := []struct {
		name  string
		build func() *Graph
		want  string
	}{
		{"no stages", func() *Graph { return New(nil) }, "no stages"},
		{"no function", func() *Graph {
			g := New(nil)
			g.Stage("a")
			return g
		}, `stage "a": no function`},
		{"empty name", func() *Graph {
			g := New(nil)
			g.Stage("").Do(nop)
			return g
		}, "empty name"},
		{"duplicate", func() *Graph {
			g := New(nil)
			g.Stage("a").Do(nop)
			g.Stage("a").Do(nop)
			return g
		}, `duplicate stage name "a"`},
		{"Do twice", func() *Graph {
			g := New(nil)
			a := g.Stage("a")
			a.Do(nop)
			a.Do(nop)
			return g
		}, "Do called twice"},
		{"negative capacity", func() *Graph {
			g := New(nil)
			a, b := g.Stage("a"), g.Stage("b")
			Connect[int](a, b, -1)
			a.Do(nop)
			b.Do(nop)
			return g
		}, "edge a->b: negative capacity -1"},
		{"two graphs", func() *Graph {
			g, h := New(nil), New(nil)
			a, b := g.Stage("a"), h.Stage("b")
			Connect[int](a, b, 1)
			a.Do(nop)
			return g
		}, "different graphs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.build().Run(context.Background())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Run = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestRunTwice(t *testing.T) {
	g := New(nil)
	g.Stage("a").Do(func(context.Context) error { return nil })
	if err := g.Run(context.Background()); err != nil {
		t.Fatalf("first Run: %v", err)
	}
	if err := g.Run(context.Background()); err == nil {
		t.Fatal("second Run = nil, want an error")
	}
}
