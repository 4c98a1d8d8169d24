// Package golden gives tests access to the llama.cpp reference data in
// ../shared/golden (see its README): locating it, its manifest, its raw
// float32 logit files, and the statistics used to compare against them.
//
// When the data is missing a test is skipped, except under CI=true, where it
// fails: CI must never pass by skipping the comparisons.
package golden

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Case is one (model, prompt) reference case of manifest.json.
type Case struct {
	ID              string    `json:"id"`
	Model           string    `json:"model"`
	PromptID        string    `json:"prompt_id"`
	PromptText      string    `json:"prompt_text"`
	NVocab          int       `json:"n_vocab"`
	PromptTokens    []int32   `json:"prompt_token_ids"`
	FirstRow        int       `json:"prompt_logits_first_row"`
	NRows           int       `json:"prompt_logits_n_rows"`
	GenTokens       []int32   `json:"gen_token_ids"`
	GenPiecesHex    []string  `json:"gen_pieces_hex"`
	GenText         string    `json:"gen_text"`
	GenTextHex      string    `json:"gen_text_hex"`
	GenMargins      []float64 `json:"gen_top2_margins"`
	PromptLogits    string    `json:"prompt_logits_file"`
	GenLogits       string    `json:"gen_logits_file"`
	GenFirstEOGStep int       `json:"gen_first_eog_step"`
}

// Prompt is one of the public prompts.
type Prompt struct {
	File     string  `json:"file"`
	Text     string  `json:"text"`
	NTokens  int     `json:"n_tokens"`
	TokenIDs []int32 `json:"token_ids"`
}

// DequantVector is one dequantization test vector.
type DequantVector struct {
	Model  string `json:"model"`
	Tensor string `json:"tensor"`
	Type   string `json:"type"`
	Ne0    int    `json:"ne0"`
	Rows   int    `json:"rows"`
	File   string `json:"file"`
}

// Delta is a measured logit difference.
type Delta struct {
	Rows   int     `json:"rows"`
	MaxAbs float64 `json:"maxabs"`
	RMS    float64 `json:"rms"`
}

// Perplexity is llama-perplexity's figure for one setting.
type Perplexity struct {
	PPL float64 `json:"ppl"`
	PM  float64 `json:"pm"`
}

// Manifest is the part of manifest.json the tests use.
type Manifest struct {
	Cases          []Case            `json:"cases"`
	ExactF32       []Case            `json:"exact_f32_reference_cases"`
	Prompts        map[string]Prompt `json:"prompts"`
	DequantVectors []DequantVector   `json:"dequant_vectors"`
	// MeasuredDeltas["deq_vs_quant"]["synth-llama-Q8_0/P2"] is how far
	// llama.cpp's own logits are from exact float32 arithmetic on the
	// dequantized weights (README §2).
	MeasuredDeltas map[string]map[string]Delta `json:"measured_deltas"`
	Perplexity     struct {
		Model   string     `json:"model"`
		Text    string     `json:"text"`
		Ctx     int        `json:"ctx"`
		KVF16   Perplexity `json:"kv_f16_default"`
		KVF32   Perplexity `json:"kv_f32"`
		Q8KVF32 Perplexity `json:"q8_0_model_kv_f32"`
		NTokens int        `json:"n_text_tokens_with_bos"`
		NChunks int        `json:"n_chunks"`
	} `json:"perplexity"`
}

// find walks up from the working directory looking for shared/golden.
func find() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		for _, c := range []string{filepath.Join(dir, "shared", "golden"), filepath.Join(dir, "..", "shared", "golden")} {
			if st, err := os.Stat(filepath.Join(c, "manifest.json")); err == nil && !st.IsDir() {
				return filepath.Clean(c)
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// Dir returns the golden directory, skipping the test when it is missing
// (failing it under CI=true).
func Dir(tb testing.TB) string {
	tb.Helper()
	d := find()
	if d == "" {
		if os.Getenv("CI") == "true" {
			tb.Fatal("golden data ../shared/golden not found (required under CI=true)")
		}
		tb.Skip("golden data ../shared/golden not found")
	}
	return d
}

var (
	manifestOnce sync.Once
	manifest     *Manifest
	manifestErr  error
)

// Load returns the parsed manifest (parsed once per test binary).
func Load(tb testing.TB) (string, *Manifest) {
	tb.Helper()
	d := Dir(tb)
	manifestOnce.Do(func() {
		b, err := os.ReadFile(filepath.Join(d, "manifest.json"))
		if err != nil {
			manifestErr = err
			return
		}
		manifest = new(Manifest)
		manifestErr = json.Unmarshal(b, manifest)
	})
	if manifestErr != nil {
		tb.Fatalf("golden manifest: %v", manifestErr)
	}
	return d, manifest
}

// ReadF32 reads a raw little-endian float32 file.
func ReadF32(path string) ([]float32, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("%s: %d bytes is not a whole number of float32", path, len(b))
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out, nil
}

// Stats compares rows of logits against a reference.
type Stats struct {
	Rows       int
	MaxAbs     float64
	SumSq      float64
	N          int
	ArgmaxSame int
}

// RMS returns the root mean square difference.
func (s *Stats) RMS() float64 {
	if s.N == 0 {
		return 0
	}
	return math.Sqrt(s.SumSq / float64(s.N))
}

// Agree returns the fraction of rows whose argmax matches.
func (s *Stats) Agree() float64 {
	if s.Rows == 0 {
		return 1
	}
	return float64(s.ArgmaxSame) / float64(s.Rows)
}

// AddRow accumulates one row; NaN or Inf in got counts as an infinite
// difference.
func (s *Stats) AddRow(got, want []float32) {
	s.Rows++
	for i := range want {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if math.IsNaN(d) {
			d = math.Inf(1)
		}
		s.MaxAbs = max(s.MaxAbs, d)
		s.SumSq += d * d
		s.N++
	}
	if Argmax(got) == Argmax(want) {
		s.ArgmaxSame++
	}
}

// Argmax returns the index of the largest value, the lowest on ties.
func Argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// ReadQuoted reads a golden text file of "key: value" lines whose values
// are Go-quoted strings, skipping blank lines and # comments (the llama.txt
// files of bench/testdata and model/testdata).
func ReadQuoted(tb testing.TB, path string) map[string]string {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	m := map[string]string{}
	for line := range strings.SplitSeq(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			tb.Fatalf("%s: bad line %q", path, line)
		}
		s, err := strconv.Unquote(v)
		if err != nil {
			tb.Fatalf("%s: %s: %v", path, k, err)
		}
		m[k] = s
	}
	return m
}

// ParseRunning parses llama-perplexity's running values, "[1]x,[2]y,...".
func ParseRunning(tb testing.TB, s string) []float64 {
	tb.Helper()
	var r []float64
	for f := range strings.SplitSeq(strings.TrimSuffix(strings.TrimSpace(s), ","), ",") {
		var i int
		var p float64
		if _, err := fmt.Sscanf(f, "[%d]%f", &i, &p); err != nil || i != len(r)+1 {
			tb.Fatalf("bad running perplexity value %q", f)
		}
		r = append(r, p)
	}
	return r
}
