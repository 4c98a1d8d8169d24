package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/gpu"
	"github.com/flowinfer/flowinfer/graph"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/model/chat"
	"github.com/flowinfer/flowinfer/model/tokenizer"
	"github.com/flowinfer/flowinfer/stages"
	"github.com/flowinfer/flowinfer/stages/sample"
	"github.com/flowinfer/flowinfer/stages/sample/grammar"
)

// RunCmd generates from one prompt, like llama-completion.
type RunCmd struct {
	ModelFlags
	SamplingFlags
	WeightFlags
	Prompt          string `short:"p" help:"Prompt text." xor:"prompt"`
	File            string `short:"f" help:"Read the prompt from a file." type:"existingfile" xor:"prompt"`
	NPredict        int    `short:"n" name:"n-predict" default:"-1" help:"Tokens to generate (-1 = until end of generation or a full context)."`
	CtxSize         int    `short:"c" name:"ctx-size" default:"0" help:"Context size (0 = the model's, at most 4096)."`
	Threads         int    `short:"t" default:"0" help:"Threads (0 = physical cores)."`
	BatchSize       int    `short:"b" name:"batch-size" default:"512" help:"Tokens per forward step (prompt chunk)."`
	EdgeTokens      int    `name:"edge-tokens" default:"64" help:"Capacity of the sampler->streamer edge (token events buffered ahead of the output)."`
	Chat            bool   `help:"Apply the model's chat template to the prompt (as a user message)."`
	System          string `name:"system" help:"System prompt (with --chat)."`
	IgnoreEOS       bool   `name:"ignore-eos" help:"Keep generating past end-of-generation tokens."`
	NoDisplayPrompt bool   `name:"no-display-prompt" help:"Do not echo the prompt."`
	LogitsOut       string `name:"logits-out" help:"Write raw float32 logits: one row per prompt position, then one per generated token fed back." type:"path"`
	Special         bool   `name:"special" help:"Render control tokens as text."`
	Grammar         string `name:"grammar" help:"Constrain the output to a GBNF grammar (llama.cpp's format; the start rule is root)." xor:"grammar"`
	GrammarFile     string `name:"grammar-file" help:"Read the GBNF grammar from a file." type:"existingfile" xor:"grammar"`
	JSONSchema      string `short:"j" name:"json-schema" help:"Constrain the output to JSON matching this JSON Schema (text, as llama.cpp's -j)." xor:"grammar"`
}

// grammar compiles the constraint asked for by --grammar, --grammar-file
// or --json-schema; nil when none is.
func (r *RunCmd) grammar() (*grammar.Grammar, error) {
	switch {
	case r.Grammar != "":
		g, err := grammar.Parse(r.Grammar)
		if err != nil {
			return nil, fmt.Errorf("--grammar: %w", err)
		}
		return g, nil
	case r.GrammarFile != "":
		b, err := os.ReadFile(r.GrammarFile)
		if err != nil {
			return nil, err
		}
		g, err := grammar.Parse(string(b))
		if err != nil {
			return nil, fmt.Errorf("--grammar-file %s: %w", r.GrammarFile, err)
		}
		return g, nil
	case r.JSONSchema != "":
		g, err := grammar.FromSchema([]byte(r.JSONSchema))
		if err != nil {
			return nil, fmt.Errorf("--json-schema: %w", err)
		}
		return g, nil
	}
	return nil, nil
}

// promptText is -p, or -f's contents, or the default prompt.
func (r *RunCmd) promptText() (string, error) {
	switch {
	case r.File != "":
		b, err := os.ReadFile(r.File)
		return string(b), err
	case r.Prompt == "":
		return "Once upon a time", nil
	}
	return r.Prompt, nil
}

// buildPrompt tokenizes the prompt: raw (BOS per the model's metadata) or
// through the chat template.
func buildPrompt(l *loaded, text string, useChat bool, system string) ([]int32, error) {
	tok := l.Tokenizer
	if !useChat {
		return tok.Encode(text, true, true), nil
	}
	if l.Template == nil {
		return nil, errors.New("the model's chat template is not supported; run without --chat")
	}
	var msgs []chat.Message
	if system != "" {
		msgs = append(msgs, chat.Message{Role: "system", Content: system})
	}
	msgs = append(msgs, chat.Message{Role: "user", Content: text})
	s, err := l.Template.Render(msgs, true)
	if err != nil {
		return nil, err
	}
	return tok.Encode(l.Template.TrimForTokenizer(s, tok.AddBOS(), tok.AddEOS()), true, true), nil
}

func (r *RunCmd) apply(c *configs.Config) {
	ownFlags{r.Threads, r.CtxSize, r.BatchSize, r.EdgeTokens, r.NPredict}.apply(c, &r.WeightFlags, &r.SamplingFlags)
}

func (r *RunCmd) Run(g *Globals) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	text, err := r.promptText()
	if err != nil {
		return err
	}
	params, err := r.sampling(&g.Config.Sampling)
	if err != nil {
		return err
	}
	l, prompt, err := r.openPrompt(ctx, g.Log, text, r.Chat, r.System)
	if err != nil {
		return err
	}
	defer l.Close()
	p := &g.Config.Pipeline
	rec := graph.NewRecorder(0)
	rg, e, err := newEngine(l, p, &r.WeightFlags, oneSequenceConfig(p, ctxSize(l, p.KVCache.CtxSize, g.Log), &l.Model.Hyper), rec, true, g.Log)
	if err != nil {
		return err
	}
	defer rg.Close()
	final, err := r.generate(ctx, e, l, prompt, params, g.Config.Sampling.MaxTokens)
	if err != nil || final == nil {
		return err
	}
	printPerf(os.Stderr, l.loadTime, *final, rec.Summary())
	if rg.streaming() {
		printWeightStats(rg.wp)
	}
	printDeviceExperts(os.Stderr, rg.gpu)
	printExpertTiers(os.Stderr, rec.Summary())
	return nil
}

// printExpertTiers prints, when the routed experts are in device slots or
// a RAM expert cache, the experts the steps needed by the tier that
// served them (VRAM, RAM, disk: stages.ExpertTiers), in all and per step.
func printExpertTiers(w io.Writer, sum graph.Summary) {
	t, ok := stages.ExpertTiersOf(sum)
	if !ok || t.Steps == 0 {
		return
	}
	per := func(n int64) float64 { return float64(n) / float64(t.Steps) }
	fmt.Fprintf(w, "flowinfer: expert tiers: %d experts needed in %d steps = %d VRAM hits + %d RAM hits + %d disk reads (per step %.2f = %.2f + %.2f + %.2f)\n",
		t.Needed, t.Steps, t.VRAM, t.RAM, t.Disk, per(t.Needed), per(t.VRAM), per(t.RAM), per(t.Disk))
}

// deviceExperts is implemented by the Vulkan backend (gpu.Backend).
type deviceExperts interface{ ExpertStats() gpu.ExpertStats }

// printDeviceExperts prints the device expert slots' counters when ops
// keep routed experts in device memory: lookups found in a slot (hits)
// or uploaded into one from host memory (misses), evictions, and the
// bytes uploaded with the host time the uploads took.
func printDeviceExperts(w io.Writer, ops model.Ops) {
	de, ok := ops.(deviceExperts)
	if !ok {
		return
	}
	st := de.ExpertStats()
	if st.Slots == 0 {
		return
	}
	fmt.Fprintf(w, "flowinfer: device expert slots: %d hits, %d misses, hit rate %.1f%%, %d evictions, %d of %d slots of %s filled; %s uploaded in %.3f s of host time\n",
		st.Hits, st.Misses, 100*st.HitRate(), st.Evictions, st.Cached, st.Slots, byteCount(st.SlotBytes), byteCount(st.UploadBytes), float64(st.UploadNanos)/1e9)
}

// sampling returns the request's sampler parameters, with the grammar
// asked for.
func (r *RunCmd) sampling(s *configs.Sampling) (sample.Params, error) {
	params, err := r.params(s)
	if err != nil {
		return params, err
	}
	if params.Grammar, err = r.grammar(); err != nil {
		return params, err
	}
	if params.Grammar != nil && r.IgnoreEOS {
		return params, errors.New("--ignore-eos cannot be used with a grammar: the grammar decides where the output ends")
	}
	return params, nil
}

// generate echoes the prompt and streams its completion to stdout (and
// the logits to --logits-out), and returns the final event: nil when
// interrupted.
func (r *RunCmd) generate(ctx context.Context, e *stages.Engine, l *loaded, prompt []int32, params sample.Params, maxTokens int) (*stages.Event, error) {
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	if !r.NoDisplayPrompt {
		echoPrompt(out, l.Tokenizer, prompt, r.Special)
	}
	var logits *logitsWriter
	if r.LogitsOut != "" {
		var err error
		if logits, err = newLogitsWriter(r.LogitsOut); err != nil {
			return nil, err
		}
	}
	stops := r.Stop
	if r.Chat && l.Template != nil {
		stops = append(stops, l.Template.StopStrings()...)
	}
	var final stages.Event
	req := &stages.Request{
		ID: 1, Prompt: prompt, Params: params, MaxTokens: maxTokens, Stops: stops,
		IgnoreEOG: r.IgnoreEOS, RenderSpecial: r.Special,
		Emit: func(ev stages.Event) error {
			out.WriteString(ev.Text)
			if ev.Finish != stages.FinishNone {
				final = ev
			}
			return out.Flush()
		},
	}
	if logits != nil {
		req.AllLogits, req.OnLogits = true, logits.write
	}
	if err := e.Submit(req); err != nil {
		return nil, err
	}
	e.Close()
	runErr := e.Run(ctx)
	out.WriteString("\n")
	out.Flush()
	if logits != nil {
		if err := logits.close(); err != nil && runErr == nil {
			runErr = err
		}
	}
	switch {
	case errors.Is(runErr, context.Canceled):
		fmt.Fprintln(os.Stderr, "flowinfer: interrupted")
		return nil, nil
	case runErr != nil:
		return nil, runErr
	case final.Finish == stages.FinishError && final.Err != nil:
		return nil, final.Err
	}
	return &final, nil
}

// echoPrompt writes the prompt's pieces after BOS, as llama-completion
// echoes them.
func echoPrompt(out *bufio.Writer, tok *tokenizer.Tokenizer, prompt []int32, special bool) {
	start := 0
	if len(prompt) > 0 && prompt[0] == tok.BOS() {
		start = 1
	}
	for _, id := range prompt[start:] {
		out.Write(tok.Piece(id, special))
	}
	out.Flush()
}

// printPerf prints llama.cpp-style timings and each stage's time split.
func printPerf(w io.Writer, load time.Duration, ev stages.Event, sum graph.Summary) {
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	rate := func(d time.Duration, n int) (float64, float64) {
		if n == 0 || d <= 0 {
			return 0, 0
		}
		return ms(d) / float64(n), float64(n) / d.Seconds()
	}
	np := ev.Usage.PromptTokens - ev.Usage.CachedTokens
	runs := max(ev.Usage.GeneratedTokens-1, 0) // the first token comes from the prompt step
	fmt.Fprintf(w, "flowinfer:        load time = %10.2f ms\n", ms(load))
	a, b := rate(ev.Timing.Prompt, np)
	fmt.Fprintf(w, "flowinfer: prompt eval time = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f tokens per second)\n", ms(ev.Timing.Prompt), np, a, b)
	a, b = rate(ev.Timing.Generate, runs)
	fmt.Fprintf(w, "flowinfer:        eval time = %10.2f ms / %5d runs   (%8.2f ms per token, %8.2f tokens per second)\n", ms(ev.Timing.Generate), runs, a, b)
	fmt.Fprintf(w, "flowinfer:       total time = %10.2f ms / %5d tokens\n", ms(ev.Timing.Total), np+ev.Usage.GeneratedTokens)
	for _, s := range sum {
		if s.Wall <= 0 {
			continue
		}
		pct := func(d time.Duration) float64 { return 100 * float64(d) / float64(s.Wall) }
		fmt.Fprintf(w, "flowinfer: stage %-9s busy %9.2f ms (%5.1f%%)  waiting %9.2f ms (%5.1f%%)  blocked %9.2f ms (%5.1f%%)\n",
			s.Stage, ms(s.Busy), pct(s.Busy), ms(s.Waiting), pct(s.Waiting), ms(s.Blocked), pct(s.Blocked))
	}
}

// logitsWriter writes logits rows as raw little-endian float32 (the golden
// .f32 layout).
type logitsWriter struct {
	f   *os.File
	w   *bufio.Writer
	buf []byte
	err error
}

func newLogitsWriter(path string) (*logitsWriter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &logitsWriter{f: f, w: bufio.NewWriterSize(f, 1<<20)}, nil
}

func (l *logitsWriter) write(row []float32) {
	if l.err != nil {
		return
	}
	l.buf = l.buf[:0]
	for _, v := range row {
		l.buf = binary.LittleEndian.AppendUint32(l.buf, math.Float32bits(v))
	}
	_, l.err = l.w.Write(l.buf)
}

func (l *logitsWriter) close() error {
	if err := l.w.Flush(); err != nil && l.err == nil {
		l.err = err
	}
	if err := l.f.Close(); err != nil && l.err == nil {
		l.err = err
	}
	return l.err
}
