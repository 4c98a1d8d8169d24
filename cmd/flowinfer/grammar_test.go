package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestRunGrammar: --grammar, --grammar-file and --json-schema constrain
// run's output; a malformed grammar is one error line naming line:col.
func TestRunGrammar(t *testing.T) {
	m, _ := goldenModel(t, "stories260K.gguf")
	base := []string{"run", "-m", m, "-n", "120", "--temp", "0", "--no-display-prompt", "-p", "Once upon a time"}

	out, errOut, err := flowinfer(t, append(base, "--grammar", `root ::= (" yes" | " no") "."`)...)
	if err != nil || (out != " yes.\n" && out != " no.\n") {
		t.Errorf("--grammar: out %q err %v\n%s", out, err, errOut)
	}

	path := filepath.Join(t.TempDir(), "phone.gbnf")
	if err := os.WriteFile(path, []byte("# a phone number\nroot ::= [0-9]{3} \"-\" [0-9]{4}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, err = flowinfer(t, append(base, "--grammar-file", path)...)
	if err != nil || !regexp.MustCompile(`^[0-9]{3}-[0-9]{4}\n$`).MatchString(out) {
		t.Errorf("--grammar-file: out %q err %v\n%s", out, err, errOut)
	}

	schema := `{"type":"object","properties":{"name":{"type":"string","maxLength":20},"age":{"type":"integer","minimum":1,"maximum":99}},"required":["name","age"],"additionalProperties":false}`
	out, errOut, err = flowinfer(t, append(base, "--json-schema", schema)...)
	var v struct {
		Name string `json:"name"`
		Age  int    `json:"age"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err != nil || dec.Decode(&v) != nil || v.Name == "" || v.Age < 1 || v.Age > 99 {
		t.Errorf("--json-schema: out %q err %v\n%s", out, err, errOut)
	}

	_, errOut, err = flowinfer(t, append(base, "--grammar", `root ::= "a`)...)
	if err == nil || !strings.Contains(errOut, "--grammar: grammar: line 1 col 10: grammar syntax error: unterminated string literal") {
		t.Errorf("bad grammar: err %v, stderr %q", err, errOut)
	}
	_, errOut, err = flowinfer(t, append(base, "--grammar", `root ::= "a"`, "--ignore-eos")...)
	if err == nil || !strings.Contains(errOut, "--ignore-eos cannot be used with a grammar") {
		t.Errorf("--ignore-eos with a grammar: err %v, stderr %q", err, errOut)
	}
	_, errOut, err = flowinfer(t, append(base, "--json-schema", `{"type":"string","pattern":"(a)\\1"}`)...)
	if err == nil || !strings.Contains(errOut, "backreference") {
		t.Errorf("bad schema: err %v, stderr %q", err, errOut)
	}
}
