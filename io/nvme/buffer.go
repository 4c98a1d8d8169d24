package nvme

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// AlignedAlloc returns n bytes (rounded up to a page) of anonymous memory,
// page-aligned (so fit for O_DIRECT), outside the Go heap: the weight
// path's slabs are allocated once and their cost is exact. With lock, the
// pages are locked in memory (mlock), so the kernel never swaps weights
// out. The pages are populated at once (MAP_POPULATE): a slab's first
// write would otherwise take a page fault per 4 KiB (measured: 5 ms to
// fill a 3 MB expert slot on this VM, against 0.3 ms when populated).
// Free it with AlignedFree.
func AlignedAlloc(n int64, lock bool) ([]byte, error) {
	if n <= 0 {
		return nil, nil
	}
	n = (n + Align - 1) &^ (Align - 1)
	b, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("nvme: allocating %d bytes: %w", n, err)
	}
	if lock {
		if err := unix.Mlock(b); err != nil {
			unix.Munmap(b)
			return nil, fmt.Errorf("nvme: mlock of %d bytes: %w (raise RLIMIT_MEMLOCK or drop --mlock)", n, err)
		}
	}
	return b, nil
}

// AlignedFree releases memory from AlignedAlloc.
func AlignedFree(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return unix.Munmap(b[:cap(b)])
}

// DropPages tells the kernel the pages of b (a view of a read-only file
// mapping) are not needed: they leave the process's resident set (and, being
// clean file pages, cost nothing to read again). Only whole pages inside b
// are dropped.
func DropPages(b []byte) {
	if len(b) == 0 {
		return
	}
	p := uintptrOf(b)
	start := (p + Align - 1) &^ (Align - 1)
	end := (p + uintptr(len(b))) &^ (Align - 1)
	if end <= start {
		return
	}
	_ = unix.Madvise(b[start-p:end-p], unix.MADV_DONTNEED)
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
