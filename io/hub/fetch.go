// This file holds Fetch: the cache check, the resumable download and its
// verification.

package hub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// meta is the sidecar {file}.meta.json written next to a verified file.
type meta struct {
	Ref    string    `json:"ref"`
	URL    string    `json:"url"`
	Size   int64     `json:"size"`
	SHA256 string    `json:"sha256"`           // of the bytes on disk
	Hub    string    `json:"hub_sha256"`       // what the hub announced ("" if nothing usable)
	Commit string    `json:"commit,omitempty"` // X-Repo-Commit, when sent
	Time   time.Time `json:"time"`
}

func metaPath(dest string) string    { return dest + ".meta.json" }
func partialPath(dest string) string { return dest + ".partial" }

// Fetch returns the local path of the file ref names, downloading it into
// the cache if needed (see the package documentation). A cancelled ctx
// stops the download and keeps the partial file for the next call.
func (c *Client) Fetch(ctx context.Context, ref Ref) (string, error) {
	if err := ref.Validate(); err != nil {
		return "", err
	}
	if c.CacheDir == "" {
		return "", errors.New("hub: Client.CacheDir is not set")
	}
	dest := c.Path(ref)
	if cached(dest) {
		return dest, nil
	}
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return "", fmt.Errorf("hub: %s: %w", ref, err)
	}
	part := partialPath(dest)
	f, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return "", fmt.Errorf("hub: %s: %w", ref, err)
	}
	defer f.Close()
	if err := lockFile(f); err != nil {
		return "", fmt.Errorf("hub: %s: %w (%s is locked: %v)", ref, ErrBusy, part, err)
	}
	if cached(dest) { // finished by another process while we waited for the lock
		os.Remove(part)
		return dest, nil
	}

	d := &download{c: c, ref: ref, url: c.URL(ref), f: f, part: part}
	delay := c.retryDelay
	if delay == 0 {
		delay = time.Second
	}
	for try := 0; ; try++ {
		d.wrote = false
		m, retry, err := d.attempt(ctx, true)
		if err == nil {
			if err := finish(f, part, dest, m); err != nil {
				return "", fmt.Errorf("hub: %s: %w", ref, err)
			}
			return dest, nil
		}
		if !retry || try >= c.Retries || ctx.Err() != nil {
			d.dropEmpty()
			return "", err
		}
		if !d.wrote { // no progress (server error, no connection): back off
			select {
			case <-ctx.Done():
				d.dropEmpty()
				return "", err
			case <-time.After(delay):
			}
			delay = min(2*delay, 30*time.Second)
		}
	}
}

// cached reports whether dest is a complete cached file: it exists and its
// size matches its sidecar. A file without a sidecar (put there by hand)
// counts as complete.
func cached(dest string) bool {
	st, err := os.Stat(dest)
	if err != nil || !st.Mode().IsRegular() {
		return false
	}
	b, err := os.ReadFile(metaPath(dest))
	if errors.Is(err, os.ErrNotExist) {
		return true
	}
	var m meta
	if err != nil || json.Unmarshal(b, &m) != nil {
		return false
	}
	return m.Size == st.Size()
}

// finish makes the verified partial file the cached file: sync, sidecar,
// atomic rename.
func finish(f *os.File, part, dest string, m meta) error {
	if err := f.Sync(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := metaPath(dest) + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, metaPath(dest)); err != nil {
		return err
	}
	if err := os.Rename(part, dest); err != nil {
		return err
	}
	if dir, err := os.Open(filepath.Dir(dest)); err == nil { // persist the renames; best effort
		dir.Sync()
		dir.Close()
	}
	return nil
}

// download is one Fetch in progress.
type download struct {
	c     *Client
	ref   Ref
	url   string
	f     *os.File // the locked partial file
	part  string
	wrote bool // bytes arrived in the current attempt
}

func (d *download) errorf(format string, args ...any) error {
	return fmt.Errorf("hub: %s: "+format, append([]any{d.ref}, args...)...)
}

// discard deletes the partial file after a verification failure.
func (d *download) discard() {
	d.f.Truncate(0)
	os.Remove(d.part)
}

// dropEmpty removes the partial file if nothing was ever written to it.
func (d *download) dropEmpty() {
	if st, err := d.f.Stat(); err == nil && st.Size() == 0 {
		os.Remove(d.part)
	}
}

// restart empties the partial file to download from the start.
func (d *download) restart() error {
	if err := d.f.Truncate(0); err != nil {
		return d.errorf("%w", err)
	}
	return nil
}

// attempt makes one request and appends the body to the partial file. It
// reports whether a failure is worth retrying. mayRestart allows one
// restart from byte 0 when the server's answer to a Range request makes the
// partial file unusable.
func (d *download) attempt(ctx context.Context, mayRestart bool) (meta, bool, error) {
	have, err := d.f.Seek(0, io.SeekEnd)
	if err != nil {
		return meta{}, false, d.errorf("%w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.url, nil)
	if err != nil {
		return meta{}, false, d.errorf("%w", err)
	}
	req.Header.Set("User-Agent", "flowinfer")
	if d.c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+d.c.Token)
	}
	if have > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", have))
	}
	resp, hdrs, err := d.c.do(req)
	if err != nil {
		if ctx.Err() != nil {
			return meta{}, false, d.errorf("%w", ctx.Err())
		}
		return meta{}, true, d.errorf("GET %s: %w", d.url, err)
	}
	defer resp.Body.Close()

	// What the hub says the file is (on its redirect response for LFS files).
	wantSize := headerInt(hdrs, "X-Linked-Size")
	wantSHA := linkedSHA(hdrs)
	again := func() (meta, bool, error) {
		resp.Body.Close()
		if err := d.restart(); err != nil {
			return meta{}, false, err
		}
		return d.attempt(ctx, false)
	}

	sendTotal := int64(-1) // the total length the server says it is sending
	switch code := resp.StatusCode; {
	case code == http.StatusOK:
		sendTotal = resp.ContentLength
		if have > 0 { // the server ignored Range: start over
			if err := d.restart(); err != nil {
				return meta{}, false, err
			}
			have = 0
		}
	case code == http.StatusPartialContent:
		start, total, ok := parseContentRange(resp.Header.Get("Content-Range"))
		if !ok || start != have {
			if mayRestart {
				return again()
			}
			return meta{}, false, d.errorf("server resumed at %q, asked for byte %d", resp.Header.Get("Content-Range"), have)
		}
		sendTotal = total
	case code == http.StatusRequestedRangeNotSatisfiable:
		// The partial file may already be complete, or longer than the file.
		total := int64(-1)
		if cr := resp.Header.Get("Content-Range"); strings.HasPrefix(cr, "bytes */") {
			total, _ = strconv.ParseInt(strings.TrimPrefix(cr, "bytes */"), 10, 64)
		}
		if wantSize < 0 {
			wantSize = total
		}
		if have > 0 && wantSize == have {
			return d.verify(have, nil, wantSize, wantSHA, hdrs)
		}
		if mayRestart {
			return again()
		}
		return meta{}, false, d.errorf("server refused range bytes=%d- (HTTP 416)", have)
	case code == http.StatusNotFound:
		return meta{}, false, d.errorf("%w: HTTP 404 for %s (check the repository, file name and revision)", ErrNotFound, d.url)
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return meta{}, false, d.errorf("%w: HTTP %d for %s (private or gated repository: set a token and accept its terms on the hub)", ErrAccess, code, d.url)
	case code == http.StatusTooManyRequests || code >= 500:
		return meta{}, true, d.errorf("HTTP %d for %s", code, d.url)
	default:
		return meta{}, false, d.errorf("unexpected HTTP %d for %s", code, d.url)
	}

	if wantSize >= 0 && sendTotal >= 0 && wantSize != sendTotal {
		d.discard()
		return meta{}, false, d.errorf("%w: the hub announces %d bytes but the server sends %d", ErrVerify, wantSize, sendTotal)
	}
	if wantSize < 0 {
		wantSize = sendTotal
	}
	if wantSize >= 0 && have > wantSize {
		if mayRestart {
			return again()
		}
		return meta{}, false, d.errorf("partial file has %d bytes, more than the file's %d", have, wantSize)
	}

	// Hash what is already on disk, then append the body.
	h := sha256.New()
	if _, err := d.f.Seek(0, io.SeekStart); err != nil {
		return meta{}, false, d.errorf("%w", err)
	}
	if _, err := io.CopyN(h, d.f, have); err != nil {
		return meta{}, false, d.errorf("reading partial file: %w", err)
	}
	var body io.Reader = resp.Body
	if wantSize >= 0 {
		body = io.LimitReader(body, wantSize-have+1) // one byte more reveals an over-long body
	}
	if d.c.Progress != nil {
		d.c.Progress(have, wantSize)
	}
	buf := make([]byte, 256<<10)
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if _, err := d.f.Write(buf[:n]); err != nil {
				return meta{}, false, d.errorf("writing %s: %w", d.part, err)
			}
			h.Write(buf[:n])
			have += int64(n)
			d.wrote = true
			if d.c.Progress != nil {
				d.c.Progress(have, wantSize)
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if ctx.Err() != nil {
				return meta{}, false, d.errorf("%w (partial download of %d bytes kept)", ctx.Err(), have)
			}
			return meta{}, true, d.errorf("download interrupted after %d bytes (kept for resume): %w", have, rerr)
		}
	}
	return d.verify(have, h, wantSize, wantSHA, hdrs)
}

// verify checks the complete partial file against the expected size and
// SHA-256 (h holds the hash so far, nil to hash the file from disk), and
// deletes it on a mismatch.
func (d *download) verify(size int64, h hash.Hash, wantSize int64, wantSHA string, hdrs []http.Header) (meta, bool, error) {
	if wantSize >= 0 && size != wantSize {
		d.discard()
		return meta{}, false, d.errorf("%w: got %d bytes, want %d (partial file deleted)", ErrVerify, size, wantSize)
	}
	if h == nil {
		h = sha256.New()
		if _, err := d.f.Seek(0, io.SeekStart); err != nil {
			return meta{}, false, d.errorf("%w", err)
		}
		if _, err := io.Copy(h, d.f); err != nil {
			return meta{}, false, d.errorf("reading partial file: %w", err)
		}
	}
	got := hex.EncodeToString(h.Sum(nil))
	if wantSHA != "" && got != wantSHA {
		d.discard()
		return meta{}, false, d.errorf("%w: sha256 %s, want %s (partial file deleted)", ErrVerify, got, wantSHA)
	}
	m := meta{Ref: d.ref.String(), URL: d.url, Size: size, SHA256: got, Hub: wantSHA, Time: time.Now().UTC()}
	for _, hd := range hdrs {
		if v := hd.Get("X-Repo-Commit"); v != "" {
			m.Commit = v
			break
		}
	}
	return m, false, nil
}

// do sends req with the client's HTTP client, following redirects, and
// returns the final response with the headers of every response in the
// chain, first to last (the hub's own headers are on the redirect to its
// CDN).
func (c *Client) do(req *http.Request) (*http.Response, []http.Header, error) {
	var hc http.Client
	if c.HTTP != nil {
		hc = *c.HTTP
	}
	var hdrs []http.Header
	next := hc.CheckRedirect
	hc.CheckRedirect = func(r *http.Request, via []*http.Request) error {
		if r.Response != nil {
			hdrs = append(hdrs, r.Response.Header)
		}
		if next != nil {
			return next(r, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	return resp, append(hdrs, resp.Header), nil
}

// headerInt returns the first non-negative integer value of key in hdrs, or -1.
func headerInt(hdrs []http.Header, key string) int64 {
	for _, h := range hdrs {
		if v := h.Get(key); v != "" {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
				return n
			}
		}
	}
	return -1
}

// linkedSHA returns the SHA-256 the hub announces: X-Linked-ETag, or else
// an ETag, that is 64 hex digits (quotes and a weak W/ prefix removed),
// lowercased; "" when there is none (a git blob's SHA-1 is not used).
func linkedSHA(hdrs []http.Header) string {
	for _, key := range []string{"X-Linked-Etag", "Etag"} {
		for _, h := range hdrs {
			if s := asSHA256(h.Get(key)); s != "" {
				return s
			}
		}
	}
	return ""
}

func asSHA256(etag string) string {
	s := strings.Trim(strings.TrimPrefix(strings.TrimSpace(etag), "W/"), `"`)
	if len(s) != 64 {
		return ""
	}
	if _, err := hex.DecodeString(s); err != nil {
		return ""
	}
	return strings.ToLower(s)
}

// parseContentRange reads "bytes START-END/TOTAL" (TOTAL may be "*": -1).
func parseContentRange(s string) (start, total int64, ok bool) {
	rest, found := strings.CutPrefix(s, "bytes ")
	if !found {
		return 0, 0, false
	}
	rng, tot, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, false
	}
	a, b, found := strings.Cut(rng, "-")
	if !found {
		return 0, 0, false
	}
	start, err1 := strconv.ParseInt(a, 10, 64)
	end, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || start < 0 || end < start {
		return 0, 0, false
	}
	total = -1
	if tot != "*" {
		t, err := strconv.ParseInt(tot, 10, 64)
		if err != nil || t <= end {
			return 0, 0, false
		}
		total = t
	}
	return start, total, true
}
