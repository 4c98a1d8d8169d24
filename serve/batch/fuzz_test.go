package batch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/internal/sdkreq"
	"github.com/valyala/fasthttp"
)

// echoHandler answers a JSON object with 200 and anything else with 400.
func echoHandler(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("application/json")
	var obj map[string]any
	if json.Unmarshal(ctx.PostBody(), &obj) != nil {
		ctx.SetStatusCode(400)
		ctx.SetBodyString(`{"error":{"message":"bad request","type":"invalid_request_error"}}`)
		return
	}
	ctx.SetBodyString(`{"id":"x","usage":{"prompt_tokens":1,"completion_tokens":1}}`)
}

// FuzzLines: every non-blank input line gets exactly one output record
// (batch_req_<line>), whatever the line holds; Run never fails on content,
// except that a file with a duplicate custom_id is refused whole (no record).
// The fuzzed inputs run in memory (Options.mem: no temporary files, no
// fsync); TestLinesFiles checks the same on the seeds through real input
// and output files. Seeds: a few lines written here and the requests of the
// SDK tests.
func FuzzLines(f *testing.F) {
	for _, s := range linesSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, input []byte) {
		checkLines(t, input, false)
	})
}

// TestLinesFiles is FuzzLines's check on its seeds with the input and the
// output in files, as `flowinfer batch` runs.
func TestLinesFiles(t *testing.T) {
	for _, s := range linesSeeds(t) {
		checkLines(t, s, true)
	}
}

// linesSeeds are FuzzLines's seeds: a few lines written here and the SDK
// tests' requests (serve/sdktest, read at test time) as batch lines, one
// file of them all.
func linesSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	for _, s := range []string{
		`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}]}}`,
		`{"prompt":"hi","max_tokens":2}` + "\n\n" + `{"messages":[{"role":"user","content":"x"}]}`,
		`{"custom_id":"a","url":"/v1/completions","body":{"prompt":"x"}}` + "\n" + `{"custom_id":"a","url":"/v1/completions","body":{"prompt":"y"}}`,
		"not json\n{}\n[]\n \t\r\n{\"url\":\"/v1/messages\",\"body\":1}",
		`{"custom_id":1,"method":"GET","url":"/x","body":{}}`,
	} {
		seeds = append(seeds, []byte(s))
	}
	reqs, err := sdkreq.Requests("../sdktest")
	if err != nil {
		t.Fatal(err)
	}
	var all []byte
	for _, path := range slices.Sorted(maps.Keys(reqs)) {
		for _, body := range reqs[path] {
			line := fmt.Sprintf(`{"custom_id":"sdk-%d","method":"POST","url":%q,"body":%s}`, len(all), path, body)
			all = append(append(all, line...), '\n')
		}
	}
	if len(all) == 0 {
		t.Fatal("no request read from serve/sdktest")
	}
	return append(seeds, all)
}

// checkLines runs input as a batch file (in files if files, else in
// memory) and checks FuzzLines's property.
func checkLines(t testing.TB, input []byte, files bool) {
	if len(input) > 1<<20 {
		return
	}
	o := Options{Handler: echoHandler, Window: 2}
	if files {
		dir := t.TempDir()
		o.Input, o.Output = filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "out.jsonl")
		if err := os.WriteFile(o.Input, input, 0o644); err != nil {
			t.Fatal(err)
		}
	} else {
		o.mem = &memIO{in: input}
	}
	type ran struct {
		st  Stats
		err error
	}
	c := make(chan ran, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		st, err := Run(ctx, o)
		c <- ran{st, err}
	}()
	var st Stats
	var err error
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	select {
	case r := <-c:
		st, err = r.st, r.err
	case <-timeout.C:
		t.Fatalf("Run still running after 10s on %q", input)
	}
	dup := errors.Is(err, ErrDuplicateCustomID) // the file is refused before any line runs
	if err != nil && !dup {
		t.Fatalf("Run: %v", err)
	}
	want := map[string]bool{}
	for i, line := range bytes.Split(input, []byte("\n")) {
		if len(trimSpace(line)) > 0 && !dup {
			want["batch_req_"+strconv.Itoa(i+1)] = true
		}
	}
	var data []byte
	if files {
		if data, err = os.ReadFile(o.Output); err != nil {
			t.Fatal(err)
		}
	} else {
		data = o.mem.out.Bytes()
	}
	got := map[string]bool{}
	for _, rec := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		if len(rec) == 0 {
			continue
		}
		var r struct{ ID string }
		if err := json.Unmarshal(rec, &r); err != nil {
			t.Fatalf("output line %q: %v", rec, err)
		}
		if got[r.ID] || !want[r.ID] {
			t.Fatalf("record %s unexpected or repeated (want %d lines)", r.ID, len(want))
		}
		got[r.ID] = true
	}
	if len(got) != len(want) || st.Written != len(want) || st.Retryable != 0 {
		t.Fatalf("%d records, %d written, %d retryable; want %d lines", len(got), st.Written, st.Retryable, len(want))
	}
}
