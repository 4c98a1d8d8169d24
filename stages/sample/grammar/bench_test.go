// bench_test.go: the per-token cost of a grammar at a 150K-token
// vocabulary (deepseek-llm's 102K tokens, extended with concatenations of
// its word pieces to 150K).

package grammar

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"

	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model/tokenizer"
)

const benchVocabSize = 150_000

var bigVocab struct {
	once   sync.Once
	pieces [][]byte
	eog    []int32
	err    error
}

// loadBigVocab returns ~150K realistic token texts: the largest golden
// vocabulary's pieces, then concatenations of two random non-special
// pieces (as BPE merges would make) until benchVocabSize.
func loadBigVocab(tb testing.TB) ([][]byte, []int32) {
	dir := golden.Dir(tb)
	bigVocab.once.Do(func() {
		f, err := gguf.Open(filepath.Join(dir, "vocab", "ggml-vocab-deepseek-llm.gguf"))
		if err != nil {
			bigVocab.err = err
			return
		}
		defer f.Close()
		tok, err := tokenizer.New(f)
		if err != nil {
			bigVocab.err = err
			return
		}
		seen := map[string]bool{}
		var words [][]byte
		for id := range tok.NVocab() {
			p := tok.Piece(int32(id), false)
			bigVocab.pieces = append(bigVocab.pieces, p)
			seen[string(p)] = true
			if len(p) > 0 {
				words = append(words, p)
			}
		}
		bigVocab.eog = []int32{tok.EOS()}
		rnd := rand.New(rand.NewPCG(7, 7))
		for len(bigVocab.pieces) < benchVocabSize {
			p := append(append([]byte(nil), words[rnd.IntN(len(words))]...), words[rnd.IntN(len(words))]...)
			if len(p) > 24 || seen[string(p)] {
				continue
			}
			seen[string(p)] = true
			bigVocab.pieces = append(bigVocab.pieces, p)
		}
	})
	if bigVocab.err != nil {
		tb.Fatal(bigVocab.err)
	}
	return bigVocab.pieces, bigVocab.eog
}

// benchStates are prefixes of a JSON output that put the matcher
// mid-object (after a comma, a key expected) and mid-string.
var benchStates = []struct{ name, prefix string }{
	{"mid-object", `{"name": "Ann", "age": 31, `},
	{"mid-string", `{"name": "Ann Lee, of the `},
	{"mid-number", `{"name": "Ann", "age": 3`},
}

func BenchmarkMask(b *testing.B) {
	pieces, eog := loadBigVocab(b)
	v, err := NewVocab(pieces, eog)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("vocab %d tokens, %d trie nodes", v.Size(), v.Nodes())
	grammars := []struct{ name, src string }{{"json", testJSON}}
	for _, gr := range grammars {
		g := MustParse(gr.src)
		for _, st := range benchStates {
			mt, err := NewMatcher(g, v)
			if err != nil {
				b.Fatal(err)
			}
			if !mt.AcceptBytes([]byte(st.prefix)) {
				b.Fatalf("prefix %q rejected", st.prefix)
			}
			allowed := 0
			for _, w := range mt.Mask() {
				for ; w != 0; w &= w - 1 {
					allowed++
				}
			}
			// walk: the trie walk of a state seen for the first time, its
			// transitions already known (what a new state mostly costs)
			b.Run(fmt.Sprintf("grammar=%s/state=%s/cache=walk", gr.name, st.name), func(b *testing.B) {
				mask := make([]uint64, mt.words)
				b.ReportAllocs()
				for b.Loop() {
					mt.fill(mask, mt.state)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/token")
				b.ReportMetric(float64(allowed), "allowed")
			})
			b.Run(fmt.Sprintf("grammar=%s/state=%s/cache=hit", gr.name, st.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					mt.Mask()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/token")
			})
			// cold: a fresh matcher, transitions and mask computed from nothing
			b.Run(fmt.Sprintf("grammar=%s/state=%s/cache=cold", gr.name, st.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					m2, _ := NewMatcher(g, v)
					m2.AcceptBytes([]byte(st.prefix))
					m2.Mask()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/token")
			})
		}
	}
}
