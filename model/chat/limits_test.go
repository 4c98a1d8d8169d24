package chat

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"
)

// hostileTemplates each exceed a render limit; they also seed FuzzNew.
var hostileTemplates = []string{
	// time: 10^12 empty iterations
	"{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}{{ messages[0].content }}",
	// output size
	"{% for i in range(1000000) %}{{ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' }}{% endfor %}",
	// one huge string
	"{{ 'x' * 1000000000 }}",
	"{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
	"{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
	"{% macro f(x) %}{{ x ~ x }}{% endmacro %}{{ f(f(f(f(f(f(f(f(f(f(f(f(f(f(f(f(f(f(f(f(f(f(f(f(f(f(f(f(f(f('ab')))))))))))))))))))))))))))))) }}",
	// padding
	"{{ 'a'|center(1000000000) }}",
	"{{ 'a'.ljust(1000000000) }}",
	"{{ 'a'.zfill(1000000000) }}",
	"{{ 'x\ny'|indent(1000000000) }}",
	"{{ '%1000000000s'|format('a') }}",
	// unbounded recursion
	"{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
	// many strings kept
	"{% set l = [] %}{% set s = 'x' * 1000000 %}{% for i in range(1000000) %}{% do l.append(s ~ i) %}{% endfor %}",
	// one call making far more than its operands (each asked for 16 GB to
	// 1 TB before limitops.go)
	"{% set x = 'a' * 1000000 %}{{ x.replace('', x) }}",
	"{% set x = 'a' * 1000000 %}{{ x|replace('a', x) }}",
	"{{ range(1000000)|join('a' * 1000000) }}",
	"{{ ('a' * 1000000).join(range(1000000)|map('string')) }}",
	"{{ ('\t' * 1000000).expandtabs(1000000) }}",
	"{{ ('a\n' * 500000)|indent(1000000) }}",
	"{{ range(1000)|list|tojson(indent=1000000) }}",
	"{{ range(1000000)|list|tojson(indent=1000) }}",
	"{{ [1]|batch(1000000000, 'x') }}",
	"{% set x = 'a' * 1000000 %}{% set l = [x, x, x, x] %}{% set l = l + l + l + l %}{{ l }}",
	// time and iterations with loops of allowed length
	"{% for i in range(60000) %}{% for j in range(60000) %}{% endfor %}{% endfor %}{{ messages[0].content }}",
	"{% for i in range(60000) %}{% for j in range(60000) %}{{ '' }}{% endfor %}{% endfor %}{{ messages[0].content }}",
	// statements without loops (50 of these took 28 s)
	"{% set x = range(1000000)|join(',') %}" + strings.Repeat("{% set x = range(1000000)|join(',')|length %}", 50),
	strings.Repeat("{% set x = range(1000000) %}", 50),
}

// maxHostileAlloc bounds what New and one render of a hostile template
// allocate in all: MaxRenderAlloc of strings built plus what gonja
// allocates in about RenderTimeout (its loops allocate about 1 GB/s).
const maxHostileAlloc = MaxRenderAlloc + 2<<30

func TestRenderLimits(t *testing.T) {
	for _, src := range hostileTemplates {
		name := src
		if len(name) > 40 {
			name = name[:40]
		}
		t.Run(name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			start := time.Now()
			tpl, err := New(src, "<s>", "</s>")
			if err == nil {
				_, err = tpl.Render([]Message{{Role: "user", Content: "hello"}}, true)
			}
			d := time.Since(start)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrRenderLimit) {
				t.Fatalf("err = %v, want ErrRenderLimit", err)
			}
			if d > 3*RenderTimeout {
				t.Errorf("took %v", d)
			}
			grew := int64(after.HeapSys) - int64(before.HeapSys)
			if grew > 3<<30 {
				t.Errorf("heap grew by %d MiB", grew>>20)
			}
			total := after.TotalAlloc - before.TotalAlloc
			if total > maxHostileAlloc {
				t.Errorf("allocated %d MiB in all", total>>20)
			}
			t.Logf("%v in %v, heap %+d MiB, %d MiB allocated", err, d.Round(time.Millisecond), grew>>20, total>>20)
		})
	}
}

// TestRenderLimitsLongConversation: the byte limit grows with the input, so
// a long conversation still renders.
func TestRenderLimitsLongConversation(t *testing.T) {
	tpl, err := New(chatMLSource, "", "")
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("word ", 1<<20) // 5 MiB, beyond MaxRenderBytes
	out, err := tpl.Render([]Message{{Role: "user", Content: big}, {Role: "assistant", Content: "ok"}, {Role: "user", Content: big}}, true)
	if err != nil || len(out) < 2*len(big) {
		t.Fatalf("%d bytes, %v", len(out), err)
	}
}
