package cpu

// workers.go: the Backend's persistent workers. T-1 goroutines are started
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
// The workers are not safe for concurrent run calls: the backend that owns
// them runs one operation at a time.

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

// workers runs tasks on n workers (the caller included).
type workers struct {
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

// newWorkers starts n-1 worker goroutines (n ≥ 1).
func newWorkers(n int) *workers {
	n = max(n, 1)
	ws := &workers{n: n, sleeping: make([]paddedFlag, n), yield: make([]yielder, n), wake: make([]chan struct{}, n), done: make(chan struct{}, 1)}
	for w := 1; w < n; w++ {
		ws.wake[w] = make(chan struct{}, 1)
		ws.wg.Add(1)
		go ws.worker(w)
	}
	return ws
}

// workers returns the number of workers, the caller included.
func (ws *workers) count() int { return ws.n }

// run runs t on the caller and the workers that join, and returns when t
// is done and no worker is inside it.
func (ws *workers) run(t task) {
	if ws.n == 1 {
		t.run(0)
		ws.yield[0].maybe()
		return
	}
	ws.task = t
	ws.gen++
	ws.state.Store(uint64(ws.gen) << 32) // publishes task: open, nobody inside
	ws.wakeAll()
	t.run(0)
	if old := ws.state.Or(closedBit); old&activeMask != 0 {
		ws.waitDone()
	}
	ws.yield[0].maybe()
}

func (ws *workers) wakeAll() {
	for w := 1; w < ws.n; w++ {
		if ws.sleeping[w].v.CompareAndSwap(1, 0) {
			ws.wake[w] <- struct{}{}
		}
	}
}

// waitDone waits until no worker is inside the closed task.
func (ws *workers) waitDone() {
	if spin(ws.idle) {
		return
	}
	ws.caller.v.Store(1)
	if ws.state.Load()&activeMask == 0 {
		if !ws.caller.v.CompareAndSwap(1, 0) {
			<-ws.done // the last worker saw us parked and sent a token
		}
		return
	}
	<-ws.done
}

// idle reports whether no worker is inside the current task.
func (ws *workers) idle() bool { return ws.state.Load()&activeMask == 0 }

// worker is the loop of worker w ≥ 1.
func (ws *workers) worker(w int) {
	defer ws.wg.Done()
	var seen uint32
	for {
		seen = ws.await(w, seen)
		if ws.quit.Load() {
			return
		}
		if !ws.join(seen) {
			continue // the caller finished without us
		}
		ws.task.run(w)
		s := ws.state.Add(^uint64(0)) // leave
		if s&closedBit != 0 && s&activeMask == 0 && ws.caller.v.CompareAndSwap(1, 0) {
			ws.done <- struct{}{}
		}
		ws.yield[w].maybe()
	}
}

// join enters the task of generation g unless it is closed or gone.
func (ws *workers) join(g uint32) bool {
	for {
		s := ws.state.Load()
		if uint32(s>>32) != g || s&closedBit != 0 {
			return false
		}
		if ws.state.CompareAndSwap(s, s+1) {
			return true
		}
	}
}

// await returns the first generation after seen, spinning and then parking.
func (ws *workers) await(w int, seen uint32) uint32 {
	var g uint32
	if spin(func() bool { g = uint32(ws.state.Load() >> 32); return g != seen }) {
		return g
	}
	f := &ws.sleeping[w].v
	f.Store(1)
	if g := uint32(ws.state.Load() >> 32); g != seen {
		if !f.CompareAndSwap(1, 0) {
			<-ws.wake[w] // a dispatcher saw us parked and sent a token
		}
		return g
	}
	<-ws.wake[w]
	return uint32(ws.state.Load() >> 32)
}

// close stops the workers and waits for them. They must be idle.
func (ws *workers) close() {
	if ws.closed || ws.n == 1 {
		ws.closed = true
		return
	}
	ws.closed = true
	ws.quit.Store(true)
	ws.gen++
	ws.state.Store(uint64(ws.gen)<<32 | closedBit)
	ws.wakeAll()
	ws.wg.Wait()
}
