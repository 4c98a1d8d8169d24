package cpu_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/model"
)

// decodeChunks runs toks through ctx (sequence 0, from position 0) in
// chunks of n tokens and returns every row's logits.
func decodeChunks(t *testing.T, ctx *model.Context, toks []int32, n int) []float32 {
	t.Helper()
	var out []float32
	for i := 0; i < len(toks); i += n {
		j := min(i+n, len(toks))
		b := &model.Batch{Tokens: toks[i:j], Pos: make([]int32, j-i), Seq: make([]int32, j-i)}
		for k := range b.Pos {
			b.Pos[k] = int32(i + k)
		}
		lg, err := ctx.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, lg...)
	}
	return out
}

// storiesTokens loads stories260K and makes n tokens of it (a fixed
// pattern over the vocabulary).
func storiesTokens(t *testing.T, n int) (*model.Model, []int32) {
	dir, _ := golden.Load(t)
	m := loadModel(t, dir, "models/stories260K.gguf")
	toks := make([]int32, n)
	for i := range toks {
		toks[i] = int32((i*37 + 11) % m.NVocab)
	}
	return m, toks
}

// TestKVRecent runs stories260K with tq4/tq3 KV and --kv-recent: the
// logits do not depend on how the prompt is cut into batches (one batch,
// chunks across the window's steps, token by token) or on the backend
// (Ref) beyond what the same cuts do to an f16 cache's rounding, a window
// covering the whole prompt gives f16 KV's logits, a window of 64 is
// closer to f16's than none, and a batch that needs f16 rows the cache
// has dropped (rewound past them) is refused.
func TestKVRecent(t *testing.T) {
	const n = 200
	m, toks := storiesTokens(t, n)
	be := cpu.NewBackend(2, nil)
	defer be.Close()
	run := func(ops model.Ops, types model.KVTypes, chunk int) []float32 {
		ctx, err := m.NewContextOf(ops, types, n, 1, n)
		if err != nil {
			t.Fatal(err)
		}
		return decodeChunks(t, ctx, toks, chunk)
	}
	tq := model.KVTypes{K: model.KVTQ4, V: model.KVTQ3, Recent: 64}
	one := run(be, tq, n)
	// Chunks of 37 and 64 go through the same matrix kernels as one batch,
	// so the cache holds the same rows: 1e-9 (measured 7e-16 on AVX2).
	for _, chunk := range []int{37, 64} {
		if e := nmse(run(be, tq, chunk), one); e > 1e-9 {
			t.Errorf("chunks of %d: NMSE %.3g against one batch", chunk, e)
		}
	}
	// Ref's arithmetic does not depend on the cut, so with it the cache's
	// bookkeeping across the window's steps (token by token against one
	// batch) must give the same bits.
	refOne := run(cpu.NewRef(), tq, n)
	if e := nmse(run(cpu.NewRef(), tq, 1), refOne); e != 0 {
		t.Errorf("Ref token by token: NMSE %.3g against Ref in one batch, want 0", e)
	}
	// Token by token (a matrix-vector kernel) and Ref sum the K and V
	// projections in other orders: a few values round to the other side
	// of an f16 or TurboQuant step (on AVX2, 4 of layer 0's 6400 f16 K
	// values are one unit apart), and later layers carry that on. An f16
	// cache cut the same way shows the size of this alone (AVX2 2.4e-9
	// token by token, 4.9e-10 Ref; pure Go 8e-11, 4.9e-10); the window
	// may cost at most 4 times as much (AVX2 1.7e-9, 4.5e-10). Token by
	// token, the lone rows' scores of tq4 K are also integer products
	// against the query rounded to int16 (kern_qint.go), which the batch's
	// flash tiles do not round: that may add kvTol[KVTQ4], its bound in
	// TestBackendAttention (measured here: AVX2 1.2e-9, pure Go 2.4e-9
	// where its f16 cut gives 8e-11). Rows read from the
	// wrong side of the window cost far more (every 7th decode reading its
	// window's K rows quantized: 8e-4).
	f16t := model.KVTypes{K: model.KVF16, V: model.KVF16}
	f16 := run(be, f16t, n)
	for _, c := range []struct {
		name  string
		ops   model.Ops
		chunk int
		qint  float64 // what the integer scores may add
	}{{"token by token", be, 1, kvTol[model.KVTQ4]}, {"Ref", cpu.NewRef(), 50, 0}} {
		floor := nmse(run(c.ops, f16t, c.chunk), f16)
		e := nmse(run(c.ops, tq, c.chunk), one)
		t.Logf("%s: NMSE %.3g against one batch (f16 KV cut the same way: %.3g)", c.name, e, floor)
		if e > 1e-9+4*floor+c.qint {
			t.Errorf("%s: NMSE %.3g against one batch, above 1e-9 + 4 × f16 KV's %.3g + %.0g", c.name, e, floor, c.qint)
		}
	}
	whole := tq
	whole.Recent = n
	if e := nmse(run(be, whole, 37), f16); e > 1e-9 {
		t.Errorf("a window over the whole prompt: NMSE %.3g against f16 KV", e)
	}
	none := tq
	none.Recent = 0
	eNone, eRecent := nmse(run(be, none, n), f16), nmse(one, f16)
	t.Logf("NMSE against f16 KV: tq4/tq3 %.3g, with --kv-recent 64 %.3g", eNone, eRecent)
	if eRecent >= eNone {
		t.Errorf("--kv-recent 64 does not bring tq4/tq3 closer to f16 KV: NMSE %.3g, without %.3g", eRecent, eNone)
	}

	// a window of one position and small batches (few slots): run to 1200,
	// then rewind
	small := tq
	small.Recent = 1
	const long = 1200
	ctx, err := m.NewContextOf(be, small, long, 1, 8)
	if err != nil {
		t.Fatal(err)
	}
	ltoks := slices.Repeat(toks, 6)[:long]
	decodeChunks(t, ctx, ltoks, 8)
	step := func(p int) error {
		_, err := ctx.Decode(&model.Batch{Tokens: ltoks[p : p+1], Pos: []int32{int32(p)}, Seq: []int32{0}})
		return err
	}
	if err := step(1180); err != nil { // within the kept rows
		t.Fatalf("rewinding within the kept rows: %v", err)
	}
	if err := step(70); !errors.Is(err, model.ErrBatch) {
		t.Fatalf("rewinding past dropped f16 rows: got %v, want an ErrBatch", err)
	} else {
		t.Log(err)
	}
}

// asyncDefer is a model.KVDeferrer that stores deferred rows in another
// goroutine, one job at a time, as the engine's kv-compress stage does.
type asyncDefer struct {
	kv   *model.KVCache
	jobs chan func()
	done chan struct{}
	out  int
	rows int
}

func (d *asyncDefer) Defer(layer int, seq, pos []int32, k, v []float32) error {
	seq, pos, k, v = slices.Clone(seq), slices.Clone(pos), slices.Clone(k), slices.Clone(v)
	d.rows += len(seq)
	d.out++
	d.jobs <- func() {
		kd, vd := d.kv.KDim, d.kv.VDim
		for t := range seq {
			d.kv.SetK(layer, int(seq[t]), int(pos[t]), k[t*kd:(t+1)*kd])
			d.kv.SetV(layer, int(seq[t]), int(pos[t]), v[t*vd:(t+1)*vd])
		}
	}
	return nil
}

func (d *asyncDefer) Flush() error {
	for ; d.out > 0; d.out-- {
		<-d.done
	}
	return nil
}

// TestKVDefer: a Context whose rows no query of the step reads quantized
// are stored in another goroutine (model.KVDeferrer, the engine's
// kv-compress stage) gives bit for bit the logits of one that stores
// every row in its layer, prefill chunks and decode steps alike, and
// defers most rows with a window of 64.
func TestKVDefer(t *testing.T) {
	const n = 300
	m, toks := storiesTokens(t, n)
	be := cpu.NewBackend(2, nil)
	defer be.Close()
	for _, types := range []model.KVTypes{{K: model.KVTQ4, V: model.KVTQ3, Recent: 64}, {K: model.KVTQ3, V: model.KVTQ4, Recent: 1}} {
		run := func(d bool) ([]float32, int) {
			ctx, err := m.NewContextOf(be, types, n, 1, 100)
			if err != nil {
				t.Fatal(err)
			}
			var ad *asyncDefer
			if d {
				ad = &asyncDefer{kv: ctx.KV, jobs: make(chan func()), done: make(chan struct{}, 64)}
				go func() {
					for f := range ad.jobs {
						f()
						ad.done <- struct{}{}
					}
				}()
				defer close(ad.jobs)
				ctx.SetHooks(model.Hooks{KVDefer: ad})
			}
			var out []float32
			out = append(out, decodeChunks(t, ctx, toks[:250], 100)...) // prefill chunks
			for p := 250; p < n; p++ {
				lg, err := ctx.Decode(&model.Batch{Tokens: toks[p : p+1], Pos: []int32{int32(p)}, Seq: []int32{0}})
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, lg...)
			}
			if ad != nil {
				return out, ad.rows
			}
			return out, 0
		}
		want, _ := run(false)
		got, rows := run(true)
		if !slices.Equal(got, want) {
			t.Errorf("%s: deferred stores change the logits: NMSE %.3g", types, nmse(got, want))
		}
		t.Logf("%s: %d of %d rows deferred per layer", types, rows/m.NLayer, n)
		if rows == 0 || types.Recent >= 64 && rows < m.NLayer*n/2 {
			t.Errorf("%s: %d rows deferred over %d layers, want some (most of %d with a window of 64)", types, rows, m.NLayer, n)
		}
	}
}
