// This file owns the output file: records in the OpenAI batch output
// format,
//
//	{"id": "batch_req_7", "custom_id": "r1", "response": {"status_code": 200, "request_id": "chatcmpl-...", "body": {...}}, "error": null}
//	{"id": "batch_req_8", "custom_id": null, "response": null, "error": {"code": "invalid_request", "message": "line 8: ..."}}
//
// written so that no crash leaves a half record behind: each record is one
// write(2) of the whole line to a file opened for appending, and the file
// is fsynced at intervals and at the end. Resuming reads what is there,
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

// openOutput opens (or creates) path for appending, after truncating a torn
// last line, and returns what it already holds. A complete line that is not
// a record is an error: the file is not ours to append to.
func openOutput(path string, syncEvery int, syncAfter time.Duration) (*outFile, *done, int64, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, 0, err
	}
	d := &done{customIDs: map[string]bool{}, ids: map[string]bool{}}
	good, torn, err := scanOutput(f, d)
	if err != nil {
		f.Close()
		return nil, nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	if torn > 0 {
		if err := f.Truncate(good); err != nil {
			f.Close()
			return nil, nil, 0, fmt.Errorf("%s: dropping a torn last line: %w", path, err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, nil, 0, err
		}
	}
	f.Close()
	// Reopen for appending: every write lands at the end, whole.
	if f, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		return nil, nil, 0, err
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
