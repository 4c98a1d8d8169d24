package serve_test

import (
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/serve"
	"github.com/flowinfer/flowinfer/stages"
)

// scriptMarker precedes, in a prompt, the base64 of the reply a scripted
// server plays back.
const scriptMarker = "script:"

// scriptReply finds the reply the last scriptMarker of prompt asks for
// ("" when there is none) and cuts it into 3-byte pieces.
func scriptReply(prompt string) []string {
	i := strings.LastIndex(prompt, scriptMarker)
	if i < 0 {
		return []string{"(no script in the prompt)"}
	}
	enc := prompt[i+len(scriptMarker):]
	end := strings.IndexFunc(enc, func(r rune) bool {
		return !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '+' || r == '/' || r == '=')
	})
	if end >= 0 {
		enc = enc[:end]
	}
	reply, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return []string{"(bad script: " + err.Error() + ")"}
	}
	var out []string
	for r := string(reply); r != ""; {
		n := min(3, len(r))
		out = append(out, r[:n])
		r = r[n:]
	}
	return out
}

// TestScriptedServer is not a test but the server of serve/sdktest's tool
// calling tests (tools.test.mjs), which runs it with
// FLOWINFER_SCRIPTED_SERVER=1: stories260K loaded, with replies scripted
// by the prompt (the last "script:" followed by the base64 of the reply),
// since the model never calls a tool by itself. With
// FLOWINFER_SCRIPTED_TEMPLATE set to the name of a template in
// model/chat/testdata/templates (reasoning.test.mjs: Qwen3.5-4B), that
// template replaces the model's. It prints its URL and serves until its
// stdin closes.
func TestScriptedServer(t *testing.T) {
	if os.Getenv("FLOWINFER_SCRIPTED_SERVER") == "" {
		t.Skip("the server of serve/sdktest's tool tests; runs with FLOWINFER_SCRIPTED_SERVER=1")
	}
	ts := start(t, serve.Config{}, stages.Config{NCtx: 2048, NSeq: 2})
	if name := os.Getenv("FLOWINFER_SCRIPTED_TEMPLATE"); name != "" {
		useTemplate(t, ts.bundle, name, "", "")
	}
	serve.SetScript(ts.srv, func(prompt []int32) []string {
		return scriptReply(ts.bundle.Tokenizer.Decode(prompt, true))
	})
	fmt.Printf("scripted server on %s\n", ts.url)
	io.Copy(io.Discard, os.Stdin)
}

// TestScriptReply checks the helper above.
func TestScriptReply(t *testing.T) {
	p := "user\nscript:" + base64.StdEncoding.EncodeToString([]byte("old")) + "\ntool\nscript:" + base64.StdEncoding.EncodeToString([]byte("<tool_call>x")) + "<|im_end|>"
	if got := strings.Join(scriptReply(p), "|"); got != "<to|ol_|cal|l>x" {
		t.Errorf("got %q", got)
	}
}
