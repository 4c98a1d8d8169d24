//go:build cgo

package gpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/flowinfer/flowinfer/gpu/shaders"
	"github.com/flowinfer/flowinfer/gpu/vk"
	"github.com/flowinfer/flowinfer/quant"
)

// F32 is a float32 array in a buffer, starting Off floats in.
type F32 struct {
	Buf *vk.Buffer
	Off int
}

// Weight is a row-major matrix of Rows rows of Cols weights of Type, stored
// as in a GGUF file, starting Off bytes into Buf.
type Weight struct {
	Buf        *vk.Buffer
	Off        int
	Type       quant.Type
	Rows, Cols int
}

// Kernels records operations into command buffers. Each records one
// dispatch and no barrier: the caller puts cb.Barrier() between
// dependent operations. Pipelines and descriptor sets are made on first
// use and kept; descriptor sets bind whole buffers (offsets travel as push
// constants), one per pipeline and buffer combination.
type Kernels struct {
	dev   *vk.Device
	mu    sync.Mutex
	pipes map[variant]*vk.Pipeline
	sets  map[setKey]*vk.DescriptorSet
	mv    map[quant.Type][2]uint32 // mat-vec variants set by SetMatVecVariant
	tile  [3]uint32                // matrix-matrix tile set by SetMatMatTile (zero: defaultTile)
	mmMin int                      // SetMatMatMin (0: MatMatMin)
	iq    iqTables                 // the lattice types' tables (iq_tables.go)
}

type variant struct {
	name string
	spec [4]uint32 // specialization constants (flash_attn.glsl has four)
}

type setKey struct {
	p    *vk.Pipeline
	bufs [6]*vk.Buffer
}

// NewKernels returns the kernels of dev. Close destroys their pipelines.
func NewKernels(dev *vk.Device) *Kernels {
	return &Kernels{dev: dev, pipes: map[variant]*vk.Pipeline{}, sets: map[setKey]*vk.DescriptorSet{}, mv: map[quant.Type][2]uint32{}}
}

// Close destroys the pipelines and their descriptor sets.
func (k *Kernels) Close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, p := range k.pipes {
		p.Destroy()
	}
	k.pipes = map[variant]*vk.Pipeline{}
	k.sets = map[setKey]*vk.DescriptorSet{}
	k.freeIQTables()
}

// Forget drops the descriptor sets that bind any of bufs, before the
// buffers are freed: a later buffer at the same address must not find a
// set bound to a destroyed one. (The sets' pool slots stay allocated until
// the pipelines are destroyed.)
func (k *Kernels) Forget(bufs ...*vk.Buffer) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for sk := range k.sets {
		for _, b := range sk.bufs {
			if b != nil && slices.Contains(bufs, b) {
				delete(k.sets, sk)
				break
			}
		}
	}
}

// bind returns the pipeline of a shader variant (built once) and a
// descriptor set binding bufs to it.
func (k *Kernels) bind(name string, push int, spec []uint32, bufs ...*vk.Buffer) (*vk.Pipeline, *vk.DescriptorSet, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	v := variant{name: name}
	copy(v.spec[:], spec)
	p := k.pipes[v]
	if p == nil {
		code, err := shaders.SPIRV(name)
		if err != nil {
			return nil, nil, err
		}
		p, err = k.dev.NewPipeline(vk.PipelineSpec{Name: name, SPIRV: code, Bindings: len(bufs), PushBytes: push, Spec: spec})
		if err != nil {
			return nil, nil, err
		}
		k.pipes[v] = p
	}
	sk := setKey{p: p}
	copy(sk.bufs[:], bufs)
	set := k.sets[sk]
	if set == nil {
		r := make([]vk.Range, len(bufs))
		for i, b := range bufs {
			r[i] = vk.Range{Buf: b}
		}
		var err error
		if set, err = p.NewDescriptorSet(r...); err != nil {
			return nil, nil, err
		}
		k.sets[sk] = set
	}
	return p, set, nil
}

// floats checks that a holds n floats and returns its offset as a uint32.
func floats(what string, a F32, n int) (uint32, error) {
	if a.Buf == nil {
		return 0, fmt.Errorf("gpu: %s: no buffer", what)
	}
	if a.Off < 0 || n < 0 || uint64(a.Off+n)*4 > a.Buf.Size() {
		return 0, fmt.Errorf("gpu: %s: %d floats at offset %d overrun a buffer of %d bytes", what, n, a.Off, a.Buf.Size())
	}
	if a.Off > math.MaxUint32 {
		return 0, fmt.Errorf("gpu: %s: offset %d beyond 32 bits", what, a.Off)
	}
	return uint32(a.Off), nil
}

func push(v ...uint32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, x)
	}
	return b
}

// grid splits groups over x and y under the device's per-dimension limit.
func (k *Kernels) grid(groups int) (x, y uint32, err error) {
	lim := k.dev.Info().Limits.MaxComputeWorkGroupCount
	x = uint32(min(groups, int(lim[0])))
	yy := (groups + int(x) - 1) / int(x)
	if yy > int(lim[1]) {
		return 0, 0, fmt.Errorf("gpu: %d workgroups exceed the device's %dx%d", groups, lim[0], lim[1])
	}
	return x, uint32(yy), nil
}

// matVecShaders maps a weight type to its shader and the variant it runs
// with: threads per workgroup (a power of two) and rows per workgroup.
// The shaders that take all their rows at once (rows_dot) run 4 or 8 rows
// a workgroup: each activation read serves them all. The threads and rows
// are the fastest of 16, 32, 64 threads × 4, 8 rows on lavapipe at
// 4096×14336 (docs/decisions.md; at 16 rows the K-quants got slower), the
// wider one where two were within noise.
var matVecShaders = map[quant.Type]struct {
	name string
	spec []uint32
}{
	quant.F32:  {shaders.MulMatVecF32, []uint32{64, 1}},
	quant.F16:  {shaders.MulMatVecF16, []uint32{64, 4}},
	quant.Q8_0: {shaders.MulMatVecQ8_0, []uint32{32, 8}},
	quant.Q4_0: {shaders.MulMatVecQ4_0, []uint32{32, 8}},
	quant.Q4_K: {shaders.MulMatVecQ4_K, []uint32{32, 8}},
	quant.Q5_K: {shaders.MulMatVecQ5_K, []uint32{64, 4}},
	quant.Q6_K: {shaders.MulMatVecQ6_K, []uint32{64, 4}},
	quant.BF16: {shaders.MulMatVecBF16, []uint32{64, 1}},
	// The 16-level table types and the other legacy and K-quant types:
	// the variants of the types whose blocks they share (Q4_0's for the
	// 32-weight blocks, Q6_K's for the 16-slot super-blocks).
	quant.MXFP4:  {shaders.MulMatVecMXFP4, []uint32{32, 8}},
	quant.IQ4_NL: {shaders.MulMatVecIQ4_NL, []uint32{32, 8}},
	quant.IQ4_XS: {shaders.MulMatVecIQ4_XS, []uint32{64, 4}},
	quant.Q4_1:   {shaders.MulMatVecQ4_1, []uint32{32, 8}},
	quant.Q5_0:   {shaders.MulMatVecQ5_0, []uint32{32, 8}},
	quant.Q5_1:   {shaders.MulMatVecQ5_1, []uint32{32, 8}},
	quant.Q2_K:   {shaders.MulMatVecQ2_K, []uint32{64, 4}},
	quant.Q3_K:   {shaders.MulMatVecQ3_K, []uint32{64, 4}},

	// The lattice types (iq_dequant.glsl): 16 slots a super-block as
	// Q4_K, and Q4_K's variant.
	quant.IQ2_XXS: {shaders.MulMatVecIQ2_XXS, []uint32{32, 8}},
	quant.IQ2_XS:  {shaders.MulMatVecIQ2_XS, []uint32{32, 8}},
	quant.IQ2_S:   {shaders.MulMatVecIQ2_S, []uint32{32, 8}},
	quant.IQ3_XXS: {shaders.MulMatVecIQ3_XXS, []uint32{32, 8}},
	quant.IQ3_S:   {shaders.MulMatVecIQ3_S, []uint32{32, 8}},
	quant.IQ1_S:   {shaders.MulMatVecIQ1_S, []uint32{32, 8}},
	quant.IQ1_M:   {shaders.MulMatVecIQ1_M, []uint32{32, 8}},
}

// SupportsMatVec reports whether MatVec handles weights of type t.
func SupportsMatVec(t quant.Type) bool { _, ok := matVecShaders[t]; return ok }

// SetMatVecVariant makes later MatVec calls on type t run threads
// invocations per workgroup (a power of two, within the device's limits)
// each workgroup making rows outputs (1 to 64); the pipeline of each
// variant is built once.
func (k *Kernels) SetMatVecVariant(t quant.Type, threads, rows int) error {
	if _, ok := matVecShaders[t]; !ok {
		return fmt.Errorf("gpu: SetMatVecVariant: %w: weights of type %s", vk.ErrUnsupported, t)
	}
	lim := k.dev.Info().Limits
	if threads < 1 || threads&(threads-1) != 0 || uint32(threads) > lim.MaxComputeWorkGroupSize[0] || uint32(threads) > lim.MaxComputeWorkGroupInvocations {
		return fmt.Errorf("gpu: SetMatVecVariant: %d threads (a power of two up to %d)", threads, min(lim.MaxComputeWorkGroupSize[0], lim.MaxComputeWorkGroupInvocations))
	}
	if rows < 1 || rows > 64 || uint32(4*threads*rows) > lim.MaxComputeSharedMemorySize {
		return fmt.Errorf("gpu: SetMatVecVariant: %d rows per workgroup (1 to 64, %d·%d floats of shared memory)", rows, threads, rows)
	}
	k.mu.Lock()
	k.mv[t] = [2]uint32{uint32(threads), uint32(rows)}
	k.mu.Unlock()
	return nil
}

// MatVec records y[t·Rows + r] = W[r]·x[t·Cols : (t+1)·Cols] for t < n
// (model.Ops.MatMul's layout), in float32 against dequantized weights.
func (k *Kernels) MatVec(cb *vk.CommandBuffer, y F32, w Weight, x F32, n int) error {
	sh, ok := matVecShaders[w.Type]
	if !ok {
		return fmt.Errorf("gpu: MatVec: %w: weights of type %s", vk.ErrUnsupported, w.Type)
	}
	if w.Rows <= 0 || w.Cols <= 0 || n <= 0 {
		return fmt.Errorf("gpu: MatVec: shape %dx%d, %d vectors", w.Rows, w.Cols, n)
	}
	rb, err := quant.RowBytes(w.Type, w.Cols)
	if err != nil {
		return fmt.Errorf("gpu: MatVec: %w", err)
	}
	if w.Buf == nil || w.Off < 0 || w.Off%4 != 0 || uint64(w.Off)+uint64(w.Rows)*uint64(rb) > w.Buf.Size() {
		return fmt.Errorf("gpu: MatVec: %d rows of %d bytes at offset %d (a multiple of 4) overrun the weight buffer", w.Rows, rb, w.Off)
	}
	if uint64(w.Off)+uint64(w.Rows)*uint64(rb) > math.MaxUint32 {
		return fmt.Errorf("gpu: MatVec: weights end beyond 4 GiB")
	}
	xo, err := floats("MatVec x", x, n*w.Cols)
	if err != nil {
		return err
	}
	yo, err := floats("MatVec y", y, n*w.Rows)
	if err != nil {
		return err
	}
	spec := sh.spec
	k.mu.Lock()
	if v, ok := k.mv[w.Type]; ok {
		spec = v[:]
	}
	k.mu.Unlock()
	// A batch of vectors goes matVecCols at a time through each
	// workgroup, which decodes each weight once for all of them.
	cols := 1
	if n > 1 {
		cols = matVecCols
	}
	groupsZ := (n + cols - 1) / cols
	if groupsZ > int(k.dev.Info().Limits.MaxComputeWorkGroupCount[2]) {
		return fmt.Errorf("gpu: MatVec: %d vectors exceed the device's z workgroup limit", n)
	}
	if uint32(4*int(spec[0])*int(spec[1])*cols) > k.dev.Info().Limits.MaxComputeSharedMemorySize {
		return fmt.Errorf("gpu: MatVec: %d threads x %d rows x %d vectors of shared memory", spec[0], spec[1], cols)
	}
	bufs, nb, err := k.productBufs(w.Type, w.Buf, x.Buf, y.Buf)
	if err != nil {
		return err
	}
	p, set, err := k.bind(sh.name, 28, []uint32{spec[0], spec[1], uint32(cols)}, bufs[:nb]...)
	if err != nil {
		return err
	}
	rows := int(spec[1])
	gx, gy, err := k.grid((w.Rows + rows - 1) / rows)
	if err != nil {
		return err
	}
	cb.Dispatch(p, set, push(uint32(w.Rows), uint32(w.Cols), uint32(rb), uint32(w.Off), xo, yo, uint32(n)), gx, gy, uint32(groupsZ))
	return nil
}

// actQuantized reports whether the device's products with weights of
// type t (mat-vec and matrix-matrix) first quantize each activation vector
// to quant.VecDotType(t) bit for bit as the CPU does, then multiply as
// ggml's vec_dot (integer block sums times the two scales), rather than
// multiplying float32 activations. MXFP4 does (its shaders include
// q8_0_quant.glsl): gpt-oss's golden against llama.cpp's CPU logits
// (1e-4) needs it; the other types multiply float32 activations.
func actQuantized(t quant.Type) bool { return t == quant.MXFP4 }

// matVecCols is how many activation vectors one mat-vec workgroup takes
// when there are several (the shaders' NUM_COLS).
const matVecCols = 8

const normThreads = 256

// RMSNorm records y = x/sqrt(mean(x²)+eps)·g for each of n rows of dim
// floats; g.Buf nil means no weight.
func (k *Kernels) RMSNorm(cb *vk.CommandBuffer, y, x, g F32, n, dim int, eps float32) error {
	if n <= 0 || dim <= 0 {
		return fmt.Errorf("gpu: RMSNorm: %d rows of %d", n, dim)
	}
	xo, err := floats("RMSNorm x", x, n*dim)
	if err != nil {
		return err
	}
	yo, err := floats("RMSNorm y", y, n*dim)
	if err != nil {
		return err
	}
	hasW, gb, gOff := uint32(0), x.Buf, uint32(0)
	if g.Buf != nil {
		if gOff, err = floats("RMSNorm weight", g, dim); err != nil {
			return err
		}
		hasW, gb = 1, g.Buf
	}
	if n > int(k.dev.Info().Limits.MaxComputeWorkGroupCount[0]) {
		return fmt.Errorf("gpu: RMSNorm: %d rows exceed the device's workgroup limit", n)
	}
	p, set, err := k.bind(shaders.RMSNorm, 24, []uint32{normThreads}, x.Buf, gb, y.Buf)
	if err != nil {
		return err
	}
	cb.Dispatch(p, set, push(uint32(dim), math.Float32bits(eps), hasW, xo, gOff, yo), uint32(n), 1, 1)
	return nil
}

const ewThreads = 256

// SwiGLU records out = silu(gate)·up over n floats.
func (k *Kernels) SwiGLU(cb *vk.CommandBuffer, out, gate, up F32, n int) error {
	return k.elementwise(cb, shaders.SwiGLU, n, out, gate, up)
}

// SwiGLUOAI records gpt-oss's clamped SwiGLU over n floats: out =
// x·σ(alpha·x)·(y+1), x = min(gate, limit), y = up clamped to ±limit.
func (k *Kernels) SwiGLUOAI(cb *vk.CommandBuffer, out, gate, up F32, n int, alpha, limit float32) error {
	return k.elementwisePush(cb, shaders.SwiGLUOAI, n, []F32{out, gate, up}, nil, []uint32{math.Float32bits(alpha), math.Float32bits(limit)})
}

// GeGLU records out = gelu(gate)·up over n floats, gelu by ggml's float16
// table: table holds quant.GELUTable's 65536 floats (geglu.comp).
func (k *Kernels) GeGLU(cb *vk.CommandBuffer, out, gate, up, table F32, n int) error {
	to, err := floats("GeGLU table", table, 1<<16)
	if err != nil {
		return err
	}
	return k.elementwisePush(cb, shaders.GeGLU, n, []F32{out, gate, up}, []*vk.Buffer{table.Buf}, []uint32{to})
}

// Scale records x *= s over n floats.
func (k *Kernels) Scale(cb *vk.CommandBuffer, x F32, n int, s float32) error {
	return k.elementwisePush(cb, shaders.Scale, n, []F32{x}, nil, []uint32{math.Float32bits(s)})
}

// Add records dst += src over n floats.
func (k *Kernels) Add(cb *vk.CommandBuffer, dst, src F32, n int) error {
	return k.elementwise(cb, shaders.Add, n, dst, src)
}

func (k *Kernels) elementwise(cb *vk.CommandBuffer, name string, n int, args ...F32) error {
	return k.elementwisePush(cb, name, n, args, nil, nil)
}

// elementwisePush records an element-wise shader over n floats of each
// operand in args, binding them and then the whole buffers of more (read
// at offsets the caller puts in extra): push constants n, the operands'
// offsets, then extra.
func (k *Kernels) elementwisePush(cb *vk.CommandBuffer, name string, n int, args []F32, more []*vk.Buffer, extra []uint32) error {
	if n <= 0 || n > math.MaxUint32 {
		return fmt.Errorf("gpu: %s: %d elements", name, n)
	}
	pc := []uint32{uint32(n)}
	var bufs []*vk.Buffer
	for i, a := range args {
		o, err := floats(fmt.Sprintf("%s operand %d", name, i), a, n)
		if err != nil {
			return err
		}
		pc = append(pc, o)
		bufs = append(bufs, a.Buf)
	}
	bufs = append(bufs, more...)
	pc = append(pc, extra...)
	p, set, err := k.bind(name, 4*len(pc), []uint32{ewThreads}, bufs...)
	if err != nil {
		return err
	}
	gx, gy, err := k.grid((n + ewThreads - 1) / ewThreads)
	if err != nil {
		return err
	}
	cb.Dispatch(p, set, push(pc...), gx, gy, 1)
	return nil
}
