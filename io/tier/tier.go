// Package tier is the eviction bookkeeping the weight tiers share: the RAM
// expert cache (stages/expertcache.go) and the device's expert slots
// (gpu/expertstore.go) both hold n equal slots, indexed 0..n-1, and ask
// the same questions of them: which slot is free, which one to evict,
// where a slot goes after use. Policy answers them; it knows nothing of
// what a slot holds (the callers keep their own key index, slot contents
// and counters).
//
// The policy is a segmented LRU (SLRU): a slot entering the cache goes to
// the front of a probation segment; a slot used again (a hit) goes to the
// front of a protected segment of 80% of the slots, whose least recent
// member is demoted back to probation's front when the segment is over
// its share; victims come from probation's cold end first, then from
// protected's. Plain LRU puts every slot in probation. The lists are
// intrusive (indices in arrays), so nothing allocates after New: the
// per-token paths that call it stay allocation-free. A slot taken (Take,
// Victim, Pin) is in no list until Keep, Enter or Free returns it, so a
// slot in use is never a victim.
//
// Not safe for concurrent use: each caller drives it from one goroutine.
package tier

// List identifies where a slot is.
type List uint8

const (
	None      List = iota // in use (pinned) or free
	Probation             // entered once, or demoted: evicted first
	Protected             // used again since it entered (SLRU only)
)

type node struct {
	list       List
	prev, next int32
}

type list struct {
	head, tail int32 // most / least recent; -1 when empty
	n          int
}

// Policy is the free list and LRU lists of n slots.
type Policy struct {
	nodes   []node
	lists   [3]list // by List
	free    []int32
	protCap int
	slru    bool
}

// New returns the policy of n slots, all free: segmented LRU when slru,
// else plain LRU. Take hands the free slots out from 0 up.
func New(n int, slru bool) *Policy {
	p := &Policy{nodes: make([]node, n), free: make([]int32, 0, n), protCap: n * 8 / 10, slru: slru}
	for i := range p.lists {
		p.lists[i] = list{head: -1, tail: -1}
	}
	for i := n - 1; i >= 0; i-- {
		p.free = append(p.free, int32(i))
		p.nodes[i] = node{prev: -1, next: -1}
	}
	return p
}

// Slots returns n.
func (p *Policy) Slots() int { return len(p.nodes) }

// Free returns the free slots' count.
func (p *Policy) Free() int { return len(p.free) }

// Len returns the slots in list l.
func (p *Policy) Len(l List) int { return p.lists[l].n }

// In returns the list slot i is in (None: in use or free).
func (p *Policy) In(i int32) List { return p.nodes[i].list }

// Take returns a free slot and true, or false when none is free.
func (p *Policy) Take() (int32, bool) {
	n := len(p.free)
	if n == 0 {
		return -1, false
	}
	i := p.free[n-1]
	p.free = p.free[:n-1]
	return i, true
}

// Victim takes the coldest slot in the lists (probation's cold end, else
// protected's) out of them and returns it, or -1 when every slot is in
// use or free. The caller forgets what it held.
func (p *Policy) Victim() int32 {
	l := Probation
	if p.lists[l].n == 0 {
		l = Protected
	}
	i := p.lists[l].tail
	if i >= 0 {
		p.unlink(i)
	}
	return i
}

// Pin takes slot i out of its list while it is in use (a hit).
func (p *Policy) Pin(i int32) { p.unlink(i) }

// Keep returns slot i, just used, to the lists: a hit to protected (SLRU),
// whose least recent member goes back to probation's front when the
// segment is over its share; a new slot (or, with LRU, any) to probation.
func (p *Policy) Keep(i int32, hit bool) {
	if !hit || !p.slru {
		p.pushFront(Probation, i)
		return
	}
	p.pushFront(Protected, i)
	for p.lists[Protected].n > p.protCap {
		t := p.lists[Protected].tail
		p.unlink(t)
		p.pushFront(Probation, t)
	}
}

// Enter puts slot i, filled without being used (a prefetch), at
// probation's front.
func (p *Policy) Enter(i int32) { p.pushFront(Probation, i) }

// Release returns slot i to the free list (out of any list).
func (p *Policy) Release(i int32) {
	p.unlink(i)
	p.free = append(p.free, i)
}

func (p *Policy) pushFront(l List, i int32) {
	nd, li := &p.nodes[i], &p.lists[l]
	nd.list, nd.prev, nd.next = l, -1, li.head
	if li.head >= 0 {
		p.nodes[li.head].prev = i
	} else {
		li.tail = i
	}
	li.head = i
	li.n++
}

func (p *Policy) unlink(i int32) {
	nd := &p.nodes[i]
	if nd.list == None {
		return
	}
	li := &p.lists[nd.list]
	if nd.prev >= 0 {
		p.nodes[nd.prev].next = nd.next
	} else {
		li.head = nd.next
	}
	if nd.next >= 0 {
		p.nodes[nd.next].prev = nd.prev
	} else {
		li.tail = nd.prev
	}
	nd.list, nd.prev, nd.next = None, -1, -1
	li.n--
}
