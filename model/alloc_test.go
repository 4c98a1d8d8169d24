package model_test

import (
	"path/filepath"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model"
)

// TestDecodeAllocs: a decode step allocates nothing once the Context
// exists, on the CPU backend, for a dense and a MoE model, with a
// quantized cache keeping recent rows, and with every hook installed (the
// weight path's experts and layers, a KV deferrer, spans).
func TestDecodeAllocs(t *testing.T) {
	for _, tc := range []struct {
		model string
		types model.KVTypes
		hooks bool
	}{
		{"stories260K.gguf", model.KVTypes{}, false},
		{"synth-qwen3-F32.gguf", model.KVTypes{K: model.KVQ8_0, V: model.KVTQ4, Recent: 64}, true},
		{"synth-qwen3moe-F32.gguf", model.KVTypes{}, false},
		{"synth-qwen3moe-F32.gguf", model.KVTypes{K: model.KVQ8_0, V: model.KVQ8_0, Recent: 64}, true},
	} {
		name := tc.model + "/" + tc.types.String()
		if tc.hooks {
			name += "/hooks"
		}
		t.Run(name, func(t *testing.T) {
			f, err := gguf.Open(filepath.Join(golden.Dir(t), "models", tc.model))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			be := cpu.NewBackend(1, nil)
			defer be.Close()
			m, err := model.Load(f, be.Supports)
			if err != nil {
				t.Fatal(err)
			}
			const nCtx = 128
			c, err := m.NewContextOf(be, tc.types, nCtx, 1, 8)
			if err != nil {
				t.Fatal(err)
			}
			deferrer := &storeNow{kv: c.KV}
			if tc.hooks {
				c.SetHooks(model.Hooks{Experts: newMappedExperts(m), PrefetchNext: true, Layers: mappedLayers{m},
					KVDefer: deferrer, Span: func(string, int, bool) {}})
			}
			if allocs := decodeAllocs(t, c); allocs != 0 {
				t.Errorf("%v allocations per decode step, want 0", allocs)
			}
			if tc.hooks && deferrer.rows == 0 {
				t.Error("no row was deferred")
			}
		})
	}
}

// mappedExperts is a weight path's Experts that hands out the mapping's
// views, for tests (a Prefetcher too, that does nothing).
type mappedExperts struct {
	m    *model.Model
	w    []model.ExpertWeights
	ids  []int
	next int
}

func newMappedExperts(m *model.Model) *mappedExperts {
	return &mappedExperts{m: m, w: make([]model.ExpertWeights, m.NExpert), ids: make([]int, 0, m.NExpert)}
}

func (e *mappedExperts) MaxFetch() int { return 3 }

func (e *mappedExperts) Fetch(il int, ids []int) error {
	L := &e.m.Layers[il]
	for _, id := range ids {
		e.w[id] = model.ExpertWeights{Gate: L.GateExps[id], Up: L.UpExps[id], Down: L.DownExps[id]}
	}
	e.ids, e.next = append(e.ids[:0], ids...), 0
	return nil
}

func (e *mappedExperts) Next() (int, *model.ExpertWeights, error) {
	id := e.ids[e.next]
	e.next++
	return id, &e.w[id], nil
}

func (e *mappedExperts) Release(il int) {}

func (e *mappedExperts) Prefetch(il int, ids []int) error { return nil }

// mappedLayers is a weight path's LayerSource that hands out the
// mapping's layers.
type mappedLayers struct{ m *model.Model }

func (s mappedLayers) Acquire(il int) (*model.Layer, error) { return &s.m.Layers[il], nil }
func (s mappedLayers) Release(il int)                       {}

// storeNow is a KVDeferrer that stores the rows it is given at once.
type storeNow struct {
	kv   *model.KVCache
	rows int
}

func (d *storeNow) Defer(layer int, seq, pos []int32, k, v []float32) error {
	d.rows += len(seq)
	for t := range seq {
		d.kv.SetK(layer, int(seq[t]), int(pos[t]), k[t*d.kv.KDim:(t+1)*d.kv.KDim])
		d.kv.SetV(layer, int(seq[t]), int(pos[t]), v[t*d.kv.VDim:(t+1)*d.kv.VDim])
	}
	return nil
}

func (d *storeNow) Flush() error { return nil }

// decodeAllocs prefills 8 tokens on c, then returns the allocations of one
// single-token decode step (testing.AllocsPerRun over 50 steps); a decode
// error fails the test.
func decodeAllocs(t *testing.T, c *model.Context) float64 {
	t.Helper()
	if _, err := c.Decode(&model.Batch{Tokens: []int32{1, 2, 3, 4, 5, 6, 7, 8}, Pos: []int32{0, 1, 2, 3, 4, 5, 6, 7}, Seq: make([]int32, 8)}); err != nil {
		t.Fatal(err)
	}
	b := &model.Batch{Tokens: []int32{9}, Pos: []int32{8}, Seq: []int32{0}}
	var derr error
	allocs := testing.AllocsPerRun(50, func() {
		if _, err := c.Decode(b); err != nil && derr == nil {
			derr = err
		}
		b.Pos[0]++
	})
	if derr != nil {
		t.Fatal(derr)
	}
	return allocs
}
