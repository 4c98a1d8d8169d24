package model_test

import (
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/internal/golden"
	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model"
)

// devOps stands for a device backend that keeps its layers' KV rows on
// the device (a KVStorer and HostSync): it stores nothing and records the
// row copies it is asked for (KVCopier).
type devOps struct {
	*cpu.Ref
	copies []kvCopy
}

type kvCopy struct{ layer, dstSeq, dstPos, srcSeq, srcPos, n int }

func (d *devOps) ToHost([]float32) error { return nil }
func (d *devOps) StoreKV(*model.KVCache, int, []int32, []int32, []float32, []float32) {
}
func (d *devOps) CopyKV(_ *model.KVCache, layer, dstSeq, dstPos, srcSeq, srcPos, n int) {
	d.copies = append(d.copies, kvCopy{layer, dstSeq, dstPos, srcSeq, srcPos, n})
}

// noCopyOps keeps KV rows on a device but cannot copy them.
type noCopyOps struct{ *cpu.Ref }

func (noCopyOps) ToHost([]float32) error { return nil }
func (noCopyOps) StoreKV(*model.KVCache, int, []int32, []int32, []float32, []float32) {
}

// TestBlockKVCacheForSplit: a block KV cache made for a split placement
// (NewBlockKVCacheFor) never allocates host rows for the device's layers:
// its bytes, and the bytes allocated while making it, are the CPU layers'
// alone; a Context on the split takes it as it is; CopyRows copies the
// host layers' rows and asks the device backend to copy its layers' rows
// at the (sequence, position) of the blocks. A device backend that cannot
// copy rows, and a cache made for a split used on the host alone, are
// refused by name.
func TestBlockKVCacheForSplit(t *testing.T) {
	f, err := gguf.Open(filepath.Join(golden.Dir(t), "models", "stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ref := cpu.NewRef()
	m, err := model.Load(f, ref.Supports)
	if err != nil {
		t.Fatal(err)
	}
	n := m.NLayer
	const bs, nCtx, nSeq = 16, 64, 2
	dev := &devOps{Ref: ref}
	s := &model.Split{Input: ref, Output: dev, Layers: make([]model.Ops, n)}
	onDev := make([]bool, n)
	for l := range n {
		s.Layers[l] = model.Ops(ref)
		if l%2 == 1 {
			s.Layers[l], onDev[l] = dev, true
		}
	}
	full, err := model.NewBlockKVCache(&m.Hyper, model.KVTypes{}, bs, nCtx, nSeq)
	if err != nil {
		t.Fatal(err)
	}
	layerBytes := full.Bytes() / int64(n) // stories260K: every layer alike
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	kv, err := model.NewBlockKVCacheFor(s, &m.Hyper, model.KVTypes{}, bs, nCtx, nSeq)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	nDev := n / 2
	want := full.Bytes() - int64(nDev)*layerBytes
	allocated := int64(after.TotalAlloc - before.TotalAlloc)
	t.Logf("%d of %d layers on the device: KV %d bytes (%d for all layers), %d bytes allocated making it", nDev, n, kv.Bytes(), full.Bytes(), allocated)
	if kv.Bytes() != want {
		t.Errorf("KV bytes %d, want %d (the CPU's %d layers)", kv.Bytes(), want, n-nDev)
	}
	if allocated >= want+layerBytes {
		t.Errorf("making the cache allocated %d bytes: the device's layers' rows too (host layers' %d, a layer %d)", allocated, want, layerBytes)
	}
	for l := range n {
		if kv.HostKV(l) == onDev[l] {
			t.Errorf("layer %d: host KV %v, on the device %v", l, kv.HostKV(l), onDev[l])
		}
	}
	ctx, err := m.NewContextKV(s, kv, 16)
	if err != nil {
		t.Fatal(err)
	}
	if ctx.KV.Bytes() != want {
		t.Errorf("the Context changed the cache: %d bytes, want %d", ctx.KV.Bytes(), want)
	}

	// host rows of block 0 (sequence 0) are copied to block 5 (sequence
	// 1, positions 16..): fill layer 0's V rows of sequence 0, copy 10
	for i := range kv.V[0][:len(kv.V[0])/nSeq] {
		kv.V[0][i] = byte(i%251 + 1)
	}
	perSeq := nCtx / bs
	kv.CopyRows(perSeq+1, 0, 10)
	var wantCopies []kvCopy
	for l := range n {
		if onDev[l] {
			wantCopies = append(wantCopies, kvCopy{l, 1, 16, 0, 0, 10})
		}
	}
	if !slices.Equal(dev.copies, wantCopies) {
		t.Errorf("device copies %v, want %v", dev.copies, wantCopies)
	}
	for kh := range m.NHeadKV {
		got, src := kv.VHeadRows(0, kh, 1, 16, 10), kv.VHeadRows(0, kh, 0, 0, 10)
		if !slices.Equal(got, src) || src[0] == 0 {
			t.Fatalf("host layer 0, head %d: rows not copied", kh)
		}
	}

	bad := &model.Split{Input: ref, Output: ref, Layers: slices.Clone(s.Layers)}
	bad.Layers[1] = noCopyOps{ref}
	if _, err := model.NewBlockKVCacheFor(bad, &m.Hyper, model.KVTypes{}, bs, nCtx, nSeq); err == nil || !strings.Contains(err.Error(), "cannot copy them") {
		t.Errorf("device layer without row copies: err %v", err)
	}
	if _, err := m.NewContextKV(noCopyOps{ref}, full, 16); err == nil || !strings.Contains(err.Error(), "cannot copy them") {
		t.Errorf("device backend without row copies: err %v", err)
	}
	kv2, err := model.NewBlockKVCacheFor(s, &m.Hyper, model.KVTypes{}, bs, nCtx, nSeq)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.NewContextKV(ref, kv2, 16); err == nil || !strings.Contains(err.Error(), "no host storage") {
		t.Errorf("a split's cache on the host alone: err %v", err)
	}
}
