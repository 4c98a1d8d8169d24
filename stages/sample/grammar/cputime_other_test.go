//go:build !linux

package grammar

import "time"

// threadCPU is unavailable here: benchmarks report 0 CPU time.
func threadCPU() time.Duration { return 0 }

func lockThread() func() { return func() {} }
