// This file holds the one internal request type every API is translated
// into (genRequest), the sampling fields the APIs share, and the helpers
// that decode JSON strings-or-arrays.

package serve

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/flowinfer/flowinfer/model/chat"
	"github.com/flowinfer/flowinfer/stages/sample"
)

// genRequest is a generation request after translation from its API: a
// conversation (rendered with the chat template) or a raw prompt, sampling
// settings and limits. Nothing API-specific survives past it except the
// fields the encoders need to echo back.
type genRequest struct {
	model     string         // as the client named it (echoed back)
	messages  []chat.Message // chat: rendered through the template
	prompt    string         // raw prompt (completions, Ollama raw)
	tokens    []int32        // raw prompt given as token ids
	chat      bool           // messages, not prompt
	params    sample.Params  // defaults with the request's fields applied
	maxTokens int            // <= 0: until end of generation or full context
	stops     []string       // the request's own stop strings
	stream    bool
	usage     bool // OpenAI stream_options.include_usage
	ignoreEOS bool // generate past end-of-generation tokens (benchmarks)
	// logprobs: report each token's log probability and the topLogprobs
	// most likely tokens of its step (OpenAI)
	logprobs    bool
	topLogprobs int
	// n: choices (OpenAI); each is its own sequence, all but the first
	// submitted once the first's prompt is cached (generateN)
	n int
	// tools: the functions the model may call (nil: none offered, the
	// reply is all content); tools.go.
	tools *toolSettings
	// think: what the request asks of reasoning (reasoning.go);
	// inReasoning: the rendered prompt leaves the model inside its
	// reasoning (the template opened it).
	think       thinkSettings
	inReasoning bool
	// ckptAt: where the chat prompt's messages start (msgstarts.go), for
	// a hybrid model's state checkpoints
	ckptAt []int
}

// toolList is the tools to render with the conversation.
func (gr *genRequest) toolList() []chat.Tool {
	if gr.tools == nil {
		return nil
	}
	return gr.tools.tools
}

// samplingFields are the sampling settings the APIs share; nil keeps the
// server's default.
type samplingFields struct {
	Temperature      *float32           `json:"temperature"`
	TopP             *float32           `json:"top_p"`
	TopK             *int               `json:"top_k"`
	MinP             *float32           `json:"min_p"`
	Seed             *int64             `json:"seed"`
	PresencePenalty  *float32           `json:"presence_penalty"`
	FrequencyPenalty *float32           `json:"frequency_penalty"`
	RepeatPenalty    *float32           `json:"repeat_penalty"`
	RepeatLastN      *int               `json:"repeat_last_n"`
	LogitBias        map[string]float64 `json:"logit_bias"`
}

// apply returns def with the fields that are set, validated.
func (f *samplingFields) apply(def sample.Params, nVocab int) (sample.Params, *apiError) {
	p := def
	if f.Temperature != nil {
		if t := *f.Temperature; !(t >= 0) || math.IsInf(float64(t), 0) {
			return p, badRequest("temperature", "temperature: %v is out of range (0 or more: 0 is greedy)", t)
		}
		p.Temperature = *f.Temperature
	}
	if f.TopK != nil && *f.TopK < 0 {
		return p, badRequest("top_k", "top_k: %d is out of range (0 or more: 0 is off)", *f.TopK)
	}
	if f.TopP != nil {
		p.TopP = *f.TopP
	}
	if f.TopK != nil {
		p.TopK = *f.TopK
	}
	if f.MinP != nil {
		p.MinP = *f.MinP
	}
	if f.Seed != nil {
		if *f.Seed < 0 {
			p.Seed = sample.RandomSeed
		} else {
			p.Seed = uint64(*f.Seed)
		}
	}
	if f.PresencePenalty != nil {
		p.PresencePenalty = *f.PresencePenalty
	}
	if f.FrequencyPenalty != nil {
		p.FrequencyPenalty = *f.FrequencyPenalty
	}
	if f.RepeatPenalty != nil {
		p.RepeatPenalty = *f.RepeatPenalty
	}
	if f.RepeatLastN != nil {
		p.RepeatLastN = *f.RepeatLastN
	}
	if (p.PresencePenalty != 0 || p.FrequencyPenalty != 0) && p.RepeatLastN == 0 {
		p.RepeatLastN = 64 // penalties need a window
	}
	if len(f.LogitBias) > 0 {
		p.LogitBias = make(map[int32]float32, len(f.LogitBias)+len(def.LogitBias))
		for k, v := range def.LogitBias {
			p.LogitBias[k] = v
		}
		for k, v := range f.LogitBias {
			id, err := strconv.ParseInt(k, 10, 32)
			if err != nil || id < 0 || int(id) >= nVocab {
				return p, badRequest("logit_bias", "logit_bias: %q is not a token id in [0, %d)", k, nVocab)
			}
			if math.IsNaN(v) {
				return p, badRequest("logit_bias", "logit_bias: bias of %s is NaN", k)
			}
			p.LogitBias[int32(id)] = float32(max(min(v, math.MaxFloat32), -math.MaxFloat32))
			if v <= -100 { // OpenAI: -100 bans the token
				p.LogitBias[int32(id)] = float32(math.Inf(-1))
			}
		}
	}
	if p.Temperature < 0 {
		p.Temperature = 0 // llama.cpp: negative is greedy
	}
	if err := p.Validate(); err != nil {
		return p, badRequest("", "%s", strings.TrimPrefix(err.Error(), "sample: "))
	}
	return p, nil
}

// isNull reports whether raw is absent or JSON null.
func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// stringOrList decodes a JSON string or array of strings (OpenAI "stop").
func stringOrList(raw json.RawMessage, field string) ([]string, *apiError) {
	if isNull(raw) {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, badRequest(field, "field %q: expected a string or an array of strings", field)
	}
	return list, nil
}

// contentPart is one element of an array content: OpenAI
// {"type":"text","text":...} or Anthropic's text block.
type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// textContent decodes a message content that is a string, null, or an
// array of text parts (joined as llama-server joins them, with newlines).
func textContent(raw json.RawMessage, field string) (string, *apiError) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest(field, "field %q: expected a string or an array of content parts", field)
	}
	return joinParts(parts, field, "text")
}

// joinParts joins the text of content parts with newlines (as llama-server
// joins them); a part of a type not in types is a 400 naming it.
func joinParts(parts []contentPart, field string, types ...string) (string, *apiError) {
	var b strings.Builder
	for i, p := range parts {
		switch {
		case p.Type == "":
			return "", badRequest(field, "%s[%d]: content part without a type", field, i)
		case !slices.Contains(types, p.Type):
			return "", badRequest(field, "%s[%d]: content part type %q is not supported (supported: %s)", field, i, p.Type, strings.Join(types, ", "))
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// checkRole validates a chat role.
func checkRole(role, field string, allowed ...string) *apiError {
	for _, a := range allowed {
		if role == a {
			return nil
		}
	}
	if role == "" {
		return badRequest(field, "%s: missing role", field)
	}
	return badRequest(field, "%s: role %q is not one of %s", field, role, strings.Join(allowed, ", "))
}

// itoa formats i, for the paths of fields ("messages[" + itoa(i) + "]").
func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

// maxTokens resolves a max-tokens field: nil keeps def; -1 is unlimited;
// 0 and other negatives are rejected.
func maxTokens(v *int, def int, field string) (int, *apiError) {
	switch {
	case v == nil:
		return def, nil
	case *v == -1:
		return 0, nil
	case *v < 1:
		return 0, badRequest(field, "%s must be at least 1 (or -1 for no limit), got %d", field, *v)
	}
	return *v, nil
}
