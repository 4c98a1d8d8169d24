// machine.go: the pushdown automaton over bytes, determinised lazily.
//
// A parse stack is a list of program positions: the top is the terminal to
// match next, the entries below are where to continue when the rule above
// ends. Stacks are hash-consed into nodes (position, parent node), so a
// stack is one int32 and stacks sharing a tail share its nodes. A state is
// the sorted set of stacks alive after some input, interned to an int32; a
// transition table trans[state*256+byte] caches the state each byte leads
// to. After warm-up, advancing by a byte is one table load, and the trie
// walk that computes a token mask runs on those loads alone.

package grammar

import (
	"errors"
	"math/bits"
	"slices"
	"unsafe"
)

// Limits that bound a machine's memory; reaching one makes the matcher
// fail with ErrTooComplex rather than grow without bound.
const (
	maxNodes   = 1 << 20 // stack nodes
	maxStates  = 1 << 18 // states (rows of the transition table)
	maxStacks  = 1 << 14 // stacks in one state
	maxClosure = 1 << 18 // (position, parent) pairs expanded by one step
	maxWork    = 1 << 25 // pairs expanded over a machine's life (a few seconds)
)

// ErrTooComplex is returned when a grammar's live parse stacks exceed the
// machine's limits (deep nesting or a highly ambiguous grammar).
var ErrTooComplex = errors.New("grammar: parse state too large")

const (
	dead    = 0  // the state with no stacks: nothing more can match
	unknown = -1 // transition not computed yet
	empty   = 0  // node id of the empty stack: the input so far is complete
)

type machine struct {
	g *Grammar

	nodePos []int32 // program position on top of each stack node
	nodePar []int32 // the node below
	nodeIDs map[uint64]int32

	setOff  []int32 // state i's stacks are setData[setOff[i]:setOff[i+1]]
	setData []int32
	setIDs  map[string]int32
	canEnd  []bool   // the state holds the empty stack
	trans   []int32  // state*256+byte -> state, or unknown
	stamp   []uint32 // per node: last closure that visited it
	cur     uint32
	work    []int64 // closure worklist of (pos, parent)
	out     []int32
	visited int // pairs expanded in the current step
	work0   int // pairs expanded before it
	err     error
}

func newMachine(g *Grammar) *machine {
	m := &machine{g: g, nodeIDs: map[uint64]int32{}, setIDs: map[string]int32{}}
	m.nodePos = append(m.nodePos, -1) // node 0: the empty stack
	m.nodePar = append(m.nodePar, -1)
	m.stamp = append(m.stamp, 0)
	m.setOff = append(m.setOff, 0)
	m.addState(nil) // state 0: dead
	return m
}

// start returns the initial state: every alternative of root expanded.
func (m *machine) start() int32 {
	m.cur++
	m.out = m.out[:0]
	m.work0, m.visited = m.work0+m.visited, 0
	for _, a := range m.g.ruleAlts[m.g.root] {
		m.expand(a, empty)
	}
	return m.intern()
}

func (m *machine) node(pos, par int32) int32 {
	k := uint64(uint32(pos))<<32 | uint64(uint32(par))
	if id, ok := m.nodeIDs[k]; ok {
		return id
	}
	if len(m.nodePos) >= maxNodes {
		m.err = ErrTooComplex
		return -1
	}
	id := int32(len(m.nodePos))
	m.nodePos = append(m.nodePos, pos)
	m.nodePar = append(m.nodePar, par)
	m.stamp = append(m.stamp, 0)
	m.nodeIDs[k] = id
	return id
}

// expand adds to m.out every stack reachable from (pos, par) without
// consuming input whose top is a terminal, and the empty stack when the
// whole input can end here. Pairs visited in the current closure (m.cur)
// are skipped, so cycles through empty rules terminate.
func (m *machine) expand(pos, par int32) {
	code := m.g.code
	m.work = append(m.work[:0], int64(pos)<<32|int64(uint32(par)))
	for len(m.work) > 0 && m.err == nil {
		w := m.work[len(m.work)-1]
		m.work = m.work[:len(m.work)-1]
		p, par := int32(w>>32), int32(uint32(w))
		n := m.node(p, par)
		if n < 0 || m.stamp[n] == m.cur {
			continue
		}
		m.stamp[n] = m.cur
		if m.visited++; m.visited > maxClosure || m.work0+m.visited > maxWork {
			m.err = ErrTooComplex
			return
		}
		switch e := code[p]; e.kind {
		case eTerm:
			m.out = append(m.out, n)
		case eEnd:
			if par == empty {
				if m.stamp[empty] != m.cur {
					m.stamp[empty] = m.cur
					m.out = append(m.out, empty)
				}
				continue
			}
			m.work = append(m.work, int64(m.nodePos[par])<<32|int64(uint32(m.nodePar[par])))
		case eRef:
			np := par
			if code[p+1].kind != eEnd { // not a tail call: remember where to return
				if np = m.node(p+1, par); np < 0 {
					continue
				}
			}
			for _, a := range m.g.ruleAlts[e.arg] {
				m.work = append(m.work, int64(a)<<32|int64(uint32(np)))
			}
		}
	}
}

// intern returns the state of the stacks in m.out (deduplicated already).
func (m *machine) intern() int32 {
	if m.err != nil {
		return dead
	}
	if len(m.out) == 0 {
		return dead
	}
	if len(m.out) > maxStacks {
		m.err = ErrTooComplex
		return dead
	}
	slices.Sort(m.out)
	key := unsafe.Slice((*byte)(unsafe.Pointer(&m.out[0])), len(m.out)*4)
	if id, ok := m.setIDs[string(key)]; ok {
		return id
	}
	if len(m.canEnd) >= maxStates {
		m.err = ErrTooComplex
		return dead
	}
	return m.addState(m.out)
}

func (m *machine) addState(stacks []int32) int32 {
	id := int32(len(m.canEnd))
	m.setData = append(m.setData, stacks...)
	m.setOff = append(m.setOff, int32(len(m.setData)))
	if len(stacks) > 0 {
		m.setIDs[string(unsafe.Slice((*byte)(unsafe.Pointer(&stacks[0])), len(stacks)*4))] = id
	}
	var live byteSet
	end := false
	for _, n := range stacks {
		if n == empty {
			end = true
			continue
		}
		t := &m.g.terms[m.g.code[m.nodePos[n]].arg]
		for i := range live {
			live[i] |= t[i]
		}
	}
	m.canEnd = append(m.canEnd, end)
	base := len(m.trans)
	m.trans = slices.Grow(m.trans, 256)[:base+256]
	for b := range 256 {
		if live.has(byte(b)) {
			m.trans[base+b] = unknown
		} else {
			m.trans[base+b] = dead
		}
	}
	return id
}

// step returns the state after byte b in state s. The result holds for
// every byte the top terminals of s cannot tell apart from b (the same
// stacks match it), so the whole class is filled in at once.
func (m *machine) step(s int32, b byte) int32 {
	if t := m.trans[int(s)<<8|int(b)]; t != unknown {
		return t
	}
	m.cur++
	m.out = m.out[:0]
	m.work0, m.visited = m.work0+m.visited, 0
	cls := byteSet{^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)}
	for _, n := range m.setData[m.setOff[s]:m.setOff[s+1]] {
		if n == empty {
			continue
		}
		p := m.nodePos[n]
		term := &m.g.terms[m.g.code[p].arg]
		if term.has(b) {
			for i := range cls {
				cls[i] &= term[i]
			}
			m.expand(p+1, m.nodePar[n])
		} else {
			for i := range cls {
				cls[i] &^= term[i]
			}
		}
	}
	t := m.intern()
	if m.err == nil {
		row := m.trans[int(s)<<8 : int(s)<<8+256]
		for i, w := range cls {
			for ; w != 0; w &= w - 1 {
				row[i<<6|bits.TrailingZeros64(w)] = t
			}
		}
	}
	return t
}
