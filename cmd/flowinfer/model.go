package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/schollz/progressbar/v3"
	"go.uber.org/zap"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/io/hub"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/model/synth"
	"github.com/flowinfer/flowinfer/quant"
)

// ModelFlags choose the model: a local GGUF, a download, or the demo.
type ModelFlags struct {
	Model   string `short:"m" help:"GGUF model file." type:"path" placeholder:"FILE"`
	HF      string `name:"hf" help:"Download REPO:FILE (or REPO@REV:FILE) from Hugging Face into the cache and use it." placeholder:"REPO:FILE"`
	Cache   string `name:"cache-dir" help:"Cache for downloads and the demo model (default: the user cache dir + /flowinfer)." env:"FLOWINFER_CACHE" type:"path"`
	HFURL   string `name:"hf-endpoint" help:"Hub base URL." default:"https://huggingface.co" env:"HF_ENDPOINT"`
	HFToken string `name:"hf-token" help:"Hub access token." env:"HF_TOKEN"`
}

func (f *ModelFlags) cacheDir() (string, error) {
	if f.Cache != "" {
		return f.Cache, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory: set --cache-dir: %w", err)
	}
	return filepath.Join(d, "flowinfer"), nil
}

// demoSeed fixes the demo model: the same bytes on every machine.
const demoSeed = 20261121

// resolve returns the path of the model file, downloading or building it
// when needed, and whether it is the demo.
func (f *ModelFlags) resolve(ctx context.Context, log *zap.Logger) (path string, demo bool, err error) {
	switch {
	case f.Model != "" && f.HF != "":
		return "", false, errors.New("give either -m or --hf, not both")
	case f.Model != "":
		return f.Model, false, nil
	case f.HF != "":
		ref, err := hub.ParseRef(f.HF)
		if err != nil {
			return "", false, err
		}
		dir, err := f.cacheDir()
		if err != nil {
			return "", false, err
		}
		c := &hub.Client{BaseURL: f.HFURL, CacheDir: filepath.Join(dir, "hub"), Token: f.HFToken, Retries: 3}
		var bar *progressbar.ProgressBar
		c.Progress = func(done, total int64) {
			if bar == nil {
				bar = progressbar.DefaultBytes(total, "downloading "+ref.File)
			}
			bar.Set64(done)
		}
		p, err := c.Fetch(ctx, ref)
		if bar != nil {
			bar.Finish()
		}
		return p, false, err
	}
	dir, err := f.cacheDir()
	if err != nil {
		return "", false, err
	}
	p := filepath.Join(dir, fmt.Sprintf("demo-%d.gguf", demoSeed))
	if _, err := os.Stat(p); err == nil {
		return p, true, nil
	}
	spec, err := synth.Preset("demo")
	if err != nil {
		return "", false, err
	}
	log.Info("building the demo model", zap.String("path", p))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", false, err
	}
	if err := synth.WriteFile(p, spec, synth.Options{Type: quant.Q8_0, Seed: demoSeed}); err != nil {
		return "", false, fmt.Errorf("building the demo model: %w", err)
	}
	return p, true, nil
}

const demoBanner = `flowinfer: no model given (-m FILE or --hf REPO:FILE): using the built-in demo model.
flowinfer: its weights are RANDOM, so its text is meaningless; it shows the pipeline working.
flowinfer: for real text, e.g.: flowinfer run --hf Qwen/Qwen2.5-0.5B-Instruct-GGUF:qwen2.5-0.5b-instruct-q8_0.gguf -p "Hello"
`

// loaded is an open model with its load time.
type loaded struct {
	*model.Bundle
	loadTime time.Duration
	demo     bool
	path     string
}

// open resolves and loads the model for the CPU reference backend.
func (f *ModelFlags) open(ctx context.Context, log *zap.Logger) (*loaded, error) {
	t0 := time.Now()
	path, demo, err := f.resolve(ctx, log)
	if err != nil {
		return nil, err
	}
	if demo {
		fmt.Fprint(os.Stderr, demoBanner)
	}
	b, err := model.Open(path, cpu.Best().Supports, log)
	if err != nil {
		return nil, err
	}
	return &loaded{Bundle: b, loadTime: time.Since(t0), demo: demo, path: path}, nil
}

// ctxSize returns the KV context to use: -c, or the model's training
// context capped at 4096 (llama.cpp's default). Beyond the training context
// it warns, as llama.cpp does.
func ctxSize(l *loaded, c int, log *zap.Logger) int {
	train := l.Model.NCtxTrain
	if c <= 0 {
		c = min(train, 4096)
		if c <= 0 {
			c = 4096
		}
	}
	if train > 0 && c > train {
		log.Warn("context size exceeds the model's training context; quality may degrade", zap.Int("n_ctx", c), zap.Int("n_ctx_train", train))
	}
	return c
}

// openPrompt opens the model and tokenizes the prompt for it (buildPrompt).
func (f *ModelFlags) openPrompt(ctx context.Context, log *zap.Logger, text string, useChat bool, system string) (*loaded, []int32, error) {
	l, err := f.open(ctx, log)
	if err != nil {
		return nil, nil, err
	}
	prompt, err := buildPrompt(l, text, useChat, system)
	if err != nil {
		l.Close()
		return nil, nil, err
	}
	return l, prompt, nil
}
