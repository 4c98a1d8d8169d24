package configs

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// FuzzLoad: any profile text loads or is an error, never a panic; a loaded
// profile is valid and survives Marshal and Load unchanged (so no key was
// silently dropped on the way). Seeds: the built-in profiles, read at test
// time, and a few broken ones.
func FuzzLoad(f *testing.F) {
	paths, _ := filepath.Glob("*.yaml")
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	for _, s := range []string{"", "{}", "nokey: 1", "hardware: {threads: -1}", "flags: {'': 1}", "a: &x [*x]", "---\n---\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := Load(bytes.NewReader(data))
		if err != nil {
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("Load accepted an invalid profile: %v", err)
		}
		out, err := Marshal(l.Config)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		l2, err := Load(bytes.NewReader(out))
		if err != nil {
			t.Fatalf("a marshalled profile does not load: %v\n%s", err, out)
		}
		// An empty list and no list are the same setting (isa: [] is
		// written as nothing: fuzz finding in testdata/fuzz/FuzzLoad).
		if d := cmp.Diff(l.Config, l2.Config, cmpopts.EquateEmpty()); d != "" {
			t.Fatalf("round trip changed the profile (-loaded +reloaded):\n%s", d)
		}
	})
}
