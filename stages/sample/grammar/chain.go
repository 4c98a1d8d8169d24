// chain.go: which states can use a vocabulary split (split.go).
//
// A state qualifies when many ASCII bytes (at least minSplitBytes) lead
// from it to one common next state and, if every multi-byte character
// does too, so do those: reading any "plain" character advances one step
// along a chain. The chain either loops (the next state is the state
// itself: the inside of a string, budget -1) or ends after budget plain
// characters at a state where every plain character is dead (a counted
// repetition: a string's maxLength). Along the chain every state must
// have the same signature. Then the tokens made only of plain characters
// are allowed exactly when they have at most budget characters, and only
// the other tokens need a walk.

package grammar

// maxChain bounds the chain followed from one state.
const maxChain = 4096

type chainInfo struct {
	known  bool
	ok     bool
	sig    subtreeBytes
	budget int32 // plain characters allowed; -1: any number
}

// advance returns the signature of the plain characters of s and the
// state they lead to; ok is false when too few bytes share a target.
func (mt *Matcher) advance(s int32) (sig subtreeBytes, next int32, ok bool) {
	var targets [0x80]int32
	best, bestN := int32(dead), 0
	for b := range 0x80 {
		t := mt.m.step(s, byte(b))
		targets[b] = t
		if t == dead || t == best {
			continue
		}
		n := 0
		for _, u := range targets[:b+1] {
			if u == t {
				n++
			}
		}
		if n > bestN {
			best, bestN = t, n
		}
	}
	if best == dead {
		return sig, dead, false
	}
	for b, t := range targets {
		if t == best {
			sig.ascii[b>>6] |= 1 << (uint(b) & 63)
		}
	}
	if !splitWorthwhile(sig) {
		return sig, dead, false
	}
	sig.nonASCII = mt.utf8To(s, best)
	return sig, best, mt.m.err == nil
}

// allDead reports whether every plain character of sig is dead at s.
func (mt *Matcher) allDead(s int32, sig subtreeBytes) bool {
	for b := range 0x80 {
		if sig.ascii[b>>6]>>(uint(b)&63)&1 != 0 && mt.m.step(s, byte(b)) != dead {
			return false
		}
	}
	if sig.nonASCII {
		for b := 0xC2; b <= 0xF4; b++ {
			if mt.m.step(s, byte(b)) != dead {
				return false
			}
		}
	}
	return true
}

// chain classifies state s (memoised per state).
func (mt *Matcher) chain(s int32) (sig subtreeBytes, budget int32, ok bool) {
	grow := func() {
		for len(mt.chains) < len(mt.m.canEnd) {
			mt.chains = append(mt.chains, chainInfo{})
		}
	}
	grow()
	if c := mt.chains[s]; c.known {
		return c.sig, c.budget, c.ok
	}
	path := mt.chainPath[:0]
	var sig0 subtreeBytes
	var tail chainInfo // what follows the last state of path
	cur := s
	for {
		grow()
		if c := mt.chains[cur]; c.known && len(path) > 0 {
			tail = c
			if !c.ok || c.sig != sig0 {
				tail = chainInfo{known: true}
			}
			break
		}
		sig, next, ok := mt.advance(cur)
		grow()
		if !ok || len(path) > 0 && sig != sig0 || len(path) == maxChain {
			if len(path) > 0 && mt.m.err == nil && mt.allDead(cur, sig0) {
				tail = chainInfo{known: true, ok: true, sig: sig0, budget: 0}
			} else {
				tail = chainInfo{known: true}
			}
			if len(path) == 0 {
				mt.chains[cur] = chainInfo{known: true}
			}
			break
		}
		sig0 = sig
		path = append(path, cur)
		if next == cur { // a loop
			tail = chainInfo{known: true, ok: true, sig: sig, budget: -1}
			mt.chains[cur] = tail
			path = path[:len(path)-1]
			break
		}
		cur = next
	}
	grow()
	if mt.m.err != nil {
		tail = chainInfo{known: true}
	}
	// assign backwards: each state allows one more plain character
	for i := len(path) - 1; i >= 0; i-- {
		c := tail
		if c.ok && c.budget >= 0 {
			c.budget++
		}
		mt.chains[path[i]] = c
		tail = c
	}
	mt.chainPath = path[:0]
	c := mt.chains[s]
	return c.sig, c.budget, c.ok
}
