// Package nvme reads byte ranges of a model file into caller-owned, aligned
// buffers: the disk end of the weight path (stages' reader). It exists so
// that what is read, and when, is decided by the runtime (the router's
// choices, the layer about to run), not by the kernel's readahead and page
// eviction behind a memory mapping.
//
// Engines:
//
//   - "pread" (the default): positional reads. With Direct the file is
//     opened O_DIRECT, so reads bypass the page cache (which would otherwise
//     hold a second copy of what the runtime keeps, and count against a
//     container's memory limit); offsets and lengths are widened to the
//     alignment and the caller gets the exact range inside its buffer. When
//     the filesystem refuses O_DIRECT (tmpfs, some overlays), buffered reads
//     are used and Direct reports false.
//   - "io_uring" (Linux): the same reads (same O_DIRECT window, same
//     results and errors) through an io_uring of our own (uring_linux.go):
//     any number of goroutines share one ring of QueueDepth entries, and
//     ReadBatch enters many ranges with one io_uring_enter. A kernel that
//     refuses io_uring (ENOSYS, or EPERM from kernel.io_uring_disabled or
//     a seccomp filter) makes Open fail with ErrNoURing: there is no silent
//     fallback to pread.
//   - "mmap": copies out of a read-only mapping of the file (the page cache
//     does the I/O), kept for comparison. A copy that meets a page past the
//     end of a file truncated under it fails that read (the fault is
//     recovered), not the process.
//
// Concurrency: a Reader is safe for concurrent use; callers keep many reads
// in flight by calling ReadAt from several goroutines (the reader stage's
// queue depth), or by handing many ranges to one ReadBatch. Errors are per
// read: a short read, EIO, or a file that changed since Open (or since the
// identity Options.Expect gives: device, inode, size, modification and
// status-change time, io/fileid) fails that read with an error naming the
// file and range, and the Reader stays usable. The identity is checked
// after every read, so the bytes of a read that returns without error were
// read from the file as it was. Close waits for the reads in flight; reads
// that start after it fail.
package nvme

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/io/fileid"
)

// Align is the alignment of buffers, offsets and lengths for O_DIRECT
// reads (the logical block size of NVMe and virtio disks is 512 or 4096;
// 4096 satisfies both).
const Align = 4096

// DefaultQueueDepth is Options.QueueDepth when it is 0.
const DefaultQueueDepth = 8

// ErrChanged is matched (errors.Is) by the error of a read from a file that
// was truncated, extended, rewritten or replaced since Open (it is
// fileid.ErrChanged).
var ErrChanged = fileid.ErrChanged

// ErrNoURing is matched (errors.Is) by Open's error when the io_uring engine
// was asked for and the kernel refuses io_uring (or the platform has none).
var ErrNoURing = errors.New("io_uring unavailable")

// Options select the engine.
type Options struct {
	Engine configs.IOEngine // "" means configs.EnginePread
	// Direct asks for O_DIRECT with the pread and io_uring engines (falls
	// back to buffered reads where the filesystem refuses it).
	Direct bool
	// QueueDepth is the reads in flight: the io_uring engine's ring
	// entries (rounded up to a power of two by the kernel), shared by all
	// callers; the pread engine's goroutines per ReadBatch. 0 means
	// DefaultQueueDepth.
	QueueDepth int
	// Expect, when set, is the identity the file must have (taken when the
	// caller first read it, e.g. gguf.File.ID): Open fails with ErrChanged
	// when the file opened differs, and every read is checked against it.
	// nil: the identity at Open.
	Expect *fileid.ID
}

// Reader reads ranges of one file.
type Reader struct {
	path   string
	engine configs.IOEngine
	f      *os.File // pread, io_uring: O_DIRECT if direct
	fd     int      // f's descriptor
	direct bool
	ring   *ring // io_uring engine
	qd     int
	data   []byte    // mmap engine
	size   int64     // id.Size
	id     fileid.ID // what the file must still be

	reads, bytes atomic.Int64
}

// Open opens path for reading with the chosen engine.
func Open(path string, o Options) (*Reader, error) {
	if o.Engine == "" {
		o.Engine = configs.EnginePread
	}
	engine, err := configs.ParseIOEngine(string(o.Engine))
	if err != nil {
		return nil, fmt.Errorf("nvme: %w", err)
	}
	if o.QueueDepth < 0 {
		return nil, fmt.Errorf("nvme: negative queue depth %d", o.QueueDepth)
	}
	if o.QueueDepth == 0 {
		o.QueueDepth = DefaultQueueDepth
	}
	r := &Reader{path: path, engine: o.Engine, qd: o.QueueDepth}
	switch engine {
	case configs.EnginePread, configs.EngineIOUring:
		if o.Direct {
			f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECT, 0)
			if err == nil {
				r.f, r.direct = f, true
			}
		}
		if r.f == nil {
			f, err := os.Open(path)
			if err != nil {
				return nil, fmt.Errorf("nvme: %w", err)
			}
			r.f = f
		}
	case configs.EngineMmap:
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("nvme: %w", err)
		}
		r.f = f
	}
	r.fd = int(r.f.Fd())
	if r.id, err = fileid.Of(r.f); err != nil {
		r.f.Close()
		return nil, fmt.Errorf("nvme: %w", err)
	}
	if o.Expect != nil {
		if err := o.Expect.Check(r.id); err != nil {
			r.f.Close()
			return nil, fmt.Errorf("nvme: %s: %w", path, err)
		}
		r.id = *o.Expect
	}
	r.size = r.id.Size
	if engine == configs.EngineMmap && r.size > 0 {
		r.data, err = unix.Mmap(int(r.f.Fd()), 0, int(r.size), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			r.f.Close()
			return nil, fmt.Errorf("nvme: mmap %s: %w", path, err)
		}
	}
	if engine == configs.EngineIOUring {
		if r.ring, err = newRing(r.fd, o.QueueDepth); err != nil {
			r.f.Close()
			return nil, fmt.Errorf("nvme: %s: %w", path, err)
		}
	}
	return r, nil
}

// Close releases the file (and mapping, and ring). With the io_uring engine
// it first waits for the reads in flight.
func (r *Reader) Close() error {
	var err error
	if r.ring != nil {
		err = r.ring.close()
	}
	if r.data != nil {
		unix.Munmap(r.data)
		r.data = nil
	}
	return errors.Join(err, r.f.Close())
}

// Engine returns the engine name.
func (r *Reader) Engine() configs.IOEngine { return r.engine }

// Direct reports whether reads bypass the page cache (O_DIRECT).
func (r *Reader) Direct() bool { return r.direct }

// Size returns the file size at Open.
func (r *Reader) Size() int64 { return r.size }

// Stats returns the number of reads and the bytes they delivered (the
// ranges asked for, not the aligned widening).
func (r *Reader) Stats() (reads, bytes int64) { return r.reads.Load(), r.bytes.Load() }

// BufferSize returns the buffer length ReadAt needs for n bytes at any
// offset: n widened by the alignment at both ends.
func BufferSize(n int64) int64 { return (n+2*Align-2)/Align*Align + Align }

// ReadAt reads the n bytes at offset off of the file into buf and returns
// the slice of buf that holds them. buf must be Align-aligned (AlignedAlloc)
// and at least BufferSize(n) long; the returned slice does not start at
// buf[0] when off is not aligned.
func (r *Reader) ReadAt(buf []byte, off, n int64) ([]byte, error) {
	if r.ring != nil {
		q := [1]Req{{Buf: buf, Off: off, N: n}}
		r.ringBatch(q[:])
		return q[0].Data, q[0].Err
	}
	if r.data != nil {
		return r.copyMapped(buf, off, n)
	}
	a0, dst, err := r.window(buf, off, n)
	if err != nil {
		return nil, err
	}
	got := 0
	for got < len(dst) {
		k, err := unix.Pread(int(r.f.Fd()), dst[got:], a0+int64(got))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, r.fail(off, n, err)
		}
		if k == 0 {
			break // end of file: fine if the wanted range is covered
		}
		got += k
	}
	return r.finish(buf, off, n, a0, got)
}

// copyMapped is ReadAt of the mmap engine: a copy out of the mapping,
// between two identity checks. A page of the mapping past the end of a
// file truncated since the first check faults (SIGBUS): the copy runs with
// debug.SetPanicOnFault, so that fault fails the read instead of killing
// the process.
func (r *Reader) copyMapped(buf []byte, off, n int64) (out []byte, err error) {
	if err := r.inFile(off, n); err != nil {
		return nil, err
	}
	if int64(len(buf)) < n {
		return nil, fmt.Errorf("nvme: buffer of %d bytes for a read of %d", len(buf), n)
	}
	if err := r.check(); err != nil {
		return nil, fmt.Errorf("nvme: %s: range [%d, %d): %w", r.path, off, off+n, err)
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = r.fail(off, n, fmt.Errorf("fault reading the mapping: %v", p))
		}
	}()
	copy(buf[:n], r.data[off:off+n])
	return r.finish(buf, off, n, off, int(n))
}

// inFile checks that [off, off+n) lies inside the file.
func (r *Reader) inFile(off, n int64) error {
	if off < 0 || n < 0 || off > r.size || n > r.size-off {
		return fmt.Errorf("nvme: %s: range [%d, %d) outside the file (size %d)", r.path, off, off+n, r.size)
	}
	return nil
}

// window checks a read of n bytes at off into buf and returns the file
// offset a0 to read from (off widened down to Align with O_DIRECT) and the
// part of buf the read fills (its end widened up to Align).
func (r *Reader) window(buf []byte, off, n int64) (int64, []byte, error) {
	if err := r.inFile(off, n); err != nil {
		return 0, nil, err
	}
	a0, a1 := off, off+n
	if r.direct {
		a0 = off &^ (Align - 1)
		a1 = (off + n + Align - 1) &^ (Align - 1)
		if !aligned(buf) {
			return 0, nil, errors.New("nvme: O_DIRECT read into a buffer that is not 4096-aligned")
		}
	}
	if int64(len(buf)) < a1-a0 {
		return 0, nil, fmt.Errorf("nvme: buffer of %d bytes for a read of %d (aligned: %d)", len(buf), n, a1-a0)
	}
	return a0, buf[:a1-a0], nil
}

// finish checks that got bytes read at a0 cover [off, off+n) and that the
// file did not change, counts the read and returns its view of buf.
func (r *Reader) finish(buf []byte, off, n, a0 int64, got int) ([]byte, error) {
	if a0+int64(got) < off+n {
		return nil, r.fail(off, n, fmt.Errorf("short read: %d of %d bytes", max(0, a0+int64(got)-off), n))
	}
	if err := r.check(); err != nil {
		return nil, fmt.Errorf("nvme: %s: range [%d, %d): %w", r.path, off, off+n, err)
	}
	r.count(n)
	return buf[off-a0 : off-a0+n], nil
}

func (r *Reader) count(n int64) {
	r.reads.Add(1)
	r.bytes.Add(n)
}

// fail wraps a read error, naming the file, the range and, when the file
// changed since Open, that as the likely cause.
func (r *Reader) fail(off, n int64, err error) error {
	if cerr := r.check(); cerr != nil {
		err = fmt.Errorf("%w (%v)", cerr, err)
	}
	return fmt.Errorf("nvme: %s: reading [%d, %d): %w", r.path, off, off+n, err)
}

// check reports ErrChanged, saying what changed, when the file's identity
// differs from the one the reader was opened with.
func (r *Reader) check() error {
	now, err := fileid.OfFd(r.fd)
	if err != nil {
		return err
	}
	return r.id.Check(now)
}

func aligned(b []byte) bool {
	return len(b) == 0 || uintptrOf(b)%Align == 0
}
