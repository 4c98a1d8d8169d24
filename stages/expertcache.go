package stages

// expertcache.go: the expert cache, the compute side of the weight path
// for routed experts. In a run, compute uses it through an expertSource
// (model.Experts): a Fetch turns the router's choices into hits (pinned
// slots) and read requests (misses, sent at once, all of a layer's in one
// go); Next hands out hits first, then misses as their reads complete.
// Requests and completions go through a readPort: the run's edges to the
// reader and from the uploader (weights.go), or a fake in the tests.
//
// Slots are all the size of the largest expert, so a byte budget is a slot
// count. The eviction policy is a segmented LRU (SLRU): a new expert enters
// a probation segment; a hit promotes it to a protected segment (80% of
// the slots), whose least recent member is demoted back to probation when
// it overflows; victims come from probation's cold end first. Experts that
// are used over and over (routing is skewed) survive one-off uses. With
// LRU every expert goes to probation. The policy's bookkeeping is
// io/tier's, shared with the device's expert slots (gpu/expertstore.go);
// its lists are intrusive (indices in arrays): Fetch and Release allocate
// nothing, so the per-token path stays allocation-free (golang-lru/v2
// allocates an entry per insertion; docs/decisions.md). Slots pinned by
// the current Fetch are in no list, so they cannot be evicted while
// compute uses them.
//
// Only compute's goroutine touches the index and lists; the counters are
// atomic for metrics.

import (
	"sync/atomic"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/graph"
	"github.com/flowinfer/flowinfer/io/tier"
	"github.com/flowinfer/flowinfer/model"
)

type expertKey struct{ layer, expert int32 }

type slotState struct {
	key        expertKey
	valid      bool                // holds key's weights
	inflight   bool                // a read into it is outstanding
	mine       bool                // part of the current Fetch
	prefetched bool                // brought by Prefetch and not yet used by a Fetch
	hit        bool                // the current fetch found it cached
	w          model.ExpertWeights // views of the slot's memory
}

// expertCache is the cache's state, kept across runs.
type expertCache struct {
	slots   []slotState
	index   map[expertKey]int32
	pol     *tier.Policy  // free slots, eviction order
	layout  []expertLayer // where each layer's experts go in a slot
	mem     *slabs        // the slots
	fetched []int32       // slots of the current Fetch
	ready   []int32       // of those, the ready ones, in order
	taken   int           // ready[:taken] have been returned by Next
	pending int           // reads outstanding (fetches and prefetches)
	mineP   int           // of those, the current Fetch's
	err     error         // the first failed read of the current Fetch

	hits, misses              []atomic.Int64
	evictions, cached         atomic.Int64
	pfIssued, pfUsed, pfWaste atomic.Int64
	pfLate                    atomic.Int64 // misses whose prefetch was still in flight
}

// newExpertCache makes a cache of n slots of mem for the experts of layout
// (nExpert per layer).
func newExpertCache(n int, policy configs.CachePolicy, layout []expertLayer, mem *slabs, nExpert int) *expertCache {
	nl := len(layout)
	c := &expertCache{
		slots: make([]slotState, n), index: make(map[expertKey]int32, n),
		pol:    tier.New(n, policy == configs.PolicySLRU),
		layout: layout, mem: mem,
		fetched: make([]int32, 0, nExpert), ready: make([]int32, 0, nExpert),
		hits: make([]atomic.Int64, nl), misses: make([]atomic.Int64, nl),
	}
	return c
}

// expertSource is the cache as compute uses it in one run: misses become
// requests on port, and it waits on port for their reads.
type expertSource struct {
	*expertCache
	port readPort
	rec  *graph.Recorder
	stg  *graph.Stage
}

var (
	_ model.Experts    = (*expertSource)(nil)
	_ model.Prefetcher = (*expertSource)(nil)
)

// MaxFetch implements model.Experts.
func (c *expertSource) MaxFetch() int { return len(c.slots) }

// Fetch implements model.Experts.
func (c *expertSource) Fetch(il int, ids []int) error {
	c.fetched, c.ready, c.taken, c.err = c.fetched[:0], c.ready[:0], 0, nil
	nHit := 0
	for _, e := range ids {
		k := expertKey{int32(il), int32(e)}
		if s, ok := c.index[k]; ok {
			st := &c.slots[s]
			if st.prefetched {
				st.prefetched = false
				c.pfUsed.Add(1)
			}
			st.mine, st.hit = true, st.valid
			c.fetched = append(c.fetched, s)
			if st.valid {
				c.pol.Pin(s)
				c.ready = append(c.ready, s)
				c.hits[il].Add(1)
				nHit++
			} else { // a prefetch of it is in flight
				c.mineP++
				c.misses[il].Add(1)
				c.pfLate.Add(1)
			}
			continue
		}
		s, err := c.victim(true)
		if err != nil {
			return err
		}
		c.fetched = append(c.fetched, s)
		c.misses[il].Add(1)
		if err := c.issue(s, k, true); err != nil {
			return err
		}
		c.mineP++
	}
	c.rec.Add(c.stg, counterRAMHits, int64(nHit))
	c.rec.Add(c.stg, counterRAMMisses, int64(len(ids)-nHit))
	return nil
}

// Prefetch implements model.Prefetcher: it starts reads of the experts of
// layer il that are neither cached nor in flight, into the coldest
// unpinned slots, and returns at once. A prefetched expert joins the cache
// (probation) when its read completes; it is counted as used when a later
// Fetch asks for it, as wasted when evicted before that.
func (c *expertSource) Prefetch(il int, ids []int) error {
	for _, e := range ids {
		k := expertKey{int32(il), int32(e)}
		if _, ok := c.index[k]; ok {
			continue
		}
		s, err := c.victim(false)
		if err != nil {
			return err
		}
		if s < 0 {
			return nil // every slot is pinned or being read: no room to guess
		}
		if err := c.issue(s, k, false); err != nil {
			return err
		}
		c.pfIssued.Add(1)
	}
	return nil
}

// issue reads expert k into slot s, for the current Fetch (mine) or as a
// prefetch; the slot's weights are views of its memory from now on.
func (c *expertSource) issue(s int32, k expertKey, mine bool) error {
	st := &c.slots[s]
	st.key, st.valid, st.inflight, st.mine, st.hit, st.prefetched = k, false, true, mine, false, !mine
	c.index[k] = s
	mem := c.mem.expert(s)
	for i, w := range st.w.Matrices() {
		*w = c.layout[k.layer][i].weight(mem)
	}
	if err := c.port.request(readReq{slot: s, layer: k.layer, expert: k.expert, mat: -1}); err != nil {
		return err
	}
	c.pending++
	return nil
}

// victim returns a slot for a new expert: a free one, else the coldest
// unpinned one (probation first), evicted. When every slot is pinned or
// being read, it waits for a read to complete if wait is set (a Fetch
// must get its slots; one exists since a Fetch asks for at most MaxFetch
// experts), and returns -1 otherwise.
func (c *expertSource) victim(wait bool) (int32, error) {
	for {
		if s, ok := c.pol.Take(); ok {
			c.cached.Add(1)
			return s, nil
		}
		if s := c.pol.Victim(); s >= 0 {
			st := &c.slots[s]
			delete(c.index, st.key)
			if st.prefetched {
				c.pfWaste.Add(1)
			}
			st.valid, st.prefetched = false, false
			c.evictions.Add(1)
			return s, nil
		}
		if !wait || c.pending == 0 {
			return -1, nil
		}
		if err := c.port.await(); err != nil {
			return -1, err
		}
	}
}

// complete records a completed expert read: the current Fetch's become
// ready for Next (or record its error); a prefetch's joins the cache.
func (c *expertCache) complete(d readDone) {
	c.pending--
	st := &c.slots[d.slot]
	st.inflight = false
	if st.mine {
		c.mineP--
		if d.err != nil {
			if c.err == nil {
				c.err = d.err
			}
			return
		}
		st.valid = true
		c.ready = append(c.ready, d.slot)
		return
	}
	if d.err != nil || !st.prefetched && !st.valid {
		// a failed prefetch: forget it
		delete(c.index, st.key)
		st.prefetched = false
		c.pol.Release(d.slot)
		c.cached.Add(-1)
		return
	}
	st.valid = true
	c.pol.Enter(d.slot)
}

// Next implements model.Experts.
func (c *expertSource) Next() (int, *model.ExpertWeights, error) {
	for c.taken == len(c.ready) {
		if c.err != nil {
			return 0, nil, c.err
		}
		if c.mineP == 0 {
			panic("stages: expert cache: Next after every fetched expert was returned")
		}
		if err := c.port.await(); err != nil {
			return 0, nil, err
		}
	}
	s := c.ready[c.taken]
	c.taken++
	return int(c.slots[s].key.expert), &c.slots[s].w, nil
}

// Release implements model.Experts: it waits for the Fetch's reads still
// in flight (after an error), then returns the fetched slots to the lists
// (keep); failed ones to the free list. Prefetches may stay in flight.
func (c *expertSource) Release(int) {
	for c.mineP > 0 {
		if c.port.await() != nil {
			break // aborting: the graph's error says why
		}
	}
	for _, s := range c.fetched {
		st := &c.slots[s]
		st.mine = false
		if !st.valid {
			if st.inflight {
				continue // abort: finish forgets it
			}
			if i, ok := c.index[st.key]; ok && i == s {
				delete(c.index, st.key)
			}
			c.pol.Release(s)
			c.cached.Add(-1)
			continue
		}
		c.pol.Keep(s, st.hit)
	}
	c.fetched, c.ready, c.taken, c.err = c.fetched[:0], c.ready[:0], 0, nil
}

// finish waits for the prefetches still in flight when compute stops (so
// the next run starts from a consistent cache); if the run was aborted
// (the port fails), it forgets them instead.
func (c *expertSource) finish() {
	for c.pending > 0 {
		if c.port.await() != nil {
			break
		}
	}
	if c.pending == 0 {
		return
	}
	for i := range c.slots {
		st := &c.slots[i]
		if st.inflight {
			delete(c.index, st.key)
			st.inflight, st.valid, st.prefetched, st.mine = false, false, false, false
			c.pol.Release(int32(i))
			c.cached.Add(-1)
		}
	}
	c.pending, c.mineP = 0, 0
}

// resetStats zeroes the counters.
func (c *expertCache) resetStats() {
	for i := range c.hits {
		c.hits[i].Store(0)
		c.misses[i].Store(0)
	}
	c.evictions.Store(0)
	c.pfIssued.Store(0)
	c.pfUsed.Store(0)
	c.pfWaste.Store(0)
	c.pfLate.Store(0)
}

// stats adds the counters to s.
func (c *expertCache) stats(s *WeightStats) {
	s.Hits, s.Misses = make([]int64, len(c.hits)), make([]int64, len(c.misses))
	for i := range c.hits {
		s.Hits[i], s.Misses[i] = c.hits[i].Load(), c.misses[i].Load()
	}
	s.Evictions = c.evictions.Load()
	s.PrefetchIssued, s.PrefetchUsed, s.PrefetchWasted = c.pfIssued.Load(), c.pfUsed.Load(), c.pfWaste.Load()
	s.PrefetchLate = c.pfLate.Load()
	s.CachedExperts = int(c.cached.Load())
}
