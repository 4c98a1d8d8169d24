package nvme

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/configs"
)

// openURing opens p with the io_uring engine, skipping the test when the
// kernel refuses io_uring (the only reason to skip).
func openURing(t testing.TB, p string, o Options) *Reader {
	t.Helper()
	o.Engine = "io_uring"
	r, err := Open(p, o)
	if errors.Is(err, ErrNoURing) {
		t.Skipf("the kernel refuses io_uring: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// noLeak fails t when goroutines started after base are still running a
// second later.
func noLeak(t *testing.T, base int) {
	t.Helper()
	for range 100 {
		if runtime.NumGoroutine() <= base {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	buf := make([]byte, 1<<16)
	t.Errorf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
}

// errString is an error's text, or "" for nil.
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// io_uring gives pread's results byte for byte and pread's errors word for
// word: random ranges, aligned and odd, O_DIRECT and buffered, ranges that
// end at or cross the end of the file, through ReadAt and ReadBatch.
func TestURingMatchesPread(t *testing.T) {
	const size = 5*1<<20 + 1234
	p, data := testFile(t, size)
	for _, direct := range []bool{true, false} {
		t.Run(fmt.Sprintf("direct=%v", direct), func(t *testing.T) {
			base := runtime.NumGoroutine()
			u := openURing(t, p, Options{Direct: direct, QueueDepth: 4})
			pr, err := Open(p, Options{Engine: "pread", Direct: direct})
			if err != nil {
				t.Fatal(err)
			}
			if u.Direct() != pr.Direct() {
				t.Fatalf("O_DIRECT: io_uring %v, pread %v", u.Direct(), pr.Direct())
			}
			const maxN = 1<<20 + 9000
			ub, _ := AlignedAlloc(BufferSize(maxN), false)
			pb, _ := AlignedAlloc(BufferSize(maxN), false)
			rng := rand.New(rand.NewPCG(5, 6))
			type rc [2]int64
			cases := []rc{{0, 0}, {size, 0}, {0, 1}, {4096, 4096}, {size - 1, 1}, {size - 1, 2}, {size - 4096, 4096}, {size - 100, 200}, {size + 1, 0}, {-1, 10}, {10, -1}, {size &^ 4095, size % 4096}}
			for range 300 {
				n := rng.Int64N(maxN)
				off := rng.Int64N(size)
				if rng.IntN(3) == 0 { // aligned
					off &^= Align - 1
					n = (n + Align - 1) &^ (Align - 1)
				}
				cases = append(cases, rc{off, n})
			}
			for _, c := range cases {
				got, uerr := u.ReadAt(ub, c[0], c[1])
				want, perr := pr.ReadAt(pb, c[0], c[1])
				if errString(uerr) != errString(perr) {
					t.Fatalf("ReadAt(%d, %d): io_uring %v, pread %v", c[0], c[1], uerr, perr)
				}
				if perr == nil && (!bytes.Equal(got, want) || !bytes.Equal(got, data[c[0]:c[0]+c[1]])) {
					t.Fatalf("ReadAt(%d, %d): io_uring's bytes differ from pread's", c[0], c[1])
				}
				if perr == nil && uintptrOf(got)-uintptrOf(ub) != uintptrOf(want)-uintptrOf(pb) {
					t.Fatalf("ReadAt(%d, %d): view at %d, pread's at %d", c[0], c[1], uintptrOf(got)-uintptrOf(ub), uintptrOf(want)-uintptrOf(pb))
				}
			}
			// the same ranges as one batch, more of them than the ring holds
			bufs := make([][]byte, 64)
			for i := range bufs {
				bufs[i], _ = AlignedAlloc(BufferSize(maxN), false)
			}
			for start := 0; start < len(cases); start += len(bufs) {
				batch := cases[start:min(start+len(bufs), len(cases))]
				reqs := make([]Req, len(batch))
				for i, c := range batch {
					reqs[i] = Req{Buf: bufs[i], Off: c[0], N: c[1]}
				}
				berr := u.ReadBatch(reqs)
				var first error
				for i, c := range batch {
					want, perr := pr.ReadAt(pb, c[0], c[1])
					if first == nil {
						first = perr
					}
					if errString(reqs[i].Err) != errString(perr) {
						t.Fatalf("ReadBatch range (%d, %d): io_uring %v, pread %v", c[0], c[1], reqs[i].Err, perr)
					}
					if perr == nil && !bytes.Equal(reqs[i].Data, want) {
						t.Fatalf("ReadBatch range (%d, %d): wrong bytes", c[0], c[1])
					}
				}
				if errString(berr) != errString(first) {
					t.Fatalf("ReadBatch: %v, want the first range's error %v", berr, first)
				}
			}
			for _, b := range append(bufs, ub, pb) {
				AlignedFree(b)
			}
			if err := u.Close(); err != nil {
				t.Fatal(err)
			}
			pr.Close()
			noLeak(t, base)
		})
	}
}

// Many goroutines share a ring smaller than the reads they want in flight
// (the ring is full most of the time); run with -race.
func TestURingConcurrent(t *testing.T) {
	const size = 8 << 20
	p, data := testFile(t, size)
	for _, direct := range []bool{true, false} {
		base := runtime.NumGoroutine()
		r := openURing(t, p, Options{Direct: direct, QueueDepth: 4})
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for g := range 16 {
			wg.Go(func() {
				const maxN = 200000
				bufs := make([][]byte, 5)
				for i := range bufs {
					bufs[i], _ = AlignedAlloc(BufferSize(maxN), false)
					defer AlignedFree(bufs[i])
				}
				rng := rand.New(rand.NewPCG(uint64(g), 9))
				for range 40 {
					if g%2 == 0 {
						off, n := rng.Int64N(size-maxN), rng.Int64N(maxN)
						got, err := r.ReadAt(bufs[0], off, n)
						if err == nil && !bytes.Equal(got, data[off:off+n]) {
							err = fmt.Errorf("ReadAt(%d, %d): wrong bytes", off, n)
						}
						if err != nil {
							errs <- err
							return
						}
						continue
					}
					reqs := make([]Req, len(bufs))
					for i := range reqs {
						reqs[i] = Req{Buf: bufs[i], Off: rng.Int64N(size - maxN), N: rng.Int64N(maxN)}
					}
					if err := r.ReadBatch(reqs); err != nil {
						errs <- err
						return
					}
					for _, q := range reqs {
						if !bytes.Equal(q.Data, data[q.Off:q.Off+q.N]) {
							errs <- fmt.Errorf("ReadBatch range (%d, %d): wrong bytes", q.Off, q.N)
							return
						}
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if reads, _ := r.Stats(); reads != 8*40+8*40*5 {
			t.Errorf("direct=%v: %d reads counted, want %d", direct, reads, 8*40+8*40*5)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		noLeak(t, base)
	}
}

// A bad range in a batch fails alone; a kernel error (here EISDIR) is the
// same as pread's and names the file and range.
func TestURingErrors(t *testing.T) {
	const size = 1 << 20
	p, data := testFile(t, size)
	r := openURing(t, p, Options{Direct: true})
	defer r.Close()
	if !r.Direct() {
		t.Skip("the filesystem of the temp dir refuses O_DIRECT")
	}
	buf, _ := AlignedAlloc(BufferSize(size), false)
	defer AlignedFree(buf)
	small, _ := AlignedAlloc(4096, false)
	defer AlignedFree(small)
	reqs := []Req{
		{Buf: buf[:BufferSize(1000)], Off: 100, N: 1000},
		{Buf: buf[1:], Off: 0, N: 10},                  // not aligned
		{Buf: small, Off: 10, N: 8192},                 // too small
		{Buf: buf[BufferSize(1000):], Off: size, N: 1}, // beyond the end
		{Buf: buf[2*BufferSize(1000):], Off: 5000, N: 1000},
	}
	err := r.ReadBatch(reqs)
	if err == nil || err != reqs[1].Err {
		t.Errorf("ReadBatch: %v, want the first range's error %v", err, reqs[1].Err)
	}
	for i, want := range []string{"", "not 4096-aligned", "buffer of 4096 bytes", "outside the file", ""} {
		q := reqs[i]
		switch {
		case want == "" && (q.Err != nil || !bytes.Equal(q.Data, data[q.Off:q.Off+q.N])):
			t.Errorf("range %d: %v", i, q.Err)
		case want != "" && (q.Err == nil || !bytes.Contains([]byte(q.Err.Error()), []byte(want))):
			t.Errorf("range %d: %v, want %q", i, q.Err, want)
		}
	}

	dir := t.TempDir()
	d := openURing(t, dir, Options{})
	defer d.Close()
	pd, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Close()
	_, uerr := d.ReadAt(buf, 0, 1)
	_, perr := pd.ReadAt(buf, 0, 1)
	if uerr == nil || errString(uerr) != errString(perr) {
		t.Errorf("reading a directory: io_uring %v, pread %v", uerr, perr)
	}
	if uerr != nil && !bytes.Contains([]byte(uerr.Error()), []byte(dir+": reading [0, 1)")) {
		t.Errorf("error does not name the file and range: %v", uerr)
	}
}

// Close while reads are in flight: every read returns its bytes or
// ErrReaderClosed, Close waits for the ring, and no goroutine is left behind.
func TestURingCloseInFlight(t *testing.T) {
	const size = 16 << 20
	p, data := testFile(t, size)
	for round := range 5 {
		base := runtime.NumGoroutine()
		r := openURing(t, p, Options{Direct: round%2 == 0, QueueDepth: 2})
		var wg sync.WaitGroup
		var mu sync.Mutex
		ok, closed := 0, 0
		for g := range 8 {
			wg.Go(func() {
				buf, _ := AlignedAlloc(BufferSize(1<<20), false)
				defer AlignedFree(buf)
				rng := rand.New(rand.NewPCG(uint64(g), uint64(round)))
				for {
					off := rng.Int64N(size - 1<<20)
					got, err := r.ReadAt(buf, off, 1<<20)
					mu.Lock()
					switch {
					case errors.Is(err, ErrReaderClosed):
						closed++
						mu.Unlock()
						return
					case err != nil:
						t.Errorf("read: %v", err)
					case !bytes.Equal(got, data[off:off+1<<20]):
						t.Errorf("read (%d): wrong bytes", off)
					default:
						ok++
					}
					mu.Unlock()
					if err != nil {
						return
					}
				}
			})
		}
		time.Sleep(time.Duration(round*5) * time.Millisecond)
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if closed != 8 {
			t.Errorf("round %d: %d readers saw ErrReaderClosed, want 8 (%d reads done)", round, closed, ok)
		}
		buf := make([]byte, BufferSize(10))
		if _, err := r.ReadAt(buf, 0, 10); !errors.Is(err, ErrReaderClosed) {
			t.Errorf("read after Close: %v", err)
		}
		noLeak(t, base)
	}
}

// A batch of more ranges than the ring has entries is entered in one
// io_uring_enter per ring-full and gives every range its bytes.
func TestURingBigBatch(t *testing.T) {
	const size = 4 << 20
	p, data := testFile(t, size)
	r := openURing(t, p, Options{Direct: true, QueueDepth: 8})
	defer r.Close()
	const n = 100
	mem, _ := AlignedAlloc(n*BufferSize(50000), false)
	defer AlignedFree(mem)
	reqs := make([]Req, n)
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range reqs {
		b := BufferSize(50000)
		reqs[i] = Req{Buf: mem[int64(i)*b : int64(i+1)*b], Off: rng.Int64N(size - 50000), N: rng.Int64N(50000)}
	}
	if err := r.ReadBatch(reqs); err != nil {
		t.Fatal(err)
	}
	for _, q := range reqs {
		if !bytes.Equal(q.Data, data[q.Off:q.Off+q.N]) {
			t.Fatalf("range (%d, %d): wrong bytes", q.Off, q.N)
		}
	}
	if reads, _ := r.Stats(); reads != n {
		t.Errorf("%d reads counted, want %d", reads, n)
	}
}

// ReadBatch with pread and mmap gives the same results as ReadAt.
func TestReadBatchPread(t *testing.T) {
	const size = 2 << 20
	p, data := testFile(t, size)
	for _, o := range []Options{{Engine: "pread", Direct: true, QueueDepth: 3}, {Engine: "mmap"}} {
		r, err := Open(p, o)
		if err != nil {
			t.Fatal(err)
		}
		mem, _ := AlignedAlloc(20*BufferSize(70000), false)
		reqs := make([]Req, 20)
		for i := range reqs {
			b := BufferSize(70000)
			reqs[i] = Req{Buf: mem[int64(i)*b : int64(i+1)*b], Off: int64(i) * 90001, N: 70000}
		}
		reqs[7].Off = size - 10
		if err := r.ReadBatch(reqs); err == nil || err != reqs[7].Err {
			t.Errorf("%s: ReadBatch: %v", o.Engine, err)
		}
		for i, q := range reqs {
			if i != 7 && (q.Err != nil || !bytes.Equal(q.Data, data[q.Off:q.Off+q.N])) {
				t.Errorf("%s: range %d: %v", o.Engine, i, q.Err)
			}
		}
		AlignedFree(mem)
		r.Close()
	}
}

// BenchmarkReadAt: 1 MiB reads at random aligned offsets of a temp file,
// 8 in flight (8 goroutines calling ReadAt, or one ReadBatch of 8 at a
// time), O_DIRECT where the temp dir's filesystem allows it.
func BenchmarkReadAt(b *testing.B) {
	const size, n, qd = 256 << 20, 1 << 20, 8
	p := benchFile(b, size)
	for _, c := range []struct {
		name   string
		engine configs.IOEngine
	}{{"pread", "pread"}, {"io_uring", "io_uring"}, {"io_uring_batch", "io_uring"}} {
		b.Run("engine="+c.name, func(b *testing.B) {
			var r *Reader
			if c.engine == "io_uring" {
				r = openURing(b, p, Options{Direct: true, QueueDepth: qd})
			} else {
				var err error
				if r, err = Open(p, Options{Engine: c.engine, Direct: true}); err != nil {
					b.Fatal(err)
				}
			}
			defer r.Close()
			mem, _ := AlignedAlloc(qd*BufferSize(n), false)
			defer AlignedFree(mem)
			buf := func(i int) []byte { return mem[int64(i)*BufferSize(n) : int64(i+1)*BufferSize(n)] }
			rng := rand.New(rand.NewPCG(1, 1))
			off := func() int64 { return rng.Int64N((size-n)/Align) * Align }
			start := time.Now()
			reads := 0
			for b.Loop() {
				reqs := make([]Req, qd)
				for i := range reqs {
					reqs[i] = Req{Buf: buf(i), Off: off(), N: n}
				}
				var err error
				if c.name == "io_uring_batch" {
					err = r.ReadBatch(reqs)
				} else {
					var wg sync.WaitGroup
					for i := range reqs {
						wg.Go(func() { reqs[i].Data, reqs[i].Err = r.ReadAt(reqs[i].Buf, reqs[i].Off, n) })
					}
					wg.Wait()
				}
				if err == nil {
					for _, q := range reqs {
						if err = q.Err; err != nil {
							break
						}
					}
				}
				if err != nil {
					b.Fatal(err)
				}
				reads += qd
			}
			b.ReportMetric(float64(reads)*n/time.Since(start).Seconds()/1e6, "MB/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

func benchFile(b *testing.B, size int) string {
	b.Helper()
	p := b.TempDir() + "/bench.bin"
	f, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for j := range chunk {
		chunk[j] = byte(rng.Uint32())
	}
	for i := 0; i < size; i += len(chunk) {
		chunk[0], chunk[1] = byte(i>>20), byte(i>>28) // no two chunks alike
		if _, err := f.Write(chunk); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	return p
}
