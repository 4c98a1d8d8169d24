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

func TestPoolRunsEveryChunkOnce(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 5} {
		for _, chunks := range []int64{0, 1, 7, 1000} {
			t.Run(fmt.Sprintf("threads=%d/chunks=%d", threads, chunks), func(t *testing.T) {
				p := newPool(threads)
				defer p.close()
				task := &countTask{n: chunks, hits: make([]atomic.Int32, chunks)}
				for rep := range 50 {
					task.next.Store(0)
					p.run(task)
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

// TestPoolParkAndWake lets the workers park (longer than the spin window)
// between dispatches, and checks they still all take part.
func TestPoolParkAndWake(t *testing.T) {
	p := newPool(3)
	defer p.close()
	var seen [3]atomic.Int32
	task := &workerSet{seen: seen[:]}
	for range 5 {
		time.Sleep(5 * time.Millisecond)
		p.run(task)
	}
	for w := range seen {
		if seen[w].Load() != 5 {
			t.Errorf("worker %d ran %d times, want 5", w, seen[w].Load())
		}
	}
}

type workerSet struct{ seen []atomic.Int32 }

func (s *workerSet) run(worker int) { s.seen[worker].Add(1) }

func TestPoolRunAllocatesNothing(t *testing.T) {
	p := newPool(2)
	defer p.close()
	task := &countTask{n: 64, hits: make([]atomic.Int32, 64)}
	allocs := testing.AllocsPerRun(100, func() {
		task.next.Store(0)
		p.run(task)
	})
	if allocs != 0 {
		t.Errorf("run allocates %v times", allocs)
	}
}

func TestPoolCloseIdempotent(t *testing.T) {
	p := newPool(4)
	p.run(&workerSet{seen: make([]atomic.Int32, 4)})
	p.close()
	p.close()
}

// BenchmarkPoolDispatch measures the cost of one empty dispatch: the
// overhead every parallel operation of a decode step pays.
func BenchmarkPoolDispatch(b *testing.B) {
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			p := newPool(threads)
			defer p.close()
			task := &workerSet{seen: make([]atomic.Int32, threads)}
			for b.Loop() {
				p.run(task)
			}
		})
	}
}
