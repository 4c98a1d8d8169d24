package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/flowinfer/flowinfer/model"
)

// KLDOptions configures KLDivergence. As for Perplexity, the model.Context
// decides how the model runs.
type KLDOptions struct {
	BOS     int32 // replaces each chunk's first token; -1: none
	Chunks  int   // at most the base's first Chunks chunks; <= 0: all
	Workers int   // goroutines scoring positions; <= 0: 1
	// Progress, if not nil, is called after each chunk with the sums so far
	// (llama-perplexity prints s.ChunkLine(chunk)).
	Progress func(chunk int, s *KLDStats)
}

// KLDResult is the outcome of KLDivergence.
type KLDResult struct {
	Chunks int
	Stats  KLDStats
	KLD    []float32 // per scored position, in order
	PDiff  []float32 // Δp per scored position
}

// BaseFile is an open base file whose header has been read and checked.
type BaseFile struct {
	BaseHeader
	Path string
	f    *os.File
}

// OpenBase opens a base file saved by Perplexity or by llama-perplexity
// --kl-divergence-base and reads its header; its size must be what the
// header says.
func OpenBase(path string) (*BaseFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	size := int64(-1)
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
		size = st.Size()
	}
	h, err := ReadBaseHeader(f, size)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &BaseFile{BaseHeader: h, Path: path, f: f}, nil
}

// Rows returns the reader of the chunks, positioned after the header.
func (b *BaseFile) Rows() io.Reader { return b.f }

// Close closes the file.
func (b *BaseFile) Close() error { return b.f.Close() }

// CheckTokens checks that text (the evaluated text tokenized as
// llama-perplexity does) begins with the base's tokens, and names the first
// difference.
func (h *BaseHeader) CheckTokens(text []int32) error {
	if len(text) < len(h.Tokens) {
		return fmt.Errorf("%w: the text has %d tokens, the base was computed on %d chunks of %d (%d tokens)", ErrBaseFile, len(text), h.NChunk, h.NCtx, len(h.Tokens))
	}
	for i, t := range h.Tokens {
		if text[i] != t {
			return fmt.Errorf("%w: token %d (chunk %d, position %d) is %d in the base and %d in the text", ErrBaseFile, i, i/h.NCtx+1, i%h.NCtx, t, text[i])
		}
	}
	return nil
}

// KLDivergence evaluates the base's tokens in its chunks, as Perplexity
// does, and compares each scored position's distribution with the one the
// base stored; rows reads the base's chunks (after the header). The base's
// n_vocab must be the model's and its n_ctx must fit mctx.
func KLDivergence(ctx context.Context, mctx *model.Context, h *BaseHeader, rows io.Reader, opt KLDOptions) (KLDResult, error) {
	var r KLDResult
	V := mctx.M.NVocab
	if h.NVocab != V {
		return r, fmt.Errorf("%w: n_vocab %d, the model has %d", ErrBaseFile, h.NVocab, V)
	}
	if len(h.Tokens) != h.NChunk*h.NCtx {
		return r, fmt.Errorf("%w: %d tokens for %d chunks of %d", ErrBaseFile, len(h.Tokens), h.NChunk, h.NCtx)
	}
	for i, t := range h.Tokens {
		if t < 0 || int(t) >= V {
			return r, fmt.Errorf("%w: token %d is %d, outside the vocabulary [0, %d)", ErrBaseFile, i, t, V)
		}
	}
	nCtx := h.NCtx
	nChunks, err := checkChunks(mctx, len(h.Tokens), nCtx, opt.Chunks)
	if err != nil {
		return r, fmt.Errorf("%w: n_ctx %d: %w", ErrBaseFile, nCtx, err)
	}
	br := newBaseReader(rows, h)
	first := nCtx / 2
	nScored := scored(nCtx)
	workers := max(1, opt.Workers)
	part := make([]KLDStats, workers)
	err = evalChunks(ctx, mctx, h.Tokens, nCtx, nChunks, opt.BOS, func(c int, logits []float32) error {
		if err := br.readChunk(); err != nil {
			return err
		}
		next := h.Tokens[c*nCtx+first+1:]
		// grown a chunk at a time: sized by what the base holds, not by its header
		r.KLD = slices.Grow(r.KLD, nScored)[:len(r.KLD)+nScored]
		r.PDiff = slices.Grow(r.PDiff, nScored)[:len(r.PDiff)+nScored]
		kld, pd := r.KLD[c*nScored:], r.PDiff[c*nScored:]
		clear(part)
		parallel(nScored, workers, func(w, lo, hi int) {
			for j := lo; j < hi; j++ {
				k, p := part[w].scoreRow(logits[(first+j)*V:(first+j+1)*V], br.row(j), next[j])
				kld[j], pd[j] = float32(k), p
			}
		})
		for w := range part {
			r.Stats.Add(&part[w])
		}
		r.Chunks = c + 1
		if opt.Progress != nil {
			opt.Progress(c+1, &r.Stats)
		}
		return nil
	})
	return r, err
}
