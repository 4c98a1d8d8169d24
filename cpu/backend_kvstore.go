package cpu

import (
	"sync/atomic"

	"github.com/flowinfer/flowinfer/model"
)

// kvStorePiece is the rows a worker claims at a time when storing a
// batch's K and V rows.
const kvStorePiece = 16

// kvStoreMinWork is the heads (rows × KV heads × 2) below which the caller
// stores them alone: a decode step's few rows cost less than a dispatch.
// TurboQuant heads (a rotation and a codebook search each) count 16 times.
const kvStoreMinWork = 512

// kvStoreTask is one StoreKV call.
type kvStoreTask struct {
	kv       *model.KVCache
	layer    int
	seq, pos []int32
	k, v     []float32
	n        int
	next     atomic.Int64
	scratch  [][]float32 // per worker, for TurboQuant
}

func (s *kvStoreTask) init(workers int) { s.scratch = make([][]float32, workers) }

// StoreKV implements model.KVStorer: the batch's rows are converted to the
// cache's K and V types (TurboQuant rows rotated and coded) on every
// worker, rows split in pieces; each head is stored as SetK and SetV
// store it, so the cache's bytes do not depend on the split.
func (b *Backend) StoreKV(kv *model.KVCache, layer int, seq, pos []int32, k, v []float32) {
	s := &b.store
	s.kv, s.layer, s.seq, s.pos, s.k, s.v, s.n = kv, layer, seq, pos, k, v, len(seq)
	for w := range s.scratch {
		s.scratch[w] = grow(s.scratch[w], kv.StoreScratch())
	}
	work := s.n * kv.NHeadKV(layer) * 2
	if kv.TurboK(layer, 0) != nil || kv.TurboV(layer, 0) != nil {
		work *= 16
	}
	s.next.Store(0)
	if b.workers.count() == 1 || work < kvStoreMinWork || s.n <= kvStorePiece {
		s.run(0)
		return
	}
	b.workers.run(s)
}

func (s *kvStoreTask) run(worker int) {
	sc := s.scratch[worker]
	kd, vd := s.kv.KDimOf(s.layer), s.kv.VDimOf(s.layer)
	heads := s.kv.NHeadKV(s.layer)
	for {
		t0 := int(s.next.Add(kvStorePiece)) - kvStorePiece
		if t0 >= s.n {
			return
		}
		for t := t0; t < min(t0+kvStorePiece, s.n); t++ {
			seq, pos := int(s.seq[t]), int(s.pos[t])
			for kh := range heads {
				s.kv.StoreHead(s.layer, seq, pos, kh, false, s.k[t*kd:(t+1)*kd], sc)
				s.kv.StoreHead(s.layer, seq, pos, kh, true, s.v[t*vd:(t+1)*vd], sc)
			}
		}
	}
}
