// Command routestats measures how a MoE model routes a text: per layer,
// how many distinct experts the text uses, how many of a token's experts
// the previous token also used (temporal locality), and what share of all
// choices the most popular tenth of the experts takes (skew). It also
// replays the choices through expert caches of several sizes with the LRU
// and SLRU policies of the weight path, reporting hit rates: the offline
// version of the question "how big must the expert cache be".
//
//	go run ./bench/routestats -m MODEL.gguf -f TEXT [-n 256]
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"slices"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/model"
)

func main() {
	path := flag.String("m", "", "MoE GGUF model (required)")
	text := flag.String("f", "", "text file to feed, token by token (required)")
	n := flag.Int("n", 256, "tokens to feed")
	flag.Parse()
	if *path == "" || *text == "" {
		fmt.Fprintln(os.Stderr, "routestats: -m MODEL and -f TEXT are required")
		os.Exit(2)
	}
	if err := run(*path, *text, *n); err != nil {
		fmt.Fprintln(os.Stderr, "routestats:", err)
		os.Exit(1)
	}
}

func run(path, textPath string, n int) error {
	be := cpu.NewBackend(0, nil)
	defer be.Close()
	b, err := model.Open(path, be.Supports, nil)
	if err != nil {
		return err
	}
	defer b.Close()
	m := b.Model
	if m.NExpert == 0 {
		return fmt.Errorf("%s has no routed experts", path)
	}
	raw, err := os.ReadFile(textPath)
	if err != nil {
		return err
	}
	toks := b.Tokenizer.Encode(string(raw), true, true)
	n = min(n, len(toks))
	mctx, err := m.NewContext(be, n, 1, 1)
	if err != nil {
		return err
	}
	// routes[l][t] = the experts token t chose in layer l
	routes := make([][][]int, m.NLayer)
	mctx.SetHooks(model.Hooks{OnRoute: func(l, _ int, experts []int, _ []float32) {
		routes[l] = append(routes[l], slices.Clone(experts))
	}})
	for t := range n {
		if _, err := mctx.Decode(&model.Batch{Tokens: toks[t : t+1], Pos: []int32{int32(t)}, Seq: []int32{0}}); err != nil {
			return err
		}
	}
	var distinct, overlap, top10, conc, topOne, cover90 float64
	for l := range m.NLayer {
		count := make([]int, m.NExpert)
		reuse, pairs := 0, 0
		for t, es := range routes[l] {
			for _, e := range es {
				count[e]++
			}
			if t > 0 {
				for _, e := range es {
					if slices.Contains(routes[l][t-1], e) {
						reuse++
					}
				}
				pairs += len(es)
			}
		}
		used := 0
		for _, c := range count {
			if c > 0 {
				used++
			}
		}
		slices.Sort(count)
		slices.Reverse(count)
		k := max(1, m.NExpert/10)
		s, all := 0, 0
		for i, c := range count {
			if i < k {
				s += c
			}
			all += c
		}
		// concentration = 1 - entropy/log(E); the top expert's share; the
		// fraction of experts that covers 90% of the choices
		var h float64
		cum, need := 0, 0
		for i, c := range count {
			if c > 0 {
				p := float64(c) / float64(all)
				h -= p * math.Log(p)
			}
			if float64(cum) < 0.9*float64(all) {
				cum += c
				need = i + 1
			}
		}
		conc += 1 - h/math.Log(float64(m.NExpert))
		topOne += float64(count[0]) / float64(all)
		cover90 += float64(need) / float64(m.NExpert)
		distinct += float64(used)
		overlap += float64(reuse) / float64(max(pairs, 1))
		top10 += float64(s) / float64(all)
	}
	L := float64(m.NLayer)
	fmt.Printf("routestats: %s, %d tokens of %s\n", path, n, textPath)
	fmt.Printf("per layer (mean): %.1f of %d experts used; %.1f%% of a token's experts also chosen by the previous token; the top 10%% of experts take %.1f%% of the choices\n",
		distinct/L, m.NExpert, 100*overlap/L, 100*top10/L)
	fmt.Printf("per layer (mean): concentration (1 - entropy/log E) %.3f; the top expert takes %.1f%%; %.0f%% of the experts cover 90%% of the choices\n",
		conc/L, 100*topOne/L, 100*cover90/L)
	total := m.NLayer * m.NExpert
	for _, frac := range []float64{0.05, 0.10, 0.15, 0.25, 0.50} {
		slots := max(m.NExpertUsed, int(frac*float64(total)))
		fmt.Printf("cache of %4.0f%% of the experts (%5d slots): hit rate LRU %5.1f%%, SLRU %5.1f%%\n",
			100*frac, slots, 100*replay(routes, m.NExpert, slots, false), 100*replay(routes, m.NExpert, slots, true))
	}
	return nil
}

// replay runs the choices, token by token and layer by layer as a decode
// would, through a cache of slots experts (SLRU: hits move to a protected
// segment of 80% of the slots) and returns the hit rate.
func replay(routes [][][]int, nExpert, slots int, slru bool) float64 {
	type key struct{ l, e int }
	var prob, prot []key   // most recent last
	where := map[key]int{} // 1 probation, 2 protected
	remove := func(s []key, k key) []key {
		i := slices.Index(s, k)
		return slices.Delete(s, i, i+1)
	}
	hits, total := 0, 0
	nTok := len(routes[0])
	for t := range nTok {
		for l := range routes {
			for _, e := range routes[l][t] {
				k := key{l, e}
				total++
				switch where[k] {
				case 1:
					hits++
					prob = remove(prob, k)
					if slru {
						prot = append(prot, k)
						where[k] = 2
						if len(prot) > slots*8/10 {
							d := prot[0]
							prot = prot[1:]
							prob = append(prob, d)
							where[d] = 1
						}
					} else {
						prob = append(prob, k)
					}
				case 2:
					hits++
					prot = append(remove(prot, k), k)
				default:
					if len(prob)+len(prot) >= slots {
						if len(prob) > 0 {
							delete(where, prob[0])
							prob = prob[1:]
						} else {
							delete(where, prot[0])
							prot = prot[1:]
						}
					}
					prob = append(prob, k)
					where[k] = 1
				}
			}
		}
	}
	return float64(hits) / float64(total)
}
