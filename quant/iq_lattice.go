// The quantizers' view of the IQ1/IQ2/IQ3 grids (ggml's iq2xs_init_impl
// and iq3xs_init_impl): each grid point as integer coordinates 2l+1, a map
// from every point of the full lattice {0..3}^8 (2-bit) or {0..7}^4
// (3-bit) to its grid index, and for every lattice point off the grid the
// list of grid points nearest to it (all points at the nwant smallest
// squared distances, ordered by distance, then index, as ggml's qsort on
// (distance, index) leaves them).
//
// Building a table costs up to ~1 s (IQ1_S: 41644 off-grid points × 2048
// grid points), so each is built once, on first use, by a sync.OnceValue;
// it is never written after that. Only the quantizers use them.

package quant

import (
	"math"
	"sync"
)

type iqLattice struct {
	dim  int    // coordinates per grid point: 8 or 4
	bits uint   // bits per coordinate in a key: 2 or 3
	q    []int8 // grid point k's coordinates (2l+1) at q[dim*k : dim*k+dim]
	// kmap[key] is the grid index of lattice point key, or -(o+1) where
	// neighbours[o] is the count of its nearest grid points and
	// neighbours[o+1:o+1+count] their indices.
	kmap       []int32
	neighbours []uint16
}

// buildLattice makes the tables of a grid given as compact points (bits
// per coordinate, dim coordinates), keeping the points at the nwant
// smallest distances as neighbours (ggml: nwant).
func buildLattice(kgrid []uint16, bits uint, dim, nwant int) *iqLattice {
	mask := uint16(1)<<bits - 1
	// ggml's kmap_size: the 2-bit grids use levels 0..2 only, so every
	// key is at most 0xAAAA (43690); ggml maps keys up to 43691 (lower
	// keys with a level 3 included) and so do we. 3-bit: all 4096 keys.
	kmapSize := 4096
	if bits == 2 {
		kmapSize = 43692
	}
	lat := &iqLattice{dim: dim, bits: bits, q: make([]int8, dim*len(kgrid)), kmap: make([]int32, kmapSize)}
	for k, p := range kgrid {
		for i := range dim {
			lat.q[dim*k+i] = int8(2*((p>>(bits*uint(i)))&mask) + 1)
		}
	}
	for i := range lat.kmap {
		lat.kmap[i] = -1
	}
	for k, p := range kgrid {
		lat.kmap[p] = int32(k)
	}
	// Squared distances by table: a key splits into two halves of dim/2
	// coordinates; half[a<<hb|b] is the squared distance between the
	// coordinates of halves a and b ((2la+1)-(2lb+1))² summed.
	hb := bits * uint(dim/2)
	hmask := 1<<hb - 1
	half := make([]int32, 1<<(2*hb))
	for a := range 1 << hb {
		for b := range 1 << hb {
			var d2 int32
			for i := range dim / 2 {
				d := 2 * (int32(a>>(bits*uint(i))&int(mask)) - int32(b>>(bits*uint(i))&int(mask)))
				d2 += d * d
			}
			half[a<<hb|b] = d2
		}
	}
	glo, ghi := make([]int32, len(kgrid)), make([]int32, len(kgrid))
	for j, p := range kgrid {
		glo[j], ghi[j] = int32(int(p)&hmask), int32(int(p)>>hb)
	}
	dist := make([]int32, len(kgrid))
	var hist [1024]int32 // squared distances are at most 4·7²·4 = 784
	var levels [3]int32
	var at [3]int
	for key := range lat.kmap {
		if lat.kmap[key] >= 0 {
			continue
		}
		rlo := half[(key&hmask)<<hb : (key&hmask+1)<<hb]
		rhi := half[(key>>hb)<<hb : (key>>hb+1)<<hb]
		for j := range dist {
			d := rlo[glo[j]] + rhi[ghi[j]]
			dist[j] = d
			hist[d]++
		}
		// the nwant smallest distinct distances, ascending, and where each
		// level's indices start in the list
		nl, total := 0, 0
		for d := range hist {
			if hist[d] == 0 {
				continue
			}
			if nl < nwant {
				levels[nl], at[nl] = int32(d), total
				total += int(hist[d])
				nl++
			}
			hist[d] = 0
		}
		o := len(lat.neighbours)
		lat.kmap[key] = -int32(o) - 1
		lat.neighbours = append(lat.neighbours, uint16(total))
		lat.neighbours = append(lat.neighbours, make([]uint16, total)...)
		list := lat.neighbours[o+1:]
		for j, d := range dist {
			for l := range nl {
				if d == levels[l] {
					list[at[l]] = uint16(j)
					at[l]++
					break
				}
			}
		}
	}
	return lat
}

// The lattices, built on first use.
var (
	latticeIQ2XXS = sync.OnceValue(func() *iqLattice { return buildLattice(kgridIQ2XXS[:], 2, 8, 2) })
	latticeIQ2XS  = sync.OnceValue(func() *iqLattice { return buildLattice(kgridIQ2XS[:], 2, 8, 2) })
	latticeIQ2S   = sync.OnceValue(func() *iqLattice { return buildLattice(kgridIQ2S[:], 2, 8, 1) })
	latticeIQ1S   = sync.OnceValue(func() *iqLattice { return buildLattice(kgridIQ1S[:], 2, 8, 3) })
	latticeIQ3XXS = sync.OnceValue(func() *iqLattice { return buildLattice(kgridIQ3XXS[:], 3, 4, 2) })
	latticeIQ3S   = sync.OnceValue(func() *iqLattice { return buildLattice(kgridIQ3S[:], 3, 4, 3) })
)

// key packs dim levels (0..2^bits-1) into a lattice key.
func (lat *iqLattice) key(l []int8) int {
	k := 0
	for i, v := range l[:lat.dim] {
		k |= int(v) << (lat.bits * uint(i))
	}
	return k
}

// neighboursOf returns the nearest grid points of an off-grid key.
func (lat *iqLattice) neighboursOf(key int) []uint16 {
	o := int(-lat.kmap[key] - 1)
	return lat.neighbours[o+1 : o+1+int(lat.neighbours[o])]
}

// bestNeighbour returns the neighbour of an off-grid key whose points
// times scale are nearest xval in the weighted squared error (the first on
// a tie), and writes its levels (q-1)/2 to l (ggml's
// iq2_find_best_neighbour, iq3_find_best_neighbour).
func (lat *iqLattice) bestNeighbour(key int, xval, weight []float32, scale float32, l []int8) int {
	nb := lat.neighboursOf(key)
	best, bestD2 := int(nb[0]), float32(math.MaxFloat32) // ggml asserts a d2 below FLT_MAX exists; the first neighbour stands in
	for _, j := range nb {
		pg := lat.q[lat.dim*int(j) : lat.dim*int(j)+lat.dim]
		var d2 float32
		for i, c := range pg {
			diff := float32(scale*float32(c)) - xval[i]
			d2 += float32(float32(weight[i]*diff) * diff)
		}
		if d2 < bestD2 {
			best, bestD2 = int(j), d2
		}
	}
	for i, c := range lat.q[lat.dim*best : lat.dim*best+lat.dim] {
		l[i] = (c - 1) / 2
	}
	return best
}
