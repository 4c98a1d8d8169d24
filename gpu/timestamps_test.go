//go:build cgo

package gpu

import (
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/model"
)

// TestBackendDeviceTiming: with timing on, marked spans come back after
// their submission with positive device durations inside the host's
// window of the run, nested spans inside their parent, a span open across
// a submission (ToHost) ends in the next one and still starts before the
// first ended, every fence wait is a Wait span; with timing off nothing
// comes back and marks are no-ops.
func TestBackendDeviceTiming(t *testing.T) {
	r, be := newOpsBackend(t)
	if err := be.DeviceTiming(); err != nil {
		t.Skipf("device timing unavailable: %v", err)
	}
	var got []model.DeviceSpan
	if err := be.TimeDevice(func(s model.DeviceSpan) { got = append(got, s) }); err != nil {
		t.Fatal(err)
	}
	x, y := r.floats(1<<16), make([]float32, 1<<16)
	t0 := time.Now()
	be.MarkDevice("outer", true)
	be.MarkDevice("inner", true)
	be.SwiGLU(y, x, x)
	be.MarkDevice("", false)
	be.Add(y, x)
	if err := be.ToHost(y); err != nil { // a submission: outer stays open
		t.Fatal(err)
	}
	mid := time.Now()
	be.Add(y, x)
	be.MarkDevice("", false)
	if err := be.ToHost(y); err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	spans := map[string]model.DeviceSpan{}
	waits := 0
	for _, s := range got {
		if s.Wait {
			waits++
			if s.End.Before(s.Start) || s.Start.Before(t0) || s.End.After(t1) {
				t.Errorf("wait %v..%v outside the run %v..%v", s.Start, s.End, t0, t1)
			}
			continue
		}
		spans[s.Name] = s
	}
	if waits != 2 || len(spans) != 2 {
		t.Fatalf("%d waits, spans %v; want 2 waits, inner and outer", waits, spans)
	}
	in, out := spans["inner"], spans["outer"]
	for _, s := range []model.DeviceSpan{in, out} {
		if !s.End.After(s.Start) || s.Start.Before(t0) || s.End.After(t1) {
			t.Errorf("span %s %v..%v: not positive or outside the run %v..%v", s.Name, s.Start, s.End, t0, t1)
		}
	}
	if in.Start.Before(out.Start) || in.End.After(out.End) {
		t.Errorf("inner %v..%v not inside outer %v..%v", in.Start, in.End, out.Start, out.End)
	}
	if !out.Start.Before(mid) || !out.End.After(mid) {
		t.Errorf("outer %v..%v does not span the first submission's end %v", out.Start, out.End, mid)
	}
	if err := be.TimeDevice(nil); err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	be.MarkDevice("off", true)
	be.Add(y, x)
	be.MarkDevice("", false)
	if err := be.ToHost(y); err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("timing off: %v", got)
	}
}
