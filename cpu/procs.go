package cpu

// procs.go: a spare P for goroutines that spend their time in cgo.
//
// A goroutine inside a C call holds no P's worth of Go work, but its P
// stays attached to it in the syscall state. When every P is in that
// state and none is idle, the runtime's monitor (sysmon) takes the P away
// after ~20 µs and hands it to a new spinning thread; when the C call
// returns, the goroutine must find a P again, and with none idle it
// queues and its thread sleeps. Backend workers spend nearly all of a
// decode step in C calls of tens to hundreds of microseconds, so with
// GOMAXPROCS equal to the thread count this happens on most calls:
// measured on this 2-core VM, two workers streaming one 9.4 MB Q4_K
// matrix after another got 1.3-1.4 CPUs of the 2 (9,996 voluntary context
// switches per 2,560 products) and 14 GB/s; with one idle P, 1.8-1.9 CPUs,
// 3,000 switches and 23-27 GB/s. The C kernels alone, on pthreads, reach
// 23-25 GB/s on the same data. docs/decisions.md has the whole account.

import (
	"os"
	"runtime"
	"sync"
)

var procsMu sync.Mutex

// reserveProcs raises GOMAXPROCS to threads+1 (never lowers it) so that a
// P is idle while threads goroutines are inside C calls. An explicit
// GOMAXPROCS in the environment is left alone. Without cgo there are no
// C calls and nothing to do.
func reserveProcs(threads int) {
	if !cgoKernels || threads < 2 || os.Getenv("GOMAXPROCS") != "" {
		return
	}
	procsMu.Lock()
	defer procsMu.Unlock()
	if runtime.GOMAXPROCS(0) < threads+1 {
		runtime.GOMAXPROCS(threads + 1)
	}
}
