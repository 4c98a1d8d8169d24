package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"github.com/flowinfer/flowinfer/bench"
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

// PerplexityCmd computes perplexity over a text file.
type PerplexityCmd struct {
	ModelFlags
	ComputeFlags
	File    string `short:"f" help:"Text file." type:"existingfile" required:""`
	CtxSize int    `short:"c" name:"ctx-size" default:"512" help:"Chunk size (tokens per evaluated sequence)."`
	Threads int    `short:"t" default:"0" help:"Threads (0 = physical cores)."`
}

func (c *PerplexityCmd) Run(g *Globals) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
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
	nCtx := ctxSize(l, c.CtxSize, g.Log)
	be := cpu.NewBackend(c.Threads, nil)
	defer be.Close()
	mctx, err := l.Model.NewContextOf(be, c.kvTypes(), nCtx, 1, nCtx)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "perplexity: tokenizing the input ..\nperplexity: %d tokens, %d chunks of %d\n", len(toks), len(toks)/nCtx, nCtx)
	bos := int32(-1)
	if l.Tokenizer.AddBOS() {
		bos = l.Tokenizer.BOS()
	}
	r, err := bench.Perplexity(ctx, mctx, toks, nCtx, bos, func(chunk int, ppl float64) {
		fmt.Printf("[%d]%.4f,", chunk, ppl)
	})
	fmt.Println()
	if err != nil {
		return err
	}
	fmt.Printf("Final estimate: PPL = %.4f +/- %.5f\n", r.PPL, r.PM)
	return nil
}
