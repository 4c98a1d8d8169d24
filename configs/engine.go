package configs

import (
	"fmt"
	"slices"
	"strings"
)

// IOEngine is how the weight path reads weights beyond the RAM budget
// (pipeline.io_engine, --io-engine).
type IOEngine string

// The I/O engines.
const (
	// EnginePread reads with pread(2), O_DIRECT where the filesystem
	// allows, into the expert cache and layer slots (the default).
	EnginePread IOEngine = "pread"
	// EngineIOUring issues the same reads through an io_uring (Linux).
	EngineIOUring IOEngine = "io_uring"
	// EngineMmap maps the whole file and lets the kernel page it: no
	// budget.
	EngineMmap IOEngine = "mmap"
)

// IOEngines returns the known values of pipeline.io_engine, the default
// first.
func IOEngines() []IOEngine { return []IOEngine{EnginePread, EngineIOUring, EngineMmap} }

// ParseIOEngine returns the engine named s.
func ParseIOEngine(s string) (IOEngine, error) {
	e := IOEngine(s)
	if !slices.Contains(IOEngines(), e) {
		return "", fmt.Errorf("unknown io_engine %q (supported: %s)", s, strings.Join(names(IOEngines()), ", "))
	}
	return e, nil
}

// CachePolicy is the expert cache's eviction policy (--expert-cache-policy;
// no profile key).
type CachePolicy string

// The expert cache policies.
const (
	// PolicySLRU is a segmented LRU: experts used again are protected from
	// one-off uses (the default).
	PolicySLRU CachePolicy = "slru"
	// PolicyLRU evicts the least recently used expert.
	PolicyLRU CachePolicy = "lru"
)

// CachePolicies returns the known expert cache policies.
func CachePolicies() []CachePolicy { return []CachePolicy{PolicySLRU, PolicyLRU} }

// ParseCachePolicy returns the policy named s.
func ParseCachePolicy(s string) (CachePolicy, error) {
	p := CachePolicy(s)
	if !slices.Contains(CachePolicies(), p) {
		return "", fmt.Errorf("unknown expert cache policy %q (supported: %s)", s, strings.Join(names(CachePolicies()), ", "))
	}
	return p, nil
}

// names returns vs as strings.
func names[T ~string](vs []T) []string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = string(v)
	}
	return s
}
