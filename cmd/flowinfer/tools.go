package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"github.com/flowinfer/flowinfer/bench"
	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/model"
)

// TokenizeCmd prints token ids, like llama-tokenize --ids.
type TokenizeCmd struct {
	ModelFlags
	Prompt         string `short:"p" help:"Text to tokenize." xor:"prompt" required:""`
	File           string `short:"f" help:"Read the text from a file." type:"existingfile" xor:"prompt" required:""`
	AddBOS         bool   `name:"add-bos" help:"Add BOS (and EOS) as the model's metadata says."`
	NoParseSpecial bool   `name:"no-parse-special" help:"Treat special-token texts in the input as plain text."`
	Pieces         bool   `help:"Print one 'id -> piece' line per token instead of the id list."`
}

func (c *TokenizeCmd) Run(g *Globals) error {
	text := c.Prompt
	if c.File != "" {
		b, err := os.ReadFile(c.File)
		if err != nil {
			return err
		}
		text = string(b)
	}
	// only the tokenizer: vocab-only files (no tensors) and architectures
	// we cannot run tokenize as well
	path, demo, err := c.resolve(context.Background(), g.Log)
	if err != nil {
		return err
	}
	if demo {
		fmt.Fprint(os.Stderr, demoBanner)
	}
	f, tok, err := model.OpenTokenizer(path)
	if err != nil {
		return err
	}
	defer f.Close()
	ids := tok.Encode(text, c.AddBOS, !c.NoParseSpecial)
	if c.Pieces {
		for _, id := range ids {
			fmt.Printf("%6d -> '%s'\n", id, tok.Piece(id, true))
		}
		return nil
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(int(id))
	}
	fmt.Printf("[%s]\n", strings.Join(s, ", "))
	return nil
}

// PerplexityCmd computes perplexity over a text file, and llama-perplexity's
// KL divergence against a saved base.
type PerplexityCmd struct {
	ModelFlags
	ComputeFlags
	File         string `short:"f" help:"Text file (with --kl-divergence: optional; the base holds the tokens, and a text given is checked against them)." type:"existingfile"`
	CtxSize      int    `short:"c" name:"ctx-size" default:"0" help:"Chunk size (tokens per evaluated sequence); 0 = 512, with --kl-divergence the base's n_ctx."`
	Threads      int    `short:"t" default:"0" help:"Threads (0 = physical cores)."`
	Chunks       int    `name:"chunks" default:"-1" help:"Evaluate at most N chunks (-1 = all). With --kl-divergence: the base's first N (llama-perplexity ignores it there)."`
	KLBase       string `name:"kl-divergence-base" aliases:"save-all-logits" placeholder:"FILE" help:"Save the log-probabilities of every scored position to FILE in llama-perplexity's format; with --kl-divergence, the base to compare against."`
	KLDivergence bool   `name:"kl-divergence" help:"Compare this run against the base named by --kl-divergence-base (KL divergence, same top token, PPL ratio), as llama-perplexity."`
}

func (c *PerplexityCmd) apply(cfg *configs.Config) {
	p := &cfg.Pipeline
	c.ComputeFlags.setPipeline(p)
	p.Threads, p.KVCache.CtxSize = c.Threads, c.CtxSize
}

func (c *PerplexityCmd) Run(g *Globals) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if c.Chunks == 0 || c.Chunks < -1 {
		return fmt.Errorf("perplexity: --chunks %d: must be positive, or -1 for all", c.Chunks)
	}
	if c.KLDivergence {
		return c.runKLD(ctx, g)
	}
	if c.File == "" {
		return errors.New("perplexity: -f FILE is required (only --kl-divergence reads its tokens from the base)")
	}
	text, err := os.ReadFile(c.File)
	if err != nil {
		return err
	}
	l, err := c.open(ctx, g.Log)
	if err != nil {
		return err
	}
	defer l.Close()
	toks := l.Tokenizer.Encode(string(text), true, false)
	nCtx := g.Config.Pipeline.KVCache.CtxSize
	if nCtx <= 0 {
		nCtx = 512 // llama-perplexity's default
	}
	nCtx = ctxSize(l, nCtx, g.Log)
	be, mctx, err := c.newContext(l, &g.Config.Pipeline, nCtx)
	if err != nil {
		return err
	}
	defer be.Close()
	nChunks := len(toks) / nCtx
	if c.Chunks > 0 {
		nChunks = min(nChunks, c.Chunks)
	}
	fmt.Fprintf(os.Stderr, "perplexity: tokenizing the input ..\nperplexity: %d tokens, %d chunks of %d\n", len(toks), nChunks, nCtx)
	r, err := c.perplexity(ctx, mctx, toks, bench.PerplexityOptions{NCtx: nCtx, BOS: bos(l), Chunks: c.Chunks, Workers: be.Threads(), Progress: func(chunk int, ppl float64) {
		fmt.Printf("[%d]%.4f,", chunk, ppl)
	}})
	if err != nil {
		return err
	}
	fmt.Printf("Final estimate: PPL = %.4f +/- %.5f\n", r.PPL, r.PM)
	return nil
}

// perplexity computes it over toks, saving the base to
// --kl-divergence-base when asked (no partial base left behind).
func (c *PerplexityCmd) perplexity(ctx context.Context, mctx *model.Context, toks []int32, opt bench.PerplexityOptions) (bench.PerplexityResult, error) {
	var base *os.File
	if c.KLBase != "" {
		var err error
		if base, err = os.Create(c.KLBase); err != nil {
			return bench.PerplexityResult{}, err
		}
		opt.Base = base
		fmt.Fprintf(os.Stderr, "perplexity: saving all logits to %s\n", c.KLBase)
	}
	r, err := bench.Perplexity(ctx, mctx, toks, opt)
	fmt.Println()
	if base != nil {
		if cerr := base.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(c.KLBase)
		}
	}
	return r, err
}

// runKLD compares a run against the base --kl-divergence-base names, and
// prints llama-perplexity's per-chunk lines and statistics.
func (c *PerplexityCmd) runKLD(ctx context.Context, g *Globals) error {
	if c.KLBase == "" {
		return errors.New("perplexity: --kl-divergence needs --kl-divergence-base FILE, a base saved by a run with --kl-divergence-base alone")
	}
	base, err := bench.OpenBase(c.KLBase)
	if err != nil {
		return fmt.Errorf("perplexity: %w", err)
	}
	defer base.Close()
	if n := g.Config.Pipeline.KVCache.CtxSize; n > 0 && n != base.NCtx {
		return fmt.Errorf("perplexity: -c %d, but the base %s was computed with n_ctx %d (pass -c %d or no -c)", n, c.KLBase, base.NCtx, base.NCtx)
	}
	l, err := c.open(ctx, g.Log)
	if err != nil {
		return err
	}
	defer l.Close()
	if base.NVocab != l.Model.NVocab {
		return fmt.Errorf("perplexity: the base %s has n_vocab %d, the model %d: it was computed with another vocabulary", c.KLBase, base.NVocab, l.Model.NVocab)
	}
	if c.File != "" {
		text, err := os.ReadFile(c.File)
		if err != nil {
			return err
		}
		if err := base.CheckTokens(l.Tokenizer.Encode(string(text), true, false)); err != nil {
			return fmt.Errorf("perplexity: %s and %s: %w", c.KLBase, c.File, err)
		}
	}
	be, mctx, err := c.newContext(l, &g.Config.Pipeline, ctxSize(l, base.NCtx, g.Log))
	if err != nil {
		return err
	}
	defer be.Close()
	nChunks := base.NChunk
	if c.Chunks > 0 {
		nChunks = min(nChunks, c.Chunks)
	}
	fmt.Fprintf(os.Stderr, "kl_divergence: computing over %d chunks, n_ctx=%d\n", nChunks, base.NCtx)
	r, err := bench.KLDivergence(ctx, mctx, &base.BaseHeader, base.Rows(), bench.KLDOptions{
		BOS: bos(l), Chunks: c.Chunks, Workers: be.Threads(),
		Progress: func(chunk int, s *bench.KLDStats) {
			if chunk == 1 {
				fmt.Print("\n" + bench.KLDHeading)
			}
			fmt.Print(s.ChunkLine(chunk))
		},
	})
	fmt.Println()
	if err != nil {
		return fmt.Errorf("perplexity: %s: %w", c.KLBase, err)
	}
	ok, err := bench.WriteKLDReport(os.Stdout, &r)
	if !ok && err == nil {
		fmt.Fprintf(os.Stderr, "kl_divergence: %d scored positions are fewer than 100: no statistics (as llama-perplexity)\n", r.Stats.Count)
	}
	return err
}

// newContext makes the backend and the model.Context that both modes
// evaluate in, one sequence of nCtx tokens decoded in one step. How the model
// runs (backend, threads, KV cache type: p) is decided here and only here: a
// base and the run compared with it differ in what these settings say.
func (c *PerplexityCmd) newContext(l *loaded, p *configs.Pipeline, nCtx int) (*cpu.Backend, *model.Context, error) {
	be := cpu.NewBackend(p.Threads, nil)
	mctx, err := l.Model.NewContextOf(be, kvTypes(p), nCtx, 1, nCtx)
	if err != nil {
		be.Close()
		return nil, nil, err
	}
	return be, mctx, nil
}

// bos is the token replacing each chunk's first, as llama-perplexity: the
// model's BOS when it adds one, else none (-1).
func bos(l *loaded) int32 {
	if l.Tokenizer.AddBOS() {
		return l.Tokenizer.BOS()
	}
	return -1
}
