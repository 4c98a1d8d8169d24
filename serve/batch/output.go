// This file owns the output file: records in the OpenAI batch output
// format,
//
//	{"id": "batch_req_7", "custom_id": "r1", "response": {"status_code": 200, "request_id": "chatcmpl-...", "body": {...}}, "error": null}
//	{"id": "batch_req_8", "custom_id": null, "response": null, "error": {"code": "invalid_request", "message": "line 8: ..."}}
//
// written so that no crash leaves a half record behind: each record is one
// write(2) of the whole line to a file opened for appending, and the file
// is fsynced at intervals and at the end. The file is locked (flock(2))
// for the whole run, so two runs never append to it at once (each would
// answer and write the lines the other has not written yet). Resuming
// reads what is there,
// drops a torn last line (a power cut can still tear one), and reports
// which lines are done.

package batch

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// record is one output line.
type record struct {
	ID       string    `json:"id"`
	CustomID *string   `json:"custom_id"`
	Response *response `json:"response"`
	Error    *recError `json:"error"`
}

type response struct {
	StatusCode int             `json:"status_code"`
	RequestID  string          `json:"request_id"`
	Body       json.RawMessage `json:"body"`
}

type recError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// encode returns the record as one line, newline included.
func (r *record) encode() ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b) // ends with '\n'
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// done is what an existing output already holds.
type done struct {
	customIDs map[string]bool
	ids       map[string]bool
	records   int
}

// has reports whether it already has a record.
func (d *done) has(it *item) bool {
	if it.customID != nil && d.customIDs[*it.customID] {
		return true
	}
	return d.ids[it.id()]
}

// syncWriter is the output file (an *os.File, or memIO in the fuzz test).
type syncWriter interface {
	io.Writer
	Sync() error
	Close() error
}

// outFile is the output being appended to.
type outFile struct {
	f         syncWriter
	syncEvery int
	syncAfter time.Duration
	unsynced  int
	lastSync  time.Time
}

// ErrOutputBusy is matched by the error of OpenOutput (and Run) when
// another run holds the output's lock.
var ErrOutputBusy = errors.New("another batch is writing it")

// Output is an output file opened and locked for one run (OpenOutput).
type Output struct {
	f    *os.File
	path string
}

// OpenOutput opens the output at path, creating it if needed, and takes an
// exclusive advisory lock on it (flock(2), without waiting): two runs
// appending to one output (a resume started while the first run still
// runs) would both answer the lines not yet written and write their
// records twice, so the second run fails at once, with ErrOutputBusy. A
// command opens the output before its slow start (loading a model) and
// hands it to Run in Options.Out; the lock lasts until Run closes it, or
// until the process exits.
func OpenOutput(path string) (*Output, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("batch: output: %w", err)
	}
	if busy, err := lockFile(f); err != nil {
		f.Close()
		if busy {
			return nil, fmt.Errorf("batch: output %s: %w (the file is locked): wait for that run to end, or write to another file", path, ErrOutputBusy)
		}
		return nil, fmt.Errorf("batch: output %s: cannot lock it (%v); without the lock two runs on one output could write the same records", path, err)
	}
	return &Output{f: f, path: path}, nil
}

// Path is the output's path.
func (o *Output) Path() string { return o.path }

// Close closes the file, which releases the lock. Run closes its output;
// closing it again does nothing.
func (o *Output) Close() error {
	if err := o.f.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		return err
	}
	return nil
}

// prepare reads what the locked output already holds, truncates a torn
// last line, and returns the file ready for appending (opened O_APPEND:
// every write lands at the end, whole). A complete line that is not a
// record is an error: the file is not ours to append to.
func prepare(o *Output, syncEvery int, syncAfter time.Duration) (*outFile, *done, int64, error) {
	f := o.f
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, nil, 0, fmt.Errorf("%s: %w", o.path, err)
	}
	d := &done{customIDs: map[string]bool{}, ids: map[string]bool{}}
	good, torn, err := scanOutput(f, d)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("%s: %w", o.path, err)
	}
	if torn > 0 {
		if err := f.Truncate(good); err != nil {
			return nil, nil, 0, fmt.Errorf("%s: dropping a torn last line: %w", o.path, err)
		}
		if err := f.Sync(); err != nil {
			return nil, nil, 0, fmt.Errorf("%s: %w", o.path, err)
		}
	}
	return &outFile{f: f, syncEvery: syncEvery, syncAfter: syncAfter, lastSync: time.Now()}, d, torn, nil
}

// scanOutput reads the records of r into d and returns the length of the
// complete lines and of a torn tail.
func scanOutput(r io.Reader, d *done) (good, torn int64, err error) {
	br := bufio.NewReaderSize(r, 1<<20)
	line := 0
	for {
		b, err := br.ReadBytes('\n')
		if len(b) > 0 && b[len(b)-1] != '\n' {
			return good, int64(len(b)), nil // no newline: torn
		}
		if len(b) > 0 {
			line++
			var rec struct {
				ID       string  `json:"id"`
				CustomID *string `json:"custom_id"`
			}
			if json.Unmarshal(b, &rec) != nil || rec.ID == "" {
				// A torn line followed by nothing but a newline cannot
				// happen (records are written whole); anything else is
				// not ours.
				return good, 0, fmt.Errorf("line %d is not a batch output record; refusing to append to it", line)
			}
			if rec.CustomID != nil {
				d.customIDs[*rec.CustomID] = true
			} else {
				d.ids[rec.ID] = true
			}
			d.records++
			good += int64(len(b))
		}
		if errors.Is(err, io.EOF) {
			return good, 0, nil
		}
		if err != nil {
			return good, 0, err
		}
	}
}

// write appends one record line with a single write and syncs when due.
func (o *outFile) write(line []byte) error {
	if _, err := o.f.Write(line); err != nil {
		return err
	}
	o.unsynced++
	if o.unsynced >= o.syncEvery || time.Since(o.lastSync) >= o.syncAfter {
		return o.sync()
	}
	return nil
}

func (o *outFile) sync() error {
	if o.unsynced == 0 {
		return nil
	}
	o.unsynced = 0
	o.lastSync = time.Now()
	return o.f.Sync()
}

func (o *outFile) close() error {
	err := o.sync()
	if cerr := o.f.Close(); err == nil {
		err = cerr
	}
	return err
}
