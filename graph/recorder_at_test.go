package graph

import (
	"context"
	"testing"
	"time"
)

// TestSpanAtWorkAt: spans recorded after the fact (a device's timing of
// its work) land where their times say: SpanAt among the stage's
// sub-spans, WorkAt among its work spans, by full name in the Summary and
// by the group before ':' in the stall report; an interval that ends
// before it starts, a nil recorder or a recorder that is off record
// nothing.
func TestSpanAtWorkAt(t *testing.T) {
	rec := NewRecorder(0)
	g := New(rec)
	s := g.Stage("compute")
	s.Do(func(ctx context.Context) error {
		t0 := time.Now()
		time.Sleep(3 * time.Millisecond)
		rec.WorkAt(s, "gpu:attn-0", t0, t0.Add(time.Millisecond))
		rec.WorkAt(s, "gpu:ffn-0", t0.Add(time.Millisecond), t0.Add(2*time.Millisecond))
		rec.WorkAt(s, "gpu:bad", t0.Add(time.Millisecond), t0)
		rec.SpanAt(s, "gpu-wait", t0, t0.Add(2*time.Millisecond))
		var nilRec *Recorder
		nilRec.WorkAt(s, "gpu:x", t0, t0.Add(time.Millisecond))
		return nil
	})
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	sum := rec.Summary()[0]
	if w := sum.Work; len(w) != 2 || w["gpu:attn-0"].Sum != time.Millisecond || w["gpu:ffn-0"].Count != 1 {
		t.Errorf("summary work %+v", w)
	}
	if sp := sum.Spans["gpu-wait"]; sp.Count != 1 || sp.Total != 2*time.Millisecond {
		t.Errorf("summary spans %+v", sum.Spans)
	}
	st := rec.Stalls().Stages[0]
	if w := st.Work; len(w) != 1 || w["gpu"].Count != 2 || w["gpu"].InFlight != 2*time.Millisecond {
		t.Errorf("stall work %+v", w)
	}
	off := NewRecorder(0)
	off.SetEnabled(false)
	g = New(off)
	s = g.Stage("compute")
	s.Do(func(ctx context.Context) error {
		off.WorkAt(s, "gpu:x", time.Now(), time.Now().Add(time.Millisecond))
		return nil
	})
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(off.Summary()); n != 0 {
		t.Errorf("a recorder that is off recorded %d stages", n)
	}
}
