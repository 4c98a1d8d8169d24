package hub

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeHub serves one file the way huggingface.co does: the resolve URL
// answers 302 with X-Linked-Size, X-Linked-Etag (the sha256) and
// X-Repo-Commit, and the CDN URL serves the bytes with Range support.
// Its knobs make it misbehave.
type fakeHub struct {
	content []byte

	mu          sync.Mutex
	linkedSize  string // overrides X-Linked-Size
	linkedSHA   string // overrides X-Linked-Etag
	noRedirect  bool   // serve from the resolve URL directly (no X-Linked-*), ETag sha
	ignoreRange bool   // answer 200 to Range requests
	cutAfter    int    // cut the connection after this many body bytes (once), 0 = never
	stall       bool   // after 64 KiB, wait for the client to go away
	failFirst   int    // answer 503 to this many requests first
	contentLen  string // overrides Content-Length on 200 responses
	ranges      []string
	auth        []string
	requests    int
}

const testRef = "owner/repo:models/tiny.gguf"

func newFakeHub(t *testing.T, size int) (*fakeHub, *httptest.Server) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(size), 1))
	h := &fakeHub{content: make([]byte, size)}
	for i := range h.content {
		h.content[i] = byte(rng.Uint32())
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return h, srv
}

func (h *fakeHub) sha() string {
	s := sha256.Sum256(h.content)
	return hex.EncodeToString(s[:])
}

func (h *fakeHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.requests++
	h.auth = append(h.auth, r.Header.Get("Authorization"))
	fail := h.failFirst > 0
	if fail {
		h.failFirst--
	}
	h.mu.Unlock()
	if fail {
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return
	}
	switch r.URL.Path {
	case "/owner/repo/resolve/main/models/tiny.gguf":
		if h.noRedirect {
			w.Header().Set("ETag", `"`+h.sha()+`"`)
			h.serveBytes(w, r)
			return
		}
		size, sha := strconv.Itoa(len(h.content)), h.sha()
		if h.linkedSize != "" {
			size = h.linkedSize
		}
		if h.linkedSHA != "" {
			sha = h.linkedSHA
		}
		w.Header().Set("X-Linked-Size", size)
		w.Header().Set("X-Linked-Etag", `"`+sha+`"`)
		w.Header().Set("X-Repo-Commit", "c0ffee")
		w.Header().Set("ETag", `"a94a8fe5ccb19ba61c4c0873d391e987982fbbd3"`)
		http.Redirect(w, r, "/cdn/blob?sig=1", http.StatusFound)
	case "/cdn/blob":
		w.Header().Set("ETag", `"0123abcd-17"`) // a CDN's own, not a sha256
		h.serveBytes(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (h *fakeHub) serveBytes(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.ranges = append(h.ranges, r.Header.Get("Range"))
	ignore, cut, stall, clen := h.ignoreRange, h.cutAfter, h.stall, h.contentLen
	h.cutAfter = 0
	h.mu.Unlock()

	body := h.content
	if rg := r.Header.Get("Range"); rg != "" && !ignore {
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(rg, "bytes="), "-"))
		if err != nil || n < 0 {
			http.Error(w, "bad range", http.StatusBadRequest)
			return
		}
		if n >= len(h.content) {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", len(h.content)))
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return
		}
		body = h.content[n:]
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", n, len(h.content)-1, len(h.content)))
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusPartialContent)
	} else {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		if clen != "" {
			w.Header().Set("Content-Length", clen)
			if n, _ := strconv.Atoi(clen); n < len(body) {
				body = body[:n]
			}
		}
		w.WriteHeader(http.StatusOK)
	}
	switch {
	case cut > 0:
		w.Write(body[:cut])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // drop the connection mid-body
	case stall:
		w.Write(body[:64<<10])
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	default:
		w.Write(body)
	}
}

func newClient(t *testing.T, srv *httptest.Server) *Client {
	return &Client{BaseURL: srv.URL, CacheDir: t.TempDir(), HTTP: srv.Client(), retryDelay: time.Millisecond}
}

func mustRef(t *testing.T) Ref {
	r, err := ParseRef(testRef)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func checkFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes, content differs from the %d served", path, len(got), len(want))
	}
	if _, err := os.Stat(path + ".partial"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("partial file left behind: %v", err)
	}
}

func TestFetchFresh(t *testing.T) {
	h, srv := newFakeHub(t, 1<<20+123)
	c := newClient(t, srv)
	c.Token = "hf_secret"
	var last [2]int64
	calls := 0
	c.Progress = func(done, total int64) { last = [2]int64{done, total}; calls++ }
	path, err := c.Fetch(context.Background(), mustRef(t))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(c.CacheDir, "owner", "repo", "models", "tiny.gguf"); path != want {
		t.Fatalf("path %s, want %s", path, want)
	}
	checkFile(t, path, h.content)
	if n := int64(len(h.content)); last != [2]int64{n, n} || calls < 2 {
		t.Errorf("last progress %v after %d calls, want [%d %d]", last, calls, n, n)
	}
	for _, a := range h.auth {
		if a != "Bearer hf_secret" {
			t.Errorf("Authorization %q", a)
		}
	}
	var m meta
	b, err := os.ReadFile(path + ".meta.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Size != int64(len(h.content)) || m.SHA256 != h.sha() || m.Hub != h.sha() || m.Commit != "c0ffee" || m.Ref != testRef {
		t.Errorf("sidecar %+v", m)
	}
}

func TestFetchResume(t *testing.T) {
	const size = 3<<20 + 7
	t.Run("next call resumes", func(t *testing.T) {
		h, srv := newFakeHub(t, size)
		const cut = 1<<20 + 5
		h.cutAfter = cut
		c := newClient(t, srv)
		_, err := c.Fetch(context.Background(), mustRef(t))
		if err == nil || !strings.Contains(err.Error(), "interrupted") {
			t.Fatalf("first Fetch: err = %v, want an interruption", err)
		}
		dest := c.Path(mustRef(t))
		st, err := os.Stat(dest + ".partial")
		if err != nil || st.Size() == 0 || st.Size() > cut {
			t.Fatalf("partial after the cut: %v %v", st, err)
		}
		have := st.Size()
		path, err := c.Fetch(context.Background(), mustRef(t))
		if err != nil {
			t.Fatal(err)
		}
		checkFile(t, path, h.content)
		if got, want := h.ranges[len(h.ranges)-1], fmt.Sprintf("bytes=%d-", have); got != want {
			t.Fatalf("resume sent Range %q, want %q", got, want)
		}
	})
	t.Run("retries resume in one call", func(t *testing.T) {
		h, srv := newFakeHub(t, size)
		h.cutAfter = 777777
		c := newClient(t, srv)
		c.Retries = 1
		path, err := c.Fetch(context.Background(), mustRef(t))
		if err != nil {
			t.Fatal(err)
		}
		checkFile(t, path, h.content)
		if len(h.ranges) != 2 || h.ranges[0] != "" || !strings.HasPrefix(h.ranges[1], "bytes=") {
			t.Fatalf("ranges %q", h.ranges)
		}
	})
	t.Run("partial already complete", func(t *testing.T) {
		// the process died between verification and rename: the server
		// answers 416 and the partial file is verified as it is
		h, srv := newFakeHub(t, 1000)
		c := newClient(t, srv)
		dest := c.Path(mustRef(t))
		os.MkdirAll(filepath.Dir(dest), 0o755)
		os.WriteFile(dest+".partial", h.content, 0o644)
		path, err := c.Fetch(context.Background(), mustRef(t))
		if err != nil {
			t.Fatal(err)
		}
		checkFile(t, path, h.content)
	})
	t.Run("partial longer than the file", func(t *testing.T) {
		h, srv := newFakeHub(t, 1000)
		c := newClient(t, srv)
		dest := c.Path(mustRef(t))
		os.MkdirAll(filepath.Dir(dest), 0o755)
		os.WriteFile(dest+".partial", make([]byte, 1500), 0o644)
		path, err := c.Fetch(context.Background(), mustRef(t))
		if err != nil {
			t.Fatal(err)
		}
		checkFile(t, path, h.content)
	})
}

func TestFetchServerIgnoresRange(t *testing.T) {
	h, srv := newFakeHub(t, 1<<20)
	h.ignoreRange = true
	c := newClient(t, srv)
	dest := c.Path(mustRef(t))
	os.MkdirAll(filepath.Dir(dest), 0o755)
	// a wrong partial: appending to it would fail the sha256 check
	os.WriteFile(dest+".partial", bytes.Repeat([]byte{0xAA}, 4096), 0o644)
	path, err := c.Fetch(context.Background(), mustRef(t))
	if err != nil {
		t.Fatal(err)
	}
	checkFile(t, path, h.content)
	if h.ranges[0] != "bytes=4096-" {
		t.Fatalf("Range %q, want bytes=4096-", h.ranges[0])
	}
}

func TestFetchVerification(t *testing.T) {
	cases := []struct {
		name string
		edit func(*fakeHub)
		want string
	}{
		{"sha mismatch", func(h *fakeHub) { h.linkedSHA = strings.Repeat("ab", 32) }, "sha256"},
		{"hub size larger", func(h *fakeHub) { h.linkedSize = strconv.Itoa(len(h.content) + 10) }, "announces"},
		{"hub size smaller", func(h *fakeHub) { h.linkedSize = strconv.Itoa(len(h.content) - 10) }, "announces"},
		{"body shorter than hub size", func(h *fakeHub) { h.contentLen = strconv.Itoa(len(h.content) - 10) }, "announces"},
		{"no redirect, ETag sha256 mismatch", nil, "sha256"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, srv := newFakeHub(t, 200000)
			if c.edit != nil {
				c.edit(h)
			} else { // a plain server whose ETag is a wrong sha256
				srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("ETag", `"`+strings.Repeat("cd", 32)+`"`)
					h.serveBytes(w, r)
				})
			}
			cl := newClient(t, srv)
			_, err := cl.Fetch(context.Background(), mustRef(t))
			if !errors.Is(err, ErrVerify) {
				t.Fatalf("err = %v, want ErrVerify", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not mention %q", err, c.want)
			}
			dest := cl.Path(mustRef(t))
			for _, p := range []string{dest, dest + ".partial", dest + ".meta.json"} {
				if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s exists after a failed verification", filepath.Base(p))
				}
			}
		})
	}
	t.Run("size only when no sha256 is announced", func(t *testing.T) {
		h, srv := newFakeHub(t, 5000)
		srv.Config.Handler = http.HandlerFunc(h.serveBytes) // no X-Linked-*, no ETag
		c := newClient(t, srv)
		path, err := c.Fetch(context.Background(), mustRef(t))
		if err != nil {
			t.Fatal(err)
		}
		checkFile(t, path, h.content)
	})
	t.Run("ETag sha256 without redirect", func(t *testing.T) {
		h, srv := newFakeHub(t, 5000)
		h.noRedirect = true
		c := newClient(t, srv)
		path, err := c.Fetch(context.Background(), mustRef(t))
		if err != nil {
			t.Fatal(err)
		}
		checkFile(t, path, h.content)
	})
}

func TestFetchHTTPErrors(t *testing.T) {
	_, srv := newFakeHub(t, 100)
	c := newClient(t, srv)
	_, err := c.Fetch(context.Background(), Ref{Repo: "owner/missing", File: "x.gguf"})
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "404") || !strings.Contains(err.Error(), "owner/missing:x.gguf") {
		t.Fatalf("404: err = %v", err)
	}
	if _, err := os.Stat(c.Path(Ref{Repo: "owner/missing", File: "x.gguf"}) + ".partial"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("404 left a partial file: %v", err)
	}

	srv401 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "gated", http.StatusUnauthorized)
	}))
	defer srv401.Close()
	c = newClient(t, srv401)
	if _, err := c.Fetch(context.Background(), mustRef(t)); !errors.Is(err, ErrAccess) {
		t.Fatalf("401: err = %v", err)
	}

	h, srv := newFakeHub(t, 3000)
	h.failFirst = 2
	c = newClient(t, srv)
	if _, err := c.Fetch(context.Background(), mustRef(t)); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("503 without retries: err = %v", err)
	}
	h.failFirst = 2
	c.Retries = 2
	path, err := c.Fetch(context.Background(), mustRef(t))
	if err != nil {
		t.Fatalf("503 twice then OK with 2 retries: %v", err)
	}
	checkFile(t, path, h.content)

	c = &Client{BaseURL: srv.URL}
	if _, err := c.Fetch(context.Background(), mustRef(t)); err == nil {
		t.Fatal("empty CacheDir accepted")
	}
	if _, err := newClient(t, srv).Fetch(context.Background(), Ref{Repo: "o/r", File: "../x"}); !errors.Is(err, ErrBadRef) {
		t.Fatalf("bad ref: %v", err)
	}
}

func TestFetchCancel(t *testing.T) {
	h, srv := newFakeHub(t, 1<<20)
	h.stall = true
	c := newClient(t, srv)
	c.Retries = 3
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.Progress = func(done, total int64) {
		if done > 0 {
			cancel()
		}
	}
	start := time.Now()
	_, err := c.Fetch(ctx, mustRef(t))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("cancellation took too long")
	}
	dest := c.Path(mustRef(t))
	st, err := os.Stat(dest + ".partial")
	if err != nil || st.Size() == 0 {
		t.Fatalf("partial not kept after cancel: %v %v", st, err)
	}
	have := st.Size()

	h.mu.Lock()
	h.stall = false
	h.mu.Unlock()
	c.Progress = nil
	path, err := c.Fetch(context.Background(), mustRef(t))
	if err != nil {
		t.Fatal(err)
	}
	checkFile(t, path, h.content)
	if got := h.ranges[len(h.ranges)-1]; got != fmt.Sprintf("bytes=%d-", have) {
		t.Fatalf("resume after cancel sent Range %q, have %d", got, have)
	}
}

func TestFetchCachedOffline(t *testing.T) {
	h, srv := newFakeHub(t, 4096)
	c := newClient(t, srv)
	path, err := c.Fetch(context.Background(), mustRef(t))
	if err != nil {
		t.Fatal(err)
	}
	srv.Close() // from now on any request fails
	n := h.requests
	got, err := c.Fetch(context.Background(), mustRef(t))
	if err != nil || got != path {
		t.Fatalf("cached Fetch = %q, %v", got, err)
	}
	if h.requests != n {
		t.Fatal("cached Fetch used the network")
	}

	// a file whose size no longer matches its sidecar is fetched again
	if err := os.Truncate(path, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fetch(context.Background(), mustRef(t)); err == nil {
		t.Fatal("truncated cached file accepted offline")
	}

	// a file placed by hand (no sidecar) is used as it is
	os.Remove(path + ".meta.json")
	if got, err := c.Fetch(context.Background(), mustRef(t)); err != nil || got != path {
		t.Fatalf("hand-placed file: %q, %v", got, err)
	}
}

func TestFetchBusy(t *testing.T) {
	_, srv := newFakeHub(t, 100)
	c := newClient(t, srv)
	dest := c.Path(mustRef(t))
	os.MkdirAll(filepath.Dir(dest), 0o755)
	f, err := os.OpenFile(dest+".partial", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := lockFile(f); err != nil {
		t.Skipf("no file locking here: %v", err)
	}
	if _, err := c.Fetch(context.Background(), mustRef(t)); !errors.Is(err, ErrBusy) {
		t.Fatalf("err = %v, want ErrBusy", err)
	}
}
