package nvme

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// A read the kernel answers in pieces (here: each SQE capped below the
// range) is resubmitted from where it stopped until the range is covered.
func TestURingShortReads(t *testing.T) {
	const size = 3<<20 + 4321
	p, data := testFile(t, size)
	for _, c := range []struct {
		direct bool
		max    int
	}{{true, 3 * Align}, {false, 5000}, {false, 1}} {
		r := openURing(t, p, Options{Direct: c.direct, QueueDepth: 4})
		r.ring.maxLen = c.max
		buf, _ := AlignedAlloc(BufferSize(100000), false)
		for _, rc := range [][2]int64{{0, 100000}, {12345, 54321}, {size - 99999, 99999}, {size - 10, 10}} {
			if c.max == 1 && rc[1] > 20000 {
				rc[1] = 20000
			}
			got, err := r.ReadAt(buf, rc[0], rc[1])
			if err != nil || !bytes.Equal(got, data[rc[0]:rc[0]+rc[1]]) {
				t.Errorf("direct=%v, %d bytes per SQE: ReadAt(%d, %d): %v", c.direct, c.max, rc[0], rc[1], err)
			}
		}
		AlignedFree(buf)
		r.Close()
	}
}

// A kernel without io_uring, or one that forbids it, is a clear error that
// errors.Is matches to ErrNoURing.
func TestSetupError(t *testing.T) {
	for errno, want := range map[unix.Errno]string{
		unix.ENOSYS: "kernel built without io_uring",
		unix.EPERM:  "io_uring_disabled or a seccomp filter",
		unix.EINVAL: "io_uring_setup: invalid argument",
	} {
		err := setupError(errno)
		if !errors.Is(err, ErrNoURing) || !errors.Is(err, errno) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "use io_engine pread") {
			t.Errorf("%v: %v", errno, err)
		}
	}
}
