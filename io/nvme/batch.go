package nvme

import (
	"errors"
	"sync"
	"sync/atomic"
)

// Req is one range of a ReadBatch: ReadAt's arguments and its results.
type Req struct {
	Buf []byte // as for ReadAt: Align-aligned, at least BufferSize(N) long
	Off int64
	N   int64

	Data []byte // set by ReadBatch: the range inside Buf, as ReadAt returns it
	Err  error  // set by ReadBatch: this range's error, as ReadAt returns it
}

// ReadBatch reads every range of reqs and sets each one's Data and Err;
// it returns when all are done, with the first error (each range keeps its
// own). With io_uring the ranges go to the kernel together, as many as the
// ring holds in one io_uring_enter (the rest as completions free slots);
// with pread, QueueDepth goroutines read them; with mmap, one after
// another. The results are ReadAt's, range by range.
func (r *Reader) ReadBatch(reqs []Req) error {
	switch {
	case len(reqs) == 0:
	case r.ring != nil:
		r.ringBatch(reqs)
	case r.data != nil || len(reqs) == 1 || r.qd == 1:
		for i := range reqs {
			q := &reqs[i]
			q.Data, q.Err = r.ReadAt(q.Buf, q.Off, q.N)
		}
	default:
		var next atomic.Int64
		var wg sync.WaitGroup
		for range min(r.qd, len(reqs)) {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < int64(len(reqs)); i = next.Add(1) - 1 {
					q := &reqs[i]
					q.Data, q.Err = r.ReadAt(q.Buf, q.Off, q.N)
				}
			})
		}
		wg.Wait()
	}
	for i := range reqs {
		if reqs[i].Err != nil {
			return reqs[i].Err
		}
	}
	return nil
}

// ErrReaderClosed is matched (errors.Is) by the error of an io_uring read that
// starts after Close (or is still waiting for a ring slot when Close comes).
var ErrReaderClosed = errors.New("reader closed")
