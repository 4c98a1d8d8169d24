// Benchmarks of rendering: Jinja (gonja) against the built-in renderer.

package chat

import (
	"path/filepath"
	"testing"
)

func BenchmarkRender(b *testing.B) {
	conv := llamaCppConversation
	for _, name := range []string{"meta-llama-Llama-3.1-8B-Instruct", "Qwen-Qwen3-0.6B", "google-gemma-2-2b-it"} {
		src := readFileB(b, filepath.Join("testdata", "templates", name+".jinja"))
		tpl, err := New(src, "<s>", "</s>")
		if err != nil {
			b.Fatal(err)
		}
		builtin := *tpl
		builtin.jinja = nil
		for _, r := range []struct {
			engine string
			t      *Template
		}{{"jinja", tpl}, {"builtin", &builtin}} {
			b.Run("template="+name+"/engine="+r.engine, func(b *testing.B) {
				for b.Loop() {
					if _, err := r.t.Render(conv, true); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
	b.Run("new/template=meta-llama-Llama-3.1-8B-Instruct", func(b *testing.B) {
		src := readFileB(b, filepath.Join("testdata", "templates", "meta-llama-Llama-3.1-8B-Instruct.jinja"))
		for b.Loop() {
			if _, err := New(src, "<s>", "</s>"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
