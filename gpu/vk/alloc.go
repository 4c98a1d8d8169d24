package vk

import "sort"

// span is a free byte range [off, off+size) of a memory block.
type span struct{ off, size uint64 }

// subAlloc hands out aligned ranges of one memory block: first fit over a
// free list kept sorted by offset, neighbours coalesced on release. It knows
// nothing about Vulkan, so its bookkeeping is tested without a device.
type subAlloc struct {
	size uint64
	free []span
	used uint64 // bytes handed out, alignment padding included
}

func newSubAlloc(size uint64) *subAlloc {
	return &subAlloc{size: size, free: []span{{0, size}}}
}

// alloc returns the offset of size bytes aligned to align (a power of two)
// and the bytes the allocation really holds (padding in front included),
// or ok=false when no free range fits.
func (a *subAlloc) alloc(size, align uint64) (off, held uint64, ok bool) {
	if size == 0 {
		size = 1
	}
	if align == 0 {
		align = 1
	}
	for i, s := range a.free {
		o := (s.off + align - 1) &^ (align - 1)
		if o+size > s.off+s.size {
			continue
		}
		pad := o - s.off
		rest := s.off + s.size - (o + size)
		if rest == 0 {
			a.free = append(a.free[:i], a.free[i+1:]...)
		} else {
			a.free[i] = span{o + size, rest}
		}
		a.used += pad + size
		return o, pad + size, true
	}
	return 0, 0, false
}

// release returns the range [end-held, end) taken by alloc, where end is
// off+size of that allocation.
func (a *subAlloc) release(start, held uint64) {
	a.used -= held
	i := sort.Search(len(a.free), func(i int) bool { return a.free[i].off > start })
	a.free = append(a.free, span{})
	copy(a.free[i+1:], a.free[i:])
	a.free[i] = span{start, held}
	// Coalesce with the next range, then with the previous one.
	if i+1 < len(a.free) && a.free[i].off+a.free[i].size == a.free[i+1].off {
		a.free[i].size += a.free[i+1].size
		a.free = append(a.free[:i+1], a.free[i+2:]...)
	}
	if i > 0 && a.free[i-1].off+a.free[i-1].size == a.free[i].off {
		a.free[i-1].size += a.free[i].size
		a.free = append(a.free[:i], a.free[i+1:]...)
	}
}

// empty reports whether nothing is allocated.
func (a *subAlloc) empty() bool { return a.used == 0 }
