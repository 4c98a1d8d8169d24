// Command diskbw measures a file's read bandwidth the way the weight path
// reads it: O_DIRECT reads of a given size at random aligned offsets, with a
// given number in flight (one goroutine each), for a given time. The page
// cache is bypassed, so the figure is the disk's, not memory's.
//
//	go run ./bench/diskbw -f MODEL.gguf -size 1MiB -qd 8 -t 10s
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/io/nvme"
)

func main() {
	path := flag.String("f", "", "file to read (required)")
	sizeFlag := flag.String("size", "1MiB", "bytes per read")
	qd := flag.Int("qd", 8, "reads in flight")
	dur := flag.Duration("t", 10*time.Second, "how long to read")
	flag.Parse()
	if *path == "" {
		fmt.Fprintln(os.Stderr, "diskbw: -f FILE is required")
		os.Exit(2)
	}
	size, err := configs.ParseByteSize(*sizeFlag)
	if err != nil || size <= 0 || *qd <= 0 {
		fmt.Fprintln(os.Stderr, "diskbw: bad -size or -qd")
		os.Exit(2)
	}
	r, err := nvme.Open(*path, nvme.Options{Engine: "pread", Direct: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "diskbw:", err)
		os.Exit(1)
	}
	defer r.Close()
	n := int64(size)
	if r.Size() < n {
		fmt.Fprintln(os.Stderr, "diskbw: file smaller than one read")
		os.Exit(1)
	}
	var total atomic.Int64
	var failed atomic.Value
	deadline := time.Now().Add(*dur)
	start := time.Now()
	var wg sync.WaitGroup
	for g := range *qd {
		wg.Go(func() {
			buf, err := nvme.AlignedAlloc(nvme.BufferSize(n), false)
			if err != nil {
				failed.Store(err)
				return
			}
			defer nvme.AlignedFree(buf)
			rng := rand.New(rand.NewPCG(uint64(g), 42))
			for time.Now().Before(deadline) {
				off := rng.Int64N((r.Size()-n)/nvme.Align) * nvme.Align
				if _, err := r.ReadAt(buf, off, n); err != nil {
					failed.Store(err)
					return
				}
				total.Add(n)
			}
		})
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		fmt.Fprintln(os.Stderr, "diskbw:", err)
		os.Exit(1)
	}
	el := time.Since(start).Seconds()
	fmt.Printf("diskbw: %s reads of %v, %d in flight, O_DIRECT=%v: %.2f GB/s (%.2f GiB in %.1f s)\n",
		*path, size, *qd, r.Direct(), float64(total.Load())/el/1e9, float64(total.Load())/(1<<30), el)
}
