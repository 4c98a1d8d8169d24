// checks.go: checks and clean-ups of a compiled grammar: alternatives
// that can never finish are dropped, left recursion that would grow the
// stack without bound is refused.

package grammar

// pruneUnproductive drops the alternatives that cannot derive a finite
// text (they reference a rule that only recurses), so that from every
// state a sentence can still be completed. It reports whether root can.
func (g *Grammar) pruneUnproductive() bool {
	productive := make([]bool, len(g.ruleAlts))
	altOK := func(p int32) bool {
		for ; g.code[p].kind != eEnd; p++ {
			if e := g.code[p]; e.kind == eRef && !productive[e.arg] {
				return false
			}
		}
		return true
	}
	for changed := true; changed; {
		changed = false
		for r, starts := range g.ruleAlts {
			if productive[r] {
				continue
			}
			for _, p := range starts {
				if altOK(p) {
					productive[r], changed = true, true
					break
				}
			}
		}
	}
	for r, starts := range g.ruleAlts {
		kept := starts[:0]
		for _, p := range starts {
			if altOK(p) {
				kept = append(kept, p)
			}
		}
		g.ruleAlts[r] = kept
	}
	return productive[g.root]
}

// leftRecursive returns a rule that can reach itself without consuming a
// byte through a reference that pushes a return position (a reference that
// is not the last element of its alternative), or -1. Such a rule would
// make the parse stack grow without bound; left cycles made only of tail
// references (as in ("a"?)*) keep the stack the same and are allowed.
func (g *Grammar) leftRecursive() int {
	n := len(g.ruleAlts)
	nullable := make([]bool, n)
	for changed := true; changed; {
		changed = false
		for r, starts := range g.ruleAlts {
			if nullable[r] {
				continue
			}
			for _, p := range starts {
				if g.nullableFrom(p, nullable) {
					nullable[r], changed = true, true
					break
				}
			}
		}
	}
	// edges: rules reachable at the left of an alternative
	type edge struct {
		to   int32
		push bool
	}
	left := make([][]edge, n)
	for r, starts := range g.ruleAlts {
		for _, p := range starts {
			for ; g.code[p].kind == eRef; p++ {
				left[r] = append(left[r], edge{g.code[p].arg, g.code[p+1].kind != eEnd})
				if !nullable[g.code[p].arg] {
					break
				}
			}
		}
	}
	// strongly connected components (iterative Tarjan)
	index := make([]int32, n)
	low := make([]int32, n)
	comp := make([]int32, n)
	onStack := make([]bool, n)
	for i := range index {
		index[i], comp[i] = -1, -1
	}
	var stack []int32
	next, ncomp := int32(0), int32(0)
	type frame struct{ r, i int32 }
	for s := range n {
		if index[s] >= 0 {
			continue
		}
		call := []frame{{int32(s), 0}}
		index[s], low[s] = next, next
		next++
		stack = append(stack, int32(s))
		onStack[s] = true
		for len(call) > 0 {
			f := &call[len(call)-1]
			if int(f.i) < len(left[f.r]) {
				w := left[f.r][f.i].to
				f.i++
				if index[w] < 0 {
					index[w], low[w] = next, next
					next++
					stack = append(stack, w)
					onStack[w] = true
					call = append(call, frame{w, 0})
				} else if onStack[w] {
					low[f.r] = min(low[f.r], index[w])
				}
				continue
			}
			r := f.r
			call = call[:len(call)-1]
			if len(call) > 0 {
				p := call[len(call)-1].r
				low[p] = min(low[p], low[r])
			}
			if low[r] == index[r] {
				for {
					w := stack[len(stack)-1]
					stack = stack[:len(stack)-1]
					onStack[w] = false
					comp[w] = ncomp
					if w == r {
						break
					}
				}
				ncomp++
			}
		}
	}
	for r := range n {
		for _, e := range left[r] {
			if e.push && comp[e.to] == comp[r] {
				return r
			}
		}
	}
	return -1
}

func (g *Grammar) nullableFrom(p int32, nullable []bool) bool {
	for ; ; p++ {
		switch e := g.code[p]; e.kind {
		case eEnd:
			return true
		case eTerm:
			return false
		case eRef:
			if !nullable[e.arg] {
				return false
			}
		}
	}
}
