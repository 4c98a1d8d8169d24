package stages

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/flowinfer/flowinfer/graph"
	"github.com/flowinfer/flowinfer/model"
)

// compute runs each step's forward pass on the backend, waiting before
// every layer for its weight ticket and returning the slab after it.
type compute struct {
	mctx *model.Context
	rec  *graph.Recorder
}

func (c *compute) run(ctx context.Context, stg *graph.Stage, steps *graph.In[*step], tickets *graph.In[*Slab], released *graph.Out[*Slab], out *graph.Out[*step]) error {
	gate := &layerGate{ctx: ctx, tickets: tickets, released: released}
	c.mctx.BeforeLayer = gate.before
	c.mctx.AfterLayer = gate.after
	for {
		st, err := steps.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		span := c.rec.Begin(stg, "forward")
		t0 := time.Now()
		logits, err := c.mctx.Decode(&st.batch)
		st.dur = time.Since(t0)
		span.End()
		if err != nil {
			return err
		}
		c.rec.Add(stg, "tokens", int64(len(st.batch.Tokens)))
		st.logits = logits
		if err := out.Send(ctx, st); err != nil {
			return err
		}
	}
}
