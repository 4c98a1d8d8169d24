package stages

// Unit tests of the layer stream over a fake port
// (readport_internal_test.go): the read-ahead window, the victim slot,
// wrap-around into the next step, failed reads, and no allocation per
// step.

import (
	"errors"
	"fmt"
	"testing"

	"github.com/flowinfer/flowinfer/model"
)

// testStream returns a stream of six layers, of which 1, 2, 4 and 5
// stream through nSlots slots (0 and 3 stay resident). A streamed layer
// has two matrices, attn_q and ffn_down, of 48 and 80 bytes.
func testStream(nSlots int) (*layerSource, *fakePort) {
	const nLayer = 6
	streamed := []bool{false, true, true, false, true, true}
	layers := make([]model.Layer, nLayer)
	mats := make([][model.NStreamable]slotMat, nLayer)
	var slot int64
	for il := range layers {
		layers[il].Wq = &model.Weight{Name: fmt.Sprintf("resident q %d", il)}
		mats[il][0] = slotMat{tmpl: model.Weight{Name: fmt.Sprintf("blk.%d.attn_q.weight", il)}, n: 48}
		mats[il][6] = slotMat{tmpl: model.Weight{Name: fmt.Sprintf("blk.%d.ffn_down.weight", il)}, n: 80}
		slot = max(slot, placeMats(mats[il][:]))
	}
	p := Plan{LayerSlots: nSlots, LayerSlotBytes: slot}
	ls := newLayerStream(layers, mats, streamed, nSlots, newSlabs(p, make([]byte, arenaBytes(p))))
	f := &fakePort{complete: ls.complete, logging: true}
	return &layerSource{layerStream: ls, port: f}, f
}

// TestLayerStreamWindow: which layers each Acquire and Release reads
// ahead, into which slot, for two steps: the window is the len(slots)
// streamed layers from the one compute is at (wrapping into the next
// step), a read goes into a free slot, else into the last slot that is
// neither in use, nor being read, nor holding a layer of the window.
// Reads complete only when compute waits for them (a slow reader), or
// (fast) as soon as they are asked for.
func TestLayerStreamWindow(t *testing.T) {
	type call struct {
		acquire bool
		layer   int
		reads   string // "layer@slot", in order
		waited  bool   // Acquire waited for its layer
	}
	a := func(il int, reads string, waited bool) call { return call{true, il, reads, waited} }
	r := func(il int, reads string) call { return call{false, il, reads, false} }
	for _, tc := range []struct {
		name  string
		slots int
		fast  bool
		steps [2][]call
	}{
		{"slots=2", 2, false, [2][]call{{
			a(0, "", false), r(0, ""),
			a(1, "1@0 2@1", true), r(1, "4@0"),
			a(2, "", true), r(2, "5@1"),
			a(3, "", false), r(3, ""),
			a(4, "", true), r(4, "1@0"), // wraps: the next step's first layer
			a(5, "", true), r(5, "2@1"),
		}, {
			a(0, "", false), r(0, ""),
			a(1, "", true), r(1, "4@0"),
			a(2, "", true), r(2, "5@1"),
			a(3, "", false), r(3, ""),
			a(4, "", true), r(4, "1@0"),
			a(5, "", true), r(5, "2@1"),
		}}},
		{"slots=3", 3, false, [2][]call{{
			a(0, "", false), r(0, ""),
			a(1, "1@0 2@1 4@2", true), r(1, "5@0"),
			a(2, "", true), r(2, "1@1"), // slot 0 is being read: slot 1 is the victim
			a(3, "", false), r(3, ""),
			a(4, "", true), r(4, "2@2"),
			a(5, "", true), r(5, "4@0"),
		}, {
			a(0, "", false), r(0, ""),
			a(1, "", true), r(1, "5@1"),
			a(2, "", true), r(2, "1@2"),
			a(3, "", false), r(3, ""),
			a(4, "", true), r(4, "2@0"),
			a(5, "", true), r(5, "4@1"),
		}}},
		{"slots=2/fast", 2, true, [2][]call{{
			a(0, "", false), r(0, ""),
			a(1, "1@0 2@1", true), r(1, "4@0"), // its read is asked for here
			a(2, "", false), r(2, "5@1"),
			a(3, "", false), r(3, ""),
			a(4, "", false), r(4, "1@0"),
			a(5, "", false), r(5, "2@1"),
		}, {
			a(0, "", false), r(0, ""),
			a(1, "", false), r(1, "4@0"),
			a(2, "", false), r(2, "5@1"),
			a(3, "", false), r(3, ""),
			a(4, "", false), r(4, "1@0"),
			a(5, "", false), r(5, "2@1"),
		}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls, f := testStream(tc.slots)
			for step, calls := range tc.steps {
				for _, c := range calls {
					what := fmt.Sprintf("step %d: Release(%d)", step, c.layer)
					waited := ls.waited.Load()
					if c.acquire {
						what = fmt.Sprintf("step %d: Acquire(%d)", step, c.layer)
						L, err := ls.Acquire(c.layer)
						if err != nil {
							t.Fatalf("%s: %v", what, err)
						}
						if L.Wq == nil || L.Wq.Name != fmt.Sprintf("blk.%d.attn_q.weight", c.layer) && L.Wq.Name != fmt.Sprintf("resident q %d", c.layer) {
							t.Fatalf("%s: got a layer whose attn_q is %v", what, L.Wq)
						}
					} else {
						ls.Release(c.layer)
					}
					if got := f.take(); got != c.reads {
						t.Errorf("%s read %q, want %q", what, got, c.reads)
					}
					if got := ls.waited.Load() > waited; got != c.waited {
						t.Errorf("%s: waited %v, want %v", what, got, c.waited)
					}
					if tc.fast {
						f.drain()
					}
				}
			}
			ls.finish()
			if ls.pending != 0 || f.inFlight() != 0 {
				t.Errorf("after finish: %d reads pending, %d in flight", ls.pending, f.inFlight())
			}
		})
	}
}

// TestLayerStreamViews: an acquired streamed layer's matrices are views of
// its slot at the layout's offsets, every matrix of the layer is read, and
// the layer's other fields are the model's.
func TestLayerStreamViews(t *testing.T) {
	ls, f := testStream(2)
	ls.layers[4].AttnNorm = model.Vector{1, 2}
	L, err := ls.Acquire(4)
	if err != nil {
		t.Fatal(err)
	}
	s := ls.find(4)
	slot := ls.mem.layer(s)
	for i, w := range []*model.Weight{L.Wq, L.Down} {
		m := &ls.mats[4][[]int{0, 6}[i]]
		if w.Name != m.tmpl.Name || len(w.Data) != int(m.n) || &w.Data[0] != &slot[m.at] {
			t.Errorf("matrix %s: %d bytes, not at offset %d of slot %d", w.Name, len(w.Data), m.at, s)
		}
	}
	if L.Wk != nil || len(L.AttnNorm) != 2 {
		t.Errorf("layer fields: Wk %v, AttnNorm %v", L.Wk, L.AttnNorm)
	}
	mats := map[int8]bool{}
	for _, r := range f.log {
		if r.layer == 4 {
			mats[r.mat] = true
		}
	}
	if len(mats) != 2 || !mats[0] || !mats[6] {
		t.Errorf("layer 4's reads were for matrices %v, want 0 and 6", mats)
	}
	ls.Release(4)
}

// TestLayerStreamReadError: a failed read fails the Acquire of its layer
// with the read's error and frees the slot; the next Acquire reads the
// layer again.
func TestLayerStreamReadError(t *testing.T) {
	ls, f := testStream(2)
	errDisk := errors.New("disk gone")
	f.fail = func(r readReq) error {
		if r.layer == 2 && r.mat == 6 {
			return errDisk
		}
		return nil
	}
	if _, err := ls.Acquire(1); err != nil {
		t.Fatal(err)
	}
	ls.Release(1)
	if _, err := ls.Acquire(2); !errors.Is(err, errDisk) {
		t.Fatalf("Acquire(2): %v, want the read's error", err)
	}
	if ls.find(2) >= 0 {
		t.Fatal("the failed layer still holds a slot")
	}
	f.fail = nil
	f.take()
	if _, err := ls.Acquire(2); err != nil {
		t.Fatal(err)
	}
	if got := f.take(); got == "" || got[:2] != "2@" {
		t.Errorf("the second Acquire(2) read %q, want layer 2 first", got)
	}
	ls.Release(2)
}

// TestLayerStreamNoAllocs: a step of Acquire and Release allocates nothing.
func TestLayerStreamNoAllocs(t *testing.T) {
	ls, f := testStream(2)
	f.logging = false
	step := func() {
		for il := range len(ls.pos) {
			if _, err := ls.Acquire(il); err != nil {
				t.Fatal(err)
			}
			ls.Release(il)
		}
	}
	step()
	if n := testing.AllocsPerRun(100, step); n != 0 {
		t.Errorf("%v allocations per step", n)
	}
}
