//go:build cgo

package gpu

// kernels_model.go: the operations a model step needs beyond the products
// and element-wise ops of kernels.go: RoPE by a host-computed angle table,
// bias rows, softmax, and causal attention against an F32 KV cache.

import (
	"fmt"
	"math"

	"github.com/flowinfer/flowinfer/gpu/shaders"
	"github.com/flowinfer/flowinfer/gpu/vk"
)

// Rope records the rotation of the first 2·half values of each of nHead
// heads of headDim in n rows of x, by the table cs (4·half floats per row,
// model.Rope.Table's layout); neox selects the NeoX pairing.
func (k *Kernels) Rope(cb *vk.CommandBuffer, x, cs F32, n, nHead, headDim, half int, neox bool) error {
	if n <= 0 || nHead <= 0 || half <= 0 || 2*half > headDim {
		return fmt.Errorf("gpu: Rope: %d rows of %d heads of %d, %d pairs", n, nHead, headDim, half)
	}
	lim := k.dev.Info().Limits.MaxComputeWorkGroupCount
	if uint32(nHead) > lim[0] || uint32(n) > lim[1] {
		return fmt.Errorf("gpu: Rope: %d heads x %d rows exceed the device's workgroup limits", nHead, n)
	}
	xo, err := floats("Rope x", x, n*nHead*headDim)
	if err != nil {
		return err
	}
	co, err := floats("Rope table", cs, n*4*half)
	if err != nil {
		return err
	}
	p, set, err := k.bind(shaders.Rope, 24, []uint32{64}, x.Buf, cs.Buf)
	if err != nil {
		return err
	}
	nx := uint32(0)
	if neox {
		nx = 1
	}
	cb.Dispatch(p, set, push(xo, co, uint32(nHead), uint32(headDim), uint32(half), nx), uint32(nHead), uint32(n), 1)
	return nil
}

// AddRows records x[i] += b[i mod dim] over n floats of x (n a multiple
// of dim).
func (k *Kernels) AddRows(cb *vk.CommandBuffer, x, b F32, n, dim int) error {
	if dim <= 0 || n <= 0 || n%dim != 0 || n > math.MaxUint32 {
		return fmt.Errorf("gpu: AddRows: %d floats in rows of %d", n, dim)
	}
	xo, err := floats("AddRows x", x, n)
	if err != nil {
		return err
	}
	bo, err := floats("AddRows bias", b, dim)
	if err != nil {
		return err
	}
	p, set, err := k.bind(shaders.AddRows, 16, []uint32{ewThreads}, x.Buf, b.Buf)
	if err != nil {
		return err
	}
	gx, gy, err := k.grid((n + ewThreads - 1) / ewThreads)
	if err != nil {
		return err
	}
	cb.Dispatch(p, set, push(uint32(n), xo, bo, uint32(dim)), gx, gy, 1)
	return nil
}

// Softmax records the softmax of each of n rows of dim floats in place.
func (k *Kernels) Softmax(cb *vk.CommandBuffer, x F32, n, dim int) error {
	if n <= 0 || dim <= 0 {
		return fmt.Errorf("gpu: Softmax: %d rows of %d", n, dim)
	}
	xo, err := floats("Softmax x", x, n*dim)
	if err != nil {
		return err
	}
	p, set, err := k.bind(shaders.Softmax, 12, []uint32{normThreads}, x.Buf)
	if err != nil {
		return err
	}
	gx, gy, err := k.grid(n)
	if err != nil {
		return err
	}
	cb.Dispatch(p, set, push(uint32(dim), xo, uint32(n)), gx, gy, 1)
	return nil
}

// AttnShape is what Attention needs besides its buffers.
type AttnShape struct {
	NHead, NHeadKV int
	DK, DV         int
	NCtx           int // cache rows per sequence: cell (seq, j) is row seq·NCtx + j
	Scale          float32
	Window         int  // 0: none
	F16            bool // the cache holds float16 values (else float32)
	Q8_0           bool // the cache holds Q8_0 blocks (rows of whole blocks; not with F16)
}

const attnThreads = 64

// maxAttnDV is attn_f32.comp's MAX_DV.
const maxAttnDV = 512

// Attention records out = softmax(q·kᵀ·Scale)·v for n query rows (row t of
// q holds NHead heads of DK; idx holds its sequence and position as two
// int32 at 2t, 2t+1 from idx.Off) against caches k and v of F32, F16
// (s.F16) or Q8_0 (s.Q8_0) values (NHeadKV heads of DK and DV per cell), with sinks (one logit
// per head) when sinks.Buf is not nil. One row (decode) goes through
// attn_*.comp, a workgroup per head; more rows go through the tiled
// flash_attn_*.comp (flashAttention) when flashTile has a tile for the
// heads and the device.
func (k *Kernels) Attention(cb *vk.CommandBuffer, out, q, kc, vc, idx, sinks F32, n int, s AttnShape) error {
	switch {
	case n <= 0 || s.NHead <= 0 || s.NHeadKV <= 0 || s.NHead%s.NHeadKV != 0 || s.DK <= 0 || s.DV <= 0 || s.NCtx <= 0 || s.Window < 0:
		return fmt.Errorf("gpu: Attention: %d rows, shape %+v", n, s)
	case s.DV > maxAttnDV:
		return fmt.Errorf("gpu: Attention: %w: value heads of %d (at most %d)", vk.ErrUnsupported, s.DV, maxAttnDV)
	}
	lim := k.dev.Info().Limits.MaxComputeWorkGroupCount
	if uint32(s.NHead) > lim[0] || uint32(n) > lim[1] {
		return fmt.Errorf("gpu: Attention: %d heads x %d rows exceed the device's workgroup limits", s.NHead, n)
	}
	qo, err := floats("Attention q", q, n*s.NHead*s.DK)
	if err != nil {
		return err
	}
	oo, err := floats("Attention out", out, n*s.NHead*s.DV)
	if err != nil {
		return err
	}
	io, err := floats("Attention positions", idx, 2*n)
	if err != nil {
		return err
	}
	// cache words per value: num/den
	name, num, den := shaders.AttnF32, 1, 1
	switch {
	case s.F16 && s.Q8_0:
		return fmt.Errorf("gpu: Attention: a cache both F16 and Q8_0")
	case s.F16:
		if s.DK%2 != 0 || s.DV%2 != 0 {
			return fmt.Errorf("gpu: Attention: F16 cache with odd heads %d/%d", s.DK, s.DV)
		}
		name, den = shaders.AttnF16, 2
	case s.Q8_0:
		if s.DK%32 != 0 || s.DV%32 != 0 {
			return fmt.Errorf("gpu: Attention: Q8_0 cache with heads %d/%d (multiples of 32)", s.DK, s.DV)
		}
		name, num, den = shaders.AttnQ8_0, 34, 128 // 34 bytes per 32 values
	}
	if _, err := floats("Attention K", kc, (s.NCtx*s.NHeadKV*s.DK*num+den-1)/den); err != nil {
		return err
	}
	if _, err := floats("Attention V", vc, (s.NCtx*s.NHeadKV*s.DV*num+den-1)/den); err != nil {
		return err
	}
	if kc.Off != 0 || vc.Off != 0 {
		return fmt.Errorf("gpu: Attention: K and V caches must start their buffers")
	}
	hasS, sb, so := uint32(0), q.Buf, uint32(0)
	if sinks.Buf != nil {
		if so, err = floats("Attention sinks", sinks, s.NHead); err != nil {
			return err
		}
		hasS, sb = 1, sinks.Buf
	}
	if _, _, ok := k.flashTile(s); n > 1 && ok {
		return k.flashAttention(cb, out, q, kc, vc, idx, sb, n, s, push(qo, oo, io, uint32(s.NHead), uint32(s.NHeadKV), uint32(s.DK), uint32(s.DV),
			uint32(s.NCtx), math.Float32bits(s.Scale), uint32(s.Window), hasS, so, uint32(n)))
	}
	p, set, err := k.bind(name, 48, []uint32{attnThreads}, q.Buf, kc.Buf, vc.Buf, idx.Buf, sb, out.Buf)
	if err != nil {
		return err
	}
	cb.Dispatch(p, set, push(qo, oo, io, uint32(s.NHead), uint32(s.NHeadKV), uint32(s.DK), uint32(s.DV),
		uint32(s.NCtx), math.Float32bits(s.Scale), uint32(s.Window), hasS, so), uint32(s.NHead), uint32(n), 1)
	return nil
}

// flashTile returns the tile of flash_attn.glsl for heads of s, BR query
// rows × BC cells, chosen so that shared memory stays within lavapipe's 32
// KiB: 16 × 32 up to heads of 128 (26.5 KiB at 128), 8 × 16 up to 256
// (24.8 KiB at 256). ok is false for larger heads or a device with less
// shared memory (Vulkan guarantees 16 KiB): Attention then takes the
// per-row shader.
func (k *Kernels) flashTile(s AttnShape) (br, bc int, ok bool) {
	kw := max(s.DK, s.DV)
	switch {
	case kw <= 128:
		br, bc = 16, 32
	case kw <= 256:
		br, bc = 8, 16
	default:
		return 0, 0, false
	}
	shm := 4*(br*s.DK+bc*kw+br*bc+6*br) + 4*bc // qs, kvs, ss, six per-row arrays, used
	return br, bc, uint64(shm) <= uint64(k.dev.Info().Limits.MaxComputeSharedMemorySize)
}

// flashAttention records Attention's prompt case (n > 1 rows, a tile from
// flashTile) with the tiled shader flash_attn_*.comp: a workgroup takes BR
// query rows of one KV head (the heads sharing it, row after row) and
// loads each step's BC cells of K and V once for all of them, where
// attn_*.comp's workgroup per (head, row) reads every cell again for each.
// A pipeline per (tile, DK, DV): the head sizes are specialization
// constants. pc is the push constants of attn.glsl plus n.
func (k *Kernels) flashAttention(cb *vk.CommandBuffer, out, q, kc, vc, idx F32, sinks *vk.Buffer, n int, s AttnShape, pc []byte) error {
	br, bc, _ := k.flashTile(s)
	tiles := (n*(s.NHead/s.NHeadKV) + br - 1) / br
	lim := k.dev.Info().Limits.MaxComputeWorkGroupCount
	if uint64(tiles) > uint64(lim[0]) || uint32(s.NHeadKV) > lim[1] {
		return fmt.Errorf("gpu: Attention: %d tiles x %d KV heads exceed the device's workgroup limits", tiles, s.NHeadKV)
	}
	name := shaders.FlashAttnF32
	switch {
	case s.F16:
		name = shaders.FlashAttnF16
	case s.Q8_0:
		name = shaders.FlashAttnQ8_0
	}
	p, set, err := k.bind(name, len(pc), []uint32{uint32(br), uint32(bc), uint32(s.DK), uint32(s.DV)}, q.Buf, kc.Buf, vc.Buf, idx.Buf, sinks, out.Buf)
	if err != nil {
		return err
	}
	cb.Dispatch(p, set, pc, uint32(tiles), uint32(s.NHeadKV), 1)
	return nil
}

// KVStoreF16 records the conversion of n rows of dim float32 values of src
// to float16 into the cache dst at the cells idx lists (seq, pos as two
// int32 per row): cell (seq, pos) is row seq·nCtx + pos.
func (k *Kernels) KVStoreF16(cb *vk.CommandBuffer, dst, src, idx F32, n, dim, nCtx int) error {
	if n <= 0 || dim <= 0 || dim%2 != 0 || nCtx <= 0 {
		return fmt.Errorf("gpu: KVStoreF16: %d rows of %d (even), context %d", n, dim, nCtx)
	}
	if uint32(n) > k.dev.Info().Limits.MaxComputeWorkGroupCount[1] {
		return fmt.Errorf("gpu: KVStoreF16: %d rows exceed the device's workgroup limit", n)
	}
	so, err := floats("KVStoreF16 src", src, n*dim)
	if err != nil {
		return err
	}
	io, err := floats("KVStoreF16 positions", idx, 2*n)
	if err != nil {
		return err
	}
	if dst.Buf == nil || dst.Off != 0 {
		return fmt.Errorf("gpu: KVStoreF16: the cache must start its buffer")
	}
	p, set, err := k.bind(shaders.KVStoreF16, 16, []uint32{64}, src.Buf, idx.Buf, dst.Buf)
	if err != nil {
		return err
	}
	cb.Dispatch(p, set, push(so, io, uint32(dim), uint32(nCtx)), uint32((dim/2+63)/64), uint32(n), 1)
	return nil
}

// KVStoreQ8_0 records the quantization of n rows of dim float32 values of
// src to Q8_0 (dim/32 blocks of 34 bytes, bit for bit what
// quant.QuantizeRowQ8_0 makes of the row, which is what the CPU's cache
// stores) into the cache dst at the cells idx lists (seq, pos as two int32
// per row): cell (seq, pos) is row seq·nCtx + pos. dim must be a multiple
// of 64: each invocation writes a pair of blocks, 17 whole words.
func (k *Kernels) KVStoreQ8_0(cb *vk.CommandBuffer, dst, src, idx F32, n, dim, nCtx int) error {
	if n <= 0 || dim <= 0 || dim%64 != 0 || nCtx <= 0 {
		return fmt.Errorf("gpu: KVStoreQ8_0: %d rows of %d (a multiple of 64), context %d", n, dim, nCtx)
	}
	if uint32(n) > k.dev.Info().Limits.MaxComputeWorkGroupCount[1] {
		return fmt.Errorf("gpu: KVStoreQ8_0: %d rows exceed the device's workgroup limit", n)
	}
	so, err := floats("KVStoreQ8_0 src", src, n*dim)
	if err != nil {
		return err
	}
	io, err := floats("KVStoreQ8_0 positions", idx, 2*n)
	if err != nil {
		return err
	}
	if dst.Buf == nil || dst.Off != 0 {
		return fmt.Errorf("gpu: KVStoreQ8_0: the cache must start its buffer")
	}
	p, set, err := k.bind(shaders.KVStoreQ8_0, 16, []uint32{kvStoreQ8Threads}, src.Buf, idx.Buf, dst.Buf)
	if err != nil {
		return err
	}
	pairs := dim / 64
	cb.Dispatch(p, set, push(so, io, uint32(dim), uint32(nCtx)), uint32((pairs+kvStoreQ8Threads-1)/kvStoreQ8Threads), uint32(n), 1)
	return nil
}

// kvStoreQ8Threads: a row of 4096 values is 64 pairs of blocks.
const kvStoreQ8Threads = 32

// maxHadamard is hadamard.comp's MAX_N.
const maxHadamard = 1024

// Hadamard records the multiplication of each of pieces pieces of n
// values of x (n a power of two up to 1024) in place by the orthonormal
// Walsh-Hadamard matrix, bit for bit as quant.Hadamard.
func (k *Kernels) Hadamard(cb *vk.CommandBuffer, x F32, pieces, n int) error {
	if pieces <= 0 || n < 1 || n&(n-1) != 0 || n > maxHadamard {
		return fmt.Errorf("gpu: Hadamard: %d pieces of %d (a power of two up to %d)", pieces, n, maxHadamard)
	}
	xo, err := floats("Hadamard x", x, pieces*n)
	if err != nil {
		return err
	}
	p, set, err := k.bind(shaders.Hadamard, 16, []uint32{ewThreads / 4}, x.Buf)
	if err != nil {
		return err
	}
	gx, gy, err := k.grid(pieces)
	if err != nil {
		return err
	}
	// quant.Hadamard's scale: float32(1/√n) computed in float64
	scale := float32(1 / math.Sqrt(float64(n)))
	cb.Dispatch(p, set, push(xo, uint32(n), uint32(pieces), math.Float32bits(scale)), gx, gy, 1)
	return nil
}
