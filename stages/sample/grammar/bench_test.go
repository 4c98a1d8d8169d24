// bench_test.go: the per-token cost of a grammar at a 150K-token
// vocabulary (deepseek-llm's 102K tokens, extended with concatenations of
// its word pieces to 150K).

package grammar

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model/tokenizer"
)

const benchVocabSize = 150_000

var bigVocab struct {
	once   sync.Once
	pieces [][]byte
	eog    []int32
	tok    *tokenizer.Tokenizer
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
		bigVocab.tok = tok
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

const benchSchema = `{
  "type": "object",
  "properties": {
    "name":    {"type": "string"},
    "age":     {"type": "integer", "minimum": 0, "maximum": 150},
    "tags":    {"type": "array", "items": {"type": "string"}, "maxItems": 8},
    "address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string", "maxLength": 40}},
                "required": ["street", "city"]},
    "note":    {"type": "string"}
  },
  "required": ["name", "age", "tags", "address"]
}`

// benchStates are prefixes of a JSON output that put the matcher
// mid-object (a key or a value expected) and mid-string.
var benchStates = []struct{ grammar, name, prefix string }{
	{"schema", "mid-object", `{"name": "Ann", "age": 31, `},
	{"schema", "mid-string", `{"name": "Ann Lee, of the `},
	{"schema", "mid-string-nested", `{"name": "Ann", "age": 31, "tags": [], "address": {"street": "Main St`},
	{"schema", "mid-string-maxLength", `{"name": "Ann", "age": 31, "tags": [], "address": {"street": "Main", "city": "Spring`},
	{"json", "mid-object", `{"name": "Ann", "age": 31, `},
	{"json", "mid-string", `{"name": "Ann Lee, of the `},
}

func BenchmarkMask(b *testing.B) {
	pieces, eog := loadBigVocab(b)
	v, err := NewVocab(pieces, eog)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("vocab %d tokens, %d trie nodes", v.Size(), v.Nodes())
	grammars := map[string]*Grammar{"json": MustParse(JSONObjectGBNF)}
	if grammars["schema"], err = FromSchema([]byte(benchSchema)); err != nil {
		b.Fatal(err)
	}
	for _, st := range benchStates {
		g := grammars[st.grammar]
		mt, err := NewMatcher(g, v)
		if err != nil {
			b.Fatal(err)
		}
		if !mt.AcceptBytes([]byte(st.prefix)) {
			b.Fatalf("prefix %q rejected", st.prefix)
		}
		allowed := 0
		for _, w := range mt.Mask() {
			allowed += bits.OnesCount64(w)
		}
		name := fmt.Sprintf("grammar=%s/state=%s", st.grammar, st.name)
		// walk: the mask of a state met for the first time, its
		// transitions already known (what a new state mostly costs)
		b.Run(name+"/cache=walk", func(b *testing.B) {
			mask := make([]uint64, mt.words)
			b.ReportAllocs()
			defer lockThread()()
			c0 := threadCPU()
			for b.Loop() {
				mt.fill(mask, mt.state)
			}
			reportCPU(b, c0, b.N)
			b.ReportMetric(float64(allowed), "allowed")
		})
		// hit: a state seen before (the steady state inside a string)
		b.Run(name+"/cache=hit", func(b *testing.B) {
			b.ReportAllocs()
			defer lockThread()()
			c0 := threadCPU()
			for b.Loop() {
				mt.Mask()
			}
			reportCPU(b, c0, b.N)
		})
		// cold: a fresh matcher; transitions, loop sets and the mask
		// computed from nothing (the vocabulary's splits already built)
		b.Run(name+"/cache=cold", func(b *testing.B) {
			b.ReportAllocs()
			defer lockThread()()
			c0 := threadCPU()
			for b.Loop() {
				m2, _ := NewMatcher(g, v)
				m2.AcceptBytes([]byte(st.prefix))
				m2.Mask()
			}
			reportCPU(b, c0, b.N)
		})
	}
	// apply: what every constrained token pays on top of the mask: copy
	// the logits row and set the disallowed ones to -Inf
	b.Run("apply", func(b *testing.B) {
		mt, _ := NewMatcher(grammars["json"], v)
		mt.AcceptBytes([]byte(`{"name": "Ann`))
		mask := mt.Mask()
		logits := make([]float32, v.Size())
		row := make([]float32, v.Size())
		b.ReportAllocs()
		defer lockThread()()
		c0 := threadCPU()
		for b.Loop() {
			ApplyTo(row, logits, mask)
		}
		reportCPU(b, c0, b.N)
	})
}

// BenchmarkVocab: building the trie, and one loop signature's split.
func BenchmarkVocab(b *testing.B) {
	pieces, eog := loadBigVocab(b)
	b.Run("trie", func(b *testing.B) {
		for b.Loop() {
			if _, err := NewVocab(pieces, eog); err != nil {
				b.Fatal(err)
			}
		}
	})
	v, _ := NewVocab(pieces, eog)
	mt, _ := NewMatcher(MustParse(JSONObjectGBNF), v)
	mt.AcceptBytes([]byte(`{"a": "`))
	sig := mt.loopSet(mt.state)
	b.Run("split", func(b *testing.B) {
		for b.Loop() {
			v.splits = nil
			v.split(sig)
		}
	})
}

// benchDoc is a document of benchSchema, as a model might write it.
const benchDoc = `{"name": "Ann Lee, of the Northern Lights Bakery", "age": 31, "tags": ["baker", "runner", "chess"],
  "address": {"street": "12 Main Street", "city": "Springfield"}, "note": "Prefers email; allergic to peanuts."}`

// BenchmarkDocument: the grammar's cost per token over a whole document
// (benchDoc tokenized by the deepseek tokenizer): Mask, ApplyTo on a
// 150K-logit row, Accept. cold: a fresh Matcher per document (every state
// met for the first time); warm: the same Matcher reset (states cached).
func BenchmarkDocument(b *testing.B) {
	pieces, eog := loadBigVocab(b)
	v, err := NewVocab(pieces, eog)
	if err != nil {
		b.Fatal(err)
	}
	g, err := FromSchema([]byte(benchSchema))
	if err != nil {
		b.Fatal(err)
	}
	toks := bigVocab.tok.Encode(benchDoc, false, false)
	logits := make([]float32, v.Size())
	row := make([]float32, v.Size())
	doc := func(mt *Matcher) {
		for _, t := range toks {
			mask := mt.Mask()
			if !Allowed(mask, t) {
				b.Fatalf("token %d (%q) not allowed", t, pieces[t])
			}
			ApplyTo(row, logits, mask)
			if err := mt.Accept(t); err != nil {
				b.Fatal(err)
			}
		}
		if !mt.CanEnd() {
			b.Fatal("document incomplete")
		}
	}
	b.Run(fmt.Sprintf("tokens=%d/cache=cold", len(toks)), func(b *testing.B) {
		b.ReportAllocs()
		defer lockThread()()
		c0 := threadCPU()
		for b.Loop() {
			mt, err := NewMatcher(g, v)
			if err != nil {
				b.Fatal(err)
			}
			doc(mt)
		}
		reportCPU(b, c0, b.N*len(toks))
	})
	b.Run(fmt.Sprintf("tokens=%d/cache=warm", len(toks)), func(b *testing.B) {
		mt, err := NewMatcher(g, v)
		if err != nil {
			b.Fatal(err)
		}
		doc(mt)
		b.ReportAllocs()
		defer lockThread()()
		c0 := threadCPU()
		for b.Loop() {
			mt.Reset()
			doc(mt)
		}
		reportCPU(b, c0, b.N*len(toks))
	})
}

// reportCPU reports wall and CPU time per token over n tokens since the
// thread CPU time c0 (the CPU figure is the one to quote on a machine
// shared with other jobs).
func reportCPU(b *testing.B, c0 time.Duration, n int) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/token")
	if c := threadCPU() - c0; c > 0 {
		b.ReportMetric(float64(c.Nanoseconds())/float64(n), "cpu-ns/token")
	}
}
