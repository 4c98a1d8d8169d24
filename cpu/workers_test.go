package cpu

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// countTask claims n chunks from a counter and records who did each.
type countTask struct {
	next  atomic.Int64
	n     int64
	hits  []atomic.Int32
	delay time.Duration
}

func (c *countTask) run(worker int) {
	for {
		i := c.next.Add(1) - 1
		if i >= c.n {
			return
		}
		if c.delay > 0 {
			time.Sleep(c.delay)
		}
		c.hits[i].Add(1)
	}
}

func TestWorkersRunsEveryChunkOnce(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 5} {
		for _, chunks := range []int64{0, 1, 7, 1000} {
			t.Run(fmt.Sprintf("threads=%d/chunks=%d", threads, chunks), func(t *testing.T) {
				ws := newWorkers(threads)
				defer ws.close()
				task := &countTask{n: chunks, hits: make([]atomic.Int32, chunks)}
				for rep := range 50 {
					task.next.Store(0)
					ws.run(task)
					for i := range task.hits {
						if got := task.hits[i].Load(); got != int32(rep+1) {
							t.Fatalf("rep %d: chunk %d ran %d times, want %d", rep, i, got, rep+1)
						}
					}
				}
			})
		}
	}
}

// TestWorkersParkAndWake lets the workers park (longer than the spin window)
// between dispatches, and checks they all wake and join: the caller's part
// of the task waits until every worker is inside.
func TestWorkersParkAndWake(t *testing.T) {
	ws := newWorkers(3)
	defer ws.close()
	task := &barrierTask{n: 3}
	for rep := range 5 {
		time.Sleep(5 * time.Millisecond)
		task.in.Store(0)
		ws.run(task)
		if task.timedOut {
			t.Fatalf("rep %d: only %d of 3 workers joined", rep, task.in.Load())
		}
	}
}

// barrierTask holds the caller until all n workers have entered.
type barrierTask struct {
	n        int32
	in       atomic.Int32
	timedOut bool
}

func (b *barrierTask) run(worker int) {
	b.in.Add(1)
	if worker != 0 {
		return
	}
	deadline := time.Now().Add(5 * time.Second)
	for b.in.Load() < b.n {
		if time.Now().After(deadline) {
			b.timedOut = true
			return
		}
		time.Sleep(10 * time.Microsecond)
	}
}

// TestWorkersCallerFinishesAlone: a task the caller completes before a slow
// worker joins returns without waiting for it, and the worker skips it.
func TestWorkersCallerFinishesAlone(t *testing.T) {
	ws := newWorkers(2)
	defer ws.close()
	task := &countTask{n: 100, hits: make([]atomic.Int32, 100)}
	for range 200 {
		task.next.Store(0)
		ws.run(task)
	}
	for i := range task.hits {
		if got := task.hits[i].Load(); got != 200 {
			t.Fatalf("chunk %d ran %d times, want 200", i, got)
		}
	}
}

type workerSet struct{ seen []atomic.Int32 }

func (s *workerSet) run(worker int) { s.seen[worker].Add(1) }

func TestWorkersRunAllocatesNothing(t *testing.T) {
	ws := newWorkers(2)
	defer ws.close()
	task := &countTask{n: 64, hits: make([]atomic.Int32, 64)}
	allocs := testing.AllocsPerRun(100, func() {
		task.next.Store(0)
		ws.run(task)
	})
	if allocs != 0 {
		t.Errorf("run allocates %v times", allocs)
	}
}

func TestWorkersCloseIdempotent(t *testing.T) {
	ws := newWorkers(4)
	ws.run(&workerSet{seen: make([]atomic.Int32, 4)})
	ws.close()
	ws.close()
}

// BenchmarkWorkersDispatch measures one dispatch of 16 chunks of about 0.3 µs
// of arithmetic each (≈5 µs of work): the overhead every parallel
// operation of a decode step pays is the difference from threads=1's
// share of the work.
func BenchmarkWorkersDispatch(b *testing.B) {
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			ws := newWorkers(threads)
			defer ws.close()
			task := &busyTask{n: 16}
			for b.Loop() {
				task.next.Store(0)
				ws.run(task)
			}
		})
	}
}

// busyTask is n chunks of a short dependent arithmetic chain.
type busyTask struct {
	next atomic.Int64
	n    int64
	sink atomic.Uint64
}

func (t *busyTask) run(int) {
	for t.next.Add(1) <= t.n {
		x := uint64(1)
		for i := range 300 {
			x = x*6364136223846793005 + uint64(i)
		}
		t.sink.Add(x)
	}
}

// TestGuided checks the row chunks of matrix-vector products (backend_matmul.go).
func TestGuided(t *testing.T) {
	for _, c := range []struct{ n, workers, minSize, align int }{
		{8192, 2, 32, 8}, {512, 2, 32, 8}, {2048, 2, 16, 8}, {13, 2, 16, 8}, {8, 4, 16, 8},
		{128256, 16, 16, 8}, {1000, 3, 7, 8}, {1, 1, 1, 1},
	} {
		b := guided(nil, c.n, c.workers, c.minSize, c.align)
		minSize := (c.minSize + c.align - 1) / c.align * c.align
		if b[0] != 0 || int(b[len(b)-1]) != c.n || len(b) < 2 {
			t.Fatalf("%+v: bounds %v", c, b)
		}
		prev := c.n + 1
		for i := 1; i < len(b); i++ {
			size := int(b[i] - b[i-1])
			last := i == len(b)-1
			if size <= 0 || !last && (size%c.align != 0 || size < minSize || size > prev) {
				t.Fatalf("%+v: chunk %d is [%d, %d) in %v", c, i-1, b[i-1], b[i], b)
			}
			prev = size
		}
		// the first chunk gives each worker a long run, the last is short
		if first := int(b[1]); c.n >= 4*c.workers*minSize && first < c.n/(2*c.workers)-c.align {
			t.Errorf("%+v: first chunk %d rows", c, first)
		}
		if last := int(b[len(b)-1] - b[len(b)-2]); last > max(minSize, c.n/(2*c.workers)) {
			t.Errorf("%+v: last chunk %d rows", c, last)
		}
	}
	if b := guided(nil, 8192, 2, 32, 8); len(b)-1 > 32 {
		t.Errorf("8192 rows on 2 workers: %d chunks", len(b)-1)
	}
}

// workerTask records which workers ran it and keeps each busy for a while.
type workerTask struct {
	ran  []atomic.Bool
	busy time.Duration
}

func (w *workerTask) run(worker int) {
	w.ran[worker].Store(true)
	for start := time.Now(); time.Since(start) < w.busy; {
	}
}

// TestWorkersYields checks that the caller and every worker that ran a task
// pass through the Go scheduler once tasks have kept them busy longer than
// yieldTime: otherwise sysmon preempts them every 10 ms (workers.go).
func TestWorkersYields(t *testing.T) {
	ws := newWorkers(2)
	task := &workerTask{ran: make([]atomic.Bool, 2), busy: 100 * time.Microsecond}
	for start := time.Now(); time.Since(start) < 4*yieldTime; {
		ws.run(task)
	}
	ws.close() // the workers' writes happen before close returns
	for w := range ws.yield {
		if task.ran[w].Load() && ws.yield[w].last.IsZero() {
			t.Errorf("worker %d ran tasks for %v and never yielded", w, 4*yieldTime)
		}
	}
	if !task.ran[0].Load() {
		t.Error("the caller never ran the task")
	}
}
