package nvme

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/io/fileid"
)

func testFile(t *testing.T, n int) (string, []byte) {
	t.Helper()
	data := make([]byte, n)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	p := filepath.Join(t.TempDir(), "f.bin")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p, data
}

// Every engine returns exactly the bytes of the range, at aligned and odd
// offsets and lengths, including ranges that end at the end of the file.
func TestReadAtRanges(t *testing.T) {
	const size = 3*1<<20 + 777
	p, data := testFile(t, size)
	for _, o := range []Options{{Engine: "pread", Direct: true}, {Engine: "pread"}, {Engine: "io_uring", Direct: true}, {Engine: "io_uring"}, {Engine: "mmap"}} {
		r, err := Open(p, o)
		if errors.Is(err, ErrNoURing) {
			t.Logf("engine io_uring not tested: %v", err)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("engine %s direct=%v", r.Engine(), r.Direct())
		buf, err := AlignedAlloc(BufferSize(1<<20+5000), false)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(3, 4))
		cases := [][2]int64{{0, 4096}, {0, 1}, {1, 4095}, {4095, 2}, {size - 1, 1}, {size - 4096, 4096}, {size - 5000, 5000}, {12345, 1 << 20}, {0, 0}, {size, 0}}
		for range 200 {
			n := rng.Int64N(1<<20 + 5000)
			cases = append(cases, [2]int64{rng.Int64N(size - n + 1), n})
		}
		for _, c := range cases {
			got, err := r.ReadAt(buf, c[0], c[1])
			if err != nil {
				t.Fatalf("%s: ReadAt(%d, %d): %v", o.Engine, c[0], c[1], err)
			}
			if !bytes.Equal(got, data[c[0]:c[0]+c[1]]) {
				t.Fatalf("%s: ReadAt(%d, %d): wrong bytes", o.Engine, c[0], c[1])
			}
		}
		reads, nb := r.Stats()
		if reads != int64(len(cases)) || nb <= 0 {
			t.Errorf("%s: stats %d reads %d bytes", o.Engine, reads, nb)
		}
		if _, err := r.ReadAt(buf, size-10, 11); err == nil || !strings.Contains(err.Error(), "outside the file") {
			t.Errorf("%s: read past the end: %v", o.Engine, err)
		}
		if _, err := r.ReadAt(buf[:100], 0, 4096); err == nil {
			t.Errorf("%s: small buffer accepted", o.Engine)
		}
		AlignedFree(buf)
		r.Close()
	}
}

// Concurrent reads (the reader stage's queue depth) return the right bytes.
func TestReadAtConcurrent(t *testing.T) {
	const size = 8 << 20
	p, data := testFile(t, size)
	r, err := Open(p, Options{Engine: "pread", Direct: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			buf, _ := AlignedAlloc(BufferSize(300000), false)
			defer AlignedFree(buf)
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for range 50 {
				off, n := rng.Int64N(size-300000), rng.Int64N(300000)
				got, err := r.ReadAt(buf, off, n)
				if err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got, data[off:off+n]) {
					errs <- errors.New("wrong bytes")
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// A file truncated, or rewritten with its size and modification time
// restored, after Open fails the read that meets it with ErrChanged saying
// what changed, on every engine; the reader keeps working for reads after
// the file is back.
func TestReadAtFileChanged(t *testing.T) {
	const size = 1 << 20
	p, data := testFile(t, size)
	for _, o := range []Options{{Engine: "pread", Direct: true}, {Engine: "pread"}, {Engine: "io_uring", Direct: true}, {Engine: "io_uring"}, {Engine: "mmap"}} {
		for _, change := range []string{"truncate", "rewrite"} {
			r, err := Open(p, o)
			if errors.Is(err, ErrNoURing) {
				t.Logf("engine io_uring not tested: %v", err)
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			buf, _ := AlignedAlloc(BufferSize(size), false)
			st, _ := os.Stat(p)
			time.Sleep(20 * time.Millisecond) // a new tick of the kernel's clock
			var want string
			switch change {
			case "truncate":
				err, want = os.Truncate(p, size/2), "size 524288, was 1048576"
			case "rewrite":
				other := bytes.Clone(data)
				other[100] ^= 1
				err, want = os.WriteFile(p, other, 0o644), "status changed"
				if err == nil {
					err = os.Chtimes(p, st.ModTime(), st.ModTime())
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			if change == "truncate" {
				_, err = r.ReadAt(buf, size/2+100, 4096)
				if !errors.Is(err, ErrChanged) {
					t.Errorf("%s: read of a truncated range: %v, want ErrChanged", o.Engine, err)
				}
			}
			_, err = r.ReadAt(buf, 0, 4096)
			if !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), want) {
				t.Errorf("%s, %s: read from a changed file: %v, want ErrChanged saying %q", o.Engine, change, err, want)
			}
			if change == "rewrite" && err != nil && (strings.Contains(err.Error(), "size") || strings.Contains(err.Error(), "modified")) {
				t.Errorf("%s, rewrite: %v names a change of size or modification time", o.Engine, err)
			}
			AlignedFree(buf)
			r.Close()
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Open with Expect refuses a file that is no longer the expected one, and
// reads check against Expect.
func TestOpenExpect(t *testing.T) {
	p, data := testFile(t, 8192)
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	id, err := fileid.Of(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	r, err := Open(p, Options{Expect: &id})
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	time.Sleep(20 * time.Millisecond)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(p, Options{Expect: &id}); !errors.Is(err, ErrChanged) {
		t.Errorf("Open of a rewritten file with Expect: %v, want ErrChanged", err)
	}
}

// The mmap engine's copy meets the pages past the end of a file truncated
// after its identity check (the race the check cannot close): the fault
// fails the read, the process lives.
func TestMmapTruncatedFault(t *testing.T) {
	const size = 1 << 20
	p, _ := testFile(t, size)
	r, err := Open(p, Options{Engine: "mmap"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := os.Truncate(p, 4096); err != nil {
		t.Fatal(err)
	}
	if r.id, err = fileid.OfFd(r.fd); err != nil { // as if truncated after the check
		t.Fatal(err)
	}
	buf := make([]byte, 8192)
	if _, err := r.ReadAt(buf, size/2, 8192); err == nil || !strings.Contains(err.Error(), "fault") {
		t.Errorf("read past the end of a truncated mapping: %v, want a fault error", err)
	}
}

func TestOpenErrors(t *testing.T) {
	p, _ := testFile(t, 100)
	if _, err := Open(p, Options{Engine: "pread", QueueDepth: -1}); err == nil || !strings.Contains(err.Error(), "queue depth") {
		t.Errorf("negative queue depth: %v", err)
	}
	if _, err := Open(p, Options{Engine: "nope"}); err == nil || !strings.Contains(err.Error(), "supported: pread, io_uring, mmap") {
		t.Errorf("unknown engine: %v", err)
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing"), Options{}); err == nil {
		t.Error("missing file opened")
	}
}

func TestAlignedAlloc(t *testing.T) {
	b, err := AlignedAlloc(10000, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 12288 || uintptrOf(b)%Align != 0 {
		t.Errorf("len %d, address %#x", len(b), uintptrOf(b))
	}
	b[len(b)-1] = 1
	if err := AlignedFree(b); err != nil {
		t.Fatal(err)
	}
}
