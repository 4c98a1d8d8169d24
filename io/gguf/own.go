package gguf

// own.go: replacing pages of the mapping with memory the process owns.
// Tensor data stays where it is in the address space (every Tensor.Data,
// and every pointer a caller keyed on it, stays valid); what backs the
// pages changes from the file to anonymous memory holding the same bytes,
// read from the file while it is still the one Open mapped. Owned pages
// never fault when the file is truncated or rewritten; pages left mapped
// do, and are for the caller not to touch after that (a weight path that
// streams them through its reader, which checks the file's identity).

import (
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/flowinfer/flowinfer/io/fileid"
)

// Range is a byte range [Off, Off+N) of the file.
type Range struct{ Off, N int64 }

// ID returns the file's identity when Open mapped it (false for a File
// from Parse): what readers of the same file later check it against.
func (f *File) ID() (fileid.ID, bool) { return f.id, f.file != nil }

// Own makes the pages that hold the file ranges rs memory the process
// owns, with the same bytes, read from the file (whole pages: bytes of a
// neighbouring range that share a page are owned too). It returns the
// bytes of the pages owned. The file must still be the one Open mapped,
// before and after the reads: otherwise Own fails matching
// fileid.ErrChanged and the File holds bytes of two files (close it).
// Nothing may read the ranges while Own runs; calling Own again for pages
// already owned reads them again.
func (f *File) Own(rs []Range) (int64, error) {
	if f.file == nil || f.data == nil {
		return 0, errors.New("gguf: Own: the file was not opened from disk (or is closed)")
	}
	if err := f.same(); err != nil {
		return 0, err
	}
	page := int64(unix.Getpagesize())
	size := int64(len(f.data))
	// the ranges widened to whole pages, sorted and merged
	var ps []Range
	for _, r := range rs {
		if r.N <= 0 {
			continue
		}
		if r.Off < 0 || r.Off > size || r.N > size-r.Off {
			return 0, fmt.Errorf("gguf: Own: range [%d, %d) outside the file (size %d)", r.Off, r.Off+r.N, size)
		}
		lo, hi := r.Off&^(page-1), (r.Off+r.N+page-1)&^(page-1)
		ps = append(ps, Range{lo, hi - lo})
	}
	slices.SortFunc(ps, func(a, b Range) int { return int(a.Off - b.Off) })
	var merged []Range
	for _, r := range ps {
		if n := len(merged); n > 0 && r.Off <= merged[n-1].Off+merged[n-1].N {
			m := &merged[n-1]
			m.N = max(m.N, r.Off+r.N-m.Off)
			continue
		}
		merged = append(merged, r)
	}
	var total int64
	base := unsafe.Pointer(unsafe.SliceData(f.data))
	for _, r := range merged {
		addr := unsafe.Add(base, r.Off)
		// fresh anonymous pages in place of the file's (MAP_FIXED keeps the
		// addresses), populated at once, then filled from the file
		if _, err := unix.MmapPtr(-1, 0, addr, uintptr(r.N), unix.PROT_READ|unix.PROT_WRITE,
			unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED|unix.MAP_POPULATE); err != nil {
			return total, fmt.Errorf("gguf: Own: mapping %d bytes at offset %d: %w", r.N, r.Off, err)
		}
		end := min(r.Off+r.N, size) // the last page may run past the end of the file
		if err := f.readInto(f.data[r.Off:end], r.Off); err != nil {
			return total, err
		}
		if err := unix.Mprotect(unsafe.Slice((*byte)(addr), r.N), unix.PROT_READ); err != nil {
			return total, fmt.Errorf("gguf: Own: %w", err)
		}
		total += r.N
	}
	return total, f.same()
}

// readInto reads len(dst) bytes of the file at off into dst.
func (f *File) readInto(dst []byte, off int64) error {
	fd := int(f.file.Fd())
	for got := 0; got < len(dst); {
		k, err := unix.Pread(fd, dst[got:], off+int64(got))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("gguf: Own: reading [%d, %d): %w", off, off+int64(len(dst)), errors.Join(err, f.same()))
		}
		if k == 0 {
			return fmt.Errorf("gguf: Own: reading [%d, %d): %w", off, off+int64(len(dst)),
				errors.Join(fmt.Errorf("end of file at %d", off+int64(got)), f.same()))
		}
		got += k
	}
	return nil
}

// same checks the file is still the one Open mapped.
func (f *File) same() error {
	now, err := fileid.Of(f.file)
	if err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	if err := f.id.Check(now); err != nil {
		return fmt.Errorf("gguf: %s: %w", f.file.Name(), err)
	}
	return nil
}
