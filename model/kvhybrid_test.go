package model_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/model"
)

// llamaHybridBytes is llama.cpp's size of a hybrid model's memory
// (llama_memory_hybrid): a KV cache of cells cells in the layers that are
// not recurrent (n_embd_k_gqa + n_embd_v_gqa values of el bytes each), and
// a recurrent state of one cell per sequence in the recurrent layers,
// n_embd_r() + n_embd_s() f32 values (llama_hparams: (d_conv-1)·(d_inner +
// 2·n_group·d_state) and d_state·d_inner).
func llamaHybridBytes(h *model.Hyper, cells, nSeq, el int) (kv, rs int64) {
	s := h.SSM
	nr := (s.Conv - 1) * (s.Inner + 2*s.Groups*s.State)
	ns := s.State * s.Inner
	for il := range h.NLayer {
		if h.IsRecurrent(il) {
			rs += int64(nSeq) * int64(nr+ns) * 4
		} else {
			kv += int64(cells) * int64(h.NHeadKV*(h.HeadDimK+h.HeadDimV)*el)
		}
	}
	return kv, rs
}

// TestHybridKVBytes: a hybrid model's recurrent layers allocate no K/V
// rows: a cache's Bytes, KVCacheBytes and KVBytesPerToken count the
// attention layers' cells and the recurrent state per sequence exactly as
// llama.cpp's formulas do, which round to the sizes llama.cpp printed for
// the same model (testdata/hybridmem); the same for Qwen3.5-9B's shape
// (256 MiB of f16 KV for 8192 cells, 2.25 + 48 MiB of state per sequence).
func TestHybridKVBytes(t *testing.T) {
	be := cpu.NewBackend(1, nil)
	defer be.Close()
	h := &openQwen35(t, be).Model.Hyper
	f16 := model.KVTypes{K: model.KVF16, V: model.KVF16}
	for _, c := range []struct {
		file       string
		nCtx, nSeq int
	}{{"qwen35-small-c512-np1.txt", 512, 1}, {"qwen35-small-c1024-np2.txt", 512, 2}} {
		kv, err := model.NewKVCacheOf(h, f16, c.nCtx, c.nSeq)
		if err != nil {
			t.Fatal(err)
		}
		wantKV, wantRS := llamaHybridBytes(h, c.nCtx*c.nSeq, c.nSeq, 2)
		if got := kv.Bytes() - kv.State.Bytes(); got != wantKV {
			t.Errorf("%s: K/V rows %d bytes, llama.cpp's formula %d", c.file, got, wantKV)
		}
		if got := kv.State.Bytes(); got != wantRS {
			t.Errorf("%s: recurrent state %d bytes, llama.cpp's formula %d", c.file, got, wantRS)
		}
		if got, err := model.KVCacheBytes(h, f16, c.nCtx*c.nSeq, c.nSeq, c.nCtx, 512); err != nil || got != kv.Bytes() {
			t.Errorf("%s: KVCacheBytes %d (%v), the cache's Bytes %d", c.file, got, err, kv.Bytes())
		}
		for l := range h.NLayer {
			if h.IsRecurrent(l) != (kv.K[l] == nil && kv.V[l] == nil) {
				t.Errorf("layer %d (recurrent %v): %d K and %d V bytes", l, h.IsRecurrent(l), len(kv.K[l]), len(kv.V[l]))
			}
		}
		printed := readHybridMem(t, c.file)
		if mib := float64(wantKV) / (1 << 20); fmt.Sprintf("%.2f", mib) != printed[0] {
			t.Errorf("%s: K/V %.4f MiB, llama.cpp printed %s", c.file, mib, printed[0])
		}
		if mib := float64(wantRS) / (1 << 20); fmt.Sprintf("%.2f", mib) != printed[1] {
			t.Errorf("%s: recurrent state %.4f MiB, llama.cpp printed %s", c.file, mib, printed[1])
		}
	}
	if per, err := model.KVBytesPerToken(h, f16); err != nil || per != 2*2*64*2 {
		t.Errorf("KVBytesPerToken %d (%v), want one attention layer's %d", per, err, 2*2*64*2)
	}
	if per, err := model.SWAFullBytesPerToken(h, f16, 512, 512); err != nil || per != 2*2*64*2 {
		t.Errorf("SWAFullBytesPerToken %d (%v), want %d", per, err, 2*2*64*2)
	}
	// Qwen3.5-9B: 32 layers, every 4th full attention, 4 KV heads of 256;
	// conv 4, state 128, 32 value heads, 16 groups
	big := &model.Hyper{NLayer: 32, NHead: 16, NHeadKV: 4, HeadDimK: 256, HeadDimV: 256,
		SSM: model.SSMHyper{Conv: 4, Inner: 4096, State: 128, DtRank: 32, Groups: 16}, Recurrent: make([]bool, 32)}
	for i := range big.Recurrent {
		big.Recurrent[i] = (i+1)%4 != 0
	}
	got, err := model.KVCacheBytes(big, f16, 8192, 1, 8192, 512)
	if want := int64(256<<20 + (2.25+48)*(1<<20)); err != nil || got != want {
		t.Errorf("Qwen3.5-9B: KVCacheBytes %d (%v), want 256 MiB + 50.25 MiB = %d", got, err, want)
	}
	if kv, rs := llamaHybridBytes(big, 8192, 1, 2); got != kv+rs {
		t.Errorf("Qwen3.5-9B: KVCacheBytes %d, llama.cpp's formula %d", got, kv+rs)
	}
}

// readHybridMem reads a hybridmem golden's printed sizes in MiB: the KV
// cache's and the recurrent state's.
func readHybridMem(t *testing.T, name string) [2]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "hybridmem", name))
	if err != nil {
		t.Fatal(err)
	}
	var out [2]string
	for i, prefix := range []string{"llama_kv_cache: size =", "llama_memory_recurrent: size ="} {
		for line := range strings.SplitSeq(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				out[i] = strings.Fields(rest)[0]
			}
		}
		if out[i] == "" {
			t.Fatalf("%s: no %q line", name, prefix)
		}
	}
	return out
}

// TestRecurrentCheckpoint: a checkpoint of a sequence's recurrent state,
// restored into another sequence that shares the first one's K/V blocks
// of the prefix, continues bit for bit as the first one did after the same
// chunk (the same batches from the checkpoint on), and within 1e-5 of the
// prompt in one batch; the pool is counted in the state's Bytes; and a
// batch that does not start where the restored state is, is refused.
func TestRecurrentCheckpoint(t *testing.T) {
	be := cpu.NewBackend(1, nil)
	defer be.Close()
	b := openQwen35(t, be)
	m := b.Model
	prompt, _ := qwen35Prompt(t)
	ids := b.Tokenizer.Encode(prompt, true, false)[:150]
	const bs, at = 16, 64 // the checkpoint: after the first 4 blocks
	types := model.KVTypes{K: model.KVF32, V: model.KVF32}
	kv, err := model.NewPagedKVCache(&m.Hyper, types, bs, 32, 2, 256)
	if err != nil {
		t.Fatal(err)
	}
	kv.State.ReserveCheckpoints(3)
	if got, want := kv.State.Bytes(), model.RecurrentStateBytes(&m.Hyper, 2+3); got != want {
		t.Errorf("state with 3 checkpoints: %d bytes, want %d", got, want)
	}
	c, err := m.NewContextKV(be, kv, 256)
	if err != nil {
		t.Fatal(err)
	}
	// seq 0: blocks 0..9; seq 1 shares blocks 0..3 (the prefix), then its own
	kv.Tables[0] = []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	kv.Tables[1] = []int32{0, 1, 2, 3, 20, 21, 22, 23, 24, 25}
	decode := func(seq int32, from, to int) []float32 {
		n := to - from
		bt := &model.Batch{Tokens: ids[from:to], Pos: make([]int32, n), Seq: make([]int32, n), Logits: make([]bool, n)}
		for j := range n {
			bt.Pos[j], bt.Seq[j], bt.Logits[j] = int32(from+j), seq, true
		}
		out, err := c.Decode(bt)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Clone(out)
	}
	decode(0, 0, at)
	if pos := kv.State.Save(1, 0); pos != at {
		t.Fatalf("checkpoint saved at position %d, want %d", pos, at)
	}
	want := decode(0, at, len(ids))
	// a batch for seq 1 at position at, before its state is restored
	if _, err := c.Decode(&model.Batch{Tokens: ids[at : at+1], Pos: []int32{at}, Seq: []int32{1}}); err == nil {
		t.Fatal("a batch past position 0 of an empty state was accepted")
	}
	if pos := kv.State.Restore(1, 1); pos != at {
		t.Fatalf("restored at position %d, want %d", pos, at)
	}
	if got := decode(1, at, len(ids)); !slices.Equal(got, want) {
		t.Errorf("after a restore the logits differ from the source's by %.3g", maxDiff(got, want))
	}
	// one batch from position 0 (seq 1 starts over: its state resets)
	one := decode(1, 0, len(ids))
	n := len(ids) - at
	if d := maxDiff(one[len(one)-n*m.NVocab:], want); d > 1e-5 {
		t.Errorf("restored continuation vs one batch: logits differ by %.3g", d)
	}
}
