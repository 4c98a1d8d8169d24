package cpu_test

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/quant"
)

// TestStoreKV: Backend.StoreKV, which stores a batch's rows on every
// worker, leaves the cache's bytes exactly as SetK and SetV row by row do,
// for every KV type (protected layers too), contiguous and paged caches,
// batches of several sequences and sizes on both sides of the serial
// threshold.
func TestStoreKV(t *testing.T) {
	h := model.Hyper{NHead: 8, NHeadKV: 4, HeadDimK: 64, HeadDimV: 64, NLayer: 3}
	const nCtx = 300
	all := []model.KVTypes{{K: model.KVF32, V: model.KVF32}, {K: model.KVF16, V: model.KVBF16}, {K: model.KVQ8_0, V: model.KVQ4_0},
		{K: model.KVTQ4, V: model.KVTQ3}, {K: model.KVTQ3, V: model.KVF16, Protect: 1}}
	be := cpu.NewBackend(2, nil)
	defer be.Close()
	for _, types := range all {
		for _, paged := range []bool{false, true} {
			for _, n := range []int{1, 17, 260} {
				t.Run(fmt.Sprintf("kv=%s/paged=%v/n=%d", types, paged, n), func(t *testing.T) {
					mk := func() *model.KVCache {
						var kv *model.KVCache
						var err error
						if paged {
							kv, err = model.NewPagedKVCache(&h, types, 16, 2*nCtx/16, 2, nCtx)
							if err == nil {
								for s := range 2 { // blocks out of order
									for b := range nCtx / 16 {
										kv.Tables[s] = append(kv.Tables[s], int32(2*(nCtx/16-1-b)+s))
									}
								}
							}
						} else {
							kv, err = model.NewKVCacheOf(&h, types, nCtx, 2)
						}
						if err != nil {
							t.Fatal(err)
						}
						return kv
					}
					want, got := mk(), mk()
					seq, pos := make([]int32, n), make([]int32, n)
					for i := range n { // two sequences interleaved
						seq[i], pos[i] = int32(i%2), int32(i/2+5*(i%2)) // each cell once
					}
					k, v := randomF32(n*h.KDim(), uint64(n)), randomF32(n*h.VDim(), uint64(n+1))
					for l := range h.NLayer {
						for i := range n {
							want.SetK(l, int(seq[i]), int(pos[i]), k[i*h.KDim():(i+1)*h.KDim()])
							want.SetV(l, int(seq[i]), int(pos[i]), v[i*h.VDim():(i+1)*h.VDim()])
						}
						be.StoreKV(got, l, seq, pos, k, v)
						if !bytes.Equal(got.K[l], want.K[l]) || !bytes.Equal(got.V[l], want.V[l]) {
							t.Fatalf("layer %d: StoreKV's bytes differ from SetK/SetV's", l)
						}
					}
				})
			}
		}
	}
}

// TestHadamard: Backend.Hadamard, split over workers, gives quant.Hadamard's
// bits piece by piece, below and above the serial threshold.
func TestHadamard(t *testing.T) {
	be := cpu.NewBackend(2, nil)
	defer be.Close()
	for _, n := range []int{64, 128} {
		for _, pieces := range []int{1, 3, 700} {
			x := randomF32(n*pieces, uint64(n+pieces))
			want := slices.Clone(x)
			for p := range pieces {
				quant.Hadamard(want[p*n : (p+1)*n])
			}
			be.Hadamard(x, n)
			for i := range x {
				if math.Float32bits(x[i]) != math.Float32bits(want[i]) {
					t.Fatalf("n=%d pieces=%d: [%d] = %v, want %v", n, pieces, i, x[i], want[i])
				}
			}
		}
	}
}
