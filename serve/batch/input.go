// This file reads batch input lines: the OpenAI batch format
//
//	{"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions", "body": {...}}
//
// and a simple form, turned into the same request,
//
//	{"id": "r1", "messages": [...], "temperature": 0.2, ...}   -> /v1/chat/completions
//	{"id": "r2", "prompt": "Once upon a time", "max_tokens": 32} -> /v1/completions
//
// A line that is neither becomes an item carrying its error, which the
// runner writes as an error record.

package batch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// URLs returns the endpoints a batch line may name.
func URLs() []string { return []string{"/v1/chat/completions", "/v1/completions", "/v1/messages"} }

// item is one input line ready to run (or to be reported as malformed).
type item struct {
	line     int     // 1-based line number in the input
	customID *string // nil when the line has none (or is not JSON)
	url      string
	body     []byte
	err      string // non-empty: malformed, not run
}

// id is the record id of a line: stable across runs and shards, so a
// resumed run can recognize lines without a custom_id.
func (it *item) id() string { return "batch_req_" + strconv.Itoa(it.line) }

// maxLine bounds one input line (a request with a long prompt).
const maxLine = 64 << 20

// parseLine turns one input line into an item.
func parseLine(line int, raw []byte) item {
	it := item{line: line}
	raw = bytes.TrimSpace(raw)
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		it.err = "line " + strconv.Itoa(line) + ": not a JSON object: " + jsonErr(err)
		return it
	}
	if _, ok := obj["body"]; ok || obj["url"] != nil || obj["custom_id"] != nil || obj["method"] != nil {
		parseOpenAI(&it, obj)
	} else {
		parseSimple(&it, obj)
	}
	return it
}

func parseOpenAI(it *item, obj map[string]json.RawMessage) {
	bad := func(format string, args ...any) {
		it.err = fmt.Sprintf("line %d: ", it.line) + fmt.Sprintf(format, args...)
	}
	if id, ok := stringField(obj, "custom_id"); ok && id != "" {
		it.customID = &id
	} else {
		bad("custom_id must be a non-empty string")
		return
	}
	for k := range obj {
		if !slices.Contains([]string{"custom_id", "method", "url", "body"}, k) {
			bad("unknown field %q (want custom_id, method, url, body)", k)
			return
		}
	}
	if m, ok := stringField(obj, "method"); !ok || m != "POST" {
		bad(`method must be "POST"`)
		return
	}
	url, _ := stringField(obj, "url")
	if !slices.Contains(URLs(), url) {
		bad("url %q is not one of %v", url, URLs())
		return
	}
	it.url = url
	body, err := requestBody(obj["body"], nil)
	if err != "" {
		bad("body: %s", err)
		return
	}
	it.body = body
}

func parseSimple(it *item, obj map[string]json.RawMessage) {
	bad := func(format string, args ...any) {
		it.err = fmt.Sprintf("line %d: ", it.line) + fmt.Sprintf(format, args...)
	}
	raw, ok := obj["id"]
	if !ok {
		bad(`want an OpenAI batch line {"custom_id", "method", "url", "body"} or {"id", "messages" or "prompt", ...}`)
		return
	}
	var id string
	if err := json.Unmarshal(raw, &id); err != nil {
		var n json.Number
		if json.Unmarshal(raw, &n) != nil {
			bad("id must be a string or a number")
			return
		}
		id = n.String()
	}
	if id == "" {
		bad("id must not be empty")
		return
	}
	it.customID = &id
	_, hasMsgs := obj["messages"]
	_, hasPrompt := obj["prompt"]
	switch {
	case hasMsgs && hasPrompt:
		bad(`give "messages" or "prompt", not both`)
		return
	case hasMsgs:
		it.url = "/v1/chat/completions"
	case hasPrompt:
		it.url = "/v1/completions"
	default:
		bad(`want "messages" (chat) or "prompt" (completion)`)
		return
	}
	body, err := requestBody(nil, obj)
	if err != "" {
		bad("%s", err)
		return
	}
	it.body = body
}

// requestBody returns the request body to send: raw (an OpenAI line's
// body) or fields (a simple line without its id), without the streaming
// fields: a batch answer is always one JSON response.
func requestBody(raw json.RawMessage, fields map[string]json.RawMessage) ([]byte, string) {
	if fields == nil {
		if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
			return nil, "must be a JSON object"
		}
		_, s1 := fields["stream"]
		_, s2 := fields["stream_options"]
		if !s1 && !s2 {
			return raw, "" // sent exactly as written
		}
	}
	delete(fields, "id")
	delete(fields, "stream")
	delete(fields, "stream_options")
	b, err := json.Marshal(fields)
	if err != nil {
		return nil, err.Error()
	}
	return b, ""
}

func stringField(obj map[string]json.RawMessage, k string) (string, bool) {
	raw, ok := obj[k]
	if !ok {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// jsonErr shortens a JSON syntax error.
func jsonErr(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%v (at byte %d)", se, se.Offset)
	}
	return err.Error()
}
