package stages

// clock.go: the clock of the durations stages keep as int64 nanoseconds
// (atomic counters, spans of reads and waits). time.Now().UnixNano() is
// wall-clock time, which jumps when the clock is set; time.Since from a
// fixed instant uses the monotonic reading.

import "time"

// epoch is the instant nanotime counts from; it is never changed.
var epoch = time.Now()

// nanotime returns monotonic nanoseconds since the package started: only
// differences of its values mean anything.
func nanotime() int64 { return int64(time.Since(epoch)) }
