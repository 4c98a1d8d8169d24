package cpu

// pool.go: the Backend's persistent worker pool. T-1 goroutines are started
// once; the calling goroutine is worker 0. A dispatch publishes a task and a
// new generation in one atomic state word; workers spin briefly on it (the
// next operation of a decode step is usually microseconds away) and then
// park on a channel, so an idle backend costs no CPU. Dispatching allocates
// nothing: a task is a pointer to a struct the backend owns, passed as an
// interface.
//
// Tasks split their work into chunks that workers claim from a counter, so
// the caller alone can finish a task. When it has, it closes the task:
// workers that had not joined yet (descheduled by the OS, still parked)
// skip it, and the caller waits only for workers still inside. On a
// machine shared with other processes this keeps one late thread from
// stalling every operation.
//
// The pool is not safe for concurrent run calls: the backend that owns it
// runs one operation at a time.

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// task is one parallel operation: run is called on the caller (worker 0)
// and on each worker that joins before the caller has finished (0 ≤ worker
// < nWorkers); the task splits its work by claiming chunks from an atomic
// counter, so any subset of workers completes it.
type task interface {
	run(worker int)
}

// spinTime bounds how long a worker (or the caller) spins before parking.
// Between two operations of a decode step the caller runs serial code
// (norms, activation conversion, RoPE) for up to tens of microseconds; a
// worker that parked then misses the next operation or costs the caller a
// wake-up (measured: with a 13 µs spin, 40% of the dispatches of a 1B
// model's decode found the worker parked).
const spinTime = 200 * time.Microsecond

// spinCheck is how many polls pass between two clock readings.
const spinCheck = 256

// spin polls done until it returns true or spinTime has passed, and
// reports whether it did.
func spin(done func() bool) bool {
	var start time.Time
	for i := 1; ; i++ {
		if done() {
			return true
		}
		if i%spinCheck == 0 {
			now := time.Now()
			if start.IsZero() {
				start = now
			} else if now.Sub(start) > spinTime {
				return false
			}
		}
	}
}

// The state word: generation in the high 32 bits, the closed flag, and the
// number of workers inside the current task in the low bits.
const (
	closedBit  = 1 << 31
	activeMask = closedBit - 1
)

// paddedFlag keeps each worker's flag on its own cache line.
type paddedFlag struct {
	v atomic.Int32
	_ [60]byte
}

// pool runs tasks on n workers.
type pool struct {
	n    int
	task task
	gen  uint32 // the caller's copy of the current generation

	_     [64]byte
	state atomic.Uint64
	_     [56]byte
	quit  atomic.Bool

	sleeping []paddedFlag    // 1 while worker w is parked (or about to)
	wake     []chan struct{} // one token wakes a parked worker
	caller   paddedFlag      // 1 while the caller is parked
	done     chan struct{}   // wakes the parked caller
	wg       sync.WaitGroup  // workers running
	closed   bool
	yield    []yielder // per worker: when it last called runtime.Gosched
}

// yieldTime is how often each worker passes through the Go scheduler
// (runtime.Gosched: 150 ns when nothing else is runnable, measured here).
// The runtime's monitor, sysmon, preempts a goroutine that has run 10 ms
// without passing through it: in Go code with a signal, inside a C call by
// taking its P away, which the goroutine must find again when the call
// returns. After taking a P, sysmon wakes every 20 µs for a millisecond or
// more, and on 2 cores each wake-up is a context switch off a worker.
// Measured (BenchmarkMatMulCold, 2 threads): 3-7 context switches per
// matrix product without yielding, 0.4-0.9 with; docs/decisions.md has the
// decode throughput.
const yieldTime = 2 * time.Millisecond

// yielder calls runtime.Gosched at most once per yieldTime.
type yielder struct {
	last time.Time
	_    [40]byte
}

func (y *yielder) maybe() {
	if now := time.Now(); now.Sub(y.last) > yieldTime {
		y.last = now
		runtime.Gosched()
	}
}

// newPool starts n-1 worker goroutines (n ≥ 1).
func newPool(n int) *pool {
	n = max(n, 1)
	p := &pool{n: n, sleeping: make([]paddedFlag, n), yield: make([]yielder, n), wake: make([]chan struct{}, n), done: make(chan struct{}, 1)}
	for w := 1; w < n; w++ {
		p.wake[w] = make(chan struct{}, 1)
		p.wg.Add(1)
		go p.worker(w)
	}
	return p
}

// workers returns the number of workers, the caller included.
func (p *pool) workers() int { return p.n }

// run runs t on the caller and the workers that join, and returns when t
// is done and no worker is inside it.
func (p *pool) run(t task) {
	if p.n == 1 {
		t.run(0)
		p.yield[0].maybe()
		return
	}
	p.task = t
	p.gen++
	p.state.Store(uint64(p.gen) << 32) // publishes task: open, nobody inside
	p.wakeAll()
	t.run(0)
	if old := p.state.Or(closedBit); old&activeMask != 0 {
		p.waitDone()
	}
	p.yield[0].maybe()
}

func (p *pool) wakeAll() {
	for w := 1; w < p.n; w++ {
		if p.sleeping[w].v.CompareAndSwap(1, 0) {
			p.wake[w] <- struct{}{}
		}
	}
}

// waitDone waits until no worker is inside the closed task.
func (p *pool) waitDone() {
	if spin(p.idle) {
		return
	}
	p.caller.v.Store(1)
	if p.state.Load()&activeMask == 0 {
		if !p.caller.v.CompareAndSwap(1, 0) {
			<-p.done // the last worker saw us parked and sent a token
		}
		return
	}
	<-p.done
}

// idle reports whether no worker is inside the current task.
func (p *pool) idle() bool { return p.state.Load()&activeMask == 0 }

// worker is the loop of worker w ≥ 1.
func (p *pool) worker(w int) {
	defer p.wg.Done()
	var seen uint32
	for {
		seen = p.await(w, seen)
		if p.quit.Load() {
			return
		}
		if !p.join(seen) {
			continue // the caller finished without us
		}
		p.task.run(w)
		s := p.state.Add(^uint64(0)) // leave
		if s&closedBit != 0 && s&activeMask == 0 && p.caller.v.CompareAndSwap(1, 0) {
			p.done <- struct{}{}
		}
		p.yield[w].maybe()
	}
}

// join enters the task of generation g unless it is closed or gone.
func (p *pool) join(g uint32) bool {
	for {
		s := p.state.Load()
		if uint32(s>>32) != g || s&closedBit != 0 {
			return false
		}
		if p.state.CompareAndSwap(s, s+1) {
			return true
		}
	}
}

// await returns the first generation after seen, spinning and then parking.
func (p *pool) await(w int, seen uint32) uint32 {
	var g uint32
	if spin(func() bool { g = uint32(p.state.Load() >> 32); return g != seen }) {
		return g
	}
	f := &p.sleeping[w].v
	f.Store(1)
	if g := uint32(p.state.Load() >> 32); g != seen {
		if !f.CompareAndSwap(1, 0) {
			<-p.wake[w] // a dispatcher saw us parked and sent a token
		}
		return g
	}
	<-p.wake[w]
	return uint32(p.state.Load() >> 32)
}

// close stops the workers and waits for them. The pool must be idle.
func (p *pool) close() {
	if p.closed || p.n == 1 {
		p.closed = true
		return
	}
	p.closed = true
	p.quit.Store(true)
	p.gen++
	p.state.Store(uint64(p.gen)<<32 | closedBit)
	p.wakeAll()
	p.wg.Wait()
}
