// bench_test.go: Encode throughput on the golden texts.

package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/io/gguf"
)

func benchEncode(b *testing.B, tok *Tokenizer, text string, parseSpecial bool) {
	b.SetBytes(int64(len(text)))
	n := 0
	for b.Loop() {
		n += len(tok.Encode(text, true, parseSpecial))
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "tok/s")
}

func BenchmarkEncode(b *testing.B) {
	dir := goldenDir(b)
	p3, err := os.ReadFile(filepath.Join(dir, "prompts", "P3.txt"))
	if err != nil {
		b.Fatal(err)
	}
	stories := loadTokenizer(b, filepath.Join(dir, "models", "stories260K.gguf"))
	b.Run("spm=stories260K/text=P3", func(b *testing.B) { benchEncode(b, stories, string(p3), true) })
	big := strings.Repeat(string(p3)+"\n", 1<<20/(len(p3)+1)+1)
	b.Run("spm=stories260K/text=1MB", func(b *testing.B) { benchEncode(b, stories, big, true) })

	for _, name := range []string{"llama-spm", "gpt-2", "falcon", "deepseek-llm", "starcoder"} {
		path := filepath.Join(dir, "vocab", "ggml-vocab-"+name+".gguf")
		tok := loadTokenizer(b, path)
		var sb strings.Builder
		for _, c := range readVocabCases(b, path) {
			sb.WriteString(c.text)
			sb.WriteByte('\n')
		}
		inp := sb.String()
		b.Run("vocab="+name+"/text=inp", func(b *testing.B) { benchEncode(b, tok, inp, false) })
		b.Run("vocab="+name+"/text=P3", func(b *testing.B) { benchEncode(b, tok, string(p3), false) })
	}
}

func BenchmarkNew(b *testing.B) {
	dir := goldenDir(b)
	for _, name := range []string{"llama-spm", "gpt-2", "deepseek-llm"} {
		path := filepath.Join(dir, "vocab", "ggml-vocab-"+name+".gguf")
		f, err := gguf.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("vocab="+name, func(b *testing.B) {
			for b.Loop() {
				if _, err := New(f); err != nil {
					b.Fatal(err)
				}
			}
		})
		f.Close()
	}
}
