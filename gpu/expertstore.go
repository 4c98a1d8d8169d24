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
// (stages/expertcache.go): a segmented LRU, new experts on probation,
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
)

// maxSlab bounds a slab's bytes below the storage-buffer range.
const maxSlab = 128 << 20

type expertKey struct{ layer, expert int32 }

const (
	listNone = iota
	listProbation
	listProtected
)

type expertSlot struct {
	key        expertKey
	valid      bool
	list       uint8
	prev, next int32
	w          [3]Weight // gate, up, down at their offsets in the slot
}

type lruList struct {
	head, tail int32 // most / least recent; -1 when empty
	n          int
}

// expertStore is the device's expert slots and their index.
type expertStore struct {
	slabs     []*vk.Buffer
	perSlab   int // slots per slab
	slotBytes int
	slots     []expertSlot
	index     map[expertKey]int32
	free      []int32
	lists     [3]lruList
	protCap   int
	slru      bool

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
		free: make([]int32, 0, n), protCap: n * 8 / 10, slru: policy != configs.PolicyLRU}
	for i := range s.lists {
		s.lists[i] = lruList{head: -1, tail: -1}
	}
	for i := n - 1; i >= 0; i-- {
		s.free = append(s.free, int32(i))
		s.slots[i].prev, s.slots[i].next = -1, -1
	}
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
		s.unlink(i)
		return i, true
	}
	s.misses.Add(1)
	var i int32
	if n := len(s.free); n > 0 {
		i = s.free[n-1]
		s.free = s.free[:n-1]
		s.cached.Add(1)
	} else {
		l := listProbation
		if s.lists[l].n == 0 {
			l = listProtected
		}
		i = s.lists[l].tail // a slot exists: every slot but the one in use is in a list
		s.unlink(i)
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
		st.list, st.prev, st.next = listNone, -1, -1
		s.free = append(s.free, i)
		s.cached.Add(-1)
		return
	}
	s.index[st.key] = i
	if !hit || !s.slru {
		s.pushFront(listProbation, i)
		return
	}
	s.pushFront(listProtected, i)
	for s.lists[listProtected].n > s.protCap {
		t := s.lists[listProtected].tail
		s.unlink(t)
		s.pushFront(listProbation, t)
	}
}

func (s *expertStore) pushFront(l int, i int32) {
	st, li := &s.slots[i], &s.lists[l]
	st.list, st.prev, st.next = uint8(l), -1, li.head
	if li.head >= 0 {
		s.slots[li.head].prev = i
	} else {
		li.tail = i
	}
	li.head = i
	li.n++
}

func (s *expertStore) unlink(i int32) {
	st := &s.slots[i]
	if st.list == listNone {
		return
	}
	li := &s.lists[st.list]
	if st.prev >= 0 {
		s.slots[st.prev].next = st.next
	} else {
		li.head = st.next
	}
	if st.next >= 0 {
		s.slots[st.next].prev = st.prev
	} else {
		li.tail = st.prev
	}
	st.list, st.prev, st.next = listNone, -1, -1
	li.n--
}

// stats returns the counters.
func (s *expertStore) stats() ExpertStats {
	return ExpertStats{Slots: len(s.slots), Cached: int(s.cached.Load()), SlotBytes: int64(s.slotBytes),
		Hits: s.hits.Load(), Misses: s.misses.Load(), Evictions: s.evictions.Load(),
		UploadBytes: s.upBytes.Load(), UploadNanos: s.upNanos.Load()}
}
