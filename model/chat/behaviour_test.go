// Tests of the Template API around rendering: defaults, errors, fallbacks,
// system-message merging, BOS handling, stop strings, concurrency.

package chat

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

const chatMLWant = "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n" +
	"<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n" +
	"<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n" +
	"<|im_start|>assistant\n"

func TestDefault(t *testing.T) {
	empty, err := New("", "<s>", "</s>")
	if err != nil {
		t.Fatal(err)
	}
	blank, err := New(" \n\t", "", "")
	if err != nil {
		t.Fatal(err)
	}
	named, err := New("chatml", "", "")
	if err != nil {
		t.Fatal(err)
	}
	for name, tpl := range map[string]*Template{"Default": Default(), "empty": empty, "blank": blank, "name chatml": named} {
		t.Run(name, func(t *testing.T) {
			if tpl.Family() != ChatML {
				t.Errorf("Family() = %s, want chatml", tpl.Family())
			}
			if tpl.UsedFallback() {
				t.Error("UsedFallback() = true")
			}
			if tpl.EmitsBOS() {
				t.Error("EmitsBOS() = true for ChatML")
			}
			got, err := tpl.Render(llamaCppConversation, true)
			if err != nil {
				t.Fatal(err)
			}
			if got != chatMLWant {
				t.Errorf("got %q\nwant %q", got, chatMLWant)
			}
			got, err = tpl.Render(llamaCppConversation[:3], false)
			if err != nil {
				t.Fatal(err)
			}
			if want := chatMLWant[:strings.Index(chatMLWant, "<|im_start|>user\nWho")]; got != want {
				t.Errorf("without generation prompt: got %q, want %q", got, want)
			}
			if ss := tpl.StopStrings(); len(ss) != 1 || ss[0] != "<|im_end|>" {
				t.Errorf("StopStrings() = %q", ss)
			}
		})
	}
	if Default().Source() != chatMLSource {
		t.Errorf("Default().Source() is not the ChatML source")
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name, src string
	}{
		{"unclosed output", "{% for m in messages %}{{ m.content }"},
		{"unclosed block", "{% for m in messages %}{{ m.content }}"},
		{"bad statement", "{% if %}{{ messages }}{% endif %}"},
		{"unknown tag", "{% frobnicate %}"},
		{"plain text", "INVALID TEMPLATE"},
		{"ignores messages", "{{ bos_token }}hello"},
		{"always raises", "{{ raise_exception('no chat for you') }}"},
		{"drops assistant turns", "{% for m in messages if m.role == 'user' %}{{ m.content }}{% endfor %}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tpl, err := New(tt.src, "<s>", "</s>")
			if !errors.Is(err, ErrUnsupported) {
				t.Fatalf("New() = %v, %v; want ErrUnsupported", tpl, err)
			}
			if strings.Contains(err.Error(), tt.src) && len(tt.src) > 40 {
				t.Errorf("error repeats the whole template: %v", err)
			}
		})
	}
}

func TestUnknownTemplateRendersThroughJinja(t *testing.T) {
	src := "{% for m in messages %}### {{ m.role | capitalize }}:\n{{ m.content | trim }}\n\n{% endfor %}" +
		"{% if add_generation_prompt %}### Assistant:\n{% endif %}"
	tpl, err := New(src, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if tpl.Family() != Unknown || tpl.UsedFallback() || tpl.StopStrings() != nil {
		t.Errorf("Family=%s UsedFallback=%v StopStrings=%q", tpl.Family(), tpl.UsedFallback(), tpl.StopStrings())
	}
	got, err := tpl.Render([]Message{{Role: "system", Content: " Be nice. "}, {Role: "user", Content: "Hi"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := "### System:\nBe nice.\n\n### User:\nHi\n\n### Assistant:\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestFallbackAtNew(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	// A ChatML template gonja cannot parse: its family is recognised, so the
	// built-in ChatML renderer takes over.
	src := "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }<|im_end|>\n{% endfor %}"
	tpl, err := New(src, "", "", WithLogger(zap.New(core)))
	if err != nil {
		t.Fatal(err)
	}
	if !tpl.UsedFallback() || tpl.Family() != ChatML {
		t.Fatalf("UsedFallback=%v Family=%s", tpl.UsedFallback(), tpl.Family())
	}
	if logs.Len() != 1 {
		t.Errorf("%d warnings logged, want 1", logs.Len())
	}
	r, err := tpl.RenderDetailed(llamaCppConversation, true)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Fallback || r.Prompt != chatMLWant {
		t.Errorf("Fallback=%v prompt %q", r.Fallback, r.Prompt)
	}
}

func TestFallbackAtRender(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	// Renders the probe conversations but fails (an engine error, not
	// raise_exception) on a tool message.
	src := "{% for m in messages %}{% if m.role == 'tool' %}{{ m.content.no_such_method() }}{% endif %}" +
		"{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{% endfor %}" +
		"{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
	tpl, err := New(src, "", "", WithLogger(zap.New(core)))
	if err != nil {
		t.Fatal(err)
	}
	if tpl.UsedFallback() {
		t.Fatal("UsedFallback() = true at New")
	}
	r, err := tpl.RenderDetailed([]Message{{Role: "user", Content: "Hi"}}, true)
	if err != nil || r.Fallback {
		t.Fatalf("plain conversation: %v, fallback %v", err, r.Fallback)
	}
	r, err = tpl.RenderDetailed([]Message{{Role: "user", Content: "Hi"}, {Role: "tool", Content: "42"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>user\nHi<|im_end|>\n<|im_start|>tool\n42<|im_end|>\n<|im_start|>assistant\n"
	if !r.Fallback || r.Prompt != want {
		t.Errorf("Fallback=%v prompt %q, want %q", r.Fallback, r.Prompt, want)
	}
	if logs.Len() != 1 {
		t.Errorf("%d warnings logged, want 1", logs.Len())
	}

	// The same failure in a template of no known family is an error.
	unknown := strings.ReplaceAll(strings.ReplaceAll(src, "<|im_start|>", "<turn>"), "<|im_end|>", "</turn>")
	tpl, err = New(unknown, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tpl.Render([]Message{{Role: "user", Content: "Hi"}, {Role: "tool", Content: "42"}}, true); err == nil || errors.Is(err, ErrRejected) {
		t.Errorf("unknown family engine failure: err = %v", err)
	}
}

func TestRejected(t *testing.T) {
	c := loadCases(t)
	for _, tt := range c.Templates {
		if tt.Family != "gemma" && tt.Family != "llama2" {
			continue
		}
		tpl := newFromFile(t, c, tt)
		_, err := tpl.Render([]Message{{Role: "user", Content: "a"}, {Role: "user", Content: "b"}}, true)
		if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "alternate") {
			t.Errorf("%s: err = %v, want ErrRejected about alternating roles", tt.stem(), err)
		}
	}
}

func TestNoMessages(t *testing.T) {
	for _, tpl := range []*Template{Default(), mustNew(t, "llama3", "<|begin_of_text|>", "<|eot_id|>")} {
		if _, err := tpl.Render(nil, true); !errors.Is(err, ErrNoMessages) {
			t.Errorf("%s: err = %v, want ErrNoMessages", tpl.Family(), err)
		}
	}
}

func mustNew(t *testing.T, src, bos, eos string, opts ...Option) *Template {
	t.Helper()
	tpl, err := New(src, bos, eos, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return tpl
}

// TestSystemMerge: templates that ignore or reject a system message get it
// merged into the next message, as llama-server does; a lone system message
// is dropped.
func TestSystemMerge(t *testing.T) {
	phiMini := "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}{{'<|user|>' + '\n' + message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}{% elif (message['role'] == 'assistant') %}{{message['content'] + '<|end|>' + '\n'}}{% endif %}{% endfor %}"
	tpl := mustNew(t, phiMini, "", "")
	if tpl.SupportsSystemRole() {
		t.Error("SupportsSystemRole() = true for a template that ignores system messages")
	}
	got, err := tpl.Render([]Message{{Role: "system", Content: "S"}, {Role: "user", Content: "U"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := "<|user|>\nS\nU<|end|>\n<|assistant|>\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if !Default().SupportsSystemRole() {
		t.Error("ChatML: SupportsSystemRole() = false")
	}
	gemma := mustNew(t, "gemma", "<bos>", "<eos>")
	got, err = gemma.Render([]Message{{Role: "system", Content: "only a system message"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := "<bos><start_of_turn>model\n"; got != want {
		t.Errorf("lone system message: got %q, want %q", got, want)
	}
}

func TestBuiltinNames(t *testing.T) {
	conv := []Message{{Role: "system", Content: "S"}, {Role: "user", Content: "U1"}, {Role: "assistant", Content: " A1 "}, {Role: "user", Content: "U2"}}
	tests := []struct {
		name, want string
		family     Family
	}{
		{"chatml", "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n<|im_start|>assistant\n A1 <|im_end|>\n<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant\n", ChatML},
		{"llama3", "<B><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nU1<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nA1<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nU2<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n", Llama3},
		{"llama2", "<B>[INST] <<SYS>>\nS\n<</SYS>>\n\nU1 [/INST] A1 <E><B>[INST] U2 [/INST]", Llama2},
		{"mistral-v1", "<B> [INST] S\n\nU1 [/INST]  A1 <E> [INST] U2 [/INST]", Mistral},
		{"mistral-v3", "<B>[INST] U1[/INST] A1<E>[INST] S\n\nU2[/INST]", Mistral},
		{"mistral-v3-tekken", "<B>[INST]U1[/INST] A1 <E>[INST]S\n\nU2[/INST]", Mistral},
		{"mistral-v7", "<B>[SYSTEM_PROMPT] S[/SYSTEM_PROMPT][INST] U1[/INST]  A1 <E>[INST] U2[/INST]", Mistral},
		{"mistral-v7-tekken", "<B>[SYSTEM_PROMPT]S[/SYSTEM_PROMPT][INST]U1[/INST] A1 <E>[INST]U2[/INST]", Mistral},
		{"gemma", "<B><start_of_turn>user\nS\nU1<end_of_turn>\n<start_of_turn>model\nA1<end_of_turn>\n<start_of_turn>user\nU2<end_of_turn>\n<start_of_turn>model\n", Gemma},
		{"phi3", "<|system|>\nS<|end|>\n<|user|>\nU1<|end|>\n<|assistant|>\n A1 <|end|>\n<|user|>\nU2<|end|>\n<|assistant|>\n", Phi3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tpl := mustNew(t, tt.name, "<B>", "<E>")
			if tpl.Family() != tt.family || tpl.UsedFallback() || tpl.Source() != tt.name {
				t.Errorf("Family=%s UsedFallback=%v Source=%q", tpl.Family(), tpl.UsedFallback(), tpl.Source())
			}
			got, err := tpl.Render(conv, true)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
			if wantBOS := strings.HasPrefix(tt.want, "<B>"); tpl.EmitsBOS() != wantBOS {
				t.Errorf("EmitsBOS() = %v, want %v", tpl.EmitsBOS(), wantBOS)
			}
		})
	}
}

func TestDetect(t *testing.T) {
	tests := []struct {
		src    string
		family Family
		check  func(variant) bool
	}{
		{"{{'<|im_start|>'}}", ChatML, nil},
		{"{{ bos_token }}{{'<|im_start|>'}}", ChatML, func(v variant) bool { return v.leadingBOS }},
		{"<|im_start|><|im_sep|>", Unknown, nil},         // Phi-4
		{"<|im_start|><end_of_utterance>", Unknown, nil}, // SmolVLM
		{"[INST] <<SYS>>", Llama2, nil},                  // Llama 2
		{"[INST] [/INST]", Mistral, func(v variant) bool { return v.mistral == mistralV0 && v.noSystem }},
		{"{{ ' [INST] ' + system_message }}", Mistral, func(v variant) bool { return v.mistral == mistralV1 }},
		{`[AVAILABLE_TOOLS] {{ "[INST] " }}`, Mistral, func(v variant) bool { return v.mistral == mistralV3 }},
		{`[AVAILABLE_TOOLS] {{ "[INST]" }}`, Mistral, func(v variant) bool { return v.mistral == mistralV3Tekken }},
		{`[SYSTEM_PROMPT] {{ '[INST] ' }}`, Mistral, func(v variant) bool { return v.mistral == mistralV7 }},
		{`{{ '[SYSTEM_PROMPT]' }}{{ '[INST]' }}`, Mistral, func(v variant) bool { return v.mistral == mistralV7Tekken }},
		{"mistral", Mistral, nil},
		{"<|user|><|end|><|assistant|>", Phi3, nil},
		{"<start_of_turn>", Gemma, func(v variant) bool { return v.noSystem && !v.gemmaFoldSystem }},
		{"<start_of_turn> first_user_prefix", Gemma, func(v variant) bool { return !v.noSystem && v.gemmaFoldSystem }},
		{"<|start_header_id|><|end_header_id|>", Llama3, func(v variant) bool { return !v.llama3Dated }},
		{"<|start_header_id|><|end_header_id|>Cutting Knowledge Date", Llama3, func(v variant) bool { return v.llama3Dated }},
		{"<|START_OF_TURN_TOKEN|><|USER_TOKEN|><|start_header_id|><|end_header_id|>", Unknown, nil}, // Command-R before Llama 3
		{"<|user|><|endoftext|><start_of_turn>", Unknown, nil},                                      // Zephyr before Gemma
		{"### Human:", Unknown, nil},
	}
	for _, tt := range tests {
		f, v := detect(tt.src)
		if f != tt.family || (tt.check != nil && !tt.check(v)) {
			t.Errorf("detect(%q) = %s %+v, want %s", tt.src, f, v, tt.family)
		}
	}
}

func TestTrimForTokenizer(t *testing.T) {
	tpl := mustNew(t, "llama3", "<|begin_of_text|>", "<|eot_id|>")
	prompt, err := tpl.Render([]Message{{Role: "user", Content: "Hi"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if !tpl.EmitsBOS() || !strings.HasPrefix(prompt, "<|begin_of_text|>") || !strings.HasSuffix(prompt, "<|eot_id|>") {
		t.Fatalf("EmitsBOS=%v prompt %q", tpl.EmitsBOS(), prompt)
	}
	body := "<|start_header_id|>user<|end_header_id|>\n\nHi"
	tests := []struct {
		addBOS, addEOS bool
		want           string
	}{
		{false, false, "<|begin_of_text|>" + body + "<|eot_id|>"},
		{true, false, body + "<|eot_id|>"},
		{false, true, "<|begin_of_text|>" + body},
		{true, true, body},
	}
	for _, tt := range tests {
		if got := tpl.TrimForTokenizer(prompt, tt.addBOS, tt.addEOS); got != tt.want {
			t.Errorf("TrimForTokenizer(addBOS=%v, addEOS=%v) = %q, want %q", tt.addBOS, tt.addEOS, got, tt.want)
		}
	}
	// No BOS text: nothing to trim.
	if got := Default().TrimForTokenizer("<s>x", true, true); got != "<s>x" {
		t.Errorf("ChatML default trimmed %q", got)
	}
}

func TestStopStrings(t *testing.T) {
	want := map[string][]string{
		"chatml": {"<|im_end|>"}, "llama3": {"<|eot_id|>", "<|eom_id|>"}, "llama2": {"</s>"},
		"mistral-v7": {"</s>"}, "gemma": {"<end_of_turn>"}, "phi3": {"<|end|>"},
	}
	for name, w := range want {
		got := mustNew(t, name, "", "").StopStrings()
		if fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("%s: StopStrings() = %q, want %q", name, got, w)
		}
		got[0] = "changed"
		if mustNew(t, name, "", "").StopStrings()[0] == "changed" {
			t.Errorf("%s: StopStrings shares its slice", name)
		}
	}
}

func TestFamilyString(t *testing.T) {
	if Llama3.String() != "llama3" || Unknown.String() != "unknown" || Family(99).String() != "Family(99)" {
		t.Error("Family.String")
	}
}

// TestClock: the date in Llama 3.1's system header and strftime_now come
// from the clock option, as llama-server's date_string does from its clock.
func TestClock(t *testing.T) {
	c := loadCases(t)
	day := time.Date(2024, 2, 29, 23, 59, 0, 0, time.UTC)
	for _, tt := range c.Templates {
		if tt.Family != "llama3" {
			continue
		}
		tpl, err := New(readFile(t, "testdata/"+tt.File), tt.BOS, tt.EOS, WithClock(func() time.Time { return day }))
		if err != nil {
			t.Fatal(err)
		}
		got, err := tpl.Render([]Message{{Role: "user", Content: "Hi"}}, true)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(got, "Today Date: 29 Feb 2024\n") {
			t.Errorf("%s: no date in %q", tt.stem(), got)
		}
	}
}

func TestDeveloperRole(t *testing.T) {
	got, err := Default().Render([]Message{{Role: "developer", Content: "D"}, {Role: "user", Content: "U"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := "<|im_start|>system\nD<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	// gpt-oss-style templates (with <|channel|>) see the developer role as is.
	src := "{# <|channel|> #}{% for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endfor %}"
	got, err = mustNew(t, src, "", "").Render([]Message{{Role: "developer", Content: "D"}, {Role: "user", Content: "U"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := "<|start|>developer<|message|>D<|end|><|start|>user<|message|>U<|end|>"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestConcurrentRender(t *testing.T) {
	c := loadCases(t)
	tt := c.Templates[0]
	for _, x := range c.Templates {
		if x.stem() == "meta-llama-Llama-3.1-8B-Instruct" {
			tt = x
		}
	}
	tpl := newFromFile(t, c, tt)
	want, _ := expected(t, tt, "chat")
	conv := c.Conversations["chat"]
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for range 20 {
				got, err := tpl.Render(conv.Messages, conv.AddGenerationPrompt)
				if err != nil || got != want {
					errs <- fmt.Errorf("got %q, %v", got, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
