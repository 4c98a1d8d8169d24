//go:build cgo

package gpu

// iq_tables.go: the grids and sign table the lattice types' shaders
// (shaders/iq_dequant.glsl) look weights up in, as a fourth storage buffer
// (binding 3) of their pipelines: one buffer a type, built from package
// quant's tables (quant.LatticeGrid, quant.SignsIQ2XS, which quant's
// TestIQGrids checks against ggml's) the first time a product of that type
// is recorded, kept until Close.
//
// Not GLSL constant arrays: glslang copies a const array into a local
// variable at every place it is indexed by a variable, and lavapipe took
// 3-7 s to build one mat-vec pipeline with them (0.1 s without); as
// initialized globals the pipelines built in 0.5 s but each invocation
// filled its own copy, and a 64×512 product ran 20-50 s. ggml-vulkan
// copies its grids into shared memory; a buffer leaves the matrix-matrix
// tiles all of it.
//
// Layout, in uint32s: the grid, then (IQ2_XXS, IQ2_XS, IQ3_XXS) the 128
// entries of ksigns_iq2xs, one a word. An 8-wide grid point (IQ2_*, IQ1_*)
// is two words, its levels as signed bytes, element 0 in the low byte of
// the first: point k's elements 4h..4h+3 are word 2k+h. A 4-wide point
// (IQ3_*) is one word. iq_dequant.glsl's SIGNS is where the signs start.

import (
	"encoding/binary"
	"fmt"

	"github.com/flowinfer/flowinfer/gpu/vk"
	"github.com/flowinfer/flowinfer/quant"
)

// iqTables holds the table buffer of each lattice type used so far.
type iqTables map[quant.Type]*vk.Buffer

// iqTableWords returns the words of type t's table, nil for a type without
// one.
func iqTableWords(t quant.Type) []uint32 {
	g := quant.LatticeGrid(t)
	if g == nil {
		return nil
	}
	words := make([]uint32, len(g)/4)
	for i := range words {
		for j := range 4 {
			words[i] |= uint32(uint8(g[4*i+j])) << (8 * j)
		}
	}
	switch t {
	case quant.IQ2_XXS, quant.IQ2_XS, quant.IQ3_XXS:
		for _, s := range quant.SignsIQ2XS() {
			words = append(words, uint32(s))
		}
	}
	return words
}

// iqTable returns the table buffer of type t (made on first use), nil for
// a type without one.
func (k *Kernels) iqTable(t quant.Type) (*vk.Buffer, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if b := k.iq[t]; b != nil {
		return b, nil
	}
	words := iqTableWords(t)
	if words == nil {
		return nil, nil
	}
	// Host-visible memory: the host's writes are visible to every later
	// submission (vkQueueSubmit orders them), with no transfer to wait on.
	b, err := k.dev.NewBuffer(uint64(4*len(words)), vk.Upload)
	if err != nil {
		return nil, fmt.Errorf("gpu: %s grid table: %w", t, err)
	}
	dst := b.Bytes()
	for i, w := range words {
		binary.LittleEndian.PutUint32(dst[4*i:], w)
	}
	if k.iq == nil {
		k.iq = iqTables{}
	}
	k.iq[t] = b
	return b, nil
}

// productBufs returns the buffers a product's pipeline binds: the weights,
// activations and outputs, and for a lattice type its table.
func (k *Kernels) productBufs(t quant.Type, w, x, y *vk.Buffer) ([4]*vk.Buffer, int, error) {
	tb, err := k.iqTable(t)
	if err != nil || tb == nil {
		return [4]*vk.Buffer{w, x, y}, 3, err
	}
	return [4]*vk.Buffer{w, x, y, tb}, 4, nil
}

// freeIQTables frees the table buffers (Close, after the pipelines and
// their descriptor sets are gone); k.mu is held.
func (k *Kernels) freeIQTables() {
	for t, b := range k.iq {
		b.Free()
		delete(k.iq, t)
	}
}
