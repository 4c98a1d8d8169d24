package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/stages/sample"
)

// SamplingFlags are llama.cpp's sampling options, with its defaults.
type SamplingFlags struct {
	Temp             float32  `name:"temp" default:"0.8" help:"Temperature; 0 = greedy."`
	TopK             int      `name:"top-k" default:"40" help:"Top-k sampling (0 = off)."`
	TopP             float32  `name:"top-p" default:"0.95" help:"Top-p (nucleus) sampling (1 = off)."`
	MinP             float32  `name:"min-p" default:"0.05" help:"Min-p sampling (0 = off)."`
	RepeatPenalty    float32  `name:"repeat-penalty" default:"1.0" help:"Penalize repeated tokens (1 = off)."`
	RepeatLastN      int      `name:"repeat-last-n" default:"64" help:"Tokens considered by the penalties."`
	PresencePenalty  float32  `name:"presence-penalty" default:"0" help:"Presence penalty (0 = off)."`
	FrequencyPenalty float32  `name:"frequency-penalty" default:"0" help:"Frequency penalty (0 = off)."`
	Seed             int64    `short:"s" default:"-1" help:"RNG seed (-1 = random)."`
	LogitBias        []string `name:"logit-bias" short:"l" help:"Bias a token: TOKEN_ID(+|-)BIAS, e.g. 15043+1 or 2-inf." placeholder:"ID+BIAS"`
	Stop             []string `name:"stop" help:"Stop when this text is generated (repeatable)."`
}

// setSampling copies the sampling flags onto s.
func (f *SamplingFlags) setSampling(s *configs.Sampling) {
	s.Temperature, s.TopK, s.TopP, s.MinP = f.Temp, f.TopK, f.TopP, f.MinP
	s.RepeatPenalty, s.RepeatLastN = f.RepeatPenalty, f.RepeatLastN
	s.PresencePenalty, s.FrequencyPenalty, s.Seed = f.PresencePenalty, f.FrequencyPenalty, f.Seed
}

// params returns the sampler's parameters: the keyed ones from s (the
// effective configuration), the logit biases from the flags. The
// sampler's own check (sample.Params.Validate) refuses what configs cannot
// see, a bias of +Inf or NaN, before anything loads.
func (f *SamplingFlags) params(s *configs.Sampling) (sample.Params, error) {
	p := sample.Params{
		Temperature: s.Temperature, TopK: s.TopK, TopP: s.TopP, MinP: s.MinP,
		RepeatPenalty: s.RepeatPenalty, RepeatLastN: s.RepeatLastN,
		PresencePenalty: s.PresencePenalty, FrequencyPenalty: s.FrequencyPenalty,
		Seed: sample.RandomSeed,
	}
	if s.Seed >= 0 {
		p.Seed = uint64(s.Seed)
	}
	for _, b := range f.LogitBias {
		i := strings.LastIndexAny(b, "+-")
		if i <= 0 {
			return p, fmt.Errorf("--logit-bias %q: want TOKEN_ID(+|-)BIAS", b)
		}
		id, err := strconv.ParseInt(b[:i], 10, 32)
		if err != nil {
			return p, fmt.Errorf("--logit-bias %q: bad token id", b)
		}
		var v float64
		if s := b[i+1:]; strings.EqualFold(s, "inf") {
			v = math.Inf(1)
		} else if v, err = strconv.ParseFloat(s, 32); err != nil {
			return p, fmt.Errorf("--logit-bias %q: bad bias", b)
		}
		if b[i] == '-' {
			v = -v
		}
		if p.LogitBias == nil {
			p.LogitBias = map[int32]float32{}
		}
		p.LogitBias[int32(id)] = float32(v)
	}
	return p, p.Validate()
}
