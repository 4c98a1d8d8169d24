package grammar

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"unicode/utf8"
)

// maskSlots is how many token masks a Matcher keeps, keyed by state.
const maskSlots = 64

// Matcher follows one sequence's output through a grammar: it says which
// tokens may come next (Mask) and advances by the token chosen (Accept).
// A Matcher is not safe for concurrent use; give each sequence its own.
//
// The first visit to a grammar state computes transitions and the state's
// mask and may allocate; revisiting a state (the common case: the inside
// of a string, the same place in a repeated object) costs a table lookup
// and allocates nothing.
type Matcher struct {
	m     *machine
	v     *Vocab
	init  int32
	state int32
	ended bool // an end-of-generation token was accepted
	words int

	slots     [][]uint64 // up to maskSlots masks, allocated on first use
	slotState []int32    // state cached in each slot, or -1
	stateSlot []int32    // slot caching each state, or -1 (grown with states)
	nextSlot  int
	walk      []int32        // state at each trie depth during a mask walk
	loops     []subtreeBytes // per state: ASCII bytes that loop on it
	loopKnown []bool
	chains    []chainInfo // per state (chain.go)
	chainPath []int32
	utf8Seqs  [][]byteRange // the UTF-8 byte-range sequences of U+0080..U+10FFFF
}

// NewMatcher returns a Matcher at the start of g, for tokens of v.
func NewMatcher(g *Grammar, v *Vocab) (*Matcher, error) {
	mt := &Matcher{m: newMachine(g), v: v, words: (v.n + 63) / 64}
	mt.slotState = make([]int32, maskSlots)
	for i := range mt.slotState {
		mt.slotState[i] = -1
	}
	mt.walk = make([]int32, v.maxDepth+1)
	mt.utf8Seqs = utf8Sequences(0x80, utf8.MaxRune, nil)
	mt.init = mt.m.start()
	if mt.m.err != nil {
		return nil, mt.m.err
	}
	if mt.init == dead {
		return nil, fmt.Errorf("grammar: root matches nothing")
	}
	mt.state = mt.init
	return mt, nil
}

// Reset returns to the start of the grammar, keeping the caches.
func (mt *Matcher) Reset() { mt.state, mt.ended = mt.init, false }

// Err reports a limit reached while exploring the grammar (ErrTooComplex);
// after it every token is refused.
func (mt *Matcher) Err() error { return mt.m.err }

// CanEnd reports whether the output so far is a complete sentence.
func (mt *Matcher) CanEnd() bool { return mt.m.canEnd[mt.state] }

// Ended reports whether an end-of-generation token was accepted.
func (mt *Matcher) Ended() bool { return mt.ended }

// Live reports whether some continuation (or the end) is still possible.
func (mt *Matcher) Live() bool { return mt.state != dead && !mt.ended }

// AcceptBytes advances by text and reports whether the grammar allows it;
// when it does not, the state is unchanged.
func (mt *Matcher) AcceptBytes(text []byte) bool {
	if mt.ended {
		return false
	}
	s := mt.state
	for _, b := range text {
		if s = mt.m.step(s, b); s == dead {
			return false
		}
	}
	mt.state = s
	return true
}

// Accept advances by token id; an end-of-generation token is accepted
// only where the grammar can end. It returns an error naming the token
// when the grammar does not allow it (the state is then unchanged).
func (mt *Matcher) Accept(id int32) error {
	if id < 0 || int(id) >= mt.v.n {
		return fmt.Errorf("grammar: token %d outside the vocabulary of %d", id, mt.v.n)
	}
	if mt.v.isEOG[id] {
		if mt.ended || !mt.CanEnd() {
			return fmt.Errorf("grammar: end-of-generation token %d before the grammar can end", id)
		}
		mt.ended = true
		return nil
	}
	p := mt.v.pieces[id]
	if len(p) == 0 || !mt.AcceptBytes(p) {
		if err := mt.m.err; err != nil {
			return err
		}
		return fmt.Errorf("grammar: token %d (%q) is not allowed here", id, p)
	}
	return nil
}

// Mask returns the tokens allowed next as a bitset over token ids (bit
// id%64 of word id/64). The slice belongs to the Matcher and stays valid
// until the next call to Mask; do not modify it.
func (mt *Matcher) Mask() []uint64 {
	s := mt.state
	if mt.ended {
		s = dead
	}
	if int(s) < len(mt.stateSlot) {
		if k := mt.stateSlot[s]; k >= 0 {
			return mt.slots[k]
		}
	}
	k := mt.nextSlot
	mt.nextSlot = (mt.nextSlot + 1) % maskSlots
	if old := mt.slotState[k]; old >= 0 {
		mt.stateSlot[old] = -1
	}
	if k == len(mt.slots) {
		mt.slots = append(mt.slots, make([]uint64, mt.words))
	}
	mask := mt.slots[k]
	mt.fill(mask, s)
	// the walk may have created states: size stateSlot after it
	for len(mt.stateSlot) < len(mt.m.canEnd) {
		mt.stateSlot = append(mt.stateSlot, -1)
	}
	if mt.m.err == nil {
		mt.slotState[k] = s
		mt.stateSlot[s] = int32(k)
	} else {
		mt.slotState[k] = -1
	}
	return mask
}

// fill computes the mask of state s by walking the vocabulary trie with
// the transition table: a byte leading to the dead state skips the whole
// subtree under it; every token ending at a node reached alive is allowed.
// A subtree whose bytes all loop on the current state (the
// inside of a string, most often) is accepted whole without walking it.
func (mt *Matcher) fill(mask []uint64, s int32) {
	clear(mask)
	if s == dead {
		return
	}
	if mt.m.canEnd[s] {
		for _, id := range mt.v.eog {
			mask[id>>6] |= 1 << (uint(id) & 63)
		}
	}
	if sig, budget, ok := mt.chain(s); ok {
		mt.fillSplit(mask, s, mt.v.split(sig), budget)
		return
	}
	m, v := mt.m, mt.v
	nodes, toks, st := v.nodes, v.toks, mt.walk
	end := len(nodes) - 1 // the sentinel
	st[0] = s
	for i := 1; i < end; {
		n := nodes[i]
		from := st[n.depth-1]
		t := m.trans[int(from)<<8|int(n.b)]
		if t == unknown {
			t = m.step(from, n.b)
		}
		if t == dead {
			i = int(n.skip)
			continue
		}
		if t == from || n.b >= 0x80 {
			if loop := mt.loopSet(from); loop.ascii != [2]uint64{} {
				sum := &n.sum
				if sum.ascii[0]&^loop.ascii[0] == 0 && sum.ascii[1]&^loop.ascii[1] == 0 &&
					(!sum.nonASCII || loop.nonASCII && !sum.badUTF8) {
					for _, id := range toks[n.tokLo:nodes[n.skip].tokLo] {
						mask[id>>6] |= 1 << (uint(id) & 63)
					}
					i = int(n.skip)
					continue
				}
			}
		}
		st[n.depth] = t
		for _, id := range toks[n.tokLo:nodes[i+1].tokLo] {
			mask[id>>6] |= 1 << (uint(id) & 63)
		}
		i++
	}
}

// loopSet returns what loops on state s, computing it on first use: the
// ASCII bytes leading from s back to s, and (nonASCII) whether every
// valid multi-byte character leads from s back to s.
func (mt *Matcher) loopSet(s int32) subtreeBytes {
	for len(mt.loops) < len(mt.m.canEnd) {
		mt.loops = append(mt.loops, subtreeBytes{})
		mt.loopKnown = append(mt.loopKnown, false)
	}
	if mt.loopKnown[s] {
		return mt.loops[s]
	}
	var l subtreeBytes
	for b := range 0x80 {
		if mt.m.step(s, byte(b)) == s {
			l.ascii[b>>6] |= 1 << (b & 63)
		}
	}
	l.nonASCII = mt.utf8Loop(s)
	if mt.m.err != nil {
		return subtreeBytes{}
	}
	for len(mt.loops) < len(mt.m.canEnd) { // step may have added states
		mt.loops = append(mt.loops, subtreeBytes{})
		mt.loopKnown = append(mt.loopKnown, false)
	}
	mt.loops[s], mt.loopKnown[s] = l, true
	return l
}

// utf8Loop reports whether every valid multi-byte character leads from
// state s back to s (every byte of it alive on the way).
func (mt *Matcher) utf8Loop(s int32) bool { return mt.utf8To(s, s) }

// utf8To reports whether every valid multi-byte character leads from
// state s to state to (every byte of it alive on the way).
func (mt *Matcher) utf8To(s, to int32) bool {
	front := []int32{s}
	var next []int32
	for _, seq := range mt.utf8Seqs {
		front = append(front[:0], s)
		for j, r := range seq {
			next = next[:0]
			for _, st := range front {
				for b := int(r.lo); b <= int(r.hi); b++ {
					t := mt.m.step(st, byte(b))
					if t == dead || j == len(seq)-1 && t != to {
						return false
					}
					if !slices.Contains(next, t) {
						next = append(next, t)
					}
				}
			}
			front, next = next, front
			if len(front) > 8 { // not a simple character class
				return false
			}
		}
	}
	return true
}

// ninfs is a word's worth of -Inf, copied over banned words.
var ninfs = func() (a [64]float32) {
	for i := range a {
		a[i] = float32(math.Inf(-1))
	}
	return a
}()

// Apply sets the logits of tokens outside mask to -Inf.
func Apply(logits []float32, mask []uint64) {
	ninf := float32(math.Inf(-1))
	for i, w := range mask {
		for z := ^w; z != 0; z &= z - 1 {
			if j := i*64 + bits.TrailingZeros64(z); j < len(logits) {
				logits[j] = ninf
			}
		}
	}
}

// ApplyTo writes src to dst (same length, not overlapping) with the
// logits of tokens outside mask at -Inf, in one pass.
func ApplyTo(dst, src []float32, mask []uint64) {
	ninf := float32(math.Inf(-1))
	n := min(len(dst), len(src))
	for i, w := range mask {
		base := i * 64
		if base >= n {
			break
		}
		end := min(base+64, n)
		switch w {
		case math.MaxUint64:
			copy(dst[base:end], src[base:end])
		case 0:
			copy(dst[base:end], ninfs[:end-base])
		default:
			d, sr := dst[base:end], src[base:end]
			if bits.OnesCount64(w) >= 32 { // copy, then ban the few
				copy(d, sr)
				for z := ^w; z != 0; z &= z - 1 {
					if j := bits.TrailingZeros64(z); j < len(d) {
						d[j] = ninf
					}
				}
			} else { // ban all, then copy the few
				copy(d, ninfs[:len(d)])
				for o := w; o != 0; o &= o - 1 {
					if j := bits.TrailingZeros64(o); j < len(d) {
						d[j] = sr[j]
					}
				}
			}
		}
	}
}

// Allowed reports whether token id is set in mask.
func Allowed(mask []uint64, id int32) bool {
	return id >= 0 && int(id>>6) < len(mask) && mask[id>>6]>>(uint(id)&63)&1 != 0
}
