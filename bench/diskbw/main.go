// Command diskbw measures a file's read bandwidth the way the weight path
// reads it: O_DIRECT reads of a given size at random aligned offsets, with a
// given number in flight, for a given time, through io/nvme's engines. The
// page cache is bypassed, so the figure is the disk's, not memory's.
//
// Engines (-engine, a comma-separated list, measured one after another for
// each size, in the same run):
//
//   - pread: -qd goroutines, each calling ReadAt in a loop.
//   - io_uring: the same -qd goroutines sharing one ring of -qd entries.
//   - io_uring-batch: one goroutine handing -qd ranges at a time to
//     ReadBatch (one io_uring_enter for all of them, wait for all), the way
//     a layer's missing experts go out together.
//
// Besides GB/s it reports the process's CPU time (user+system) per GB read.
// With -drop (root) the page cache is dropped before each measurement. A
// virtual disk's rate wanders by tens of percent from one ten seconds to the
// next, so -rounds N repeats the list N times, rotating the engines' order
// each round, and ends with each engine's median.
//
//	go run ./bench/diskbw -f MODEL.gguf -size 1MiB,4MiB -qd 8 -t 5s -engine pread,io_uring,io_uring-batch -rounds 4 -drop
package main

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/io/nvme"
)

func main() {
	path := flag.String("f", "", "file to read (required)")
	sizeFlag := flag.String("size", "1MiB", "bytes per read (comma-separated list: each is measured)")
	qd := flag.Int("qd", 8, "reads in flight")
	dur := flag.Duration("t", 10*time.Second, "how long to read, per engine and size")
	engines := flag.String("engine", "pread", "engines to measure, comma-separated: pread, io_uring, io_uring-batch")
	drop := flag.Bool("drop", false, "drop the page cache (echo 3 > /proc/sys/vm/drop_caches, needs root) before each measurement")
	rounds := flag.Int("rounds", 1, "repeat the measurements, rotating the engines' order, and report medians")
	flag.Parse()
	if err := run(*path, *sizeFlag, *engines, *qd, *dur, *drop, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "diskbw:", err)
		os.Exit(1)
	}
}

func run(path, sizeList, engineList string, qd int, dur time.Duration, drop bool, rounds int) error {
	if path == "" {
		return errors.New("-f FILE is required")
	}
	if qd <= 0 {
		return fmt.Errorf("-qd %d: must be positive", qd)
	}
	if rounds <= 0 {
		return fmt.Errorf("-rounds %d: must be positive", rounds)
	}
	var sizes []int64
	for _, s := range strings.Split(sizeList, ",") {
		n, err := configs.ParseByteSize(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return fmt.Errorf("bad -size %q", s)
		}
		sizes = append(sizes, int64(n))
	}
	engines := strings.Split(engineList, ",")
	for _, e := range engines {
		if e != "pread" && e != "io_uring" && e != "io_uring-batch" {
			return fmt.Errorf("unknown -engine %q (supported: pread, io_uring, io_uring-batch)", e)
		}
	}
	type key struct {
		engine string
		size   int64
	}
	gbs, cpus := map[key][]float64{}, map[key][]float64{}
	for round := range rounds {
		for _, n := range sizes {
			for j := range engines {
				e := engines[(j+round)%len(engines)]
				if drop {
					if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0); err != nil {
						return fmt.Errorf("-drop: %w (needs root)", err)
					}
				}
				res, err := measure(path, e, n, qd, dur)
				if err != nil {
					return fmt.Errorf("%s, %s reads: %w", e, configs.ByteSize(n), err)
				}
				k := key{e, n}
				gbs[k] = append(gbs[k], res.bytes/res.secs/1e9)
				cpus[k] = append(cpus[k], res.cpu/(res.bytes/1e9))
				fmt.Printf("diskbw: %s: %-14s %v reads, %d in flight, O_DIRECT=%v: %.2f GB/s (%.2f GiB in %.1f s), CPU %.3f s/GB\n",
					path, e, configs.ByteSize(n), qd, res.direct, res.bytes/res.secs/1e9, res.bytes/(1<<30), res.secs, res.cpu/(res.bytes/1e9))
			}
		}
	}
	if rounds > 1 {
		for _, n := range sizes {
			for _, e := range engines {
				k := key{e, n}
				g := gbs[k]
				slices.Sort(g)
				fmt.Printf("diskbw: median of %d: %-14s %v reads, %d in flight: %.2f GB/s (%.2f-%.2f), CPU %.3f s/GB\n",
					rounds, e, configs.ByteSize(n), qd, median(g), g[0], g[len(g)-1], median(cpus[k]))
			}
		}
	}
	return nil
}

type result struct {
	direct      bool
	bytes, secs float64
	cpu         float64 // seconds of user+system time
}

func measure(path, engine string, n int64, qd int, dur time.Duration) (result, error) {
	eng := strings.TrimSuffix(engine, "-batch")
	r, err := nvme.Open(path, nvme.Options{Engine: configs.IOEngine(eng), Direct: true, QueueDepth: qd})
	if err != nil {
		return result{}, err
	}
	defer r.Close()
	if r.Size() < n {
		return result{}, errors.New("file smaller than one read")
	}
	mem, err := nvme.AlignedAlloc(int64(qd)*nvme.BufferSize(n), false)
	if err != nil {
		return result{}, err
	}
	defer nvme.AlignedFree(mem)
	buf := func(i int) []byte { return mem[int64(i)*nvme.BufferSize(n) : int64(i+1)*nvme.BufferSize(n)] }
	var total atomic.Int64
	var failed atomic.Value
	cpu0 := cpuTime()
	start := time.Now()
	deadline := start.Add(dur)
	if engine == "io_uring-batch" {
		rng := rand.New(rand.NewPCG(0, 42))
		reqs := make([]nvme.Req, qd)
		for time.Now().Before(deadline) {
			for i := range reqs {
				reqs[i] = nvme.Req{Buf: buf(i), Off: rng.Int64N((r.Size()-n)/nvme.Align) * nvme.Align, N: n}
			}
			if err := r.ReadBatch(reqs); err != nil {
				return result{}, err
			}
			total.Add(int64(qd) * n)
		}
	} else {
		var wg sync.WaitGroup
		for g := range qd {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), 42))
				for time.Now().Before(deadline) {
					off := rng.Int64N((r.Size()-n)/nvme.Align) * nvme.Align
					if _, err := r.ReadAt(buf(g), off, n); err != nil {
						failed.Store(err)
						return
					}
					total.Add(n)
				}
			})
		}
		wg.Wait()
		if err, ok := failed.Load().(error); ok {
			return result{}, err
		}
	}
	return result{
		direct: r.Direct(),
		bytes:  float64(total.Load()),
		secs:   time.Since(start).Seconds(),
		cpu:    cpuTime() - cpu0,
	}, nil
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// cpuTime is the process's user+system CPU time in seconds.
func cpuTime() float64 {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
