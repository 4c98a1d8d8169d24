// This file is the built-in renderer used when Jinja cannot render a
// template of a known family. Each family reproduces its reference template
// (the model authors' own, as rendered by transformers) for plain text
// conversations: Qwen2.5/Qwen3 for ChatML, Llama 3.0 and 3.1/3.2/3.3,
// Llama-2-chat, Mistral v0.2/v1/v3/Nemo/Large-2411/Small-3.x, Gemma 2/3 and
// Phi-3.5-mini. It does not reproduce tool calls, reasoning-history
// stripping, default system prompts other than Qwen2.5's, or the role
// alternation checks some templates raise on.

package chat

import (
	"fmt"
	"strings"
)

// renderBuiltin renders msgs with the family's built-in format.
func (t *Template) renderBuiltin(msgs []Message, addGen bool) (string, error) {
	if t.variant.noSystem {
		msgs = mergeSystem(msgs)
	}
	var b strings.Builder
	switch t.family {
	case ChatML:
		t.chatML(&b, msgs, addGen)
	case Llama3:
		t.llama3(&b, msgs, addGen)
	case Llama2:
		t.llama2(&b, msgs)
	case Mistral:
		t.mistral(&b, msgs)
	case Gemma:
		t.gemma(&b, msgs, addGen)
	case Phi3:
		t.phi3(&b, msgs, addGen)
	default:
		return "", fmt.Errorf("%w: no built-in renderer for family %s", ErrUnsupported, t.family)
	}
	return b.String(), nil
}

// splitSystem separates a leading system message from the rest.
func splitSystem(msgs []Message) (system string, hasSystem bool, rest []Message) {
	if len(msgs) > 0 && msgs[0].Role == "system" {
		return msgs[0].Content, true, msgs[1:]
	}
	return "", false, msgs
}

func trimSpace(s string) string { return pyStrip(s, nil, true, true) }

// chatML: <|im_start|>role\ncontent<|im_end|>\n per message.
func (t *Template) chatML(b *strings.Builder, msgs []Message, addGen bool) {
	if t.variant.leadingBOS {
		b.WriteString(t.bos)
	}
	if t.variant.chatMLDefaultSystem != "" && (len(msgs) == 0 || msgs[0].Role != "system") {
		b.WriteString("<|im_start|>system\n" + t.variant.chatMLDefaultSystem + "<|im_end|>\n")
	}
	for _, m := range msgs {
		b.WriteString("<|im_start|>" + m.Role + "\n" + m.Content + "<|im_end|>\n")
	}
	if addGen {
		b.WriteString("<|im_start|>assistant\n")
	}
}

// llama3: BOS, then a header per message with trimmed content; Llama 3.1+
// always starts with a dated system block.
func (t *Template) llama3(b *strings.Builder, msgs []Message, addGen bool) {
	b.WriteString(t.bos)
	if t.variant.llama3Dated {
		system, _, rest := splitSystem(msgs)
		msgs = rest
		b.WriteString("<|start_header_id|>system<|end_header_id|>\n\n")
		b.WriteString("Cutting Knowledge Date: December 2023\n")
		b.WriteString("Today Date: " + strftime("%d %b %Y", t.now()) + "\n\n")
		b.WriteString(trimSpace(system) + "<|eot_id|>")
	}
	for _, m := range msgs {
		if t.variant.llama3Dated && (m.Role == "tool" || m.Role == "ipython") {
			// A string is iterable in Jinja, so 3.1's template tojson's it.
			content, _ := toJSON(m.Content, jsonOptions{itemSep: ", ", keySep: ": "})
			b.WriteString("<|start_header_id|>ipython<|end_header_id|>\n\n" + content + "<|eot_id|>")
			continue
		}
		b.WriteString("<|start_header_id|>" + m.Role + "<|end_header_id|>\n\n" + trimSpace(m.Content) + "<|eot_id|>")
	}
	if addGen {
		b.WriteString("<|start_header_id|>assistant<|end_header_id|>\n\n")
	}
}

// llama2: Llama-2-chat. BOS before each user turn, the system message in a
// <<SYS>> block inside the first one; contents stripped.
func (t *Template) llama2(b *strings.Builder, msgs []Message) {
	system, hasSystem, rest := splitSystem(msgs)
	for i, m := range rest {
		content := m.Content
		if i == 0 && hasSystem {
			content = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content
		}
		switch m.Role {
		case "user":
			b.WriteString(t.bos + "[INST] " + trimSpace(content) + " [/INST]")
		case "assistant":
			b.WriteString(" " + trimSpace(content) + " " + t.eos)
		}
	}
}

// mistral renders the [INST] dialects.
func (t *Template) mistral(b *strings.Builder, msgs []Message) {
	b.WriteString(t.bos)
	style := t.variant.mistral
	if style == mistralV7 || style == mistralV7Tekken {
		sp := " "
		if style == mistralV7Tekken {
			sp = ""
		}
		for _, m := range msgs {
			switch m.Role {
			case "system":
				b.WriteString("[SYSTEM_PROMPT]" + sp + m.Content + "[/SYSTEM_PROMPT]")
			case "user":
				b.WriteString("[INST]" + sp + m.Content + "[/INST]")
			case "assistant":
				b.WriteString(sp + m.Content + t.eos)
			}
		}
		return
	}
	system, hasSystem, rest := splitSystem(msgs)
	if style == mistralV0 {
		rest, hasSystem = msgs, false // the system message was merged
	}
	for i, m := range rest {
		switch m.Role {
		case "user":
			content := m.Content
			if hasSystem && ((style == mistralV1 && i == 0) || (style != mistralV1 && i == len(rest)-1)) {
				content = system + "\n\n" + content
			}
			switch style {
			case mistralV0:
				b.WriteString("[INST] " + content + " [/INST]")
			case mistralV1:
				b.WriteString(" [INST] " + content + " [/INST]")
			case mistralV3:
				b.WriteString("[INST] " + content + "[/INST]")
			case mistralV3Tekken:
				b.WriteString("[INST]" + content + "[/INST]")
			}
		case "assistant":
			switch style {
			case mistralV0, mistralV3Tekken:
				b.WriteString(m.Content + t.eos)
			case mistralV1:
				b.WriteString(" " + m.Content + t.eos)
			case mistralV3:
				b.WriteString(" " + trimSpace(m.Content) + t.eos)
			}
		}
	}
}

// gemma: BOS, <start_of_turn>user|model\n trimmed content <end_of_turn>\n.
func (t *Template) gemma(b *strings.Builder, msgs []Message, addGen bool) {
	b.WriteString(t.bos)
	prefix := ""
	if t.variant.gemmaFoldSystem {
		system, hasSystem, rest := splitSystem(msgs)
		if hasSystem {
			prefix = system + "\n\n"
		}
		msgs = rest
	}
	for i, m := range msgs {
		role := m.Role
		if role == "assistant" {
			role = "model"
		}
		b.WriteString("<start_of_turn>" + role + "\n")
		if i == 0 {
			b.WriteString(prefix)
		}
		b.WriteString(trimSpace(m.Content) + "<end_of_turn>\n")
	}
	if addGen {
		b.WriteString("<start_of_turn>model\n")
	}
}

// phi3: Phi-3.5-mini. <|role|>\ncontent<|end|>\n; an empty system message is
// dropped; without a generation prompt the EOS text closes the prompt.
func (t *Template) phi3(b *strings.Builder, msgs []Message, addGen bool) {
	for _, m := range msgs {
		switch m.Role {
		case "system":
			if m.Content != "" {
				b.WriteString("<|system|>\n" + m.Content + "<|end|>\n")
			}
		case "user", "assistant":
			b.WriteString("<|" + m.Role + "|>\n" + m.Content + "<|end|>\n")
		}
	}
	if addGen {
		b.WriteString("<|assistant|>\n")
	} else {
		b.WriteString(t.eos)
	}
}
