// This file decodes profiles: strict YAML (unknown keys are errors) over
// the defaults, plus the set of keys the file actually wrote, which cmd
// needs to let a file override the environment only where it says
// something.

package configs

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Loaded is a decoded profile.
type Loaded struct {
	Config
	// Set holds the dotted key of every key the file wrote, leaves and
	// sections alike: "pipeline", "pipeline.kv_cache.type_k", "flags.seed".
	Set map[string]bool
	// Source names where it came from (a path, "builtin:NAME", or "").
	Source string
	// Derived maps each key whose value Derive took from another key to
	// that key ("pipeline.threads": "hardware.cores").
	Derived map[string]string
}

// IsSet reports whether the file wrote key (dotted, as in Set).
func (l *Loaded) IsSet(key string) bool { return l.Set[key] }

// maxProfileBytes bounds a profile file.
const maxProfileBytes = 1 << 20

// Load decodes a profile from r over Default and validates it. Unknown keys
// and values of the wrong type are errors naming their line; an empty
// document gives the defaults.
func Load(r io.Reader) (Loaded, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxProfileBytes+1))
	if err != nil {
		return Loaded{}, fmt.Errorf("configs: reading profile: %w", err)
	}
	if len(data) > maxProfileBytes {
		return Loaded{}, fmt.Errorf("configs: profile larger than %d bytes", maxProfileBytes)
	}
	l := Loaded{Config: Default(), Set: map[string]bool{}}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&l.Config); err != nil && !errors.Is(err, io.EOF) {
		var root yaml.Node
		if yaml.Unmarshal(data, &root) == nil && len(root.Content) > 0 {
			set := map[string]bool{}
			collectKeys(root.Content[0], "", set)
			if set["pipeline.kv_cache.type"] {
				return Loaded{}, errors.New("configs: pipeline.kv_cache.type was replaced by type_k and type_v (llama.cpp's -ctk and -ctv; one of " + strings.Join(KVTypes(), ", ") + " each)")
			}
		}
		return Loaded{}, fmt.Errorf("configs: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return Loaded{}, errors.New("configs: a profile must be a single YAML document")
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return Loaded{}, fmt.Errorf("configs: %w", err)
	}
	if len(root.Content) > 0 {
		collectKeys(root.Content[0], "", l.Set)
	}
	for k, v := range l.Flags {
		if k == "" || strings.ContainsAny(k, " =") {
			return Loaded{}, fmt.Errorf("configs: flags: %q is not a flag name", k)
		}
		if _, ok := v.(map[string]any); ok {
			return Loaded{}, fmt.Errorf("configs: flags.%s: want a value, not a mapping", k)
		}
	}
	if err := l.Validate(); err != nil {
		return Loaded{}, err
	}
	return l, nil
}

// collectKeys records the dotted path of every mapping key under n.
func collectKeys(n *yaml.Node, prefix string, set map[string]bool) {
	WalkKeys(n, prefix, func(key string, _ *yaml.Node) { set[key] = true })
}

// WalkKeys calls fn with the dotted path (under prefix) and the value of
// every mapping key under n, parents before their children.
func WalkKeys(n *yaml.Node, prefix string, fn func(key string, v *yaml.Node)) {
	if n.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key := n.Content[i].Value
		if prefix != "" {
			key = prefix + "." + key
		}
		fn(key, n.Content[i+1])
		WalkKeys(n.Content[i+1], key, fn)
	}
}

// LoadFile loads the profile at path, or a built-in profile given as
// "builtin:NAME" (see Builtins).
func LoadFile(p string) (Loaded, error) {
	var data []byte
	var err error
	if name, ok := strings.CutPrefix(p, "builtin:"); ok {
		data, err = profiles.ReadFile(name + ".yaml")
		if err != nil {
			return Loaded{}, fmt.Errorf("configs: no built-in profile %q (known: %s)", name, strings.Join(Builtins(), ", "))
		}
	} else if data, err = os.ReadFile(p); err != nil {
		return Loaded{}, fmt.Errorf("configs: %w", err)
	}
	l, err := Load(bytes.NewReader(data))
	if err != nil {
		return Loaded{}, fmt.Errorf("%s: %w", p, err)
	}
	l.Source = p
	return l, nil
}

//go:embed *.yaml
var profiles embed.FS

// Builtins returns the names of the profiles shipped in this directory.
func Builtins() []string {
	entries, _ := profiles.ReadDir(".")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), path.Ext(e.Name())))
	}
	slices.Sort(names)
	return names
}

// Marshal writes c as a profile, with the hardware, pipeline, sampling and
// server sections in that order.
func Marshal(c Config) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
		return nil, fmt.Errorf("configs: %w", err)
	}
	enc.Close()
	return b.Bytes(), nil
}
