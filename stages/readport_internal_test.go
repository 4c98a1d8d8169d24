package stages

import (
	"errors"
	"fmt"
	"strings"
)

// fakePort stands in for the weight path's stages (reader, pool,
// uploader) in the tests of the expert cache and the layer stream: no
// disk, no graph. Requests queue in order; await completes the oldest,
// with fail's error for it (nil: the read succeeded), and hands it to
// complete, as Streams.await does. Nothing completes until compute waits
// (a slow reader), unless the test calls drain (a reader that kept up).
type fakePort struct {
	queue    []readReq // in flight, from head on
	head     int
	log      []readReq // every request, in order, while logging
	logging  bool
	complete func(readDone)
	fail     func(readReq) error
}

func (f *fakePort) request(r readReq) error {
	f.queue = append(f.queue, r)
	if f.logging {
		f.log = append(f.log, r)
	}
	return nil
}

func (f *fakePort) await() error {
	if f.head == len(f.queue) {
		return errors.New("fake port: await with no read in flight")
	}
	r := f.queue[f.head]
	if f.head++; f.head == len(f.queue) {
		f.queue, f.head = f.queue[:0], 0 // keeps the capacity: no allocation in steady state
	}
	var err error
	if f.fail != nil {
		err = f.fail(r)
	}
	f.complete(readDone{slot: r.slot, mat: r.mat, err: err})
	return nil
}

// inFlight returns the reads not yet completed.
func (f *fakePort) inFlight() int { return len(f.queue) - f.head }

// drain completes every read in flight.
func (f *fakePort) drain() {
	for f.inFlight() > 0 {
		f.await()
	}
}

// take returns the requests logged since the last take, as "layer@slot"
// (experts: "layer.expert@slot"), one per layer read for layer matrices.
func (f *fakePort) take() string {
	var out []string
	for i, r := range f.log {
		switch {
		case r.mat < 0:
			out = append(out, fmt.Sprintf("%d.%d@%d", r.layer, r.expert, r.slot))
		case i == 0 || f.log[i-1].layer != r.layer || f.log[i-1].slot != r.slot:
			out = append(out, fmt.Sprintf("%d@%d", r.layer, r.slot))
		}
	}
	f.log = f.log[:0]
	return strings.Join(out, " ")
}
