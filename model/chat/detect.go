// This file recognises a template's family from distinctive markers in its
// source, in the order llama.cpp's llm_chat_detect_template checks them, and
// picks the variant parameters of the built-in renderer. Families llama.cpp
// knows but we have no renderer for come out as Unknown (they still render
// through Jinja).

package chat

import (
	"regexp"
	"strings"
)

// leadingBOS matches a template whose output starts with the BOS text.
var leadingBOS = regexp.MustCompile(`^\s*\{\{-?\s*bos_token\s*-?\}\}`)

// variant holds what the built-in renderer of a family needs to reproduce a
// particular template of that family.
type variant struct {
	// noSystem: the format has no system role; a leading system message is
	// merged into the next one ("system\nuser"), as llama-server does.
	noSystem bool
	// leadingBOS: the template starts with {{ bos_token }} (ChatML only;
	// the other families' formats fix where BOS goes).
	leadingBOS bool
	// chatMLDefaultSystem is inserted when the conversation has no system
	// message (Qwen2.5's "You are Qwen, created by Alibaba Cloud...").
	chatMLDefaultSystem string
	// llama3Dated: Llama 3.1+ always opens with a system block carrying the
	// knowledge cutoff and today's date.
	llama3Dated bool
	// mistral is the [INST] dialect of a Mistral template.
	mistral mistralStyle
	// gemmaFoldSystem: Gemma 3 puts "system\n\n" before the first turn itself.
	gemmaFoldSystem bool
}

// mistralStyle names Mistral's prompt dialects (mistralai/cookbook's
// "templates" document and llama.cpp's LLM_CHAT_TEMPLATE_MISTRAL_*).
type mistralStyle int

const (
	mistralV0       mistralStyle = iota // "[INST] u [/INST]a</s>", no system role (7B v0.1/v0.2, Mixtral)
	mistralV1                           // " [INST] s\n\nu [/INST] a</s>", system in the first turn
	mistralV3                           // "[INST] s\n\nu[/INST] a</s>", system in the last turn
	mistralV3Tekken                     // "[INST]s\n\nu[/INST]a</s>", system in the last turn (Nemo)
	mistralV7                           // "[SYSTEM_PROMPT] s[/SYSTEM_PROMPT][INST] u[/INST] a</s>"
	mistralV7Tekken                     // "[SYSTEM_PROMPT]s[/SYSTEM_PROMPT][INST]u[/INST]a</s>" (Small 3.x)
)

// qwenDefaultSystem is Qwen2.5's system prompt for conversations without one.
const qwenDefaultSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

// detect returns the family of a Jinja template source and its variant.
func detect(src string) (Family, variant) {
	has := func(s string) bool { return strings.Contains(src, s) }
	switch {
	case has("<|im_start|>"):
		if has("<|im_sep|>") || has("<end_of_utterance>") {
			return Unknown, variant{} // Phi-4, SmolVLM: not plain ChatML
		}
		v := variant{leadingBOS: leadingBOS.MatchString(src)}
		if has(qwenDefaultSystem) {
			v.chatMLDefaultSystem = qwenDefaultSystem
		}
		return ChatML, v
	case strings.HasPrefix(src, "mistral") || has("[INST]"):
		if has("<<SYS>>") {
			return Llama2, variant{}
		}
		return Mistral, mistralVariant(src)
	case has("<|assistant|>") && has("<|end|>"):
		return Phi3, variant{}
	// Families llama.cpp checks before Gemma and Llama 3, whose markers could
	// overlap with theirs.
	case has("[gMASK]<sop>"),
		has("<|assistant|>") && has("<|user|>"),
		has("<|{{ item['role'] }}|>") && has("<|begin_of_image|>"),
		has("<|user|>") && has("<|endoftext|>"),
		has("bos_token + message['role']"):
		return Unknown, variant{}
	case has("<start_of_turn>"):
		return Gemma, variant{noSystem: !has("first_user_prefix"), gemmaFoldSystem: has("first_user_prefix")}
	case has("'\\n\\nAssistant: ' + eos_token"),
		has("GPT4 Correct "),
		has("USER: ") && has("ASSISTANT: "),
		has("### Instruction:") && has("<|EOT|>"),
		has("<|START_OF_TURN_TOKEN|>") && has("<|USER_TOKEN|>"):
		return Unknown, variant{}
	case has("<|start_header_id|>") && has("<|end_header_id|>"):
		return Llama3, variant{llama3Dated: has("Cutting Knowledge Date")}
	}
	return Unknown, variant{}
}

// mistralVariant picks the dialect of an [INST] template without <<SYS>>.
func mistralVariant(src string) variant {
	has := func(s string) bool { return strings.Contains(src, s) }
	// A template writes "[INST]" with no space after it in the tekken dialects.
	tight := has(`"[INST]"`) || has(`'[INST]'`)
	switch {
	case has("[SYSTEM_PROMPT]"):
		if tight || has(`'[SYSTEM_PROMPT]'`) || has(`"[SYSTEM_PROMPT]"`) {
			return variant{mistral: mistralV7Tekken}
		}
		return variant{mistral: mistralV7}
	case has("' [INST] ' + system_message") || has(`" [INST] " + system_message`):
		return variant{mistral: mistralV1}
	case has("[AVAILABLE_TOOLS]"):
		if tight {
			return variant{mistral: mistralV3Tekken}
		}
		return variant{mistral: mistralV3}
	}
	return variant{mistral: mistralV0, noSystem: true}
}

// builtinByName resolves the names New accepts instead of a template.
func builtinByName(name string) (Family, variant, bool) {
	switch name {
	case "chatml":
		return ChatML, variant{}, true
	case "llama3":
		return Llama3, variant{}, true
	case "llama2":
		return Llama2, variant{}, true
	case "mistral-v1":
		return Mistral, variant{mistral: mistralV1}, true
	case "mistral-v3":
		return Mistral, variant{mistral: mistralV3}, true
	case "mistral-v3-tekken":
		return Mistral, variant{mistral: mistralV3Tekken}, true
	case "mistral-v7":
		return Mistral, variant{mistral: mistralV7}, true
	case "mistral-v7-tekken":
		return Mistral, variant{mistral: mistralV7Tekken}, true
	case "gemma":
		return Gemma, variant{noSystem: true}, true
	case "phi3":
		return Phi3, variant{}, true
	}
	return Unknown, variant{}, false
}
