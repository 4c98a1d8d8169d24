// Package bench holds flowinfer's measurement harnesses: perplexity and KL
// divergence (as llama-perplexity computes them) and, later, throughput
// benchmarks and side-by-side drivers against llama.cpp.
package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"sync"

	"github.com/flowinfer/flowinfer/model"
)

// PerplexityResult is the outcome of Perplexity.
type PerplexityResult struct {
	PPL     float64 // exp(mean NLL)
	PM      float64 // ± uncertainty, as llama-perplexity prints it
	Chunks  int
	Scored  int       // predictions scored
	Running []float64 // PPL after each chunk ("[1]x,[2]y,...")
	NTokens int
}

// PerplexityOptions configures Perplexity. The model.Context decides
// everything about how the model runs (backend, KV cache type); these
// decide only what is evaluated.
type PerplexityOptions struct {
	NCtx   int   // tokens per chunk (-c)
	BOS    int32 // replaces each chunk's first token; -1: none
	Chunks int   // at most this many chunks (--chunks); <= 0: all
	// Base, if not nil, receives llama-perplexity's --kl-divergence-base
	// file: the header, then the log-softmax of every scored position,
	// one chunk at a time.
	Base     io.Writer
	Workers  int                          // goroutines encoding Base rows; <= 0: 1
	Progress func(chunk int, ppl float64) // called after each chunk, if not nil
}

// Perplexity evaluates tokens (tokenized with BOS, as llama-perplexity
// does) in chunks of opt.NCtx, each chunk a fresh sequence whose first
// token is replaced by opt.BOS. Only the second half of each chunk is
// scored: the logits at positions nCtx/2 .. nCtx-2 predict the next token.
func Perplexity(ctx context.Context, mctx *model.Context, tokens []int32, opt PerplexityOptions) (PerplexityResult, error) {
	r := PerplexityResult{NTokens: len(tokens)}
	nCtx := opt.NCtx
	nChunks, err := checkChunks(mctx, len(tokens), nCtx, opt.Chunks)
	if err != nil {
		return r, err
	}
	V := mctx.M.NVocab
	var bw *baseWriter
	if opt.Base != nil {
		h := &BaseHeader{NCtx: nCtx, NVocab: V, NChunk: nChunks, Tokens: tokens[:nChunks*nCtx]}
		if bw, err = newBaseWriter(opt.Base, h); err != nil {
			return r, fmt.Errorf("bench: writing the KL-divergence base: %w", err)
		}
	}
	first := nCtx / 2
	nScored := scored(nCtx)
	workers := max(1, opt.Workers)
	part := make([]float64, 2*workers) // per worker: Σ nll, Σ nll²
	var nll, nll2 float64
	err = evalChunks(ctx, mctx, tokens, nCtx, nChunks, opt.BOS, func(c int, logits []float32) error {
		next := tokens[c*nCtx+first+1:]
		if bw == nil {
			for j := range nScored {
				l := nllOf(logits[(first+j)*V:(first+j+1)*V], next[j])
				nll += l
				nll2 += l * l
			}
		} else {
			clear(part)
			parallel(nScored, workers, func(w, lo, hi int) {
				for j := lo; j < hi; j++ {
					l := encodeRow(logits[(first+j)*V:(first+j+1)*V], bw.row(j), next[j])
					part[2*w] += l
					part[2*w+1] += l * l
				}
			})
			for w := range workers {
				nll += part[2*w]
				nll2 += part[2*w+1]
			}
			if err := bw.writeChunk(); err != nil {
				return fmt.Errorf("bench: writing the KL-divergence base: %w", err)
			}
		}
		r.Scored += nScored
		ppl := math.Exp(nll / float64(r.Scored))
		r.Running = append(r.Running, ppl)
		if opt.Progress != nil {
			opt.Progress(c+1, ppl)
		}
		return nil
	})
	if err != nil {
		return r, err
	}
	if bw != nil {
		if err := bw.flush(); err != nil {
			return r, fmt.Errorf("bench: writing the KL-divergence base: %w", err)
		}
	}
	r.Chunks = nChunks
	mean := nll / float64(r.Scored)
	r.PPL = math.Exp(mean)
	if v := nll2/float64(r.Scored) - mean*mean; v > 0 && r.Scored > 1 {
		r.PM = math.Sqrt(v/float64(r.Scored-1)) * r.PPL
	}
	return r, nil
}

// nllOf is the negative log-likelihood of tok under the softmax of row, as
// llama-perplexity's log_softmax (exp in float32, summed in float64).
func nllOf(row []float32, tok int32) float64 {
	mx := row[0]
	for _, v := range row {
		mx = max(mx, v)
	}
	var sum float64
	for _, v := range row {
		sum += float64(expf(v - mx))
	}
	return -(float64(row[tok]-mx) - math.Log(sum))
}

// checkChunks checks the chunk size against the context and returns the
// number of chunks to evaluate: all whole chunks of nTokens, at most limit
// (when positive).
func checkChunks(mctx *model.Context, nTokens, nCtx, limit int) (int, error) {
	if nCtx < 4 || nCtx > mctx.KV.NCtx || nCtx > mctx.MaxBatch {
		return 0, fmt.Errorf("bench: perplexity context %d must be in [4, %d]", nCtx, min(mctx.KV.NCtx, mctx.MaxBatch))
	}
	n := nTokens / nCtx
	if n == 0 {
		return 0, fmt.Errorf("bench: %d tokens are fewer than one chunk of %d", nTokens, nCtx)
	}
	if limit > 0 {
		n = min(n, limit)
	}
	return n, nil
}

// evalChunks decodes chunks 0 .. nChunks-1 of tokens, each a fresh
// sequence of nCtx tokens whose first is replaced by bos (when bos >= 0),
// and hands fn the logits of all its positions (nCtx × vocabulary).
func evalChunks(ctx context.Context, mctx *model.Context, tokens []int32, nCtx, nChunks int, bos int32, fn func(c int, logits []float32) error) error {
	chunk := make([]int32, nCtx)
	b := &model.Batch{Tokens: chunk, Pos: make([]int32, nCtx), Seq: make([]int32, nCtx)}
	for i := range b.Pos {
		b.Pos[i] = int32(i)
	}
	for c := range nChunks {
		if err := ctx.Err(); err != nil {
			return err
		}
		copy(chunk, tokens[c*nCtx:(c+1)*nCtx])
		if bos >= 0 {
			chunk[0] = bos
		}
		logits, err := mctx.Decode(b)
		if err != nil {
			return err
		}
		if err := fn(c, logits); err != nil {
			return err
		}
	}
	return nil
}

// parallel splits [0, n) into workers contiguous ranges and runs fn on each
// in its own goroutine (worker w gets the w-th range), returning when all
// are done. One worker runs on the caller's goroutine.
func parallel(n, workers int, fn func(w, lo, hi int)) {
	workers = max(1, min(workers, n))
	if workers == 1 {
		fn(0, 0, n)
		return
	}
	var wg sync.WaitGroup
	for w := 1; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(w, w*n/workers, (w+1)*n/workers)
		}()
	}
	fn(0, 0, n/workers)
	wg.Wait()
}
