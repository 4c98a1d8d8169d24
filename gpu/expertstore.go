//go:build cgo

package gpu

// expertstore.go: routed experts' weights in device memory. A slot holds
// one expert's gate, up and down matrices as the file stores them, each
// 256-byte aligned; all slots have the size of the largest expert, and
// slabs of device-local buffers hold whole slots (a slab stays under the
// device's maxStorageBufferRange, since descriptor sets bind whole
// buffers: 128 MiB on lavapipe). The expert products are the mat-vec and
// mat-mat shaders run on a slot's matrices at their byte offsets
// (Weight.Off): no shader of its own per type, so every weight type the
// dense path multiplies works for experts too, at the same speed.
//
// With a slot per expert (NewBackend, no budget) every expert is uploaded
// at load and stays. With fewer (a VRAM budget, SetExpertBudget) the slots
// are a cache keyed by (layer, expert) with the RAM expert cache's policy
// (stages/expertcache.go; both keep their bookkeeping in io/tier): a
// segmented LRU, new experts on probation,
// experts used again promoted to a protected segment of 80% of the slots,
// victims from probation's cold end first; or plain LRU. A miss uploads
// the expert's bytes (from the mapping, or from the RAM expert cache's
// slot that Hooks.Experts handed out) into the victim slot through the
// uploader (expertdma.go: a staging slab, a transfer command buffer and a
// timeline semaphore the misses' products wait for), or, on a device
// without timeline semaphores, through the staging ring in the compute
// command buffer before the products that read it.

import (
	"fmt"
	"sync/atomic"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/gpu/vk"
	"github.com/flowinfer/flowinfer/io/tier"
)

// maxSlab bounds a slab's bytes below the storage-buffer range.
const maxSlab = 128 << 20

type expertKey struct{ layer, expert int32 }

type expertSlot struct {
	key   expertKey
	valid bool
	w     [3]Weight // gate, up, down at their offsets in the slot
}

// expertStore is the device's expert slots and their index.
type expertStore struct {
	slabs     []*vk.Buffer
	perSlab   int // slots per slab
	slotBytes int
	slots     []expertSlot
	index     map[expertKey]int32
	pol       *tier.Policy // free slots, eviction order

	hits, misses, evictions atomic.Int64
	cached                  atomic.Int64 // slots holding an expert
	upBytes, upNanos        atomic.Int64
}

// newExpertStore allocates n slots of slotBytes on dev, a slab holding a
// multiple of group slots where it holds group at all (a layer's experts
// in one slab: RouteExperts reads them from one buffer).
func newExpertStore(dev *vk.Device, n, slotBytes, group int, policy configs.CachePolicy) (*expertStore, error) {
	if n <= 0 || slotBytes <= 0 {
		return nil, fmt.Errorf("gpu: expert store of %d slots of %d bytes", n, slotBytes)
	}
	lim := min(int64(maxSlab), int64(dev.Info().Limits.MaxStorageBufferRange))
	per := int(lim / int64(slotBytes))
	if per == 0 {
		return nil, fmt.Errorf("gpu: %w: an expert of %d bytes exceeds the device's storage-buffer range (%d)", vk.ErrUnsupported, slotBytes, lim)
	}
	if group > 0 && per >= group && per < n {
		per -= per % group
	}
	s := &expertStore{perSlab: per, slotBytes: slotBytes, slots: make([]expertSlot, n), index: make(map[expertKey]int32, n),
		pol: tier.New(n, policy != configs.PolicyLRU)}
	for left := n; left > 0; left -= per {
		k := min(left, per)
		buf, err := dev.NewBuffer(uint64(k*slotBytes), vk.DeviceLocal)
		if err != nil {
			s.freeSlabs()
			return nil, fmt.Errorf("gpu: expert slots (%d of %d bytes): %w", n, slotBytes, err)
		}
		s.slabs = append(s.slabs, buf)
	}
	return s, nil
}

func (s *expertStore) freeSlabs() {
	for _, b := range s.slabs {
		b.Free()
	}
	s.slabs = nil
}

// place returns slot i's buffer and byte offset.
func (s *expertStore) place(i int32) (*vk.Buffer, int) {
	return s.slabs[int(i)/s.perSlab], (int(i) % s.perSlab) * s.slotBytes
}

// lookup returns the slot holding expert k and true, or a slot to fill
// (free, or the coldest, evicted) and false. The slot is taken off the
// lists until done returns it.
func (s *expertStore) lookup(k expertKey) (int32, bool) {
	if i, ok := s.index[k]; ok {
		s.hits.Add(1)
		s.pol.Pin(i)
		return i, true
	}
	s.misses.Add(1)
	i, ok := s.pol.Take()
	if ok {
		s.cached.Add(1)
	} else {
		i = s.pol.Victim() // a slot exists: every slot but the one in use is in a list
		delete(s.index, s.slots[i].key)
		s.evictions.Add(1)
	}
	st := &s.slots[i]
	st.key, st.valid = k, false
	return i, false
}

// done returns slot i, just used, to the lists: a hit to protected (SLRU),
// whose least recent member goes back to probation's front when the
// segment is over its share; a new expert (or with LRU, any) to
// probation. A slot whose fill failed goes back to the free list.
func (s *expertStore) done(i int32, hit bool) {
	st := &s.slots[i]
	if !st.valid {
		s.pol.Release(i)
		s.cached.Add(-1)
		return
	}
	s.index[st.key] = i
	s.pol.Keep(i, hit)
}

// stats returns the counters.
func (s *expertStore) stats() ExpertStats {
	return ExpertStats{Slots: len(s.slots), Cached: int(s.cached.Load()), SlotBytes: int64(s.slotBytes),
		Hits: s.hits.Load(), Misses: s.misses.Load(), Evictions: s.evictions.Load(),
		UploadBytes: s.upBytes.Load(), UploadNanos: s.upNanos.Load()}
}
