// Fuzzing of template parsing and rendering: any template text must give a
// Template or an error, never a panic or a hang.

package chat

import (
	"testing"
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
	f.Fuzz(func(t *testing.T, src string) {
		tpl, err := New(src, "<s>", "</s>")
		if err != nil {
			return
		}
		_, _ = tpl.Render([]Message{{"system", "s"}, {"user", "u"}, {"assistant", "a"}, {"user", "u2"}}, true)
		_, _ = tpl.Render([]Message{{"user", "x"}}, false)
	})
}
