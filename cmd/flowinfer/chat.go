package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/model/chat"
	"github.com/flowinfer/flowinfer/stages"
	"github.com/flowinfer/flowinfer/stages/sample"
)

// ChatCmd is an interactive chat. The conversation is re-rendered through
// the chat template each turn; the KV cache keeps the earlier turns (the
// engine reuses the longest cached prefix), so only the new text is
// evaluated.
type ChatCmd struct {
	ModelFlags
	SamplingFlags
	WeightFlags
	System     string `name:"system" help:"System prompt."`
	CtxSize    int    `short:"c" name:"ctx-size" default:"0" help:"Context size (0 = the model's, at most 4096)."`
	NPredict   int    `short:"n" name:"n-predict" default:"-1" help:"Max tokens per reply (-1 = until end of turn)."`
	BatchSize  int    `short:"b" name:"batch-size" default:"512" help:"Tokens per forward step."`
	EdgeTokens int    `name:"edge-tokens" default:"64" help:"Capacity of the sampler->streamer edge (token events buffered ahead of the output)."`
	Threads    int    `short:"t" default:"0" help:"Threads (0 = physical cores)."`
}

const chatHelp = "commands: /reset (forget the conversation), /system TEXT (set the system prompt and reset), /exit"

func (c *ChatCmd) apply(cfg *configs.Config) {
	ownFlags{c.Threads, c.CtxSize, c.BatchSize, c.EdgeTokens, c.NPredict}.apply(cfg, &c.WeightFlags, &c.SamplingFlags)
}

func (c *ChatCmd) Run(g *Globals) error {
	params, err := c.params(&g.Config.Sampling)
	if err != nil {
		return err
	}
	l, err := c.open(context.Background(), g.Log)
	if err != nil {
		return err
	}
	defer l.Close()
	if l.Template == nil {
		return errors.New("the model's chat template is not supported")
	}
	if l.DefaultTemplate {
		fmt.Fprintln(os.Stderr, "flowinfer: the model has no chat template; using ChatML")
	}
	p := &g.Config.Pipeline
	rg, e, err := newEngine(l, p, &c.WeightFlags, oneSequenceConfig(p, ctxSize(l, p.KVCache.CtxSize, g.Log), &l.Model.Hyper), nil, true, g.Log)
	if err != nil {
		return err
	}
	defer rg.Close()
	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	run := start(runCtx, e)
	defer func() { e.Close(); <-run.done }()

	// Ctrl-C stops the current reply; at the prompt it exits.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt)
	defer signal.Stop(sigs)
	return c.converse(e, l, params, g.Config.Sampling.MaxTokens, sigs)
}

// converse reads the user's lines and answers them until /exit or the end
// of the input.
func (c *ChatCmd) converse(e *stages.Engine, l *loaded, params sample.Params, maxTokens int, sigs chan os.Signal) error {
	system := c.System
	var history []chat.Message
	in := bufio.NewReader(os.Stdin)
	fmt.Fprintln(os.Stderr, chatHelp)
	for {
		fmt.Fprint(os.Stderr, "\n> ")
		line, err := in.ReadString('\n')
		if errors.Is(err, io.EOF) && line == "" {
			fmt.Fprintln(os.Stderr)
			return nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" || strings.HasPrefix(line, "/") {
			if !chatCommand(line, &system, &history) {
				return nil
			}
			continue
		}
		history = append(history, chat.Message{Role: "user", Content: line})
		reply, err := c.turn(e, l, system, history, params, maxTokens, sigs)
		if errors.Is(err, stages.ErrPrompt) {
			// The conversation no longer fits: say so and let the user reset.
			fmt.Fprintf(os.Stderr, "(%v: /reset to start over)\n", err)
			history = history[:len(history)-1]
			continue
		}
		if err != nil {
			return err
		}
		history = append(history, chat.Message{Role: "assistant", Content: reply})
	}
}

// chatCommand carries out a /command line (or an empty one); false means
// /exit.
func chatCommand(line string, system *string, history *[]chat.Message) bool {
	switch {
	case line == "":
	case line == "/exit" || line == "/quit":
		return false
	case line == "/reset":
		*history = nil
		fmt.Fprintln(os.Stderr, "(conversation reset)")
	case strings.HasPrefix(line, "/system"):
		*system = strings.TrimSpace(strings.TrimPrefix(line, "/system"))
		*history = nil
		fmt.Fprintln(os.Stderr, "(system prompt set; conversation reset)")
	default:
		fmt.Fprintln(os.Stderr, chatHelp)
	}
	return true
}

// turn generates one assistant reply, streaming it to stdout.
func (c *ChatCmd) turn(e *stages.Engine, l *loaded, system string, history []chat.Message, params sample.Params, maxTokens int, sigs chan os.Signal) (string, error) {
	var msgs []chat.Message
	if system != "" {
		msgs = append(msgs, chat.Message{Role: "system", Content: system})
	}
	msgs = append(msgs, history...)
	rendered, err := l.Template.Render(msgs, true)
	if err != nil {
		return "", err
	}
	tok := l.Tokenizer
	prompt := tok.Encode(l.Template.TrimForTokenizer(rendered, tok.AddBOS(), tok.AddEOS()), true, true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var reply strings.Builder
	done := make(chan stages.Event, 1)
	req := &stages.Request{Ctx: ctx, Prompt: prompt, Params: params, MaxTokens: maxTokens, Stops: append(c.Stop, l.Template.StopStrings()...),
		Emit: func(ev stages.Event) error {
			mu.Lock()
			reply.WriteString(ev.Text)
			mu.Unlock()
			fmt.Print(ev.Text)
			if ev.Finish != stages.FinishNone {
				done <- ev
			}
			return nil
		}}
	if err := e.Submit(req); err != nil {
		return "", err
	}
	select {
	case ev := <-done:
		if ev.Finish == stages.FinishLength && ev.Usage.GeneratedTokens != maxTokens {
			fmt.Fprintln(os.Stderr, "\n(context full: /reset to continue)")
		}
	case <-sigs:
		cancel()
		fmt.Fprintln(os.Stderr, "\n(stopped)")
	}
	fmt.Println()
	mu.Lock()
	defer mu.Unlock()
	return reply.String(), nil
}
