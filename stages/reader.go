package stages

// reader.go: the reader stage, disk -> staging slab. It takes each read
// request (from the expert cache or the layer stream, on compute's edge)
// and a free staging slab from the pool, and reads the weight's byte
// ranges into the slab (io/nvme: pread or io_uring, O_DIRECT) with up to
// QueueDepth reads in flight: an expert's three ranges as one batch, a
// streamed layer's matrix in readChunk pieces read in parallel. A read
// weight goes on to the uploader in its slab, with its error if the read
// failed: a failed read fails the step that needed it, not the path.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/flowinfer/flowinfer/graph"
	"github.com/flowinfer/flowinfer/io/nvme"
)

// readReq asks for one expert to be read into a cache slot, or (mat >= 0)
// one matrix of a streamed layer into a layer slot.
type readReq struct {
	slot          int32
	layer, expert int32
	mat           int8 // index in model.Layer.Matrices; -1: an expert
}

// staged is a read weight in a staging slab, on its way to the uploader.
type staged struct {
	req   readReq
	slab  int       // index of the staging slab
	views [3][]byte // the matrices' bytes in the slab (a layer matrix: views[0])
	err   error
}

// readChunk is the size of the pieces a streamed layer matrix is read in,
// QueueDepth of them in flight (1 MiB O_DIRECT reads reach the disk's
// bandwidth here: bench/diskbw).
const readChunk = 1 << 20

// readStats are the reader's counters, kept across runs (their methods:
// readstats.go).
type readStats struct {
	bytes, nanos atomic.Int64 // bytes read; summed time of the reads (in flight together)
	// reads issued to the disk (an expert's batch, a matrix's piece), and
	// experts and layer matrices read whole
	reads, experts, matrices atomic.Int64
	busy                     diskBusy // the time at least one read was in flight
}

// reader is the reader stage of one run.
type reader struct {
	rd    *nvme.Reader
	lay   *weightLayout
	slabs *slabs
	qd    int // reads in flight
	stats *readStats
	rec   *graph.Recorder
	stg   *graph.Stage

	// a streamed matrix is read in chunks by several workers: chunks
	// left and the first error, per staging slab
	left    []atomic.Int32
	errMu   sync.Mutex
	slabErr []error
}

func newReader(rd *nvme.Reader, lay *weightLayout, sl *slabs, qd int, stats *readStats, rec *graph.Recorder, stg *graph.Stage) *reader {
	n := len(sl.staging)
	return &reader{rd: rd, lay: lay, slabs: sl, qd: qd, stats: stats, rec: rec, stg: stg,
		left: make([]atomic.Int32, n), slabErr: make([]error, n)}
}

// readJob is one read for a worker: a whole expert (c0 < 0), or one chunk
// [c0, c1) of a layer matrix into its staging slab at dst.
type readJob struct {
	s           staged
	c0, c1, dst int64
}

// run takes each request and a free staging slab, and hands the reads to
// qd workers: an expert's three ranges as one job, a layer matrix in
// readChunk pieces read in parallel (the worker that reads the last piece
// passes the matrix on).
func (r *reader) run(ctx context.Context, reqs *graph.In[readReq], free *graph.In[int], out *graph.Out[staged]) error {
	work := make(chan readJob, r.qd)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(work)
	for range r.qd {
		wg.Go(func() {
			for j := range work {
				if j.c0 < 0 {
					r.readExpert(&j.s)
				} else if !r.readPiece(&j) {
					continue
				}
				if out.Send(ctx, j.s) != nil {
					return
				}
			}
		})
	}
	send := func(j readJob) error {
		select {
		case work <- j:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return each(ctx, reqs, func(q readReq) error {
		slab, err := free.Recv(ctx)
		if err != nil {
			return err
		}
		s := staged{req: q, slab: slab}
		if q.mat < 0 {
			return send(readJob{s: s, c0: -1})
		}
		// pieces start at the aligned block holding the matrix's first
		// byte, so every piece is an aligned O_DIRECT read and lands where
		// a single read of the whole range would have put it
		m := &r.lay.mats[q.layer][q.mat]
		a0, end := m.off&^(nvme.Align-1), m.off+m.n
		s.views[0] = r.slabs.slab(slab)[m.off-a0 : m.off-a0+m.n]
		n := (end - a0 + readChunk - 1) / readChunk
		r.left[slab].Store(int32(n))
		r.errMu.Lock()
		r.slabErr[slab] = nil
		r.errMu.Unlock()
		for i := range n {
			c0 := a0 + i*readChunk
			if err := send(readJob{s: s, c0: c0, c1: min(end, c0+readChunk), dst: i * readChunk}); err != nil {
				return err
			}
		}
		return nil
	})
}

// readPiece reads one piece of a layer matrix and reports whether it was
// the last one (j.s then carries the matrix's first error).
func (r *reader) readPiece(j *readJob) bool {
	m := &r.lay.mats[j.s.req.layer][j.s.req.mat]
	span := r.rec.BeginWork(r.stg, "read")
	t0 := r.stats.begin()
	_, err := r.rd.ReadAt(r.slabs.slab(j.s.slab)[j.dst:], j.c0, j.c1-j.c0)
	r.stats.end(t0)
	span.End()
	if err != nil {
		r.errMu.Lock()
		if r.slabErr[j.s.slab] == nil {
			r.slabErr[j.s.slab] = fmt.Errorf("%w: %s: %w", ErrWeightRead, m.tmpl.Name, err)
		}
		r.errMu.Unlock()
	} else {
		n := j.c1 - max(j.c0, m.off) // the matrix's bytes, not the block's head
		r.stats.bytes.Add(n)
		r.rec.Add(r.stg, "bytes read", n)
	}
	if r.left[j.s.slab].Add(-1) != 0 {
		return false
	}
	r.errMu.Lock()
	j.s.err = r.slabErr[j.s.slab]
	r.errMu.Unlock()
	if j.s.err == nil {
		r.stats.matrices.Add(1)
	}
	return true
}

// readExpert reads the expert of s.req into its staging slab: its three
// ranges in one submission with io_uring, one after another with pread.
func (r *reader) readExpert(s *staged) {
	el := &r.lay.experts[s.req.layer]
	buf := r.slabs.slab(s.slab)
	span := r.rec.BeginWork(r.stg, "read")
	t0 := r.stats.begin()
	var q [3]nvme.Req
	var at [3]int // q[j] reads matrix at[j]; an empty matrix (an ungated expert's gate) is not read
	var o, total int64
	nq := 0
	for i := range el {
		m := &el[i]
		if m.n == 0 {
			continue
		}
		n := nvme.BufferSize(m.n)
		q[nq], at[nq] = nvme.Req{Buf: buf[o : o+n], Off: m.off + int64(s.req.expert)*m.stride, N: m.n}, i
		nq++
		o += n
		total += m.n
	}
	if err := r.rd.ReadBatch(q[:nq]); err != nil {
		s.err = fmt.Errorf("%w: expert %d of layer %d: %w", ErrWeightRead, s.req.expert, s.req.layer, err)
	} else {
		s.views = [3][]byte{}
		for j := range nq {
			s.views[at[j]] = q[j].Data
		}
	}
	r.stats.end(t0)
	span.End()
	if s.err == nil {
		r.stats.experts.Add(1)
		r.stats.bytes.Add(total)
		r.rec.Add(r.stg, "bytes read", total)
	}
}
