// vocab.go: the built-in SentencePiece-style vocabulary of the demo model,
// made in code so that flowinfer can build a model without any file.
//
// It is laid out like llama's SPM vocabularies (tokenizer.ggml.model =
// "llama"): <unk>, <s>, </s>, the 256 byte-fallback tokens <0x00>..<0xFF>,
// then pieces learned by byte-pair encoding over a built-in list of common
// English words (each word "▁word", weighted by rank as Zipf's law), scored
// -rank in merge order, then the single characters (printable ASCII and ▁)
// with the lowest scores. 1024 tokens in all. SPM tokenization replays the
// merges, so "Once upon a time" becomes ▁Once ▁upon ▁a ▁time. It is not
// a trained vocabulary.

package synth

import (
	"container/heap"
	"slices"
	"strings"

	"github.com/flowinfer/flowinfer/io/gguf"
)

// builtinSize is the built-in vocabulary's token count.
const builtinSize = 1024

// Token types as llama.cpp's llama_token_type.
const (
	tokNormal  = 1
	tokUnknown = 2
	tokControl = 3
	tokByte    = 6
)

// commonWords lists common English words, most frequent first (a rough
// order: it only sets which pieces merge first).
const commonWords = `the and a to was he she it of in they said her his
you that with on for is had i but there so day one big little time once upon
were what all be not very at up we them saw then as wanted play out him have
do my go can friends friend happy mom like went named girl boy get could
are this from will no help looked see came an back did your me too would
when their had found came just fun made make new love loved home tree dog
cat bird ball toy park sun sky water car box house room red blue green
yellow small long fast good sad nice kind away down over into about after
again other some more best every than now how who why where here which
been has our us its way well know think thought felt feel look looking
say says ran run walk walked jump jumped eat ate take took give gave
come going playing smiled laughed asked told started tried wanted hugged
together inside outside under around before because something nothing
everyone someone many much own same each both few first last next high
still never always soon very really little lily tom ben sue max mia anna
mommy daddy dad mother father sister brother baby friend teacher family
school garden forest river sea beach hill town street door window bed
table chair book picture flower flowers grass rock stone apple cake
cookie milk bread food fish bear rabbit bunny duck frog lion mouse
cow horse pig sheep monkey toys game games story stories idea world
night morning evening today tomorrow year years hand hands head eyes
face hair feet legs heart voice name thing things place places people
man woman children kids child old young tall short hot cold warm soft
hard loud quiet bright dark pretty beautiful scared afraid brave proud
excited tired hungry careful special important different strong wet
dry clean dirty full empty open closed right left yes oh hello thank
thanks please sorry learned learn share shared cried laugh smile sing
sang dance danced draw drew read wrote write build built fly flew swim
fell fall climb climbed catch caught hold held keep kept find lost
hide hid seek show showed sleep slept wake woke stop stopped turn
turned pick picked put open opened close closed carry carried decided
noticed realized remembered answered replied shouted whispered waved
watched listened followed reached touched pulled pushed threw thrown
bring brought buy bought need needed use used try knew should might
must shall may also only even just ever such any most while until
through across along behind between near far off yet though`

// capitalWords are words that often start a sentence or are names.
const capitalWords = `The Once One He She They It I But So Then When
There Lily Tom Ben Sue Max Mia Anna Mom Dad What Why Where How Yes Oh
We You His Her Their After Every Timmy Sam`

// BuiltinVocab returns the tokenizer.* metadata of the built-in vocabulary
// (tokens, scores, token types, special token ids, BOS added, space prefix
// added). It is the same on every call.
func BuiltinVocab() []gguf.KV {
	toks, scores, types := builtinVocab()
	return []gguf.KV{
		{Key: "tokenizer.ggml.model", Value: gguf.String("llama")},
		{Key: "tokenizer.ggml.tokens", Value: gguf.Strings(toks)},
		{Key: "tokenizer.ggml.scores", Value: gguf.Float32s(scores)},
		{Key: "tokenizer.ggml.token_type", Value: gguf.Int32s(types)},
		{Key: "tokenizer.ggml.bos_token_id", Value: gguf.Uint32(1)},
		{Key: "tokenizer.ggml.eos_token_id", Value: gguf.Uint32(2)},
		{Key: "tokenizer.ggml.unknown_token_id", Value: gguf.Uint32(0)},
		{Key: "tokenizer.ggml.add_bos_token", Value: gguf.Bool(true)},
		{Key: "tokenizer.ggml.add_eos_token", Value: gguf.Bool(false)},
		{Key: "tokenizer.ggml.add_space_prefix", Value: gguf.Bool(true)},
	}
}

// builtinTokens returns the built-in vocabulary's token texts.
func builtinTokens() []string {
	toks, _, _ := builtinVocab()
	return toks
}

func builtinVocab() (toks []string, scores []float32, types []int32) {
	add := func(t string, score float32, typ int32) {
		toks = append(toks, t)
		scores = append(scores, score)
		types = append(types, typ)
	}
	add("<unk>", 0, tokUnknown)
	add("<s>", 0, tokControl)
	add("</s>", 0, tokControl)
	const hex = "0123456789ABCDEF"
	for b := range 256 {
		add("<0x"+string(hex[b>>4])+string(hex[b&15])+">", 0, tokByte)
	}
	chars := []string{"▁"}
	for c := byte('!'); c <= '~'; c++ {
		chars = append(chars, string(c))
	}
	pieces := bpeMerges(builtinSize - len(toks) - len(chars))
	for i, p := range pieces {
		add(p, -float32(i), tokNormal)
	}
	for i, c := range chars {
		add(c, -float32(len(pieces)+i), tokNormal)
	}
	return toks, scores, types
}

// bpeMerges learns up to n merges over the word list: repeatedly the most
// frequent adjacent pair of symbols (ties: the smaller pair by text) is
// merged everywhere, and each new symbol is a piece.
func bpeMerges(n int) []string {
	type word struct {
		syms  []int
		count int
	}
	var (
		names []string // symbol id -> text
		ids   = map[string]int{}
		words []word
	)
	sym := func(s string) int {
		id, ok := ids[s]
		if !ok {
			id = len(names)
			ids[s] = id
			names = append(names, s)
		}
		return id
	}
	seen := map[string]bool{}
	addWords := func(list string, offset int) {
		rank := 0
		for _, f := range strings.Fields(list) {
			if seen[f] {
				continue
			}
			seen[f] = true
			w := word{count: 100000 / (rank + offset)}
			rank++
			for _, r := range "▁" + f {
				w.syms = append(w.syms, sym(string(r)))
			}
			words = append(words, w)
		}
	}
	addWords(commonWords, 10)
	addWords(capitalWords, 30) // a sentence start is rarer than "the"
	// pair counts, kept up to date as words change; the heap holds
	// (count, pair) entries, stale ones skipped when popped
	counts := map[uint64]int{}
	h := &pairHeap{names: &names}
	var dirty []uint64 // pairs whose count changed since the last push
	count := func(w word, sign int) {
		for i := 0; i+1 < len(w.syms); i++ {
			k := uint64(w.syms[i])<<32 | uint64(w.syms[i+1])
			if c := counts[k] + sign*w.count; c == 0 {
				delete(counts, k)
			} else {
				counts[k] = c
			}
			dirty = append(dirty, k)
		}
	}
	push := func() {
		for _, k := range dirty {
			if c := counts[k]; c > 0 {
				heap.Push(h, pairCount{k, c})
			}
		}
		dirty = dirty[:0]
	}
	// occ lists, per symbol, the words that (may) contain it
	occ := map[int][]int{}
	for wi, w := range words {
		count(w, 1)
		for i, sy := range w.syms {
			if !slices.Contains(w.syms[:i], sy) {
				occ[sy] = append(occ[sy], wi)
			}
		}
	}
	push()
	var pieces []string
	for len(pieces) < n && h.Len() > 0 {
		top := heap.Pop(h).(pairCount)
		if counts[top.pair] != top.n {
			continue // stale
		}
		a, b := int(top.pair>>32), int(top.pair&0xffffffff)
		text := names[a] + names[b]
		_, existed := ids[text]
		m := sym(text)
		if !existed {
			pieces = append(pieces, text)
		}
		for _, wi := range occ[a] {
			w := &words[wi]
			if !hasPair(w.syms, a, b) {
				continue
			}
			occ[m] = append(occ[m], wi)
			count(*w, -1)
			out := w.syms[:0]
			for i := 0; i < len(w.syms); i++ {
				if i+1 < len(w.syms) && w.syms[i] == a && w.syms[i+1] == b {
					out = append(out, m)
					i++
					continue
				}
				out = append(out, w.syms[i])
			}
			w.syms = out
			count(*w, 1)
		}
		push()
	}
	return slices.Clip(pieces)
}

func hasPair(syms []int, a, b int) bool {
	for i := 0; i+1 < len(syms); i++ {
		if syms[i] == a && syms[i+1] == b {
			return true
		}
	}
	return false
}

type pairCount struct {
	pair uint64 // left symbol << 32 | right symbol
	n    int
}

// pairHeap pops the most frequent pair first, ties broken by the pair's
// texts (left, then right) so the merges do not depend on map order.
type pairHeap struct {
	names *[]string
	items []pairCount
}

func (h *pairHeap) Len() int      { return len(h.items) }
func (h *pairHeap) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *pairHeap) Push(x any)    { h.items = append(h.items, x.(pairCount)) }
func (h *pairHeap) Pop() any {
	x := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return x
}

func (h *pairHeap) Less(i, j int) bool {
	x, y := h.items[i], h.items[j]
	if x.n != y.n {
		return x.n > y.n
	}
	names := *h.names
	ax, bx := names[x.pair>>32], names[x.pair&0xffffffff]
	ay, by := names[y.pair>>32], names[y.pair&0xffffffff]
	if ax != ay {
		return ax < ay
	}
	return bx < by
}
