package stages

// kvcompress.go: the kv-compress stage. With --kv-recent, a query reads its
// most recent K and V rows from their f16 copies, so a new row's quantized
// form (TurboQuant's rotation and coding, or q8_0/q4_0 blocks) is first
// read by a later step: compute hands those rows to this stage
// (model.KVDeferrer) and goes on with the next layers while it converts
// them, then waits for the step's last ones before the step ends (Flush,
// after the output projection). Rows travel in a few job buffers that go
// round compute -> kv-compress -> compute; compute waits on the way back
// only when every buffer is out (its wait on the acks edge is the stall
// the trace shows), and the stage's busy time is the conversion.

import (
	"context"
	"errors"
	"io"

	"github.com/flowinfer/flowinfer/graph"
	"github.com/flowinfer/flowinfer/model"
)

// kvJobs is the job buffers in flight at most (a few layers' rows).
const kvJobs = 4

// kvJob is one layer's deferred rows of a step.
type kvJob struct {
	layer    int
	seq, pos []int32
	k, v     []float32
}

// kvCompress is both ends of the stage: Defer and Flush run in compute's
// goroutine, run in the stage's.
type kvCompress struct {
	kv    *model.KVCache
	jobs  []kvJob
	free  []int
	out   int // jobs sent and not yet acknowledged
	ctx   context.Context
	send  *graph.Out[int]
	ackIn *graph.In[int]
	recv  *graph.In[int]
	ack   *graph.Out[int]
}

// addKVCompress wires a kv-compress stage next to comp when the cache
// keeps f16 copies (nil otherwise); bind gives it comp's context.
func addKVCompress(g *graph.Graph, comp *graph.Stage, kv *model.KVCache) *kvCompress {
	if !kv.HasRecent() {
		return nil
	}
	defers := false
	for l := range kv.NLayer {
		lt := kv.Layer(l)
		defers = defers || lt.RecentK && lt.RecentV
	}
	if !defers {
		return nil
	}
	st := g.Stage("kv-compress")
	c := &kvCompress{kv: kv, jobs: make([]kvJob, kvJobs)}
	for i := range kvJobs {
		c.free = append(c.free, i)
	}
	c.send, c.recv = graph.Connect[int](comp, st, kvJobs)
	c.ack, c.ackIn = graph.Connect[int](st, comp, kvJobs)
	st.Do(c.run)
	return c
}

// bind sets the context compute's calls use.
func (c *kvCompress) bind(ctx context.Context) { c.ctx = ctx }

// Defer implements model.KVDeferrer: it copies the rows into a free job
// buffer (waiting for one to come back if all are out) and sends it.
func (c *kvCompress) Defer(layer int, seq, pos []int32, k, v []float32) error {
	if len(c.free) == 0 {
		if err := c.wait(); err != nil {
			return err
		}
	}
	i := c.free[len(c.free)-1]
	c.free = c.free[:len(c.free)-1]
	j := &c.jobs[i]
	j.layer = layer
	j.seq = append(j.seq[:0], seq...)
	j.pos = append(j.pos[:0], pos...)
	j.k = append(j.k[:0], k...)
	j.v = append(j.v[:0], v...)
	if err := c.send.Send(c.ctx, i); err != nil {
		return err
	}
	c.out++
	return nil
}

// Flush implements model.KVDeferrer.
func (c *kvCompress) Flush() error {
	for c.out > 0 {
		if err := c.wait(); err != nil {
			return err
		}
	}
	return nil
}

// wait takes one job buffer back.
func (c *kvCompress) wait() error {
	i, err := c.ackIn.Recv(c.ctx)
	if errors.Is(err, io.EOF) {
		err = errors.New("stages: the kv-compress stage stopped")
	}
	if err != nil {
		return err
	}
	c.free = append(c.free, i)
	c.out--
	return nil
}

// run is the stage: each job's rows converted to the cache's types, head
// by head, as SetK and SetV store them.
func (c *kvCompress) run(ctx context.Context) error {
	scratch := make([]float32, c.kv.StoreScratch())
	for {
		i, err := c.recv.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		j := &c.jobs[i]
		// the layer's own row geometry (gemma4's layers differ)
		heads, kd, vd := c.kv.NHeadKV(j.layer), c.kv.KDimOf(j.layer), c.kv.VDimOf(j.layer)
		for t := range j.seq {
			s, p := int(j.seq[t]), int(j.pos[t])
			for kh := range heads {
				c.kv.StoreHead(j.layer, s, p, kh, false, j.k[t*kd:(t+1)*kd], scratch)
				c.kv.StoreHead(j.layer, s, p, kh, true, j.v[t*vd:(t+1)*vd], scratch)
			}
		}
		if err := c.ack.Send(ctx, i); err != nil {
			return err
		}
	}
}
