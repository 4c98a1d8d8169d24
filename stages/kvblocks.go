package stages

// kvblocks.go: the KV cache's block allocator: the cache as fixed-size
// blocks handed to sequences, with block-hash prefix sharing between
// requests. (Not the weight path's pool stage, which owns staging slabs.)
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
// The blocks are owned by the scheduler stage: no locking.

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

// kvBlocks is the cache's blocks: who holds each, what it holds, and
// which are free.
type kvBlocks struct {
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

	// Sliding-window layers (model.KVCache.Ring): per sequence slot, the
	// tokens whose rows its rings hold, from the last sequence released
	// from it (nil: none); see swaSource.
	swaToks [][]int32

	// ckpt is a hybrid model's recurrent-state checkpoints (statecache.go;
	// nil: not hybrid, or no pool).
	ckpt *stateCkpts
}

func newKVBlocks(kv *model.KVCache, paged bool, nSeq int) *kvBlocks {
	n := kv.NBlocks
	kb := &kvBlocks{kv: kv, size: kv.BlockSize, paged: paged, perSeq: n / nSeq,
		ref: make([]int32, n), key: make([]uint64, n), parent: make([]uint64, n), fill: make([]int32, n), toks: make([]int32, n*kv.BlockSize),
		byKey: map[uint64]int32{}, byParent: map[uint64][]int32{}, swaToks: make([][]int32, nSeq), ckpt: newStateCkpts(kv)}
	if paged {
		kb.prev, kb.next = make([]int32, n+1), make([]int32, n+1)
		kb.prev[n], kb.next[n] = int32(n), int32(n)
		kb.emptyAt = make([]int32, n)
		for b := n - 1; b >= 0; b-- {
			kb.pushEmpty(int32(b))
		}
	}
	return kb
}

func (kb *kvBlocks) pushEmpty(b int32) {
	kb.emptyAt[b] = int32(len(kb.empty))
	kb.empty = append(kb.empty, b)
}

func (kb *kvBlocks) takeEmpty(b int32) {
	i, last := kb.emptyAt[b], kb.empty[len(kb.empty)-1]
	kb.empty[i], kb.emptyAt[last] = last, i
	kb.empty = kb.empty[:len(kb.empty)-1]
	kb.emptyAt[b] = -1
}

// spot picks the empty block a sequence should grow into next: the one
// right after its last block if free, so that its rows stay consecutive
// (attention reads consecutive rows as one matrix); else the middle of the
// longest run of empty blocks (the start if nothing precedes the run),
// leaving room on both sides to grow the same way.
func (kb *kvBlocks) spot(prev int32) int32 {
	if prev >= 0 && int(prev)+1 < len(kb.emptyAt) && kb.emptyAt[prev+1] >= 0 {
		return prev + 1
	}
	bestStart, bestLen := -1, 0
	for b := 0; b < len(kb.emptyAt); {
		if kb.emptyAt[b] < 0 {
			b++
			continue
		}
		start := b
		for b < len(kb.emptyAt) && kb.emptyAt[b] >= 0 {
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
func (kb *kvBlocks) content(b int32) []int32 {
	return kb.toks[int(b)*kb.size:][:kb.fill[b]]
}

// index records toks as block b's content under parent.
func (kb *kvBlocks) index(b int32, parent uint64, toks []int32) {
	kb.unindex(b)
	copy(kb.toks[int(b)*kb.size:], toks)
	kb.fill[b], kb.parent[b] = int32(len(toks)), parent
	kb.byParent[parent] = append(kb.byParent[parent], b)
	if len(toks) == kb.size {
		k := chainHash(parent, toks)
		if _, dup := kb.byKey[k]; !dup {
			kb.byKey[k], kb.key[b] = b, k
		}
	}
}

// unindex forgets block b's content.
func (kb *kvBlocks) unindex(b int32) {
	if kb.fill[b] == 0 {
		return
	}
	if k := kb.key[b]; k != 0 {
		delete(kb.byKey, k)
		kb.key[b] = 0
	}
	list := kb.byParent[kb.parent[b]]
	if i := slices.Index(list, b); i >= 0 {
		list = slices.Delete(list, i, i+1)
	}
	if len(list) == 0 {
		delete(kb.byParent, kb.parent[b])
	} else {
		kb.byParent[kb.parent[b]] = list
	}
	kb.fill[b] = 0
}

// LRU list of unheld blocks with content (paged layout).
func (kb *kvBlocks) lruPush(b int32) {
	s := int32(len(kb.ref))
	kb.prev[b], kb.next[b] = kb.prev[s], s
	kb.next[kb.prev[s]] = b
	kb.prev[s] = b
	kb.nLRU++
}

func (kb *kvBlocks) lruRemove(b int32) {
	kb.next[kb.prev[b]] = kb.next[b]
	kb.prev[kb.next[b]] = kb.prev[b]
	kb.nLRU--
}

// available returns how many blocks could still be allocated.
func (kb *kvBlocks) available() int {
	if !kb.paged {
		return len(kb.ref) // a slot always has room for its whole context
	}
	return len(kb.empty) + kb.nLRU
}

// cachedBlocks returns the unheld blocks that still hold content.
func (kb *kvBlocks) cachedBlocks() int {
	if kb.paged {
		return kb.nLRU
	}
	n := 0
	for b, r := range kb.ref {
		if r == 0 && kb.fill[b] > 0 {
			n++
		}
	}
	return n
}

// alloc takes a free block for a sequence whose last block is prev (-1:
// none): an empty one (see spot), else the least recently freed, or
// returns -1 (paged layout).
func (kb *kvBlocks) alloc(prev int32) int32 {
	var b int32
	switch {
	case len(kb.empty) > 0:
		b = kb.spot(prev)
		kb.takeEmpty(b)
	case kb.nLRU > 0:
		b = kb.next[len(kb.ref)]
		kb.lruRemove(b)
		kb.unindex(b)
	default:
		return -1
	}
	kb.ref[b] = 1
	kb.used++
	return b
}

// hold adds a reference to block b (paged layout).
func (kb *kvBlocks) hold(b int32) {
	if kb.ref[b] == 0 {
		kb.lruRemove(b)
		kb.used++
	}
	kb.ref[b]++
}

// drop removes a reference to block b.
func (kb *kvBlocks) drop(b int32) {
	kb.ref[b]--
	if kb.ref[b] > 0 {
		return
	}
	kb.used--
	if !kb.paged {
		return
	}
	if kb.fill[b] > 0 {
		kb.lruPush(b)
	} else {
		kb.pushEmpty(b)
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

// match looks toks up in the index. A hybrid model's cache (kv.State:
// recurrent layers) without state checkpoints never matches: the
// recurrent state at the end of a prefix cannot be rebuilt from its K/V
// rows, so such a model prefills the whole prompt (a sequence that starts
// at position 0 resets its state). With checkpoints, the scheduler cuts
// the match to a checkpointed prefix (statecache.go).
func (kb *kvBlocks) match(toks []int32) prefix {
	m := prefix{part: -1}
	if kb.kv.State != nil && kb.ckpt == nil {
		return m
	}
	h := hashSeed
	for i := 0; (i+1)*kb.size <= len(toks); i++ {
		blk := toks[i*kb.size : (i+1)*kb.size]
		k := chainHash(h, blk)
		b, ok := kb.byKey[k]
		if !ok || kb.parent[b] != h || !slices.Equal(kb.content(b), blk) {
			break
		}
		m.full, m.keys = append(m.full, b), append(m.keys, k)
		h = k
	}
	rest := toks[len(m.full)*kb.size:]
	for _, b := range kb.byParent[h] {
		c := kb.content(b)
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
// blocks shared as they are keep their copies: attach shares the whole
// blocks of the prefix it reuses and copies the partial last one (and, in
// the fixed layout, every block that is not the slot's own), so the blocks
// that count depend on the length tried, which is cut until it holds.
func (kb *kvBlocks) recentHit(slot int, m prefix, cached int) int {
	if !kb.kv.HasRecent() {
		return cached
	}
	for cached > 0 {
		nFull := min(cached/kb.size, len(m.full))
		blocks := make([]int32, 0, nFull+1)
		for i, b := range m.full[:nFull] {
			if !kb.paged && int(b) != slot*kb.perSeq+i {
				b = -1
			}
			blocks = append(blocks, b)
		}
		if cached > nFull*kb.size {
			blocks = append(blocks, -1)
		}
		n := kb.kv.RecentHit(blocks, cached)
		if n == cached {
			return n
		}
		cached = n
	}
	return 0
}

// attach gives q (resident in slot) the cached prefix m of its tokens, at
// most limit tokens, and returns how many tokens it reused.
func (kb *kvBlocks) attach(q *seq, m prefix, limit int) int {
	cached := min(m.tokens(kb.size), limit)
	nFull, rem := cached/kb.size, cached%kb.size
	src := m.part
	if nFull < len(m.full) {
		src = m.full[nFull]
	}
	if kb.paged {
		for _, b := range m.full[:nFull] {
			kb.hold(b)
		}
		q.blocks = append(q.blocks[:0], m.full[:nFull]...)
		if rem > 0 {
			kb.hold(src) // keep it from being evicted by alloc
			prev := int32(-1)
			if nFull > 0 {
				prev = m.full[nFull-1]
			}
			if dst := kb.alloc(prev); dst >= 0 {
				kb.kv.CopyRows(int(dst), int(src), rem)
				q.blocks = append(q.blocks, dst)
			} else {
				rem = 0
			}
			kb.drop(src)
		}
		kb.kv.Tables[q.slot] = q.blocks
	} else {
		base := int32(q.slot * kb.perSeq)
		q.blocks = q.blocks[:0]
		for i, b := range m.full[:nFull] {
			dst := base + int32(i)
			if b != dst {
				kb.unindex(dst)
				kb.kv.CopyRows(int(dst), int(b), kb.size)
			}
			kb.ref[dst] = 1
			kb.used++
			q.blocks = append(q.blocks, dst)
		}
		if rem > 0 {
			dst := base + int32(nFull)
			if src != dst {
				kb.unindex(dst)
				kb.kv.CopyRows(int(dst), int(src), rem)
			}
			kb.unindex(dst) // its rows from rem on will be overwritten
			kb.ref[dst] = 1
			kb.used++
			q.blocks = append(q.blocks, dst)
		}
	}
	q.keys = append(q.keys[:0], m.keys[:nFull]...)
	return nFull*kb.size + rem
}

// grow gives q blocks for positions below upto, as far as the blocks
// allows, and returns the positions it now covers.
func (kb *kvBlocks) grow(q *seq, upto int) int {
	for len(q.blocks)*kb.size < upto {
		var b int32
		if kb.paged {
			prev := int32(-1)
			if len(q.blocks) > 0 {
				prev = q.blocks[len(q.blocks)-1]
			}
			if b = kb.alloc(prev); b < 0 {
				break
			}
		} else {
			b = int32(q.slot*kb.perSeq + len(q.blocks))
			kb.unindex(b) // about to be overwritten
			kb.ref[b] = 1
			kb.used++
		}
		q.blocks = append(q.blocks, b)
	}
	if kb.paged {
		kb.kv.Tables[q.slot] = q.blocks
	}
	return min(upto, len(q.blocks)*kb.size)
}

// publish indexes the blocks q has filled since the last call.
func (kb *kvBlocks) publish(q *seq) {
	for i := len(q.keys); (i+1)*kb.size <= q.fed; i++ {
		parent := hashSeed
		if i > 0 {
			parent = q.keys[i-1]
		}
		blk := q.toks[i*kb.size : (i+1)*kb.size]
		k := chainHash(parent, blk)
		if _, dup := kb.byKey[k]; !dup {
			kb.index(q.blocks[i], parent, blk)
		}
		q.keys = append(q.keys, k)
	}
}

// release gives q's blocks back, leaving their content indexed (full
// blocks whose twin has gone, and the partial last block, are indexed
// now).
func (kb *kvBlocks) release(q *seq) {
	kb.publish(q)
	kb.swaToks[q.slot] = append(kb.swaToks[q.slot][:0], q.toks[:q.fed]...)
	for i, b := range q.blocks {
		parent := hashSeed
		if i > 0 && i-1 < len(q.keys) {
			parent = q.keys[i-1]
		}
		switch {
		case i < len(q.keys):
			if _, ok := kb.byKey[q.keys[i]]; !ok {
				kb.index(b, parent, q.toks[i*kb.size:(i+1)*kb.size])
			}
		case i == len(q.keys) && q.fed > i*kb.size && kb.ref[b] == 1:
			kb.index(b, parent, q.toks[i*kb.size:q.fed])
		}
		kb.drop(b)
	}
	q.blocks, q.keys = q.blocks[:0], q.keys[:0]
	if kb.paged {
		kb.kv.Tables[q.slot] = nil
	}
}

// swaRings reports whether the cache has sliding-window rings, which
// sequences do not share through blocks.
func (kb *kvBlocks) swaRings() bool {
	for l := range kb.kv.NLayer {
		if kb.kv.Ring(l) > 0 {
			return true
		}
	}
	return false
}

// commonPrefix returns how many leading tokens a and b share.
func commonPrefix(a, b []int32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
