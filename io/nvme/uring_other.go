//go:build !linux

package nvme

import "fmt"

// ring is the io_uring engine's ring; io_uring is Linux only.
type ring struct{}

func newRing(fileFD, entries int) (*ring, error) {
	return nil, fmt.Errorf("%w: io_uring is Linux only; use io_engine pread", ErrNoURing)
}

func (*ring) close() error { return nil }

func (r *Reader) ringBatch(reqs []Req) {
	for i := range reqs {
		reqs[i].Err = ErrNoURing
	}
}
