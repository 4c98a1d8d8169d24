//go:build cgo

package gpu

// matmul.go: the matrix-matrix products of prefill (the mm_<type>
// shaders, mm_head.glsl's tiling) and MatMul, which picks them or the
// mat-vec shaders by the number of activation vectors.

import (
	"fmt"
	"math"

	"github.com/flowinfer/flowinfer/gpu/shaders"
	"github.com/flowinfer/flowinfer/gpu/vk"
	"github.com/flowinfer/flowinfer/quant"
)

// matMatShaders maps a weight type to its tiled matrix-matrix shader.
var matMatShaders = map[quant.Type]string{
	quant.F32:  shaders.MMF32,
	quant.F16:  shaders.MMF16,
	quant.BF16: shaders.MMBF16,
	quant.Q8_0: shaders.MMQ8_0,
	quant.Q4_0: shaders.MMQ4_0,
	quant.Q4_K: shaders.MMQ4_K,
	quant.Q5_K: shaders.MMQ5_K,
	quant.Q6_K: shaders.MMQ6_K,
	// The 16-level table types and the other legacy and K-quant types.
	quant.MXFP4:  shaders.MMMXFP4,
	quant.IQ4_NL: shaders.MMIQ4_NL,
	quant.IQ4_XS: shaders.MMIQ4_XS,
	quant.Q4_1:   shaders.MMQ4_1,
	quant.Q5_0:   shaders.MMQ5_0,
	quant.Q5_1:   shaders.MMQ5_1,
	quant.Q2_K:   shaders.MMQ2_K,
	quant.Q3_K:   shaders.MMQ3_K,

	// The lattice types (iq_dequant.glsl).
	quant.IQ2_XXS: shaders.MMIQ2_XXS,
	quant.IQ2_XS:  shaders.MMIQ2_XS,
	quant.IQ2_S:   shaders.MMIQ2_S,
	quant.IQ3_XXS: shaders.MMIQ3_XXS,
	quant.IQ3_S:   shaders.MMIQ3_S,
	quant.IQ1_S:   shaders.MMIQ1_S,
	quant.IQ1_M:   shaders.MMIQ1_M,
}

// SupportsMatMat reports whether MatMat handles weights of type t.
func SupportsMatMat(t quant.Type) bool { _, ok := matMatShaders[t]; return ok }

// mmThreads is the matrix-matrix shaders' workgroup size (mm_head.glsl's
// THREADS), mmK the weights of a row one step dequantizes (BK).
const (
	mmThreads = 256
	mmK       = 32
)

// defaultTile is the tile of a matrix-matrix workgroup for at least
// mmWideMin vectors unless SetMatMatTile chose another: rows, vectors,
// rows per thread (8 rows × 8 vectors per thread, the activations
// broadcast within subgroups: see mmSubgroup). narrowTile (4 rows × 8
// vectors per thread) takes fewer vectors, where a 128-vector tile would
// be mostly padding.
var (
	defaultTile = [3]uint32{128, 128, 8}
	narrowTile  = [3]uint32{128, 64, 4}
)

// mmWideMin is the fewest vectors defaultTile takes.
const mmWideMin = 128

// MatMatMin is the fewest activation vectors MatMul sends through the
// matrix-matrix shaders; fewer go through the mat-vec ones, whose
// workgroups take matVecCols vectors each. On lavapipe (BenchmarkMatMul,
// 2048×2048 Q4_K and Q8_0) mat-vec is 2.4-3.4× faster at 9 vectors and
// up to 2× at 16, the two are even at 32 and the 128×64 tile is 1.4×
// faster at 64: a tile's cost hardly depends on how many of its 64
// vectors are real. (llama.cpp's Vulkan backend switches above 8 columns,
// for GPUs.)
const MatMatMin = 32

// SetMatMatMin makes MatMul send products of at least n vectors through
// the matrix-matrix shaders (0: MatMatMin); a benchmark compares the two
// paths with it.
func (k *Kernels) SetMatMatMin(n int) {
	k.mu.Lock()
	k.mmMin = n
	k.mu.Unlock()
}

// MatMul records y = W·x for n vectors (MatVec's layout): through the
// matrix-matrix shader of w's type when n ≥ MatMatMin (or SetMatMatMin's
// value) and there is one, else through MatVec.
func (k *Kernels) MatMul(cb *vk.CommandBuffer, y F32, w Weight, x F32, n int) error {
	k.mu.Lock()
	least := k.mmMin
	k.mu.Unlock()
	if least <= 0 {
		least = MatMatMin
	}
	if n >= least && SupportsMatMat(w.Type) && k.tileFits(n) {
		return k.MatMat(cb, y, w, x, n)
	}
	return k.MatVec(cb, y, w, x, n)
}

// curTile returns the matrix-matrix tile for a product of n vectors.
func (k *Kernels) curTile(n int) [3]uint32 {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case k.tile != [3]uint32{}:
		return k.tile
	case n >= mmWideMin:
		return defaultTile
	}
	return narrowTile
}

// tileFits reports whether the tile's shared memory fits the device (the
// default tile takes 32 KiB; Vulkan guarantees 16) and the device runs
// the shaders' SPIR-V 1.3 (a Vulkan 1.1 device, which reports a subgroup
// size): MatMul takes the mat-vec shaders on a device where not.
func (k *Kernels) tileFits(n int) bool {
	t := k.curTile(n)
	info := k.dev.Info()
	return info.SubgroupSize > 0 && 4*(t[0]+t[1])*mmK <= info.Limits.MaxComputeSharedMemorySize
}

// mmSubgroup returns mm_head.glsl's SG for tile t: the device's subgroup
// size when the tile's vectors per thread (TN) are at most 8 and at most
// the subgroup size, and each subgroup's lanes share one vector group
// (the row groups, rows/perThread, a multiple of the subgroup size:
// subgroups are runs of consecutive invocations); else 0 (each thread
// reads its own activations).
func mmSubgroup(t [3]uint32, sg uint32) uint32 {
	rg := t[0] / t[2]
	tn := t[1] / (mmThreads / rg)
	if sg == 0 || tn > 8 || tn > sg || rg%sg != 0 {
		return 0
	}
	return sg
}

// SetMatMatTile makes later MatMat calls use tiles of rows × vectors,
// each thread making perThread rows of vectors·perThread·256/(rows·256)
// vectors: rows/perThread must divide 256, and 256·perThread/rows divide
// vectors; each tile's pipelines are built once.
func (k *Kernels) SetMatMatTile(rows, vectors, perThread int) error {
	lim := k.dev.Info().Limits
	bad := rows < 1 || vectors < 1 || perThread < 1 || rows%perThread != 0
	if !bad {
		rg := rows / perThread
		bad = mmThreads%rg != 0 || vectors%(mmThreads/rg) != 0 || vectors/(mmThreads/rg) > 16
	}
	if bad || rows*vectors/mmThreads > 128 {
		return fmt.Errorf("gpu: SetMatMatTile: %d×%d, %d rows per thread (rows/perThread must divide %d, %d·perThread/rows divide vectors, at most 16 vectors and 128 outputs per thread)", rows, vectors, perThread, mmThreads, mmThreads)
	}
	if uint32(4*(rows+vectors)*mmK) > lim.MaxComputeSharedMemorySize {
		return fmt.Errorf("gpu: SetMatMatTile: %d×%d needs %d bytes of shared memory (the device has %d)", rows, vectors, 4*(rows+vectors)*mmK, lim.MaxComputeSharedMemorySize)
	}
	k.mu.Lock()
	k.tile = [3]uint32{uint32(rows), uint32(vectors), uint32(perThread)}
	k.mu.Unlock()
	return nil
}

// MatMat records y[t·Rows + r] = W[r]·x[t·Cols : (t+1)·Cols] for t < n
// (MatVec's layout) with the tiled shader of w's type: float32 products
// of dequantized weights and float32 activations, float32 sums.
func (k *Kernels) MatMat(cb *vk.CommandBuffer, y F32, w Weight, x F32, n int) error {
	name, ok := matMatShaders[w.Type]
	if !ok {
		return fmt.Errorf("gpu: MatMat: %w: weights of type %s", vk.ErrUnsupported, w.Type)
	}
	if w.Rows <= 0 || w.Cols <= 0 || n <= 0 {
		return fmt.Errorf("gpu: MatMat: shape %dx%d, %d vectors", w.Rows, w.Cols, n)
	}
	rb, err := quant.RowBytes(w.Type, w.Cols)
	if err != nil {
		return fmt.Errorf("gpu: MatMat: %w", err)
	}
	// F32, Q4_K and Q5_K (whose rows are whole words) are read by words
	// from 4-aligned offsets; the other types' rows need only be 2-aligned.
	align := 2
	if w.Type == quant.F32 || w.Type == quant.Q4_K || w.Type == quant.Q5_K {
		align = 4
	}
	if w.Buf == nil || w.Off < 0 || w.Off%align != 0 || uint64(w.Off)+uint64(w.Rows)*uint64(rb) > w.Buf.Size() {
		return fmt.Errorf("gpu: MatMat: %d rows of %d bytes at offset %d (a multiple of %d) overrun the weight buffer", w.Rows, rb, w.Off, align)
	}
	if uint64(w.Off)+uint64(w.Rows)*uint64(rb) > math.MaxUint32 {
		return fmt.Errorf("gpu: MatMat: weights end beyond 4 GiB")
	}
	xo, err := floats("MatMat x", x, n*w.Cols)
	if err != nil {
		return err
	}
	yo, err := floats("MatMat y", y, n*w.Rows)
	if err != nil {
		return err
	}
	tile := k.curTile(n)
	if !k.tileFits(n) {
		return fmt.Errorf("gpu: MatMat: %w: a %d×%d tile needs %d bytes of shared memory (the device has %d) and a Vulkan 1.1 device (subgroup size %d)", vk.ErrUnsupported, tile[0], tile[1], 4*(tile[0]+tile[1])*mmK, k.dev.Info().Limits.MaxComputeSharedMemorySize, k.dev.Info().SubgroupSize)
	}
	groupsZ := (n + int(tile[1]) - 1) / int(tile[1])
	if groupsZ > int(k.dev.Info().Limits.MaxComputeWorkGroupCount[2]) {
		return fmt.Errorf("gpu: MatMat: %d vectors exceed the device's z workgroup limit", n)
	}
	bufs, nb, err := k.productBufs(w.Type, w.Buf, x.Buf, y.Buf)
	if err != nil {
		return err
	}
	spec := [4]uint32{tile[0], tile[1], tile[2], mmSubgroup(tile, k.dev.Info().SubgroupSize)}
	p, set, err := k.bind(name, 28, spec[:], bufs[:nb]...)
	if err != nil {
		return err
	}
	gx, gy, err := k.grid((w.Rows + int(tile[0]) - 1) / int(tile[0]))
	if err != nil {
		return err
	}
	cb.Dispatch(p, set, push(uint32(w.Rows), uint32(w.Cols), uint32(rb), uint32(w.Off), xo, yo, uint32(n)), gx, gy, uint32(groupsZ))
	return nil
}
