package hub

import (
	"errors"
	"path/filepath"
	"testing"
)

func TestParseRef(t *testing.T) {
	ok := []struct {
		in   string
		want Ref
	}{
		{"owner/repo:model.gguf", Ref{Repo: "owner/repo", File: "model.gguf"}},
		{"Qwen/Qwen3-0.6B-GGUF:Qwen3-0.6B-Q8_0.gguf", Ref{Repo: "Qwen/Qwen3-0.6B-GGUF", File: "Qwen3-0.6B-Q8_0.gguf"}},
		{"o/r:sub/dir/m-00001-of-00002.gguf", Ref{Repo: "o/r", File: "sub/dir/m-00001-of-00002.gguf"}},
		{"o/r@v1.0:m.gguf", Ref{Repo: "o/r", File: "m.gguf", Revision: "v1.0"}},
		{"o/r@refs/pr/3:m.gguf", Ref{Repo: "o/r", File: "m.gguf", Revision: "refs/pr/3"}},
		{"o/r@0123456789abcdef0123456789abcdef01234567:m.gguf", Ref{Repo: "o/r", File: "m.gguf", Revision: "0123456789abcdef0123456789abcdef01234567"}},
		{"o/r:weird name@1.gguf", Ref{Repo: "o/r", File: "weird name@1.gguf"}},
	}
	for _, c := range ok {
		t.Run(c.in, func(t *testing.T) {
			got, err := ParseRef(c.in)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("ParseRef = %+v, want %+v", got, c.want)
			}
			if back, err := ParseRef(got.String()); err != nil || back != got {
				t.Fatalf("String() = %q does not round-trip: %+v %v", got.String(), back, err)
			}
		})
	}
	bad := []string{
		"", "model.gguf", "owner/repo", "owner/repo:", ":m.gguf", "repo:m.gguf",
		"a/b/c:m.gguf", "o/r:../m.gguf", "o/r:sub/../../m.gguf", "o/r:/etc/passwd",
		"o/r:./m.gguf", "o/r:sub//m.gguf", "o/r:sub/", `o/r:..\m.gguf`, "o/r:m\x00.gguf",
		"../r:m.gguf", "o/..:m.gguf", "o/.hidden:m.gguf", "o/r r:m.gguf", "o/r@:m.gguf",
		"o/r@../x:m.gguf", "o/r@/abs:m.gguf", "o/r:c:m.gguf", "o/r@a\nb:m.gguf",
	}
	for _, in := range bad {
		t.Run("bad/"+in, func(t *testing.T) {
			if r, err := ParseRef(in); err == nil {
				t.Fatalf("ParseRef(%q) = %+v, want an error", in, r)
			} else if !errors.Is(err, ErrBadRef) {
				t.Fatalf("error %v does not wrap ErrBadRef", err)
			}
		})
	}
}

func TestURLAndPath(t *testing.T) {
	c := &Client{BaseURL: "http://hub.test/", CacheDir: "/cache"}
	cases := []struct {
		ref       string
		url, path string
	}{
		{"o/r:m.gguf", "http://hub.test/o/r/resolve/main/m.gguf", "/cache/o/r/m.gguf"},
		{"o/r@main:m.gguf", "http://hub.test/o/r/resolve/main/m.gguf", "/cache/o/r/m.gguf"},
		{"o/r@refs/pr/3:sub/a b.gguf", "http://hub.test/o/r/resolve/refs%2Fpr%2F3/sub/a%20b.gguf", "/cache/o/r@refs%2Fpr%2F3/sub/a b.gguf"},
	}
	for _, cs := range cases {
		r, err := ParseRef(cs.ref)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.URL(r); got != cs.url {
			t.Errorf("URL(%s) = %s, want %s", cs.ref, got, cs.url)
		}
		if got := c.Path(r); got != filepath.FromSlash(cs.path) {
			t.Errorf("Path(%s) = %s, want %s", cs.ref, got, cs.path)
		}
	}
	if got := (&Client{}).URL(Ref{Repo: "o/r", File: "m.gguf"}); got != "https://huggingface.co/o/r/resolve/main/m.gguf" {
		t.Errorf("default base URL: %s", got)
	}
}

func TestParseContentRange(t *testing.T) {
	cases := []struct {
		in           string
		start, total int64
		ok           bool
	}{
		{"bytes 0-99/100", 0, 100, true},
		{"bytes 50-99/*", 50, -1, true},
		{"bytes 50-99/99", 0, 0, false},
		{"bytes */100", 0, 0, false},
		{"bytes 9-3/100", 0, 0, false},
		{"items 0-1/2", 0, 0, false},
	}
	for _, c := range cases {
		s, tot, ok := parseContentRange(c.in)
		if ok != c.ok || (ok && (s != c.start || tot != c.total)) {
			t.Errorf("parseContentRange(%q) = %d %d %v", c.in, s, tot, ok)
		}
	}
}

func TestAsSHA256(t *testing.T) {
	sha := "9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08"
	for in, want := range map[string]string{
		`"` + sha + `"`:   "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		`W/"` + sha + `"`: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		`"a94a8fe5ccb19ba61c4c0873d391e987982fbbd3"`: "", // git blob sha1
		`"` + sha[:63] + `x"`:                        "",
		"":                                           "",
	} {
		if got := asSHA256(in); got != want {
			t.Errorf("asSHA256(%q) = %q, want %q", in, got, want)
		}
	}
}
