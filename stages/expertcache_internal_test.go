package stages

// Unit tests of the expert cache over a fake port (readport_internal_test.go):
// eviction order by policy, the protected segment's bound, prefetch
// accounting, failed reads, slot views, and no allocation per token.

import (
	"errors"
	"fmt"
	"testing"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/io/tier"
	"github.com/flowinfer/flowinfer/model"
)

const testExperts = 16 // experts per layer of the test caches

// testCache returns a cache of n slots, for two layers of testExperts
// experts of three 40-byte matrices, over a fake port.
func testCache(n int, policy configs.CachePolicy) (*expertSource, *fakePort) {
	layout := make([]expertLayer, 2)
	var slot int64
	for il := range layout {
		for i := range layout[il] {
			layout[il][i] = slotMat{tmpl: model.Weight{Name: fmt.Sprintf("blk.%d.%s.weight", il, model.ExpertNames[i])}, n: 40, stride: 40}
		}
		slot = placeMats(layout[il][:])
	}
	p := Plan{Slots: n, SlotBytes: slot}
	c := newExpertCache(n, policy, layout, newSlabs(p, make([]byte, arenaBytes(p))), testExperts)
	f := &fakePort{complete: c.complete, logging: true}
	return &expertSource{expertCache: c, port: f}, f
}

// use runs one layer's use of experts ids as compute does (Fetch, Next for
// each, Release) and returns the reads it asked for.
func use(t *testing.T, c *expertSource, f *fakePort, il int, ids ...int) string {
	t.Helper()
	if err := fetchAll(c, il, ids); err != nil {
		t.Fatal(err)
	}
	return f.take()
}

// fetchAll is one layer's use of experts ids: Fetch, Next for each,
// Release.
func fetchAll(c model.Experts, il int, ids []int) error {
	defer c.Release(il)
	if err := c.Fetch(il, ids); err != nil {
		return err
	}
	for range ids {
		if _, _, err := c.Next(); err != nil {
			return err
		}
	}
	return nil
}

// has reports whether expert e of layer il is in the cache (or being
// read into it).
func (c *expertCache) has(il, e int) bool {
	_, ok := c.index[expertKey{int32(il), int32(e)}]
	return ok
}

// TestExpertCachePolicy: an expert used twice survives a run of one-off
// experts under SLRU (protected) and is the first evicted under LRU (least
// recently used). Swapping the policies fails this test.
func TestExpertCachePolicy(t *testing.T) {
	const a, b, c, d = 1, 2, 3, 4
	for _, tc := range []struct {
		policy  configs.CachePolicy
		evicted int    // by d, in a cache of three full slots
		reuseA  string // the reads of using a again
	}{
		{configs.PolicySLRU, b, ""},
		{configs.PolicyLRU, a, "0.1@1"},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			ec, f := testCache(3, tc.policy)
			if got := use(t, ec, f, 0, a); got != "0.1@0" {
				t.Fatalf("first use of a read %q", got)
			}
			if got := use(t, ec, f, 0, a); got != "" {
				t.Fatalf("a hit read %q", got)
			}
			use(t, ec, f, 0, b)
			use(t, ec, f, 0, c)
			use(t, ec, f, 0, d)
			for _, e := range []int{a, b, c, d} {
				if want := e != tc.evicted; ec.has(0, e) != want {
					t.Errorf("expert %d cached: %v, want %v", e, !want, want)
				}
			}
			if got := use(t, ec, f, 0, a); got != tc.reuseA {
				t.Errorf("using a again read %q, want %q", got, tc.reuseA)
			}
			if n := ec.evictions.Load(); n < 1 {
				t.Errorf("%d evictions", n)
			}
		})
	}
}

// TestExpertCacheDemotion: SLRU's protected segment holds at most 80% of
// the slots; a hit past that demotes the least recent protected expert to
// the hot end of probation, so the next victims are probation's older
// experts first, then the demoted one, never the protected ones.
func TestExpertCacheDemotion(t *testing.T) {
	c, f := testCache(6, configs.PolicySLRU) // protected holds 4
	const q, r, s = 10, 11, 12
	use(t, c, f, 0, q) // probation: q
	for e := range 5 { // protected: 4 3 2 1 0, then 0 goes back
		use(t, c, f, 0, e)
		use(t, c, f, 0, e)
	}
	if n := c.pol.Len(tier.Protected); n != 4 {
		t.Fatalf("protected holds %d experts, want 4", n)
	}
	if l := c.pol.In(c.index[expertKey{0, 0}]); l != tier.Probation {
		t.Fatalf("expert 0 is in list %d, want probation (%d)", l, tier.Probation)
	}
	use(t, c, f, 0, r) // probation: 0 q -> evicts q (its cold end)
	if c.has(0, q) || !c.has(0, 0) {
		t.Errorf("r evicted the wrong expert: q cached %v, 0 cached %v", c.has(0, q), c.has(0, 0))
	}
	use(t, c, f, 0, s) // probation: r 0 -> evicts 0
	if c.has(0, 0) || !c.has(0, r) {
		t.Errorf("s evicted the wrong expert: 0 cached %v, r cached %v", c.has(0, 0), c.has(0, r))
	}
	for e := 1; e <= 4; e++ {
		if !c.has(0, e) {
			t.Errorf("protected expert %d was evicted", e)
		}
	}
}

// TestExpertCachePrefetch: a prefetched expert that a Fetch then asks for
// counts as used (and as a miss if its read is still in flight); one
// evicted before any Fetch asks for it counts as wasted; prefetching what
// is cached or in flight reads nothing.
func TestExpertCachePrefetch(t *testing.T) {
	c, f := testCache(3, configs.PolicySLRU)
	if err := c.Prefetch(0, []int{1, 2}); err != nil {
		t.Fatal(err)
	}
	if err := c.Prefetch(0, []int{1}); err != nil {
		t.Fatal(err)
	}
	if got := f.take(); got != "0.1@0 0.2@1" {
		t.Fatalf("prefetch read %q", got)
	}
	if got := use(t, c, f, 0, 1); got != "" { // waits for the prefetch's read
		t.Fatalf("using a prefetched expert read %q", got)
	}
	c.finish() // the other prefetch completes and joins probation
	if f.inFlight() != 0 || !c.slots[c.index[expertKey{0, 2}]].valid {
		t.Fatalf("after finish: %d reads in flight, expert 2 valid %v", f.inFlight(), c.slots[c.index[expertKey{0, 2}]].valid)
	}
	// probation, hot to cold: 2 1; each use below takes a slot, the last
	// two by evicting 1 (used), then 2 (never used)
	for i, want := range [3][3]int64{{2, 1, 0}, {2, 1, 0}, {2, 1, 1}} {
		use(t, c, f, 1, 5+i)
		if got := [3]int64{c.pfIssued.Load(), c.pfUsed.Load(), c.pfWaste.Load()}; got != want {
			t.Errorf("after using expert %d: prefetch issued, used, wasted %v, want %v", 5+i, got, want)
		}
	}
	if c.has(0, 1) || c.has(0, 2) {
		t.Errorf("the cache still holds expert 1 (%v) or 2 (%v)", c.has(0, 1), c.has(0, 2))
	}
	if h, m := c.hits[0].Load(), c.misses[0].Load(); h != 0 || m != 1 {
		t.Errorf("layer 0: %d hits, %d misses; want 0, 1 (the prefetch was in flight)", h, m)
	}
}

// TestExpertCacheReadError: a failed read fails the Fetch's Next after the
// experts that did arrive, and Release frees its slot: the expert is not
// cached, and the next Fetch reads it again. A failed prefetch is
// forgotten.
func TestExpertCacheReadError(t *testing.T) {
	c, f := testCache(4, configs.PolicySLRU)
	errDisk := errors.New("disk gone")
	f.fail = func(r readReq) error {
		if r.expert == 2 || r.expert == 3 {
			return errDisk
		}
		return nil
	}
	if err := c.Fetch(0, []int{1, 2}); err != nil {
		t.Fatal(err)
	}
	if e, _, err := c.Next(); err != nil || e != 1 {
		t.Fatalf("Next: expert %d, %v; want 1", e, err)
	}
	if _, _, err := c.Next(); !errors.Is(err, errDisk) {
		t.Fatalf("Next: %v, want the read's error", err)
	}
	c.Release(0)
	if !c.has(0, 1) || c.has(0, 2) || c.cached.Load() != 1 || c.pol.Free() != 3 {
		t.Errorf("after a failed read: 1 cached %v, 2 cached %v, %d slots used, %d free", c.has(0, 1), c.has(0, 2), c.cached.Load(), c.pol.Free())
	}
	if err := c.Prefetch(0, []int{3}); err != nil {
		t.Fatal(err)
	}
	c.finish()
	if c.has(0, 3) || c.cached.Load() != 1 {
		t.Errorf("a failed prefetch stayed: 3 cached %v, %d slots used", c.has(0, 3), c.cached.Load())
	}
	f.fail = nil
	f.take()
	if got := use(t, c, f, 0, 2); got == "" {
		t.Error("the expert whose read failed was not read again")
	}
}

// TestExpertCacheViews: Next returns the expert's matrices as views of its
// own slot, at the layout's offsets.
func TestExpertCacheViews(t *testing.T) {
	c, f := testCache(3, configs.PolicyLRU)
	if err := c.Fetch(1, []int{7, 8}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		e, w, err := c.Next()
		if err != nil {
			t.Fatal(err)
		}
		s := c.index[expertKey{1, int32(e)}]
		slot := c.mem.expert(s)
		for i, m := range w.Matrices() {
			lm := &c.layout[1][i]
			if m.Name != lm.tmpl.Name || len(m.Data) != int(lm.n) || &m.Data[0] != &slot[lm.at] {
				t.Errorf("expert %d matrix %d: %q, %d bytes, not at offset %d of slot %d", e, i, m.Name, len(m.Data), lm.at, s)
			}
		}
	}
	c.Release(1)
	_ = f
}

// TestExpertCacheNoAllocs: Fetch, Next and Release allocate nothing, hits
// or misses (evicting every time).
func TestExpertCacheNoAllocs(t *testing.T) {
	c, _ := testCache(4, configs.PolicySLRU)
	c.port.(*fakePort).logging = false
	ids := make([]int, 2)
	round := 0
	step := func() {
		for il := range 2 {
			ids[0], ids[1] = round%testExperts, (round*7+3)%testExperts
			if ids[0] == ids[1] {
				ids[1] = (ids[1] + 1) % testExperts
			}
			if err := fetchAll(c, il, ids); err != nil {
				t.Fatal(err)
			}
		}
		round++
	}
	for range 100 {
		step() // every key has been in the index once
	}
	if n := testing.AllocsPerRun(1000, step); n != 0 {
		t.Errorf("%v allocations per step", n)
	}
	if c.evictions.Load() == 0 || c.hits[0].Load() == 0 {
		t.Errorf("the steps did not both hit and evict: %d evictions, %d hits", c.evictions.Load(), c.hits[0].Load())
	}
}
