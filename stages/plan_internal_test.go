package stages

// Unit tests of the plan's budget arithmetic (planBudget) on made-up
// sizes: no model, no file.

import (
	"fmt"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/configs"
)

// Made-up models. dense8: eight layers of 1000 bytes (900 in the file),
// 6000 bytes of other weights; staging slabs of 500 bytes for the largest
// matrix. moe4: four such layers with 8 routed experts each (2 per token)
// of 300 bytes in a slot, 600 bytes of staging, 280 in the file.
// uneven6: layers of unequal sizes, where spreading the streamed layers
// keeps fewer resident than fit and the bytes left buy read-ahead.
var (
	dense8 = weightSizes{resident: 14000, layerSlot: []int64{1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000},
		layerFile: []int64{900, 900, 900, 900, 900, 900, 900, 900}, layerSlab: 500}
	moe4 = weightSizes{resident: 10000, layerSlot: []int64{1000, 1000, 1000, 1000},
		layerFile: []int64{900, 900, 900, 900}, layerSlab: 500,
		experts: 32, expertsUsed: 2, expertSlot: 300, expertSlab: 600, expertFile: 32 * 280}
	uneven6 = weightSizes{resident: 9700, layerSlot: []int64{700, 1000, 1000, 100, 900, 1000},
		layerFile: []int64{700, 1000, 1000, 100, 900, 1000}, layerSlab: 50}
)

// TestPlanBudget: what stays resident, which layers stream through how
// many slots, how many experts the cache holds, the staging slabs, the
// smallest budget, and the errors when the budget is too small.
func TestPlanBudget(t *testing.T) {
	type want struct {
		resident             int64
		streamed             string // layers that stream; "-": none (nil)
		layerSlots           int
		slabs                int
		slabBytes            int64
		slots                int // expert cache slots
		minBudget            int64
		err                  string
		residentLayers, file int64 // checked when streamed is not "-"
	}
	for _, tc := range []struct {
		name   string
		sz     weightSizes
		cfg    WeightConfig
		want   want
		layers int // Plan.Layers
	}{
		// dense: nothing streams while the budget holds every layer
		{"dense/no limit", dense8, WeightConfig{}, want{resident: 14000, streamed: "-", minBudget: 9000}, 0},
		{"dense/fits exactly", dense8, WeightConfig{Budget: 14000}, want{resident: 14000, streamed: "-", minBudget: 9000}, 0},
		// 6000 fixed + 2 slabs of 500 + 2 slots of 1000 = 9000: every layer streams
		{"dense/min budget", dense8, WeightConfig{Budget: 9000},
			want{resident: 6000, streamed: "0 1 2 3 4 5 6 7", layerSlots: 2, slabs: 2, slabBytes: 500, minBudget: 9000, file: 7200}, 8},
		{"dense/below min", dense8, WeightConfig{Budget: 8999},
			want{err: "cannot hold the weights that always stay resident (5.86KiB: embeddings, output, norms, routers), 2 layer slots (1.95KiB), the staging slabs (1000); it needs at least 8.79KiB"}, 0},
		// 2000 over the minimum: two layers stay, spread between the streamed
		{"dense/two stay", dense8, WeightConfig{Budget: 11000},
			want{resident: 8000, streamed: "1 2 3 5 6 7", layerSlots: 2, slabs: 2, slabBytes: 500, minBudget: 9000, residentLayers: 2, file: 5400}, 6},
		{"dense/four stay", dense8, WeightConfig{Budget: 13999},
			want{resident: 10000, streamed: "1 3 5 7", layerSlots: 2, slabs: 2, slabBytes: 500, minBudget: 9000, residentLayers: 4, file: 3600}, 4},
		// 2301 over 7100: the three smallest fit (1700), but spread they
		// cost 2600; two stay (800) and 1501 left buys a third slot
		{"uneven/read-ahead", uneven6, WeightConfig{Budget: 9401},
			want{resident: 5800, streamed: "1 2 4 5", layerSlots: 3, slabs: 2, slabBytes: 50, minBudget: 7100, residentLayers: 2, file: 3900}, 4},
		{"dense/forced", dense8, WeightConfig{force: &layerForce{resident: 1, slots: 3}},
			want{resident: 7000, streamed: "1 2 3 4 5 6 7", layerSlots: 3, slabs: 2, slabBytes: 500, minBudget: 9000, residentLayers: 1, file: 6300}, 7},

		// MoE: QueueDepth+1 slabs; the cache gets what is left
		{"moe/no limit", moe4, WeightConfig{QueueDepth: 3},
			want{resident: 10000, streamed: "-", slabs: 4, slabBytes: 600, slots: 32, minBudget: 11000}, 0},
		{"moe/one token", moe4, WeightConfig{QueueDepth: 3, Budget: 13000},
			want{resident: 10000, streamed: "-", slabs: 4, slabBytes: 600, slots: 2, minBudget: 11000}, 0},
		{"moe/twelve", moe4, WeightConfig{QueueDepth: 3, Budget: 16000},
			want{resident: 10000, streamed: "-", slabs: 4, slabBytes: 600, slots: 12, minBudget: 11000}, 0},
		// one byte short of a token's experts: layers stream, and the
		// bytes the streamed layers free go to the cache
		{"moe/layers stream", moe4, WeightConfig{QueueDepth: 3, Budget: 12999},
			want{resident: 7000, streamed: "1 2 3", layerSlots: 2, slabs: 4, slabBytes: 600, slots: 5, minBudget: 11000, residentLayers: 1, file: 2700}, 3},
		{"moe/below min", moe4, WeightConfig{QueueDepth: 3, Budget: 10999},
			want{err: "one token's 2 experts (600); it needs at least 10.74KiB"}, 0},
		{"moe/forced, no room for experts", moe4, WeightConfig{QueueDepth: 3, Budget: 1, force: &layerForce{resident: 0, slots: 2}},
			want{err: "cannot hold the resident weights (5.86KiB), the staging slabs (2.34KiB) and one token's 2 experts (600); it needs at least 10.74KiB"}, 0},
		{"moe/mmap", moe4, WeightConfig{Engine: configs.EngineMmap, Budget: 18960},
			want{resident: 10000, streamed: "-"}, 0},
		{"moe/mmap over budget", moe4, WeightConfig{Engine: configs.EngineMmap, Budget: 18959},
			want{err: "io_engine mmap maps the whole model (18.52KiB) and cannot keep within the RAM budget of 18.51KiB"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, streamed, err := planBudget(tc.sz, tc.cfg.withDefaults())
			if tc.want.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want.err) {
					t.Fatalf("error %v, want %q", err, tc.want.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := want{resident: p.Resident, streamed: layerList(streamed), layerSlots: p.LayerSlots, slabs: p.Slabs, slabBytes: p.SlabBytes,
				slots: p.Slots, minBudget: p.MinBudget}
			if streamed != nil {
				got.residentLayers, got.file = int64(p.ResidentLayers), p.LayerFile
			}
			if got != tc.want || p.Layers != tc.layers {
				t.Errorf("got  %+v, %d layers stream\nwant %+v, %d", got, p.Layers, tc.want, tc.layers)
			}
			if p.Staging != int64(p.Slabs)*p.SlabBytes {
				t.Errorf("staging %d, not %d slabs of %d", p.Staging, p.Slabs, p.SlabBytes)
			}
			if p.Layers > 0 && p.LayerSlotBytes != 1000 {
				t.Errorf("layer slots of %d bytes, want the largest layer's 1000", p.LayerSlotBytes)
			}
			if p.Budget > 0 && p.Engine != configs.EngineMmap && arenaBytes(p)+p.Resident > p.Budget {
				t.Errorf("resident %d + arena %d exceed the budget of %d", p.Resident, arenaBytes(p), p.Budget)
			}
		})
	}
}

func layerList(streamed []bool) string {
	if streamed == nil {
		return "-"
	}
	var s []string
	for il, st := range streamed {
		if st {
			s = append(s, fmt.Sprint(il))
		}
	}
	return strings.Join(s, " ")
}

// TestSpread: the streamed layers are spaced evenly, the last of each
// group streaming.
func TestSpread(t *testing.T) {
	for _, tc := range []struct {
		n, k int
		want string
	}{{4, 0, ""}, {4, 1, "3"}, {4, 2, "1 3"}, {4, 3, "1 2 3"}, {4, 4, "0 1 2 3"}, {6, 4, "1 2 4 5"}, {8, 3, "2 5 7"}} {
		if got := layerList(spread(tc.n, tc.k)); got != tc.want {
			t.Errorf("spread(%d, %d) = %q, want %q", tc.n, tc.k, got, tc.want)
		}
	}
}

// TestWeightConfigCheck: what the plan refuses to plan with, whatever
// configs let through.
func TestWeightConfigCheck(t *testing.T) {
	for _, tc := range []struct {
		cfg  WeightConfig
		want string
	}{
		{WeightConfig{}, ""},
		{WeightConfig{Engine: configs.EngineIOUring, Policy: configs.PolicyLRU, PrefetchDepth: 1}, ""},
		{WeightConfig{Budget: -1}, "negative RAM budget -1"},
		{WeightConfig{Engine: "aio"}, `unknown io_engine "aio"`},
		{WeightConfig{Policy: "lfu"}, `unknown expert cache policy "lfu"`},
		{WeightConfig{PrefetchDepth: 2}, "prefetch_depth 2 is not implemented"},
	} {
		err := tc.cfg.withDefaults().check()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// TestSlabsLayout: the staging slabs, expert slots and layer slots follow
// one another in the arena without overlap, each slab at a multiple of
// its (aligned) size, and a matrix's view is at its offset in its slot.
func TestSlabsLayout(t *testing.T) {
	p := Plan{Slabs: 3, SlabBytes: 8192, Staging: 3 * 8192, Slots: 4, SlotBytes: 320, LayerSlots: 2, LayerSlotBytes: 1000}
	arena := make([]byte, arenaBytes(p))
	s := newSlabs(p, arena)
	want := 0
	check := func(what string, b []byte, n int64) {
		if &b[0] != &arena[want] || len(b) != int(n) {
			t.Errorf("%s: %d bytes, not at %d", what, len(b), want)
		}
		want += int(n)
	}
	for i := range p.Slabs {
		check(fmt.Sprint("slab ", i), s.slab(i), p.SlabBytes)
		if cap(s.slab(i)) != len(s.slab(i)) {
			t.Errorf("slab %d can grow into its neighbour", i)
		}
	}
	for i := range int32(p.Slots) {
		check(fmt.Sprint("expert slot ", i), s.expert(i), p.SlotBytes)
	}
	for i := range int32(p.LayerSlots) {
		check(fmt.Sprint("layer slot ", i), s.layer(i), p.LayerSlotBytes)
	}
	if want != len(arena) {
		t.Errorf("the slots end at %d of %d bytes", want, len(arena))
	}
	ms := []slotMat{{n: 100}, {n: 70, packed: 90}, {n: 8}}
	if n := placeMats(ms); n != 128+128+64 {
		t.Errorf("three matrices take %d bytes of a slot", n)
	}
	slot := s.expert(2)
	if w := ms[1].weight(slot); !w.Packed || len(w.Data) != 90 || &w.Data[0] != &slot[128] {
		t.Errorf("packed matrix: packed %v, %d bytes, not at 128", w.Packed, len(w.Data))
	}
	if w := ms[2].weight(slot); w.Packed || len(w.Data) != 8 || &w.Data[0] != &slot[256] {
		t.Errorf("unpacked matrix: packed %v, %d bytes, not at 256", w.Packed, len(w.Data))
	}
}
