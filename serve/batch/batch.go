// Package batch runs files of requests offline, like OpenAI's Batch API:
// every input line is one request (the OpenAI batch format, or a simple
// {"id", "messages" | "prompt", ...} form), answered by the same handler
// `flowinfer serve` answers HTTP requests with, called in-process, so each
// output body is exactly what the server would have sent. Requests run
// Window at a time; with the handler's engine decoding several sequences
// per step (continuous batching), that is what keeps its slots full.
//
// Runs are resumable and crash-safe: a record is appended with one write
// of the whole line and fsynced at intervals; rerunning with the same
// output skips the lines it already holds (by custom_id, or by line for
// lines without one) and drops a torn last line. A run holds an exclusive
// lock on its output (OpenOutput): a second run on the same output fails
// at once rather than answer the same lines again. A malformed line becomes
// an error record and the run goes on. --shard i/n takes every n-th line,
// so several machines can split one file. Server errors (5xx, and requests
// cut short by an interrupt) are not written: they are retried by the
// next run.
package batch

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// Options configure Run. Zero fields take the defaults in brackets.
type Options struct {
	Input, Output string
	// Out, if set, is the output already opened and locked (OpenOutput),
	// and Output is ignored; Run closes it. Otherwise Run opens Output.
	Out *Output
	// Handler answers the requests (serve.Server.Handler).
	Handler fasthttp.RequestHandler
	// Window is the number of requests in flight [4]: give the engine at
	// least its parallel sequences, and no more than it queues.
	Window int
	// Ordered writes records in input order (completed requests wait for
	// earlier ones); otherwise in completion order.
	Ordered bool
	// Shard and Shards select the lines whose 0-based index i has
	// i % Shards == Shard [0, 1].
	Shard, Shards int
	// SyncEvery and SyncInterval bound the records and the time between
	// fsyncs of the output [64, 1s].
	SyncEvery    int
	SyncInterval time.Duration
	// Retry is the wait before a request answered 429 (queue full) is
	// sent again [20ms].
	Retry time.Duration
	// Progress, if set, is called from Run's goroutine after each record.
	Progress func(Progress)

	// mem, if set (by this package's fuzz test), replaces both files: the
	// input is read from mem.in and the output starts empty and is
	// appended to mem.out, with no file or fsync.
	mem *memIO
}

// memIO is an in-memory input and output (see Options.mem).
type memIO struct {
	in  []byte
	out bytes.Buffer
}

// Write, Sync and Close make memIO the output file.
func (m *memIO) Write(b []byte) (int, error) { return m.out.Write(b) }
func (m *memIO) Sync() error                 { return nil }
func (m *memIO) Close() error                { return nil }

// Progress is the state of a run.
type Progress struct {
	Total            int // requests of this shard still to do when the run started
	Done             int // records written so far
	Failed           int // of which 4xx answers (as Stats.Failed)
	Malformed        int // of which malformed lines (as Stats.Malformed)
	CompletionTokens int64
	Elapsed          time.Duration
}

// Stats summarize a run.
type Stats struct {
	Lines     int   // lines in the input
	InShard   int   // lines of this shard
	Skipped   int   // lines already in the output
	TornBytes int64 // torn tail dropped from the output
	Written   int   // records written by this run
	OK        int   // 2xx answers
	Failed    int   // 4xx answers (written)
	Malformed int   // malformed lines (error records)
	// UnknownModel counts the Failed answers that were 404 for a model
	// the server does not serve (a line naming "gpt-4o-mini" without an
	// --alias for it).
	UnknownModel int
	// Retryable counts requests not written: server errors (5xx) and
	// requests cut short by an interrupt. Run again to finish them.
	Retryable                      int
	PromptTokens, CompletionTokens int64
	Elapsed                        time.Duration
}

// ErrInterrupted is returned (wrapping the context's error) when ctx ended
// before every request was done; what was written stays valid.
var ErrInterrupted = errors.New("batch: interrupted")

func (o *Options) defaults() error {
	if o.Window <= 0 {
		o.Window = 4
	}
	if o.Shards <= 0 {
		o.Shards = 1
	}
	if o.Shard < 0 || o.Shard >= o.Shards {
		return fmt.Errorf("batch: shard %d/%d: want 0 <= i < n", o.Shard, o.Shards)
	}
	if o.SyncEvery <= 0 {
		o.SyncEvery = 64
	}
	if o.SyncInterval <= 0 {
		o.SyncInterval = time.Second
	}
	if o.Retry <= 0 {
		o.Retry = 20 * time.Millisecond
	}
	if o.Handler == nil {
		return errors.New("batch: no handler")
	}
	return nil
}

// result is a finished item.
type result struct {
	seq    int
	it     item
	status int
	body   []byte
	intime bool // finished before ctx ended
}

// Run processes o.Input into o.Output.
func Run(ctx context.Context, o Options) (Stats, error) {
	var st Stats
	if o.Out != nil {
		defer o.Out.Close() // releases the lock on every return
		o.Output = o.Out.path
	}
	if err := o.defaults(); err != nil {
		return st, err
	}
	t0 := time.Now()
	var out *outFile
	var prev *done
	var torn int64
	var err error
	if o.mem != nil {
		out = &outFile{f: o.mem, syncEvery: o.SyncEvery, syncAfter: o.SyncInterval, lastSync: time.Now()}
		prev = &done{customIDs: map[string]bool{}, ids: map[string]bool{}}
	} else {
		if o.Out == nil {
			if o.Out, err = OpenOutput(o.Output); err != nil {
				return st, err
			}
			defer o.Out.Close()
		}
		if out, prev, torn, err = prepare(o.Out, o.SyncEvery, o.SyncInterval); err != nil {
			return st, err
		}
	}
	st.TornBytes = torn
	todo, err := survey(o, prev, &st)
	if err != nil {
		out.close()
		return st, err
	}

	work := make(chan result)
	results := make(chan result, o.Window)
	window := make(chan struct{}, o.Window) // a token per request between dispatch and write
	var wg sync.WaitGroup
	for range o.Window {
		wg.Go(func() {
			for r := range work {
				results <- o.answer(ctx, r)
			}
		})
	}
	readErr := make(chan error, 1)
	go func() {
		readErr <- dispatch(ctx, o, prev, window, work)
		close(work)
		wg.Wait()
		close(results)
	}()

	prog := Progress{Total: todo}
	pending := map[int]result{}
	next := 0
	gap := false // ordered run interrupted: nothing after the first gap is written
	var werr error
	emit := func(r result) {
		<-window
		if werr != nil {
			return
		}
		if !r.intime || r.status >= 500 {
			st.Retryable++
			gap = true
			return
		}
		if o.Ordered && gap && ctx.Err() != nil {
			st.Retryable++
			return
		}
		line, err := r.record().encode()
		if err == nil {
			err = out.write(line)
		}
		if err != nil {
			werr = fmt.Errorf("batch: writing %s: %w", o.Output, err)
			return
		}
		st.Written++
		prog.Done++
		switch {
		case r.it.err != "":
			st.Malformed++
			prog.Malformed++
		case r.status >= 200 && r.status < 300:
			st.OK++
			p, c := usage(r.body)
			st.PromptTokens += p
			st.CompletionTokens += c
			prog.CompletionTokens += c
		default:
			st.Failed++
			prog.Failed++
			if r.status == 404 { // the generation endpoints' only 404
				st.UnknownModel++
			}
		}
		if o.Progress != nil {
			prog.Elapsed = time.Since(t0)
			o.Progress(prog)
		}
	}
	if o.Progress != nil {
		o.Progress(prog)
	}
	for r := range results {
		if !o.Ordered {
			emit(r)
			continue
		}
		pending[r.seq] = r
		for {
			p, ok := pending[next]
			if !ok {
				break
			}
			delete(pending, next)
			next++
			emit(p)
		}
	}
	st.Retryable += len(pending) // none unless a result went missing
	err = errors.Join(<-readErr, werr, out.close())
	st.Elapsed = time.Since(t0)
	if err == nil && ctx.Err() != nil && st.Written < todo {
		err = fmt.Errorf("%w: %w", ErrInterrupted, ctx.Err())
	}
	return st, err
}

// ErrDuplicateCustomID is matched by Run's error when two lines of the
// input share a custom_id: as OpenAI's Batch API does, the whole file is
// refused before any line runs (the output could not say which answer is
// whose).
var ErrDuplicateCustomID = errors.New("batch: duplicate custom_id")

// survey reads the input once: it counts lines, the shard's lines and
// those already done, and refuses the file if two lines (of any shard)
// share a custom_id.
func survey(o Options, prev *done, st *Stats) (todo int, err error) {
	firstLine := map[string]int{}
	st.Skipped = 0
	err = o.eachLine(func(n int, raw []byte) error {
		st.Lines++
		it := parseLine(n, raw)
		if it.customID != nil {
			if first, ok := firstLine[*it.customID]; ok {
				return fmt.Errorf("%w %q on lines %d and %d: nothing was run; give every line its own custom_id", ErrDuplicateCustomID, *it.customID, first, n)
			}
			firstLine[*it.customID] = n
		}
		if (n-1)%o.Shards != o.Shard {
			return nil
		}
		st.InShard++
		if prev.has(&it) {
			st.Skipped++
			return nil
		}
		todo++
		return nil
	})
	return todo, err
}

// dispatch reads the input again and sends the shard's lines still to do to
// work, taking a window token for each.
func dispatch(ctx context.Context, o Options, prev *done, window chan struct{}, work chan<- result) error {
	seq := 0
	err := o.eachLine(func(n int, raw []byte) error {
		if (n-1)%o.Shards != o.Shard {
			return nil
		}
		it := parseLine(n, raw)
		if prev.has(&it) {
			return nil
		}
		select {
		case window <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case work <- result{seq: seq, it: it}:
		case <-ctx.Done():
			<-window
			return ctx.Err()
		}
		seq++
		return nil
	})
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil // reported by Run as an interruption
	}
	return err
}

// eachLine calls f with every line of the input (1-based numbers, empty
// lines skipped but counted).
func (o *Options) eachLine(f func(n int, raw []byte) error) error {
	path := o.Input
	var in io.Reader
	var size int64
	if o.mem != nil {
		path = "(memory)"
		in, size = bytes.NewReader(o.mem.in), int64(len(o.mem.in))
	} else {
		file, err := os.Open(path)
		if err != nil {
			return err
		}
		defer file.Close()
		fi, err := file.Stat()
		if err != nil {
			return err
		}
		in, size = file, fi.Size()
	}
	// A 1 MiB buffer, or the input's size if smaller (readLine grows
	// lines past the buffer anyway).
	br := bufio.NewReaderSize(in, int(min(size+1, 1<<20)))
	for n := 1; ; n++ {
		raw, err := readLine(br)
		if errors.Is(err, io.EOF) && len(raw) == 0 {
			return nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("batch: %s line %d: %w", path, n, err)
		}
		if len(trimSpace(raw)) > 0 {
			if ferr := f(n, raw); ferr != nil {
				return ferr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
	}
}

// readLine reads one line (without its newline), up to maxLine bytes.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxLine {
			return nil, fmt.Errorf("line longer than %d bytes", maxLine)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if n := len(line); n > 0 && line[n-1] == '\n' {
			line = line[:n-1]
		}
		return line, err
	}
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// answer runs one item through the handler (malformed items answer
// themselves), retrying while the server's queue is full.
func (o *Options) answer(ctx context.Context, r result) result {
	if r.it.err != "" {
		r.intime = true
		return r
	}
	for {
		r.status, r.body = call(o.Handler, r.it.url, r.it.body)
		if r.status != fasthttp.StatusTooManyRequests {
			break
		}
		select {
		case <-time.After(o.Retry):
			continue
		case <-ctx.Done():
		}
		break
	}
	r.intime = ctx.Err() == nil
	return r
}

// call sends one POST through h in-process.
func call(h fasthttp.RequestHandler, url string, body []byte) (int, []byte) {
	var req fasthttp.Request
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI(url)
	req.Header.SetContentType("application/json")
	req.SetBody(body)
	rc := new(fasthttp.RequestCtx)
	rc.Init(&req, nil, nil)
	h(rc)
	return rc.Response.StatusCode(), append([]byte(nil), rc.Response.Body()...)
}

// record builds the output line of a finished item.
func (r *result) record() *record {
	rec := &record{ID: r.it.id(), CustomID: r.it.customID}
	if r.it.err != "" {
		rec.Error = &recError{Code: "invalid_request", Message: r.it.err}
		return rec
	}
	body := json.RawMessage(r.body)
	if !json.Valid(body) {
		body, _ = json.Marshal(string(r.body))
	}
	var id struct {
		ID string `json:"id"`
	}
	json.Unmarshal(body, &id)
	rec.Response = &response{StatusCode: r.status, RequestID: id.ID, Body: body}
	return rec
}

// usage reads token counts from an OpenAI or Anthropic response body.
func usage(body []byte) (prompt, completion int64) {
	var u struct {
		Usage struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
			InputTokens      int64 `json:"input_tokens"`
			OutputTokens     int64 `json:"output_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(body, &u) != nil {
		return 0, 0
	}
	return u.Usage.PromptTokens + u.Usage.InputTokens, u.Usage.CompletionTokens + u.Usage.OutputTokens
}
