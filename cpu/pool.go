package cpu

// pool.go: the Backend's persistent worker pool. T-1 goroutines are started
// once; the calling goroutine is worker 0. A dispatch publishes a task and
// bumps a generation counter; workers spin briefly on the counter (the next
// operation of a decode step is usually microseconds away) and then park on
// a channel, so an idle backend costs no CPU. Dispatching allocates nothing:
// a task is a pointer to a struct the backend owns, passed as an interface.
//
// The pool is not safe for concurrent Run calls: the backend that owns it
// runs one operation at a time.

import (
	"sync"
	"sync/atomic"
)

// task is one parallel operation: run is called once on every worker
// (0 ≤ worker < nWorkers); the task splits its work, usually by claiming
// chunks from an atomic counter.
type task interface {
	run(worker int)
}

// spinIters bounds how long a worker (or the caller) spins before parking:
// roughly tens of microseconds of atomic loads.
const spinIters = 1 << 15

// paddedFlag keeps each worker's flag on its own cache line.
type paddedFlag struct {
	v atomic.Int32
	_ [60]byte
}

// pool runs tasks on n workers.
type pool struct {
	n    int
	task task

	gen  atomic.Uint32 // bumped once per dispatch
	_    [60]byte
	left atomic.Int32 // workers 1..n-1 still running the current task
	_    [60]byte
	quit atomic.Bool

	sleeping []paddedFlag    // 1 while worker w is parked (or about to)
	wake     []chan struct{} // one token wakes a parked worker
	caller   paddedFlag      // 1 while the caller is parked
	done     chan struct{}   // wakes the parked caller
	wg       sync.WaitGroup  // workers running
	closed   bool
}

// newPool starts n-1 worker goroutines (n ≥ 1).
func newPool(n int) *pool {
	n = max(n, 1)
	p := &pool{n: n, sleeping: make([]paddedFlag, n), wake: make([]chan struct{}, n), done: make(chan struct{}, 1)}
	for w := 1; w < n; w++ {
		p.wake[w] = make(chan struct{}, 1)
		p.wg.Add(1)
		go p.worker(w)
	}
	return p
}

// workers returns the number of workers, the caller included.
func (p *pool) workers() int { return p.n }

// run runs t on every worker and returns when all are done.
func (p *pool) run(t task) {
	if p.n == 1 {
		t.run(0)
		return
	}
	p.task = t
	p.left.Store(int32(p.n - 1))
	p.gen.Add(1) // publishes task (atomics are sequentially consistent)
	p.wakeAll()
	t.run(0)
	p.waitDone()
}

func (p *pool) wakeAll() {
	for w := 1; w < p.n; w++ {
		if p.sleeping[w].v.CompareAndSwap(1, 0) {
			p.wake[w] <- struct{}{}
		}
	}
}

// waitDone waits until every worker has finished the current task.
func (p *pool) waitDone() {
	for range spinIters {
		if p.left.Load() == 0 {
			return
		}
	}
	p.caller.v.Store(1)
	if p.left.Load() == 0 {
		if !p.caller.v.CompareAndSwap(1, 0) {
			<-p.done // the last worker saw us parked and sent a token
		}
		return
	}
	<-p.done
}

// worker is the loop of worker w ≥ 1.
func (p *pool) worker(w int) {
	defer p.wg.Done()
	var seen uint32
	for {
		seen = p.await(w, seen)
		if p.quit.Load() {
			return
		}
		p.task.run(w)
		if p.left.Add(-1) == 0 && p.caller.v.CompareAndSwap(1, 0) {
			p.done <- struct{}{}
		}
	}
}

// await returns the first generation after seen, spinning and then parking.
func (p *pool) await(w int, seen uint32) uint32 {
	for range spinIters {
		if g := p.gen.Load(); g != seen {
			return g
		}
	}
	f := &p.sleeping[w].v
	f.Store(1)
	if g := p.gen.Load(); g != seen {
		if !f.CompareAndSwap(1, 0) {
			<-p.wake[w] // a dispatcher saw us parked and sent a token
		}
		return g
	}
	<-p.wake[w]
	return p.gen.Load()
}

// close stops the workers and waits for them. The pool must be idle.
func (p *pool) close() {
	if p.closed || p.n == 1 {
		p.closed = true
		return
	}
	p.closed = true
	p.quit.Store(true)
	p.gen.Add(1)
	p.wakeAll()
	p.wg.Wait()
}
