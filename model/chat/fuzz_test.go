// Fuzzing of template parsing and rendering: any template text gives a
// Template or an error, never a panic; a render takes at most about
// RenderTimeout and its output stays within the byte limit, or fails with
// ErrRenderLimit; New and the renders allocate within the bound of
// TestRenderLimits. Seeds: the templates in testdata/templates and the chat
// template of the golden phi-3 vocabulary (read at test time).

package chat

import (
	"os"
	"path/filepath"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/io/gguf"
)

func FuzzNew(f *testing.F) {
	for _, s := range []string{
		"", "chatml", "INVALID TEMPLATE", chatMLSource,
		"{% for m in messages %}{{ m.content }}{% endfor %}",
		"{{ messages[-1].content.split('x')[-1] | trim | tojson }}",
		"{{ ('a' if messages|length > 1 else 'b') }}{% set x = 1 if y %}",
		"{% generation %}{{ messages[0]['content'] }}{% endgeneration %}",
		"<|im_start|>{% for %}", "[INST] {{ raise_exception('x') }}",
		"{{ strftime_now('%-d %b') }}{% for i in range(3, 0, -1) %}{{ i }}{% endfor %}",
		"{% raw %}{{{% endraw %}{# ( if else #}{{ '\\'' }}",
	} {
		f.Add(s)
	}
	for _, h := range hostileTemplates {
		if !strings.Contains(h, "range(1000000)") && !strings.Contains(h, "range(60000)") { // those take a second each
			f.Add(h)
		}
	}
	paths, _ := filepath.Glob("testdata/templates/*.jinja")
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(string(b))
		}
	}
	if dir := golden.Dir(f); dir != "" {
		if g, err := gguf.Open(filepath.Join(dir, "vocab", "ggml-vocab-phi-3.gguf")); err == nil {
			if s, ok := g.GetString("tokenizer.chat_template"); ok {
				f.Add(s)
			}
			g.Close()
		}
	}
	allocs := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	f.Fuzz(func(t *testing.T, src string) {
		metrics.Read(allocs)
		allocated := allocs[0].Value.Uint64()
		defer func() {
			// New and the two renders below, each within the bound of
			// TestRenderLimits.
			metrics.Read(allocs)
			if n := allocs[0].Value.Uint64() - allocated; n > 3*maxHostileAlloc {
				t.Fatalf("New and two renders allocated %d MiB", n>>20)
			}
		}()
		start := time.Now()
		tpl, err := New(src, "<s>", "</s>")
		// New renders up to three probe conversations.
		if d := time.Since(start); d > 4*RenderTimeout {
			t.Fatalf("New took %v", d)
		}
		if err != nil {
			return
		}
		for _, c := range []struct {
			msgs []Message
			gen  bool
		}{
			{[]Message{{Role: "system", Content: "s"}, {Role: "user", Content: "u"}, {Role: "assistant", Content: "a"}, {Role: "user", Content: "u2"}}, true},
			{[]Message{{Role: "user", Content: "x"}}, false},
		} {
			start := time.Now()
			out, err := tpl.Render(c.msgs, c.gen)
			if d := time.Since(start); d > 2*RenderTimeout {
				t.Fatalf("Render took %v (err %v)", d, err)
			}
			if len(out) > MaxRenderBytes+RenderBytesPerInput*64 {
				t.Fatalf("Render wrote %d bytes", len(out))
			}
			if err == nil && out == "" && tpl.jinja == nil {
				t.Fatal("built-in renderer rendered nothing")
			}
		}
	})
}
