package serve_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/serve"
	"github.com/flowinfer/flowinfer/stages"
)

// The disconnect matrix: every generating API, streamed and not, in every
// mode that takes a different path through the server (plain text, tool
// calls held back by the parser, a grammar, n choices, logprobs), started
// over a real TCP connection and left by its client mid-generation. Each
// request is built never to end by itself: end-of-generation tokens and
// every token with a "]" are banned (so a JSON array, and the grammars
// below built around one, never closes) and there is no token limit. Once
// the client has gone, the engine must be back at its baseline (no running
// sequence, no queued request, no used KV block) within a second, and the
// request must not have finished by itself.

// arraySchema is an object whose one property is an array of integers:
// with "]" banned it never closes.
const arraySchema = `{"type":"object","properties":{"xs":{"type":"array","items":{"type":"integer"}}},"required":["xs"]}`

// disconnectCase is one row of the matrix; body gets the request's
// "stream" value and the logit_bias that keeps it going.
type disconnectCase struct {
	api, mode, path string
	body            func(stream bool, bias string) string
}

func disconnectCases() []disconnectCase {
	msgs := `"messages":[{"role":"user","content":"Tell me a long story."}]`
	oaiTool := `{"type":"function","function":{"name":"record","parameters":` + arraySchema + `}}`
	respTool := `{"type":"function","name":"record","parameters":` + arraySchema + `}`
	antTool := `{"name":"record","input_schema":` + arraySchema + `}`
	chat := func(extra string) func(bool, string) string {
		return func(stream bool, bias string) string {
			return fmt.Sprintf(`{%s,"max_tokens":-1,"stream":%v,"logit_bias":%s%s}`, msgs, stream, bias, extra)
		}
	}
	completion := func(extra string) func(bool, string) string {
		return func(stream bool, bias string) string {
			return fmt.Sprintf(`{"prompt":"Once upon a time","max_tokens":-1,"stream":%v,"logit_bias":%s%s}`, stream, bias, extra)
		}
	}
	responses := func(extra string) func(bool, string) string {
		return func(stream bool, bias string) string {
			return fmt.Sprintf(`{"input":"Tell me a long story.","max_output_tokens":-1,"stream":%v,"logit_bias":%s%s}`, stream, bias, extra)
		}
	}
	anthropic := func(extra string) func(bool, string) string {
		return func(stream bool, bias string) string {
			return fmt.Sprintf(`{"model":"stories260K",%s,"max_tokens":100000,"stream":%v,"logit_bias":%s%s}`, msgs, stream, bias, extra)
		}
	}
	ollamaChat := func(extra string) func(bool, string) string {
		return func(stream bool, bias string) string {
			return fmt.Sprintf(`{"model":"stories260K",%s,"stream":%v,"options":{"num_predict":-1,"logit_bias":%s}%s}`, msgs, stream, bias, extra)
		}
	}
	ollamaGenerate := func(extra string) func(bool, string) string {
		return func(stream bool, bias string) string {
			return fmt.Sprintf(`{"model":"stories260K","prompt":"Once upon a time","stream":%v,"options":{"num_predict":-1,"logit_bias":%s}%s}`, stream, bias, extra)
		}
	}
	const words = `,"grammar":"root ::= [a-z ]+"`
	return []disconnectCase{
		{"openai chat", "plain", "/v1/chat/completions", chat("")},
		{"openai chat", "tools", "/v1/chat/completions", chat(`,"tools":[` + oaiTool + `],"tool_choice":"required"`)},
		{"openai chat", "json_schema", "/v1/chat/completions", chat(`,"response_format":{"type":"json_schema","json_schema":{"name":"xs","schema":` + arraySchema + `}}`)},
		{"openai chat", "grammar", "/v1/chat/completions", chat(words)},
		{"openai chat", "n=2", "/v1/chat/completions", chat(`,"n":2`)},
		{"openai chat", "logprobs", "/v1/chat/completions", chat(`,"logprobs":true,"top_logprobs":2`)},
		{"openai completions", "plain", "/v1/completions", completion("")},
		{"openai completions", "json_schema", "/v1/completions", completion(`,"response_format":{"type":"json_schema","json_schema":{"name":"xs","schema":` + arraySchema + `}}`)},
		{"openai completions", "grammar", "/v1/completions", completion(words)},
		{"openai completions", "n=2", "/v1/completions", completion(`,"n":2`)},
		{"openai completions", "logprobs", "/v1/completions", completion(`,"logprobs":2`)},
		{"responses", "plain", "/v1/responses", responses("")},
		{"responses", "tools", "/v1/responses", responses(`,"tools":[` + respTool + `],"tool_choice":"required"`)},
		{"responses", "json_schema", "/v1/responses", responses(`,"text":{"format":{"type":"json_schema","name":"xs","schema":` + arraySchema + `}}`)},
		{"anthropic", "plain", "/v1/messages", anthropic("")},
		{"anthropic", "tools", "/v1/messages", anthropic(`,"tools":[` + antTool + `],"tool_choice":{"type":"any"}`)},
		{"ollama chat", "plain", "/api/chat", ollamaChat("")},
		// Ollama has no tool_choice: the tools are offered, the parser
		// watches the reply
		{"ollama chat", "tools", "/api/chat", ollamaChat(`,"tools":[` + oaiTool + `]`)},
		{"ollama chat", "format", "/api/chat", ollamaChat(`,"format":` + arraySchema)},
		{"ollama generate", "plain", "/api/generate", ollamaGenerate("")},
		{"ollama generate", "format", "/api/generate", ollamaGenerate(`,"format":` + arraySchema)},
	}
}

// TestDisconnectMatrix: see the top of this file.
func TestDisconnectMatrix(t *testing.T) {
	// The SIMD backend (what serve runs) with steps slowed to at least
	// 2 ms and prompts cut into chunks of 64 tokens: a cancel takes
	// effect between steps, and the reference backend takes over a second
	// for the ~500 tokens of a prompt with tools in one step.
	be := cpu.NewBackend(1, nil)
	t.Cleanup(be.Close)
	ts := startOn(t, modelPath(t), serve.Config{}, stages.Config{NCtx: 4096, NSeq: 4, MaxBatch: 64}, slowOps{be, 2 * time.Millisecond}, false)
	bias := neverEnding(t, ts)
	generated := finishedTokens(t, ts)
	for _, c := range disconnectCases() {
		for _, stream := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/%s/stream=%v", c.api, c.mode, stream), func(t *testing.T) {
				// (after a failed case, the engine may need a while)
				waitFor(t, "the engine to be idle before the request", func() bool {
					st := ts.engine.Stats()
					return st.Running == 0 && st.Queued == 0 && st.KVBlocksUsed == 0
				})
				conn := ts.startRaw(t, c.path, c.body(stream, bias))
				defer conn.Close()
				if stream {
					conn.firstBytes(t)
				}
				waitFor(t, "the sequence to run", func() bool {
					st := ts.engine.Stats()
					return st.Running >= 1 && st.KVBlocksUsed > 0
				})
				time.Sleep(50 * time.Millisecond) // well into generation
				if st := ts.engine.Stats(); st.Running == 0 {
					t.Fatalf("the request ended by itself: %+v", st)
				}
				conn.Close()
				t.Logf("stopped %v after the client left", drained(t, ts))
				// cancelled, not finished: no finished request counted
				if g := finishedTokens(t, ts); g != generated {
					t.Errorf("a request finished by itself (generated tokens of finished requests %d -> %d)", generated, g)
					generated = g
				}
			})
		}
	}
}

// neverEnding returns the logit_bias (JSON) that bans the model's
// end-of-generation tokens and every token containing "]".
func neverEnding(t *testing.T, ts *testServer) string {
	t.Helper()
	tok := ts.bundle.Tokenizer
	bias := map[string]float64{}
	for id := range int32(tok.NVocab()) {
		if tok.IsEOG(id) || strings.Contains(string(tok.Piece(id, true)), "]") {
			bias[strconv.Itoa(int(id))] = -100
		}
	}
	if len(bias) < 2 {
		t.Fatalf("banned tokens %v: want an end-of-generation token and a ]", bias)
	}
	b, _ := json.Marshal(bias)
	return string(b)
}

var generatedRE = regexp.MustCompile(`(?m)^flowinfer_generated_tokens_total (\d+)`)

// finishedTokens reads the generated tokens of finished requests from
// /metrics.
func finishedTokens(t *testing.T, ts *testServer) int {
	t.Helper()
	m := generatedRE.FindSubmatch(ts.do(t, "GET", "/metrics", nil).body)
	if m == nil {
		t.Fatal("no flowinfer_generated_tokens_total in /metrics")
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// rawConn is a request sent on its own TCP connection.
type rawConn struct {
	net.Conn
	rd *bufio.Reader
}

// startRaw sends a POST on a new connection (TCP, or the server's
// in-memory listener) and returns without reading.
func (ts *testServer) startRaw(t testing.TB, path, body string) *rawConn {
	t.Helper()
	var c net.Conn
	var err error
	if ts.dial != nil {
		c, err = ts.dial()
	} else {
		c, err = net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
	}
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
	return &rawConn{Conn: c, rd: bufio.NewReader(c)}
}

// firstBytes reads the answer's headers, which must be a 200, and its
// first line of body.
func (c *rawConn) firstBytes(t testing.TB) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	status, err := c.rd.ReadString('\n')
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	if !strings.Contains(status, " 200 ") {
		rest, _ := c.rd.Peek(c.rd.Buffered())
		t.Fatalf("answer %q%s", status, rest)
	}
	for {
		line, err := c.rd.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the headers: %v", err)
		}
		if line == "\r\n" {
			break
		}
	}
	if _, err := c.rd.ReadString('\n'); err != nil {
		t.Fatalf("reading the body: %v", err)
	}
}

// TestDisconnectStorm: more forced-call streams than sequence slots (the
// issue's storm: running and queued requests, every client gone): the
// engine is back at its baseline within a second of the last client
// leaving, queued requests included.
func TestDisconnectStorm(t *testing.T) {
	be := cpu.NewBackend(1, nil)
	t.Cleanup(be.Close)
	ts := startOn(t, modelPath(t), serve.Config{}, stages.Config{NCtx: 4096, NSeq: 4, MaxBatch: 64}, slowOps{be, 2 * time.Millisecond}, false)
	bias := neverEnding(t, ts)
	var body func(bool, string) string
	for _, c := range disconnectCases() {
		if c.api == "responses" && c.mode == "tools" {
			body = c.body
		}
	}
	var conns []*rawConn
	for range 12 {
		c := ts.startRaw(t, "/v1/responses", body(true, bias))
		defer c.Close()
		c.firstBytes(t)
		conns = append(conns, c)
	}
	waitFor(t, "4 running and others queued", func() bool {
		st := ts.engine.Stats()
		return st.Running == 4 && st.Queued > 0
	})
	time.Sleep(50 * time.Millisecond)
	for _, c := range conns {
		c.Close()
	}
	t.Logf("stopped %v after the clients left", drained(t, ts))
	if g := finishedTokens(t, ts); g != 0 {
		t.Errorf("a request finished by itself (%d generated tokens)", g)
	}
}

// TestDisconnectQueued: a request whose client leaves while it waits for
// a sequence slot is never admitted: no prompt of it is evaluated once
// the slot frees.
func TestDisconnectQueued(t *testing.T) {
	be := cpu.NewBackend(1, nil)
	t.Cleanup(be.Close)
	ts := startOn(t, modelPath(t), serve.Config{}, stages.Config{NCtx: 4096, NSeq: 1, MaxBatch: 64}, slowOps{be, 2 * time.Millisecond}, false)
	bias := neverEnding(t, ts)
	cases := disconnectCases()
	holder := ts.startRaw(t, "/v1/completions", cases[6].body(true, bias)) // completions, plain
	defer holder.Close()
	holder.firstBytes(t)
	waitFor(t, "the first request to run", func() bool { return ts.engine.Stats().Running == 1 })
	var queued []*rawConn
	for _, c := range cases[:3] { // chat: plain, tools, json_schema
		q := ts.startRaw(t, c.path, c.body(true, bias))
		defer q.Close()
		q.firstBytes(t) // the stream opens (a heartbeat) while it waits
		queued = append(queued, q)
	}
	waitFor(t, "the others to queue", func() bool { return ts.engine.Stats().Queued >= 1 })
	before := ts.engine.Stats().PromptTokens
	for _, q := range queued {
		q.Close()
	}
	time.Sleep(400 * time.Millisecond) // two checks of the connections
	holder.Close()
	waitFor(t, "the engine to be idle", func() bool {
		st := ts.engine.Stats()
		return st.Running == 0 && st.Queued == 0 && st.KVBlocksUsed == 0
	})
	if after := ts.engine.Stats().PromptTokens; after != before {
		t.Errorf("prompt tokens admitted after the queued clients left: %d -> %d", before, after)
	}
}

// TestDisconnectUnwatched: on a connection the server cannot peek at (an
// in-memory listener here; TLS would be another), a stream whose text is
// all held back by the tool-call parser still writes heartbeats, and the
// failed write ends it once its client has left.
func TestDisconnectUnwatched(t *testing.T) {
	ts := startInmem(t, serve.Config{Heartbeat: 20 * time.Millisecond}, stages.Config{NCtx: 4096, MaxBatch: 64})
	bias := neverEnding(t, ts)
	for _, c := range disconnectCases() {
		if c.mode != "tools" || c.api == "ollama chat" { // ollama's tools are not forced
			continue
		}
		t.Run(c.api, func(t *testing.T) {
			conn := ts.startRaw(t, c.path, c.body(true, bias))
			defer conn.Close()
			conn.firstBytes(t)
			waitFor(t, "the sequence to run", func() bool {
				st := ts.engine.Stats()
				return st.Running == 1 && st.KVBlocksUsed > 0
			})
			time.Sleep(100 * time.Millisecond)
			conn.Close()
			left := time.Now()
			waitFor(t, "the sequence to end", func() bool {
				st := ts.engine.Stats()
				return st.Running == 0 && st.KVBlocksUsed == 0
			})
			if d := time.Since(left); d > time.Second {
				t.Errorf("stopped %v after the client left", d)
			}
		})
	}
}

// drained waits, from now (a client just left), until no sequence runs,
// none is queued and no KV block is held, and returns how long that took;
// it fails the test after 1 s.
func drained(t *testing.T, ts *testServer) time.Duration {
	t.Helper()
	left := time.Now()
	for {
		st := ts.engine.Stats()
		if st.Running == 0 && st.Queued == 0 && st.KVBlocksUsed == 0 {
			return time.Since(left).Round(time.Millisecond)
		}
		if time.Since(left) > time.Second {
			t.Fatalf("1 s after the client left: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
