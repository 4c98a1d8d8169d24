package stages

// kvpool.go: the KV cache as fixed-size blocks from one pool, with
// block-hash prefix sharing between requests.
//
// A block holds BlockSize consecutive positions of one sequence. Once a
// block is full its content is named by a chain hash (FNV-1a of the hash
// of the block before it and its tokens) and indexed; a new request walks
// its prompt block by block through the index and reuses every block that
// matches (the tokens are compared too, so a hash collision cannot give a
// wrong cache). Where the match ends inside a block (the next chat turn, a
// prompt that diverges mid-block), the matching rows of the best candidate
// block with the same parent are copied into a fresh block. When a
// sequence ends, its blocks stay indexed (its last, partial block too)
// until their space is needed: freed blocks are evicted oldest first.
//
// Two layouts, chosen by what the backend supports:
//   - paged: blocks come from a free list and are shared by reference
//     (reference counts); a sequence's block table maps its positions to
//     them. Sequences write only blocks they alone hold.
//   - fixed: each sequence slot owns a contiguous range of blocks (a
//     contiguous cache, for backends that index it directly); shared
//     blocks are copied into the slot, which still saves recomputing them.
//
// The pool is owned by the scheduler stage: no locking.

import (
	"slices"

	"github.com/flowinfer/flowinfer/model"
)

// hashSeed is the chain hash "before" the first block (FNV-1a offset).
const hashSeed uint64 = 14695981039346656037

// chainHash names a full block by its parent's hash and its tokens.
func chainHash(parent uint64, toks []int32) uint64 {
	const prime = 1099511628211
	h := hashSeed
	for i := 0; i < 64; i += 8 {
		h = (h ^ (parent >> i & 0xff)) * prime
	}
	for _, t := range toks {
		u := uint32(t)
		h = (h ^ uint64(u&0xff)) * prime
		h = (h ^ uint64(u>>8&0xff)) * prime
		h = (h ^ uint64(u>>16&0xff)) * prime
		h = (h ^ uint64(u>>24)) * prime
	}
	if h == 0 {
		h = 1 // 0 means "no key"
	}
	return h
}

type blockPool struct {
	kv     *model.KVCache
	size   int
	paged  bool
	perSeq int // fixed layout: blocks per sequence slot

	ref    []int32  // sequences holding the block
	key    []uint64 // chain hash of a full block in byKey, 0 if none
	parent []uint64 // chain hash of the block before (with fill > 0)
	fill   []int32  // tokens of known content (0: none)
	toks   []int32  // content: block b's tokens are toks[b*size:][:fill[b]]

	byKey    map[uint64]int32   // full blocks by chain hash
	byParent map[uint64][]int32 // every block with content, by parent hash

	// Paged layout: blocks nobody holds. Empty ones first (emptyAt is a
	// block's index in empty, -1 if not there); those with content form an
	// LRU list (prev/next, sentinel at index n).
	empty      []int32
	emptyAt    []int32
	prev, next []int32
	nLRU       int

	used int // blocks with ref > 0
}

func newBlockPool(kv *model.KVCache, paged bool, nSeq int) *blockPool {
	n := kv.NBlocks
	p := &blockPool{kv: kv, size: kv.BlockSize, paged: paged, perSeq: n / nSeq,
		ref: make([]int32, n), key: make([]uint64, n), parent: make([]uint64, n), fill: make([]int32, n), toks: make([]int32, n*kv.BlockSize),
		byKey: map[uint64]int32{}, byParent: map[uint64][]int32{}}
	if paged {
		p.prev, p.next = make([]int32, n+1), make([]int32, n+1)
		p.prev[n], p.next[n] = int32(n), int32(n)
		p.emptyAt = make([]int32, n)
		for b := n - 1; b >= 0; b-- {
			p.pushEmpty(int32(b))
		}
	}
	return p
}

func (p *blockPool) pushEmpty(b int32) {
	p.emptyAt[b] = int32(len(p.empty))
	p.empty = append(p.empty, b)
}

func (p *blockPool) takeEmpty(b int32) {
	i, last := p.emptyAt[b], p.empty[len(p.empty)-1]
	p.empty[i], p.emptyAt[last] = last, i
	p.empty = p.empty[:len(p.empty)-1]
	p.emptyAt[b] = -1
}

// spot picks the empty block a sequence should grow into next: the one
// right after its last block if free, so that its rows stay consecutive
// (attention reads consecutive rows as one matrix); else the middle of the
// longest run of empty blocks (the start if nothing precedes the run),
// leaving room on both sides to grow the same way.
func (p *blockPool) spot(prev int32) int32 {
	if prev >= 0 && int(prev)+1 < len(p.emptyAt) && p.emptyAt[prev+1] >= 0 {
		return prev + 1
	}
	bestStart, bestLen := -1, 0
	for b := 0; b < len(p.emptyAt); {
		if p.emptyAt[b] < 0 {
			b++
			continue
		}
		start := b
		for b < len(p.emptyAt) && p.emptyAt[b] >= 0 {
			b++
		}
		if b-start > bestLen {
			bestStart, bestLen = start, b-start
		}
	}
	if bestStart > 0 {
		return int32(bestStart + bestLen/2)
	}
	return int32(bestStart)
}

// content returns block b's known tokens.
func (p *blockPool) content(b int32) []int32 {
	return p.toks[int(b)*p.size:][:p.fill[b]]
}

// index records toks as block b's content under parent.
func (p *blockPool) index(b int32, parent uint64, toks []int32) {
	p.unindex(b)
	copy(p.toks[int(b)*p.size:], toks)
	p.fill[b], p.parent[b] = int32(len(toks)), parent
	p.byParent[parent] = append(p.byParent[parent], b)
	if len(toks) == p.size {
		k := chainHash(parent, toks)
		if _, dup := p.byKey[k]; !dup {
			p.byKey[k], p.key[b] = b, k
		}
	}
}

// unindex forgets block b's content.
func (p *blockPool) unindex(b int32) {
	if p.fill[b] == 0 {
		return
	}
	if k := p.key[b]; k != 0 {
		delete(p.byKey, k)
		p.key[b] = 0
	}
	list := p.byParent[p.parent[b]]
	if i := slices.Index(list, b); i >= 0 {
		list = slices.Delete(list, i, i+1)
	}
	if len(list) == 0 {
		delete(p.byParent, p.parent[b])
	} else {
		p.byParent[p.parent[b]] = list
	}
	p.fill[b] = 0
}

// LRU list of unheld blocks with content (paged layout).
func (p *blockPool) lruPush(b int32) {
	s := int32(len(p.ref))
	p.prev[b], p.next[b] = p.prev[s], s
	p.next[p.prev[s]] = b
	p.prev[s] = b
	p.nLRU++
}

func (p *blockPool) lruRemove(b int32) {
	p.next[p.prev[b]] = p.next[b]
	p.prev[p.next[b]] = p.prev[b]
	p.nLRU--
}

// available returns how many blocks could still be allocated.
func (p *blockPool) available() int {
	if !p.paged {
		return len(p.ref) // a slot always has room for its whole context
	}
	return len(p.empty) + p.nLRU
}

// cachedBlocks returns the unheld blocks that still hold content.
func (p *blockPool) cachedBlocks() int {
	if p.paged {
		return p.nLRU
	}
	n := 0
	for b, r := range p.ref {
		if r == 0 && p.fill[b] > 0 {
			n++
		}
	}
	return n
}

// alloc takes a free block for a sequence whose last block is prev (-1:
// none): an empty one (see spot), else the least recently freed, or
// returns -1 (paged layout).
func (p *blockPool) alloc(prev int32) int32 {
	var b int32
	switch {
	case len(p.empty) > 0:
		b = p.spot(prev)
		p.takeEmpty(b)
	case p.nLRU > 0:
		b = p.next[len(p.ref)]
		p.lruRemove(b)
		p.unindex(b)
	default:
		return -1
	}
	p.ref[b] = 1
	p.used++
	return b
}

// hold adds a reference to block b (paged layout).
func (p *blockPool) hold(b int32) {
	if p.ref[b] == 0 {
		p.lruRemove(b)
		p.used++
	}
	p.ref[b]++
}

// drop removes a reference to block b.
func (p *blockPool) drop(b int32) {
	p.ref[b]--
	if p.ref[b] > 0 {
		return
	}
	p.used--
	if !p.paged {
		return
	}
	if p.fill[b] > 0 {
		p.lruPush(b)
	} else {
		p.pushEmpty(b)
	}
}

// prefix is the result of a lookup: full blocks matching the first
// len(full)*size tokens, then a block whose first part tokens match the
// next ones (part < 0: none).
type prefix struct {
	full  []int32
	keys  []uint64
	part  int32
	nPart int
}

func (m *prefix) tokens(size int) int { return len(m.full)*size + m.nPart }

// match looks toks up in the index.
func (p *blockPool) match(toks []int32) prefix {
	m := prefix{part: -1}
	h := hashSeed
	for i := 0; (i+1)*p.size <= len(toks); i++ {
		blk := toks[i*p.size : (i+1)*p.size]
		k := chainHash(h, blk)
		b, ok := p.byKey[k]
		if !ok || p.parent[b] != h || !slices.Equal(p.content(b), blk) {
			break
		}
		m.full, m.keys = append(m.full, b), append(m.keys, k)
		h = k
	}
	rest := toks[len(m.full)*p.size:]
	for _, b := range p.byParent[h] {
		c := p.content(b)
		n := 0
		for n < len(c) && n < len(rest) && c[n] == rest[n] {
			n++
		}
		if n > m.nPart {
			m.part, m.nPart = b, n
		}
	}
	return m
}

// recentHit returns how much of the cached prefix m (cached tokens of it)
// a sequence in slot can reuse when the cache keeps f16 copies of recent
// rows (--kv-recent): its next queries read the copies of the positions
// just before it, so it stops where those are no longer all kept. Only
// blocks shared as they are keep their copies (a partial block is copied,
// and so is a full block in the fixed layout unless it is the slot's own).
func (p *blockPool) recentHit(slot int, m prefix, cached int) int {
	if !p.kv.HasRecent() || cached == 0 {
		return cached
	}
	blocks := make([]int32, 0, len(m.full)+1)
	for i, b := range m.full {
		if !p.paged && int(b) != slot*p.perSeq+i {
			b = -1
		}
		blocks = append(blocks, b)
	}
	if m.part >= 0 {
		blocks = append(blocks, -1)
	}
	return p.kv.RecentHit(blocks, cached)
}

// attach gives q (resident in slot) the cached prefix m of its tokens, at
// most limit tokens, and returns how many tokens it reused.
func (p *blockPool) attach(q *seq, m prefix, limit int) int {
	cached := min(m.tokens(p.size), limit)
	nFull, rem := cached/p.size, cached%p.size
	src := m.part
	if nFull < len(m.full) {
		src = m.full[nFull]
	}
	if p.paged {
		for _, b := range m.full[:nFull] {
			p.hold(b)
		}
		q.blocks = append(q.blocks[:0], m.full[:nFull]...)
		if rem > 0 {
			p.hold(src) // keep it from being evicted by alloc
			prev := int32(-1)
			if nFull > 0 {
				prev = m.full[nFull-1]
			}
			if dst := p.alloc(prev); dst >= 0 {
				p.kv.CopyRows(int(dst), int(src), rem)
				q.blocks = append(q.blocks, dst)
			} else {
				rem = 0
			}
			p.drop(src)
		}
		p.kv.Tables[q.slot] = q.blocks
	} else {
		base := int32(q.slot * p.perSeq)
		q.blocks = q.blocks[:0]
		for i, b := range m.full[:nFull] {
			dst := base + int32(i)
			if b != dst {
				p.unindex(dst)
				p.kv.CopyRows(int(dst), int(b), p.size)
			}
			p.ref[dst] = 1
			p.used++
			q.blocks = append(q.blocks, dst)
		}
		if rem > 0 {
			dst := base + int32(nFull)
			if src != dst {
				p.unindex(dst)
				p.kv.CopyRows(int(dst), int(src), rem)
			}
			p.unindex(dst) // its rows from rem on will be overwritten
			p.ref[dst] = 1
			p.used++
			q.blocks = append(q.blocks, dst)
		}
	}
	q.keys = append(q.keys[:0], m.keys[:nFull]...)
	return nFull*p.size + rem
}

// grow gives q blocks for positions below upto, as far as the pool
// allows, and returns the positions it now covers.
func (p *blockPool) grow(q *seq, upto int) int {
	for len(q.blocks)*p.size < upto {
		var b int32
		if p.paged {
			prev := int32(-1)
			if len(q.blocks) > 0 {
				prev = q.blocks[len(q.blocks)-1]
			}
			if b = p.alloc(prev); b < 0 {
				break
			}
		} else {
			b = int32(q.slot*p.perSeq + len(q.blocks))
			p.unindex(b) // about to be overwritten
			p.ref[b] = 1
			p.used++
		}
		q.blocks = append(q.blocks, b)
	}
	if p.paged {
		p.kv.Tables[q.slot] = q.blocks
	}
	return min(upto, len(q.blocks)*p.size)
}

// publish indexes the blocks q has filled since the last call.
func (p *blockPool) publish(q *seq) {
	for i := len(q.keys); (i+1)*p.size <= q.fed; i++ {
		parent := hashSeed
		if i > 0 {
			parent = q.keys[i-1]
		}
		blk := q.toks[i*p.size : (i+1)*p.size]
		k := chainHash(parent, blk)
		if _, dup := p.byKey[k]; !dup {
			p.index(q.blocks[i], parent, blk)
		}
		q.keys = append(q.keys, k)
	}
}

// release gives q's blocks back, leaving their content indexed (full
// blocks whose twin has gone, and the partial last block, are indexed
// now).
func (p *blockPool) release(q *seq) {
	p.publish(q)
	for i, b := range q.blocks {
		parent := hashSeed
		if i > 0 && i-1 < len(q.keys) {
			parent = q.keys[i-1]
		}
		switch {
		case i < len(q.keys):
			if _, ok := p.byKey[q.keys[i]]; !ok {
				p.index(b, parent, q.toks[i*p.size:(i+1)*p.size])
			}
		case i == len(q.keys) && q.fed > i*p.size && p.ref[b] == 1:
			p.index(b, parent, q.toks[i*p.size:q.fed])
		}
		p.drop(b)
	}
	q.blocks, q.keys = q.blocks[:0], q.keys[:0]
	if p.paged {
		p.kv.Tables[q.slot] = nil
	}
}
