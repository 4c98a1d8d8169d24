package stages

// expertcache.go: the expert cache, the compute side of the weight path.
// It implements model.Experts for compute: a Fetch turns the router's
// choices into hits (pinned slots) and read requests (misses, sent to the
// reader at once, all of a layer's in one go); Next hands out hits first,
// then misses as the uploader finishes them.
//
// Slots are all the size of the largest expert, so a byte budget is a slot
// count. The eviction policy is a segmented LRU (SLRU): a new expert enters
// a probation segment; a hit promotes it to a protected segment (80% of
// the slots), whose least recent member is demoted back to probation when
// it overflows; victims come from probation's cold end first. Experts that
// are used over and over (routing is skewed) survive one-off uses. The lists
// are intrusive (indices in arrays): Fetch and Release allocate nothing, so
// the per-token path stays allocation-free (golang-lru/v2 allocates an entry
// per insertion; docs/decisions.md). Slots pinned by the current Fetch are
// in no list, so they cannot be evicted while compute uses them.
//
// Only compute's goroutine touches the index and lists; the counters are
// atomic for metrics.

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/flowinfer/flowinfer/graph"
	"github.com/flowinfer/flowinfer/model"
)

func nanotime() int64 { return time.Now().UnixNano() }

type expertKey struct{ layer, expert int32 }

const (
	listNone = iota
	listProbation
	listProtected
)

type slotState struct {
	key        expertKey
	valid      bool // holds key's weights
	list       uint8
	hit        bool // the current fetch found it cached
	prev, next int32
	w          model.ExpertWeights
}

type lruList struct {
	head, tail int32 // most / least recent; -1 when empty
	n          int
}

type expertCache struct {
	wp        *WeightPath
	slots     []slotState
	index     map[expertKey]int32
	free      []int32
	lists     [3]lruList // by list id
	protCap   int
	slru      bool
	ports     ports
	ctx       context.Context
	rec       *graph.Recorder
	stg       *graph.Stage
	fetched   []int32 // slots of the current Fetch
	ready     []int32 // of those, ready and not yet returned by Next
	pending   int     // reads outstanding
	layer     int
	hits      []atomic.Int64
	misses    []atomic.Int64
	evictions atomic.Int64
	cached    atomic.Int64
}

var _ model.Experts = (*expertCache)(nil)

func newExpertCache(wp *WeightPath, n int, policy string) *expertCache {
	c := &expertCache{
		wp: wp, slots: make([]slotState, n), index: make(map[expertKey]int32, n),
		free: make([]int32, 0, n), protCap: n * 8 / 10, slru: policy == "slru",
		fetched: make([]int32, 0, wp.m.NExpert), ready: make([]int32, 0, wp.m.NExpert),
		hits: make([]atomic.Int64, wp.m.NLayer), misses: make([]atomic.Int64, wp.m.NLayer),
	}
	for i := range c.lists {
		c.lists[i] = lruList{head: -1, tail: -1}
	}
	for i := n - 1; i >= 0; i-- {
		c.free = append(c.free, int32(i))
		c.slots[i].prev, c.slots[i].next = -1, -1
	}
	return c
}

// slotBytes returns slot i's memory.
func (c *expertCache) slotBytes(i int32) []byte {
	sb, base := c.wp.plan.SlotBytes, c.wp.plan.Staging
	return c.wp.arena[base+int64(i)*sb : base+int64(i+1)*sb]
}

// bind gives the cache compute's context (the stage's Run).
func (c *expertCache) bind(ctx context.Context) { c.ctx = ctx }

// MaxFetch implements model.Experts.
func (c *expertCache) MaxFetch() int { return len(c.slots) }

// Fetch implements model.Experts.
func (c *expertCache) Fetch(il int, ids []int) error {
	c.layer = il
	c.fetched, c.ready = c.fetched[:0], c.ready[:0]
	for _, e := range ids {
		k := expertKey{int32(il), int32(e)}
		if s, ok := c.index[k]; ok && c.slots[s].valid {
			c.unlink(s)
			c.slots[s].hit = true
			c.fetched = append(c.fetched, s)
			c.ready = append(c.ready, s)
			c.hits[il].Add(1)
			continue
		}
		s := c.victim()
		st := &c.slots[s]
		st.key, st.valid, st.hit = k, false, false
		c.index[k] = s
		c.fetched = append(c.fetched, s)
		c.misses[il].Add(1)
		if err := c.ports.reqs.Send(c.ctx, readReq{slot: s, layer: int32(il), expert: int32(e)}); err != nil {
			return err
		}
		c.pending++
	}
	c.rec.Add(c.stg, "expert hits", int64(len(c.ready)))
	c.rec.Add(c.stg, "expert misses", int64(len(ids)-len(c.ready)))
	return nil
}

// victim returns a slot for a new expert: a free one, else the coldest
// unpinned one (probation first), evicted.
func (c *expertCache) victim() int32 {
	if n := len(c.free); n > 0 {
		s := c.free[n-1]
		c.free = c.free[:n-1]
		c.cached.Add(1)
		return s
	}
	l := listProbation
	if c.lists[l].n == 0 {
		l = listProtected
	}
	s := c.lists[l].tail
	if s < 0 {
		// every slot is pinned: Fetch asked for more than MaxFetch
		panic("stages: expert cache: no unpinned slot (fetch larger than MaxFetch)")
	}
	c.unlink(s)
	delete(c.index, c.slots[s].key)
	c.slots[s].valid = false
	c.evictions.Add(1)
	return s
}

// Next implements model.Experts.
func (c *expertCache) Next() (int, *model.ExpertWeights, error) {
	if n := len(c.ready); n > 0 {
		s := c.ready[0]
		c.ready = c.ready[1:]
		return int(c.slots[s].key.expert), &c.slots[s].w, nil
	}
	if c.pending == 0 {
		panic("stages: expert cache: Next after every fetched expert was returned")
	}
	d, err := c.ports.doneIn.Recv(c.ctx)
	if err != nil {
		return 0, nil, err
	}
	c.pending--
	st := &c.slots[d.slot]
	if d.err != nil {
		return 0, nil, d.err
	}
	st.valid = true
	return int(st.key.expert), &st.w, nil
}

// Release implements model.Experts: it waits for reads still in flight
// (after an error), then returns the fetched slots to the lists: hits to
// protected (SLRU), new ones to probation; failed ones to the free list.
func (c *expertCache) Release(int) {
	for c.pending > 0 {
		d, err := c.ports.doneIn.Recv(c.ctx)
		if err != nil {
			break // aborting: the graph's error says why
		}
		c.pending--
		if d.err == nil {
			c.slots[d.slot].valid = true
		}
	}
	for _, s := range c.fetched {
		st := &c.slots[s]
		if !st.valid {
			if i, ok := c.index[st.key]; ok && i == s {
				delete(c.index, st.key)
			}
			c.free = append(c.free, s)
			c.cached.Add(-1)
			continue
		}
		if st.hit && c.slru {
			c.pushFront(listProtected, s)
			for c.lists[listProtected].n > c.protCap {
				t := c.lists[listProtected].tail
				c.unlink(t)
				c.pushFront(listProbation, t)
			}
		} else {
			c.pushFront(listProbation, s)
		}
	}
	c.fetched, c.ready = c.fetched[:0], c.ready[:0]
}

func (c *expertCache) pushFront(l int, s int32) {
	st, li := &c.slots[s], &c.lists[l]
	st.list, st.prev, st.next = uint8(l), -1, li.head
	if li.head >= 0 {
		c.slots[li.head].prev = s
	} else {
		li.tail = s
	}
	li.head = s
	li.n++
}

func (c *expertCache) unlink(s int32) {
	st := &c.slots[s]
	if st.list == listNone {
		return
	}
	li := &c.lists[st.list]
	if st.prev >= 0 {
		c.slots[st.prev].next = st.next
	} else {
		li.head = st.next
	}
	if st.next >= 0 {
		c.slots[st.next].prev = st.prev
	} else {
		li.tail = st.prev
	}
	st.list, st.prev, st.next = listNone, -1, -1
	li.n--
}
