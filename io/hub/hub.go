// Package hub downloads model files from a Hugging Face-style hub into a
// local cache, for `flowinfer run --hf owner/repo:file.gguf` (like
// llama.cpp's -hf and ollama pull).
//
// A file is fetched from {BaseURL}/{owner}/{repo}/resolve/{revision}/{file}
// into {CacheDir}/{owner}/{repo}/{file} (a revision other than main goes to
// {CacheDir}/{owner}/{repo}@{revision}/{file}, the revision path-escaped).
// Bytes go to {file}.partial first; an interrupted download resumes from
// there with a Range request. The file is verified (size against
// X-Linked-Size or Content-Length, SHA-256 against X-Linked-ETag or ETag
// when that is a SHA-256, which is what the hub sends for LFS files) before
// it is renamed into place, and a sidecar {file}.meta.json records what was
// verified. A file already in the cache whose size matches its sidecar is
// returned without touching the network.
//
// It does not resolve quantization tags (llama.cpp's `-hf repo:Q4_K_M`),
// list repositories, or download several files of a split model at once.
package hub

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// DefaultBaseURL is the hub used when Client.BaseURL is empty.
const DefaultBaseURL = "https://huggingface.co"

// DefaultRevision is the revision used when a Ref names none.
const DefaultRevision = "main"

// Errors that Fetch wraps; match them with errors.Is.
var (
	ErrBadRef   = errors.New("bad model reference")
	ErrNotFound = errors.New("not found on the hub")
	ErrAccess   = errors.New("access denied by the hub")
	ErrVerify   = errors.New("downloaded file failed verification")
	ErrBusy     = errors.New("another download of this file is in progress")
)

// Client fetches files into a cache directory. The zero value is not
// usable: CacheDir is required.
type Client struct {
	// BaseURL is the hub's address; DefaultBaseURL when empty.
	BaseURL string
	// CacheDir is the root of the cache.
	CacheDir string
	// HTTP is the client used for requests; a plain http.Client when nil.
	// Its CheckRedirect, if any, still applies.
	HTTP *http.Client
	// Token, when set, is sent as "Authorization: Bearer <Token>" (gated or
	// private repositories). Go's client drops it on redirects to another
	// host, such as the hub's CDN.
	Token string
	// Progress, when set, is called as bytes arrive with the bytes on disk
	// so far (including resumed ones) and the expected total (-1 when
	// unknown). It is called often; throttle display in the callback.
	Progress func(done, total int64)
	// Retries is how many more times Fetch tries after a transient failure
	// (dropped connection, 5xx), each time resuming from the partial file.
	// 0 means one attempt. Retries that follow a failure without progress
	// wait 1 s, then twice as long each time (at most 30 s).
	Retries int

	retryDelay time.Duration // first backoff; tests shorten it
}

// Ref names one file in one repository at one revision.
type Ref struct {
	Repo     string // "owner/name"
	File     string // path inside the repository, "/"-separated
	Revision string // branch, tag or commit; DefaultRevision when empty
}

// String returns the reference in the form ParseRef reads.
func (r Ref) String() string {
	s := r.Repo
	if r.Revision != "" && r.Revision != DefaultRevision {
		s += "@" + r.Revision
	}
	return s + ":" + r.File
}

func (r Ref) revision() string {
	if r.Revision == "" {
		return DefaultRevision
	}
	return r.Revision
}

// ParseRef reads "owner/repo:path/to/file.gguf" or, with a revision (branch,
// tag, commit hash or "refs/pr/N"), "owner/repo@revision:path/to/file.gguf".
// It rejects anything that could escape the cache directory: absolute
// paths, "." and ".." segments, backslashes, empty segments, control
// characters.
func ParseRef(s string) (Ref, error) {
	repo, file, ok := strings.Cut(s, ":")
	if !ok {
		return Ref{}, fmt.Errorf("hub: %w %q: want owner/repo:file (optionally owner/repo@revision:file)", ErrBadRef, s)
	}
	r := Ref{File: file}
	var hasRev bool
	r.Repo, r.Revision, hasRev = strings.Cut(repo, "@")
	if hasRev && r.Revision == "" {
		return Ref{}, fmt.Errorf("hub: %w %q: empty revision after '@'", ErrBadRef, s)
	}
	if err := r.Validate(); err != nil {
		return Ref{}, err
	}
	return r, nil
}

// Validate checks that the reference is well formed and safe to map to a
// cache path.
func (r Ref) Validate() error {
	bad := func(what, v, why string) error {
		return fmt.Errorf("hub: %w: %s %q %s", ErrBadRef, what, v, why)
	}
	owner, name, ok := strings.Cut(r.Repo, "/")
	if !ok || strings.Contains(name, "/") {
		return bad("repository", r.Repo, "is not owner/name")
	}
	for _, seg := range []string{owner, name} {
		if err := checkName(seg); err != "" {
			return bad("repository", r.Repo, err)
		}
	}
	if r.File == "" {
		return bad("file", r.File, "is empty")
	}
	if len(r.File) > 1024 {
		return bad("file", r.File[:64]+"...", "is too long")
	}
	if err := checkPath(r.File); err != "" {
		return bad("file", r.File, err)
	}
	if r.Revision != "" {
		if len(r.Revision) > 256 {
			return bad("revision", r.Revision[:64]+"...", "is too long")
		}
		if err := checkPath(r.Revision); err != "" {
			return bad("revision", r.Revision, err)
		}
	}
	return nil
}

// checkName accepts a hub owner or repository name: ASCII letters, digits,
// '-', '_', '.', not starting with '.' or '-', at most 96 bytes.
func checkName(s string) string {
	if s == "" || len(s) > 96 {
		return "has an empty or over-long name"
	}
	if s[0] == '.' || s[0] == '-' {
		return "has a name starting with '.' or '-'"
	}
	if strings.Contains(s, "..") {
		return `contains ".."`
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Sprintf("contains %q", c)
		}
	}
	return ""
}

// checkPath accepts a relative "/"-separated path with no empty, "." or
// ".." segments, no backslash, no control characters and no ':' (which
// would be ambiguous in a reference and is a drive separator on Windows).
func checkPath(s string) string {
	if strings.HasPrefix(s, "/") {
		return "is absolute"
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f || c == '\\' || c == ':' {
			return fmt.Sprintf("contains %q", c)
		}
	}
	for seg := range strings.SplitSeq(s, "/") {
		switch seg {
		case "":
			return "has an empty path segment"
		case ".", "..":
			return fmt.Sprintf("has a %q segment", seg)
		}
	}
	return ""
}

// URL returns where the file is downloaded from.
func (c *Client) URL(r Ref) string {
	base := strings.TrimSuffix(c.BaseURL, "/")
	if base == "" {
		base = DefaultBaseURL
	}
	var segs []string
	for seg := range strings.SplitSeq(r.File, "/") {
		segs = append(segs, url.PathEscape(seg))
	}
	return base + "/" + r.Repo + "/resolve/" + url.PathEscape(r.revision()) + "/" + strings.Join(segs, "/")
}

// Path returns where the file is cached (it may not exist yet).
func (c *Client) Path(r Ref) string {
	owner, name, _ := strings.Cut(r.Repo, "/")
	if rev := r.revision(); rev != DefaultRevision {
		name += "@" + url.PathEscape(rev)
	}
	return filepath.Join(c.CacheDir, owner, name, filepath.FromSlash(path.Clean(r.File)))
}
