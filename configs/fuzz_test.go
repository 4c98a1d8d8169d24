package configs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.yaml.in/yaml/v3"
)

// maxFuzzBytes is the length of profile text FuzzLoad tries: longer inputs
// are cut to it. Go's fuzzer minimizes every input that adds coverage
// before it reports anything (golang/go#48820), and its minimizer tries
// every cut of the input: up to n²/2 runs for n bytes. The YAML scanner
// reads every byte, so any longer input changes some loop's hit count,
// which counts as new coverage; minimizing a 1236-byte profile took 287k
// runs and 43 s, and inputs the mutator grew to 4 KB never finished within
// -fuzzminimizetime (60 s), all with 0 execs/s reported. At 256 bytes a
// minimization is at most ~33k runs (a few seconds); every key fits.
const maxFuzzBytes = 256

// FuzzLoad: any profile text loads or is an error, never a panic; a loaded
// profile is valid and survives Marshal and Load unchanged (so no key was
// silently dropped on the way). Seeds: every section of every built-in
// profile on its own, without comments (at most maxFuzzBytes long), a few profiles
// combining sections the way Validate checks them together, and a few
// broken ones.
func FuzzLoad(f *testing.F) {
	seeds, err := profileSections()
	if err != nil {
		f.Fatal(err)
	}
	seeds = append(seeds,
		"", "{}", "nokey: 1", "hardware: {threads: -1}", "flags: {'': 1}", "a: &x [*x]", "---\n---\n",
		"# comment\nprofile: x # trailing\n",
		"hardware: {ram: 8GiB}\npipeline: {ram_pool: 4GiB}\n",
		"hardware: {gpus: [{name: g, vram: 12GiB}]}\npipeline: {backend: vulkan, vram: 11GiB}\n",
		"pipeline: {kv_cache: {type: q8_0}}\n",
	)
	for _, s := range seeds {
		if len(s) > maxFuzzBytes {
			f.Fatalf("seed of %d bytes (at most %d: see maxFuzzBytes):\n%s", len(s), maxFuzzBytes, s)
		}
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > maxFuzzBytes {
			data = data[:maxFuzzBytes]
		}
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
		// The comparison runs through cmp only on a difference, so that
		// cmp's own code paths are not coverage the fuzzer chases.
		a, b := l.Config, l2.Config
		emptyToNil(&a)
		emptyToNil(&b)
		if !reflect.DeepEqual(a, b) {
			d := cmp.Diff(l.Config, l2.Config, cmpopts.EquateEmpty())
			t.Fatalf("round trip changed the profile (-loaded +reloaded):\n%s", d)
		}
	})
}

// emptyToNil makes c's empty lists and maps nil: no list and an empty
// list are the same setting.
func emptyToNil(c *Config) {
	if len(c.Hardware.ISA) == 0 {
		c.Hardware.ISA = nil
	}
	if len(c.Hardware.GPUs) == 0 {
		c.Hardware.GPUs = nil
	}
	if len(c.Flags) == 0 {
		c.Flags = nil
	}
}

// profileSections returns the keys of the built-in profiles as small
// profiles of their own, without comments: each top-level key whole when
// it is at most maxFuzzBytes/2 long, else each of its keys apart
// ("pipeline:\n  threads: 2\n"), each seed once.
func profileSections() ([]string, error) {
	paths, err := filepath.Glob("*.yaml")
	if err != nil {
		return nil, err
	}
	var seeds []string
	seen := map[string]bool{}
	add := func(key, value *yaml.Node) error {
		n := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{key, value}}
		var b bytes.Buffer
		enc := yaml.NewEncoder(&b)
		enc.SetIndent(2)
		if err := enc.Encode(n); err != nil {
			return err
		}
		enc.Close()
		if s := b.String(); !seen[s] {
			seen[s] = true
			seeds = append(seeds, s)
		}
		return nil
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var root yaml.Node
		if err := yaml.Unmarshal(data, &root); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		doc := root.Content[0]
		dropComments(doc)
		for i := 0; i+1 < len(doc.Content); i += 2 {
			key, sec := doc.Content[i], doc.Content[i+1]
			whole, err := yaml.Marshal(&yaml.Node{Kind: yaml.MappingNode, Content: doc.Content[i : i+2]})
			if err != nil {
				return nil, err
			}
			if sec.Kind != yaml.MappingNode || len(whole) <= maxFuzzBytes/2 {
				if err := add(key, sec); err != nil {
					return nil, err
				}
				continue
			}
			for j := 0; j+1 < len(sec.Content); j += 2 {
				part := &yaml.Node{Kind: yaml.MappingNode, Content: sec.Content[j : j+2]}
				if err := add(key, part); err != nil {
					return nil, err
				}
			}
		}
	}
	return seeds, nil
}

func dropComments(n *yaml.Node) {
	n.HeadComment, n.LineComment, n.FootComment = "", "", ""
	for _, c := range n.Content {
		dropComments(c)
	}
}
