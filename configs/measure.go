// This file measures the two bandwidths that bound inference on a machine:
// memory read bandwidth (the ceiling of decode, which reads every active
// weight once per token) and sequential disk read bandwidth bypassing the
// page cache (the ceiling of streaming weights that do not fit in memory).
// Both are short and bounded in bytes and in time.

package configs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// MemOptions bound MeasureMemory.
type MemOptions struct {
	Threads  int           // readers in parallel (<= 0: 1)
	Bytes    int64         // buffer size, split among threads [256 MiB]
	Duration time.Duration // time budget; at least one pass is made [500 ms]
}

// MeasureMemory returns the memory read bandwidth in GB/s (1e9 bytes/s):
// Threads goroutines each sum their share of a buffer much larger than the
// caches, pass after pass, and the best pass counts.
func MeasureMemory(ctx context.Context, o MemOptions) (float64, error) {
	threads := max(o.Threads, 1)
	size := o.Bytes
	if size <= 0 {
		size = 256 << 20
	}
	dur := o.Duration
	if dur <= 0 {
		dur = 500 * time.Millisecond
	}
	words := int(size / 8 / int64(threads) / 64 * 64)
	if words == 0 {
		return 0, fmt.Errorf("configs: memory test of %d bytes is too small for %d threads", size, threads)
	}
	bufs := make([][]uint64, threads)
	var wg sync.WaitGroup
	for i := range bufs {
		wg.Go(func() { // touch the pages from the thread that reads them
			b := make([]uint64, words)
			for j := range b {
				b[j] = uint64(j)
			}
			bufs[i] = b
		})
	}
	wg.Wait()
	best := 0.0
	sums := make([]uint64, threads)
	deadline := time.Now().Add(dur)
	for pass := 0; pass < 3 || time.Now().Before(deadline); pass++ {
		if err := ctx.Err(); err != nil {
			return best, err
		}
		t0 := time.Now()
		for i := range bufs {
			wg.Go(func() { sums[i] += sumWords(bufs[i]) })
		}
		wg.Wait()
		el := time.Since(t0).Seconds()
		best = max(best, float64(threads*words*8)/el/1e9)
		if time.Now().After(deadline) {
			break
		}
	}
	var keep uint64
	for _, s := range sums {
		keep += s
	}
	_ = keep
	return best, nil
}

// sumWords reads every word of b (eight independent chains so loads
// overlap).
func sumWords(b []uint64) uint64 {
	var s0, s1, s2, s3, s4, s5, s6, s7 uint64
	for i := 0; i+8 <= len(b); i += 8 {
		c := (*[8]uint64)(b[i : i+8])
		s0 += c[0]
		s1 += c[1]
		s2 += c[2]
		s3 += c[3]
		s4 += c[4]
		s5 += c[5]
		s6 += c[6]
		s7 += c[7]
	}
	return s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7
}

// DiskOptions bound MeasureDisk.
type DiskOptions struct {
	// File is read if set (a model file is a good choice); otherwise a
	// scratch file of Bytes is written in Dir and removed afterwards.
	File     string
	Dir      string
	Bytes    int64         // bytes to read at most [256 MiB]
	Duration time.Duration // time budget for the read [2 s]
}

// DiskResult is a disk measurement.
type DiskResult struct {
	GBps   float64
	Bytes  int64
	Direct bool // read with O_DIRECT; false: page cache dropped with fadvise, less reliable
}

const diskChunk = 4 << 20

// MeasureDisk returns the sequential read bandwidth of a file read with
// O_DIRECT (bypassing the page cache) in 4 MiB requests. When the
// filesystem refuses O_DIRECT (tmpfs), it drops the file's cached pages
// with fadvise and reads normally.
func MeasureDisk(ctx context.Context, o DiskOptions) (DiskResult, error) {
	size := o.Bytes
	if size <= 0 {
		size = 256 << 20
	}
	size = max(size/diskChunk, 1) * diskChunk
	dur := o.Duration
	if dur <= 0 {
		dur = 2 * time.Second
	}
	path := o.File
	if path == "" {
		dir := o.Dir
		if dir == "" {
			dir = os.TempDir()
		}
		f, err := os.CreateTemp(dir, "flowinfer-disk-*.bin")
		if err != nil {
			return DiskResult{}, fmt.Errorf("configs: disk test: %w", err)
		}
		path = f.Name()
		defer os.Remove(path)
		err = writeScratch(ctx, f, size)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return DiskResult{}, fmt.Errorf("configs: disk test: writing %s: %w", path, err)
		}
	}
	res := DiskResult{Direct: true}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		res.Direct = false
		if fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
			return DiskResult{}, fmt.Errorf("configs: disk test: %s: %w", path, err)
		}
		_ = unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED)
	}
	defer unix.Close(fd)
	buf, err := alignedBuffer(diskChunk)
	if err != nil {
		return DiskResult{}, err
	}
	defer unix.Munmap(buf)
	t0 := time.Now()
	deadline := t0.Add(dur)
	for res.Bytes < size && time.Now().Before(deadline) {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		n, err := unix.Pread(fd, buf, res.Bytes)
		if errors.Is(err, unix.EINVAL) && res.Direct && res.Bytes == 0 {
			// O_DIRECT accepted at open but not for reads: read normally.
			unix.Close(fd)
			if fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
				return DiskResult{}, fmt.Errorf("configs: disk test: %s: %w", path, err)
			}
			_ = unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED)
			res.Direct = false
			t0 = time.Now()
			continue
		}
		if err != nil {
			return res, fmt.Errorf("configs: disk test: reading %s: %w", path, err)
		}
		if n == 0 {
			break
		}
		res.Bytes += int64(n)
	}
	if res.Bytes == 0 {
		return res, fmt.Errorf("configs: disk test: %s is empty", path)
	}
	res.GBps = float64(res.Bytes) / time.Since(t0).Seconds() / 1e9
	return res, nil
}

// writeScratch fills f with size bytes of non-zero data and syncs it.
func writeScratch(ctx context.Context, f *os.File, size int64) error {
	chunk := make([]byte, diskChunk)
	for i := range chunk {
		chunk[i] = byte(i*131 + i>>9)
	}
	for off := int64(0); off < size; off += diskChunk {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := f.Write(chunk); err != nil {
			return err
		}
	}
	return f.Sync()
}

// alignedBuffer returns page-aligned memory (O_DIRECT needs 512-byte
// alignment of the buffer).
func alignedBuffer(n int) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return nil, fmt.Errorf("configs: disk test buffer: %w", err)
	}
	if uintptr(unsafe.Pointer(&b[0]))%4096 != 0 {
		unix.Munmap(b)
		return nil, errors.New("configs: disk test buffer is not page-aligned")
	}
	return b, nil
}
