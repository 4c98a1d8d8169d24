package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// TestResponsesFail: a stream that cannot complete ends with OpenAI's
// error event (type, code, message, param) then response.failed carrying
// the error and the output so far; before any output, response.created
// comes first, as the SDK expects.
func TestResponsesFail(t *testing.T) {
	for _, started := range []bool{true, false} {
		j := newJob(context.Background(), "resp_x", "m", "/v1/responses", []int32{1})
		var buf bytes.Buffer
		w := bufio.NewWriter(&buf)
		enc := &respEncoder{msg: -1, echo: respEcho{Metadata: json.RawMessage("{}")}}
		if started {
			enc.begin(w, j, j.usage)
			enc.delta(w, j, "Once")
		}
		enc.fail(w, j, errEngineDown)
		w.Flush()
		var types []string
		var last map[string]any
		for i, block := range strings.Split(strings.TrimSpace(buf.String()), "\n\n") {
			name, data, ok := strings.Cut(block, "\ndata: ")
			var m map[string]any
			if !ok || json.Unmarshal([]byte(data), &m) != nil || "event: "+m["type"].(string) != name || m["sequence_number"] != float64(i) {
				t.Fatalf("event %d: %q", i, block)
			}
			types = append(types, m["type"].(string))
			if m["type"] == "error" && (m["code"] != "server_error" || m["message"] != errEngineDown.message) {
				t.Errorf("error event %v", m)
			}
			last = m
		}
		want := "response.created response.in_progress response.output_item.added response.content_part.added response.output_text.delta error response.failed"
		if !started {
			want = "response.created response.in_progress error response.failed"
		}
		if got := strings.Join(types, " "); got != want {
			t.Errorf("started %v: events %s, want %s", started, got, want)
		}
		r := last["response"].(map[string]any)
		out := r["output"].([]any)
		if r["status"] != "failed" || r["error"].(map[string]any)["message"] != errEngineDown.message || len(out) != map[bool]int{true: 1, false: 0}[started] {
			t.Errorf("response.failed: %v", r)
		}
	}
}
