// Package bench holds flowinfer's measurement harnesses: perplexity (as
// llama-perplexity computes it) and, later, throughput benchmarks and
// side-by-side drivers against llama.cpp.
package bench

import (
	"context"
	"fmt"
	"math"

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

// Perplexity evaluates tokens (tokenized with BOS, as llama-perplexity
// does) in chunks of nCtx, each chunk a fresh sequence whose first token is
// replaced by bos (when bos >= 0). Only the second half of each chunk is
// scored: the logits at positions nCtx/2 .. nCtx-2 predict the next token.
// progress, if not nil, is called after each chunk.
func Perplexity(ctx context.Context, mctx *model.Context, tokens []int32, nCtx int, bos int32, progress func(chunk int, ppl float64)) (PerplexityResult, error) {
	r := PerplexityResult{NTokens: len(tokens)}
	if nCtx < 4 || nCtx > mctx.KV.NCtx || nCtx > mctx.MaxBatch {
		return r, fmt.Errorf("bench: perplexity context %d must be in [4, %d]", nCtx, min(mctx.KV.NCtx, mctx.MaxBatch))
	}
	nChunks := len(tokens) / nCtx
	if nChunks == 0 {
		return r, fmt.Errorf("bench: %d tokens are fewer than one chunk of %d", len(tokens), nCtx)
	}
	V := mctx.M.NVocab
	chunk := make([]int32, nCtx)
	b := &model.Batch{Tokens: chunk, Pos: make([]int32, nCtx), Seq: make([]int32, nCtx)}
	for i := range b.Pos {
		b.Pos[i] = int32(i)
	}
	first := nCtx / 2
	var nll, nll2 float64
	for c := range nChunks {
		if err := ctx.Err(); err != nil {
			return r, err
		}
		copy(chunk, tokens[c*nCtx:(c+1)*nCtx])
		if bos >= 0 {
			chunk[0] = bos
		}
		logits, err := mctx.Decode(b)
		if err != nil {
			return r, err
		}
		for j := first; j < nCtx-1; j++ {
			row := logits[j*V : (j+1)*V]
			mx := row[0]
			for _, v := range row {
				mx = max(mx, v)
			}
			var sum float64
			for _, v := range row {
				sum += float64(float32(math.Exp(float64(v - mx))))
			}
			tok := tokens[c*nCtx+j+1]
			l := -(float64(row[tok]-mx) - math.Log(sum))
			nll += l
			nll2 += l * l
			r.Scored++
		}
		ppl := math.Exp(nll / float64(r.Scored))
		r.Running = append(r.Running, ppl)
		if progress != nil {
			progress(c+1, ppl)
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
