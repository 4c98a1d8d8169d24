package cpu

// backend.go: Backend, the fast CPU implementation of model.Ops. It
// computes what Ref computes (the same activation conversion before every
// matrix product, the same per-block integer dot products) on persistent
// workers (workers.go) with the SIMD kernels; only the order of float
// additions differs. Matrix products split the weight rows into blocks that
// workers claim from a shared counter; activations are converted once per
// matrix (in parallel for batches); a batch multiplies tiles of weight rows
// by tiles of tokens (GemmRows) instead of one matrix-vector product per
// token; weights the kernels have a packed layout for are multiplied in
// that layout (backend_pack.go). Attention runs in parallel over (rows, KV
// head) units (backend_attn.go); norms, SwiGLU and softmax split rows
// across workers when the work pays for a dispatch.
//
// Steady-state calls allocate nothing: scratch grows to the largest
// operation seen and is then reused. A Backend runs one operation at a time
// (like Ref): give each model.Context its own.
//
// This file holds the Backend, what its operations share (chunks,
// rowBytes) and Embed. The matrix products are in backend_matmul.go, the
// row-wise operations in backend_ew.go, attention in backend_attn*.go,
// the KV cache's stores in backend_kvstore.go; the arithmetic is in the
// kernels (kern*.go), the goroutines in workers.go.

import (
	"fmt"

	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/quant"
)

// Backend is the multi-threaded SIMD backend.
type Backend struct {
	workers *workers
	k       *Kernels

	act []byte // activations converted to a vec-dot type

	// NoPack keeps MatMul on the file's weight layout: by default a weight
	// the kernels can pack is copied into their packed layout when first
	// used (or by PackModel), and products read the copy.
	NoPack bool
	// DropPacked makes PackModel release each matrix's pages of the file
	// mapping as soon as its packed copy exists (madvise DONTNEED: a clean
	// file page costs nothing to read again), so resident weights cost
	// their size once, also at the peak.
	DropPacked bool
	packed     map[packKey]*Packed // nil value: not packable

	mat    matTask
	one    [1]*model.Weight // MatMul's argument to MatMuls
	oneOut [1][]float32
	quant  quantTask
	ew     ewTask
	ropeCS []float32 // Rope's angle tables (4·Dim/2 floats per row)
	attn   attnTask
	store  kvStoreTask
	rot    rotTask
	dn     dnTask // the DeltaNet ops (backend_deltanet.go)
	mb     mbTask // the Mamba ops (mamba_backend.go)
}

var (
	_ model.Ops         = (*Backend)(nil)
	_ model.MultiMatMul = (*Backend)(nil)
	_ model.KVStorer    = (*Backend)(nil)
	_ model.Rotator     = (*Backend)(nil)
)

// NewBackend returns a backend on threads workers (≤ 0: PhysicalCores)
// with the given kernels (nil: Best()). It starts threads-1 goroutines,
// which Close stops. With C kernels it raises GOMAXPROCS to threads+1
// unless the environment sets it (procs.go says why).
func NewBackend(threads int, kernels *Kernels) *Backend {
	if threads <= 0 {
		threads = PhysicalCores()
	}
	if kernels == nil {
		kernels = Best()
	}
	if kernels.ISA() != ISAScalarGo {
		reserveProcs(threads)
	}
	b := &Backend{workers: newWorkers(threads), k: kernels, packed: make(map[packKey]*Packed)}
	b.attn.init(threads)
	b.store.init(threads)
	b.ew.k = kernels
	return b
}

// Threads returns the number of workers (the calling goroutine included).
func (b *Backend) Threads() int { return b.workers.count() }

// ISA returns the kernels' instruction-set path.
func (b *Backend) ISA() ISA { return b.k.ISA() }

// Close stops the workers. The backend must not be used afterwards.
func (b *Backend) Close() { b.workers.close() }

// Supports implements model.Ops.
func (b *Backend) Supports(t quant.Type) bool { return b.k.Supports(t) }

// chunks returns how many pieces of at least minSize of a range of n to
// cut so that each of the workers gets several (for balance when a core
// is busy elsewhere), and the piece size, a multiple of align.
func chunks(n, workers, perWorker, minSize, align int) (count, size int) {
	size = max(minSize, (n+workers*perWorker-1)/(workers*perWorker))
	size = (size + align - 1) / align * align
	return (n + size - 1) / size, size
}

// Embed implements model.Ops.
func (b *Backend) Embed(out []float32, w *model.Weight, ids []int32) {
	deq := quant.DequantizeFunc(w.Type)
	for t, id := range ids {
		deq(w.Row(int(id)), out[t*w.Cols:(t+1)*w.Cols])
	}
}

// rowBytes is quant.RowBytes for shapes validated at load.
func rowBytes(t quant.Type, cols int) int {
	n, err := quant.RowBytes(t, cols)
	if err != nil {
		panic(fmt.Sprintf("cpu: %v", err)) // shapes were validated at load
	}
	return n
}
