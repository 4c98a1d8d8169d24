//go:build cgo

package gpu

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/stages"
	"github.com/flowinfer/flowinfer/stages/sample"
)

// TestCopyKVStories: prefix blocks copied between sequences
// (KVCache.CopyRows, as the scheduler shares a cached prompt prefix with
// a sequence in another slot) are copied on the device for the device's
// layers (CopyKV). stories260K with half, then all, of its layers on the
// device prefills a prompt in sequence 0, copies its two full blocks and
// the first rows of its third to sequence 1, and decodes greedily in
// sequence 1 from there: the logits match the CPU doing the same within
// TestSplitStories' 2e-4 and the tokens are the same. Decoding sequence 1
// without the copy gives other logits (the test sees the copied rows),
// and the cache made for the placement (NewBlockKVCacheFor) has no host
// storage for the device's layers.
func TestCopyKVStories(t *testing.T) {
	r := newRig(t)
	bd := openStories(t)
	m := bd.Model
	n := m.NLayer
	const bs, nCtx, nSeq, nGen = 16, 128, 2, 24
	prompt := bd.Tokenizer.Encode("Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends.", true, false)
	if len(prompt) <= 2*bs || len(prompt) >= 3*bs {
		t.Fatalf("prompt of %d tokens: want two full blocks of %d and a part", len(prompt), bs)
	}
	cut := len(prompt) - 3 // the prefix copied: 2 full blocks and a part
	run := func(ops model.Ops, copyRows bool) ([]float32, []int32) {
		kv, err := model.NewBlockKVCacheFor(ops, &m.Hyper, model.KVTypes{}, bs, nCtx, nSeq)
		if err != nil {
			t.Fatal(err)
		}
		for l := range n { // before the Context: never allocated
			_, onCPU := ops.(*cpu.Backend)
			if s, split := ops.(*model.Split); split {
				_, onCPU = s.Layers[l].(*cpu.Backend)
			}
			if kv.HostKV(l) != onCPU {
				t.Fatalf("layer %d: host KV %v, computed on the CPU %v", l, kv.HostKV(l), onCPU)
			}
		}
		ctx, err := m.NewContextKV(ops, kv, nCtx)
		if err != nil {
			t.Fatal(err)
		}
		decode := func(seq int32, toks []int32, pos0 int) []float32 {
			b := &model.Batch{Tokens: toks, Pos: make([]int32, len(toks)), Seq: make([]int32, len(toks))}
			for i := range toks {
				b.Pos[i], b.Seq[i] = int32(pos0+i), seq
			}
			out, err := ctx.Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		decode(0, prompt, 0)
		if copyRows {
			perSeq := nCtx / bs
			for b := range cut / bs {
				kv.CopyRows(perSeq+b, b, bs)
			}
			kv.CopyRows(perSeq+cut/bs, cut/bs, cut%bs)
		}
		out := decode(1, prompt[cut:], cut)
		logits := slices.Clone(out)
		var gen []int32
		pos := len(prompt)
		for range nGen {
			tok := int32(golden.Argmax(out[len(out)-m.NVocab:]))
			gen = append(gen, tok)
			out = decode(1, []int32{tok}, pos)
			logits = append(logits, out...)
			pos++
		}
		return logits, gen
	}
	cb := cpu.NewBackend(1, nil)
	defer cb.Close()
	refLogits, refGen := run(cb, true)
	for _, ngl := range []int{n / 2, n + 1} {
		t.Run(fmt.Sprintf("ngl=%d", ngl), func(t *testing.T) {
			p := PlanLayers(m, ngl, 0)
			be, err := newPlaced(r.d, m, r.k, &p)
			if err != nil {
				t.Fatal(err)
			}
			defer be.Close()
			ops := SplitOps(&p, be, cb)
			logits, gen := run(ops, true)
			var s golden.Stats
			for row := range len(logits) / m.NVocab {
				s.AddRow(logits[row*m.NVocab:(row+1)*m.NVocab], refLogits[row*m.NVocab:(row+1)*m.NVocab])
			}
			t.Logf("%s: max |Δlogit| %.2e, RMS %.2e over %d rows", &p, s.MaxAbs, s.RMS(), len(logits)/m.NVocab)
			if s.MaxAbs > 2e-4 || math.IsNaN(s.MaxAbs) {
				t.Errorf("max |Δlogit| %.3g > 2e-4", s.MaxAbs)
			}
			if !slices.Equal(gen, refGen) {
				t.Errorf("greedy tokens differ:\n got %v\nwant %v", gen, refGen)
			}
			noCopy, _ := run(ops, false)
			var d golden.Stats
			for row := range len(noCopy) / m.NVocab {
				d.AddRow(noCopy[row*m.NVocab:(row+1)*m.NVocab], refLogits[row*m.NVocab:(row+1)*m.NVocab])
			}
			if d.MaxAbs < 0.1 {
				t.Errorf("without the copy the logits are within %.3g of the reference: the test does not see the copied rows", d.MaxAbs)
			}
		})
	}
	t.Logf("greedy after the copied prefix: %q", detok(bd, refGen))
}

// TestEnginePrefixCopyStories: the scheduler's prefix sharing between two
// KV sequences on the device: request A runs in sequence 0; request B,
// extending A's prompt, arrives while A still decodes, so it is given
// sequence 1 and A's cached blocks are copied into it (KVCache.CopyRows
// through CopyKV). With half and all of stories260K's layers on the
// device, B reuses A's prompt and prints the text the CPU prints for B
// alone.
func TestEnginePrefixCopyStories(t *testing.T) {
	r := newRig(t)
	bd := openStories(t)
	m := bd.Model
	base := bd.Tokenizer.Encode("Once upon a time, there was a little girl named Lily. She loved to play outside.", true, true)
	longer := bd.Tokenizer.Encode("Once upon a time, there was a little girl named Lily. She loved to play outside. One day", true, true)
	greedy := sample.Params{Temperature: 0, RepeatPenalty: 1}
	cfg := stages.Config{NCtx: 256, NSeq: 2}
	type result struct {
		text   string
		cached int
	}
	// run runs B alone, or A then B submitted once A has emitted 4 tokens
	run := func(ops model.Ops, withA bool) result {
		e, err := stages.NewEngine(m, bd.Tokenizer, ops, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var res result
		bDone := make(chan struct{})
		b := &stages.Request{Prompt: longer, Params: greedy, MaxTokens: 24, Emit: func(ev stages.Event) error {
			mu.Lock()
			defer mu.Unlock()
			res.text += ev.Text
			if ev.Finish != stages.FinishNone {
				res.cached = ev.Usage.CachedTokens
				close(bDone)
			}
			return nil
		}}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- e.Run(ctx) }()
		if withA {
			n := 0
			a := &stages.Request{Prompt: base, Params: greedy, MaxTokens: 200, IgnoreEOG: true, Emit: func(ev stages.Event) error {
				if n++; n == 4 {
					if err := e.Submit(b); err != nil {
						t.Error(err)
					}
				}
				return nil
			}}
			if err := e.Submit(a); err != nil {
				t.Fatal(err)
			}
		} else if err := e.Submit(b); err != nil {
			t.Fatal(err)
		}
		<-bDone
		e.Close()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		return res
	}
	cb := cpu.NewBackend(1, nil)
	defer cb.Close()
	want := run(cb, false)
	if cpuShared := run(cb, true); cpuShared.text != want.text || cpuShared.cached == 0 {
		t.Fatalf("CPU: B after A %q (%d cached), alone %q", cpuShared.text, cpuShared.cached, want.text)
	}
	for _, ngl := range []int{m.NLayer / 2, m.NLayer + 1} {
		t.Run(fmt.Sprintf("ngl=%d", ngl), func(t *testing.T) {
			p := PlanLayers(m, ngl, 0)
			be, err := newPlaced(r.d, m, r.k, &p)
			if err != nil {
				t.Fatal(err)
			}
			defer be.Close()
			got := run(SplitOps(&p, be, cb), true)
			t.Logf("%s: B reused %d of %d prompt tokens", &p, got.cached, len(longer))
			if got.cached < len(base)/16*16 {
				t.Errorf("B reused %d cached tokens, want at least A's %d whole blocks", got.cached, len(base)/16)
			}
			if got.text != want.text {
				t.Errorf("B after A on the device %q, on the CPU alone %q", got.text, want.text)
			}
		})
	}
}
