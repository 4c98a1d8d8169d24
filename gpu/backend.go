//go:build cgo

package gpu

// backend.go: Backend, the Vulkan implementation of model.Ops. Weights
// are uploaded to device memory once (NewBackend); activations live in
// device buffers that mirror the Context's host slices (the arena, keyed
// by the end address of each host allocation) and stay there between ops:
// every op is recorded into one command buffer, which is submitted only
// when the host needs a value (model.HostSync's ToHost: the rows the
// output projection reads, the logits, a debug hook) or a staging buffer
// is full. The KV cache lives on the device too (KVStorer, Attention).
//
// A mirror is host-owned (the host slice is authoritative) or holds a
// device-owned range [lo, hi) of floats written by device ops since the
// last ToHost; the host is authoritative outside it. An op reading a
// host-owned range uploads it first. The protocol rests on the Context
// calling ToHost before it reads or writes an activation on the host,
// which model/context.go does.
//
// MoE layers of qwen3moe and gpt-oss run here (backend_moe.go), their
// experts in device slots (expertstore.go), gpt-oss's expert biases
// resident beside them; the other MoE families are refused. Sliding-window
// layers (gemma3, gpt-oss) need a row per position (--swa-full): the
// host's rings are refused by name.
// Not done here yet: quantized, TurboQuant or --kv-recent KV caches (f32 and f16 are done) (StoreKV fails naming the
// type), paged caches, bias, penalties or grammar masks on the device
// (argmax.go ranks logits for greedy and top-k). A weight that does not
// fit the device budget is an error naming the tensor; placement.go plans
// which layers go to the device (the others compute on the CPU). A prompt's products go
// through the tiled matrix-matrix shaders (matmul.go).

import (
	"fmt"
	"slices"
	"time"
	"unsafe"

	"github.com/flowinfer/flowinfer/configs"
	"github.com/flowinfer/flowinfer/gpu/vk"
	"github.com/flowinfer/flowinfer/model"
)

// ringBytes is the size of the host-visible staging buffer uploads,
// angle tables and position lists are written to during a step.
const ringBytes = 16 << 20

// submitTimeout bounds one submission's wait.
const submitTimeout = 10 * time.Minute

// Backend runs model.Ops on a Vulkan device. It is not safe for
// concurrent use (like a Context).
type Backend struct {
	dev       *vk.Device
	k         *Kernels
	ownK      bool // Close closes k
	cb        *vk.CommandBuffer
	fence     *vk.Fence
	recording bool

	ring    *vk.Buffer // staging: uploads and per-step tables
	ringUse int        // bytes of ring used since the last submission
	down    *vk.Buffer // readback staging (grown as needed)

	mirrors   map[uintptr]*mirror
	weights   map[*model.Weight]Weight
	vecs      map[*float32]F32
	kvs       map[*model.KVCache]*devKV
	place     *Plan         // the layers on the device (nil: all); newBackendOn
	owned     []*vk.Buffer  // freed by Close: no descriptor set may outlive its buffer
	topk      topKBufs      // TopK's buffers (argmax.go), also in owned
	timer     *devTimer     // device timing while on (timestamps.go)
	experts   *expertStore  // routed experts' slots (nil: no MoE layers)
	up        *uploader     // uploads of missed experts (expertdma.go; nil: none)
	routes    []*layerRoute // resident layers' experts for RouteExperts (backend_moe.go)
	routeBuf  *vk.Buffer    // RouteExperts' routing row (also in owned)
	devRouted int           // layers RouteExperts routed on the device
	submits   int           // submissions waited for (flush)
	moe       moeBufs       // MoE scratch (backend_moe.go)
	gelu      F32           // quant.GELUTable on the device (GeGLU; nil Buf until first use)
	err       error         // first failure of an op since the last ToHost
}

// mirror is the device copy of one host allocation of floats.
type mirror struct {
	buf    *vk.Buffer
	host   []float32 // the whole host allocation (kept alive: its address is the key)
	dev    bool      // [lo, hi) is device-owned
	lo, hi int
}

// devKV is a KV cache on the device: per layer, K and V rows of F32 or
// F16 values, cell (seq, pos) at row seq·NCtx + pos.
type devKV struct {
	k, v []*vk.Buffer
	f16  bool
	q8   bool // Q8_0 blocks (backend_ops.go)
}

// NewBackend opens the backend on dev for model m: its matrices and
// vectors are uploaded now, routed experts each into a slot of their own.
// An architecture without device shaders, a matrix type without a shader
// or a tensor the device budget cannot hold is an error naming it. Close
// releases what NewBackend made (not dev).
func NewBackend(dev *vk.Device, m *model.Model) (*Backend, error) {
	return newBackendOf(dev, m, nil)
}

// newBackendOf is NewBackend on the kernels k (nil: its own), whose
// pipelines it shares and does not close: tests running many models keep
// the driver's shader compilations.
func newBackendOf(dev *vk.Device, m *model.Model, k *Kernels) (*Backend, error) {
	return newBackendOn(dev, m, k, nil)
}

// newBackendOn is newBackendOf holding only the parts of m that plan puts
// on the device (nil: all of them).
func newBackendOn(dev *vk.Device, m *model.Model, k *Kernels, plan *Plan) (*Backend, error) {
	if err := deviceArch(m); err != nil {
		return nil, err
	}
	if m.NExpert > 0 && plan != nil && !plan.AllGPU() {
		return nil, fmt.Errorf("gpu: %w: a MoE model split between the CPU and the device (%s)", vk.ErrUnsupported, plan)
	}
	b, err := newBackend(dev, k)
	if err != nil {
		return nil, err
	}
	b.place = plan
	var ws []*model.Weight
	var vs []model.Vector
	if plan == nil || plan.Output {
		ws, vs = append(ws, m.Output), append(vs, m.OutputNorm)
	}
	for il := range m.Layers {
		if plan != nil && !plan.GPU[il] {
			continue // computed by the CPU (placement.go)
		}
		L := &m.Layers[il]
		for _, w := range L.Matrices() {
			if *w != nil {
				ws = append(ws, *w)
			}
		}
		vs = append(vs, layerVectors(L)...)
	}
	for _, w := range ws {
		if err := b.uploadWeight(w); err != nil {
			b.Close()
			return nil, err
		}
	}
	for _, v := range vs {
		if v != nil {
			if _, err := b.vector(v); err != nil {
				b.Close()
				return nil, err
			}
		}
	}
	slots, policy := 0, configs.CachePolicy("")
	if plan != nil {
		slots, policy = plan.ExpertSlots, plan.ExpertPolicy
	}
	if err := b.loadExperts(m, slots, policy); err != nil {
		b.Close()
		return nil, err
	}
	if err := b.flush(); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// newBackend makes a backend with no weights yet on the kernels k (nil:
// its own).
func newBackend(dev *vk.Device, k *Kernels) (*Backend, error) {
	own := k == nil
	if own {
		k = NewKernels(dev)
	}
	b := &Backend{dev: dev, k: k, ownK: own, mirrors: map[uintptr]*mirror{}, weights: map[*model.Weight]Weight{},
		vecs: map[*float32]F32{}, kvs: map[*model.KVCache]*devKV{}}
	var err error
	if b.cb, err = dev.NewCommandBuffer(vk.Compute); err != nil {
		b.Close()
		return nil, err
	}
	if b.fence, err = dev.NewFence(); err != nil {
		b.Close()
		return nil, err
	}
	if b.ring, err = dev.NewBuffer(ringBytes, vk.Upload); err != nil {
		b.Close()
		return nil, fmt.Errorf("gpu: staging ring of %d bytes: %w", ringBytes, err)
	}
	return b, nil
}

// Close waits for the device and frees the backend's buffers, pipelines
// and command buffer.
func (b *Backend) Close() {
	if b.dev == nil {
		return
	}
	if b.recording {
		b.cb.End()
		b.recording = false
	}
	b.dev.WaitIdle()
	b.closeTimer()
	b.closeUploader()
	bufs := slices.Clone(b.owned)
	for _, kv := range b.kvs {
		bufs = append(append(bufs, kv.k...), kv.v...)
	}
	for _, m := range b.mirrors {
		bufs = append(bufs, m.buf)
	}
	for _, w := range b.weights {
		bufs = append(bufs, w.Buf)
	}
	for _, v := range b.vecs {
		bufs = append(bufs, v.Buf)
	}
	if b.experts != nil {
		bufs = append(bufs, b.experts.slabs...)
	}
	for _, buf := range []*vk.Buffer{b.ring, b.down} {
		if buf != nil {
			bufs = append(bufs, buf)
		}
	}
	if b.ownK {
		b.k.Close()
	} else {
		b.k.Forget(bufs...)
	}
	for _, buf := range bufs {
		if buf != nil { // a CPU layer's KV (placement.go)
			buf.Free()
		}
	}
	if b.cb != nil {
		b.cb.Free()
	}
	if b.fence != nil {
		b.fence.Destroy()
	}
	b.dev = nil
}

func (b *Backend) fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

// record makes sure the command buffer is recording.
func (b *Backend) record() error {
	if b.recording {
		return nil
	}
	if err := b.cb.Begin(); err != nil {
		return err
	}
	b.recording = true
	b.timerBegin()
	return nil
}

// flush submits what is recorded, waits for it, and frees the ring.
func (b *Backend) flush() error {
	if err := b.drainExperts(); err != nil {
		b.abortUploads()
		return err
	}
	if !b.recording {
		b.ringUse = 0
		return nil
	}
	b.timerEnd()
	b.recording = false
	if err := b.cb.End(); err != nil {
		b.abortUploads()
		return err
	}
	if err := b.dev.Submit(b.cb, b.waits(), nil, b.fence); err != nil {
		b.abortUploads()
		return err
	}
	waited := time.Now()
	if err := b.fence.Wait(submitTimeout); err != nil {
		return err
	}
	done := time.Now()
	b.ringUse = 0
	b.submits++
	b.uploaded() // the fence covers the earlier submissions too
	if err := b.fence.Reset(); err != nil {
		return err
	}
	return b.timerDone(waited, done)
}

// stage returns n bytes of the ring (16-byte aligned), submitting what is
// recorded first when the ring is full. Earlier stage results of the same
// op may be reused by then: an op stages once, after its inputs.
func (b *Backend) stage(n int) (int, error) {
	if n > ringBytes {
		return 0, fmt.Errorf("gpu: %d bytes of staging in one piece (the ring holds %d)", n, ringBytes)
	}
	if b.ringUse+n > ringBytes {
		if err := b.flush(); err != nil {
			return 0, err
		}
	}
	off := b.ringUse
	b.ringUse = (off + n + 15) &^ 15
	return off, b.record()
}

// upload records a copy of data into dst at dstOff through the ring.
func (b *Backend) upload(dst *vk.Buffer, dstOff uint64, data []byte) error {
	for len(data) > 0 {
		n := min(len(data), ringBytes/2)
		off, err := b.stage(n)
		if err != nil {
			return err
		}
		copy(b.ring.Bytes()[off:], data[:n])
		b.cb.Copy(dst, dstOff, b.ring, uint64(off), uint64(n))
		dstOff += uint64(n)
		data = data[n:]
	}
	if err := b.record(); err != nil {
		return err
	}
	b.cb.Barrier()
	return nil
}

func f32b(x []float32) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))
}

// uploadWeight copies w's bytes to a device-local buffer of its own.
func (b *Backend) uploadWeight(w *model.Weight) error {
	if _, ok := b.weights[w]; ok {
		return nil
	}
	if w.Packed {
		return fmt.Errorf("gpu: weight %q: %w: a backend-packed layout", w.Name, vk.ErrUnsupported)
	}
	if !SupportsMatVec(w.Type) {
		return fmt.Errorf("gpu: weight %q: %w: no shader for type %s", w.Name, vk.ErrUnsupported, w.Type)
	}
	n := w.Rows * w.RowBytes
	if len(w.Data) < n {
		return fmt.Errorf("gpu: weight %q: %d bytes for %d rows of %d", w.Name, len(w.Data), w.Rows, w.RowBytes)
	}
	buf, err := b.dev.NewBuffer(uint64((n+3)&^3), vk.DeviceLocal)
	if err != nil {
		return fmt.Errorf("gpu: weight %q (%d bytes): %w", w.Name, n, err)
	}
	b.weights[w] = Weight{Buf: buf, Type: w.Type, Rows: w.Rows, Cols: w.Cols}
	return b.upload(buf, 0, w.Data[:n])
}

// vector returns the device copy of v, uploading it on first use.
func (b *Backend) vector(v model.Vector) (F32, error) {
	if len(v) == 0 {
		return F32{}, fmt.Errorf("gpu: empty vector")
	}
	if f, ok := b.vecs[&v[0]]; ok {
		return f, nil
	}
	buf, err := b.dev.NewBuffer(uint64(4*len(v)), vk.DeviceLocal)
	if err != nil {
		return F32{}, fmt.Errorf("gpu: vector of %d floats: %w", len(v), err)
	}
	f := F32{Buf: buf}
	b.vecs[&v[0]] = f
	return f, b.upload(buf, 0, f32b(v))
}

// mirrorOf returns the mirror of s's allocation and s's float offset in it.
func (b *Backend) mirrorOf(s []float32) (*mirror, int, error) {
	if cap(s) == 0 {
		return nil, 0, fmt.Errorf("gpu: empty activation")
	}
	all := s[:cap(s)]
	end := uintptr(unsafe.Pointer(&all[0])) + uintptr(4*len(all))
	m := b.mirrors[end]
	if m != nil && len(m.host) >= len(all) {
		return m, len(m.host) - len(all), nil
	}
	if m != nil { // the allocation seen from an earlier start: a bigger mirror
		if err := b.sync(m); err != nil {
			return nil, 0, err
		}
		b.owned = append(b.owned, m.buf)
	}
	buf, err := b.dev.NewBuffer(uint64(4*len(all)), vk.DeviceLocal)
	if err != nil {
		return nil, 0, fmt.Errorf("gpu: activation of %d floats: %w", len(all), err)
	}
	m = &mirror{buf: buf, host: all}
	b.mirrors[end] = m
	return m, 0, nil
}

// sync copies m's device-owned range to the host and makes m host-owned.
func (b *Backend) sync(m *mirror) error {
	if !m.dev {
		return nil
	}
	n := uint64(4 * (m.hi - m.lo))
	if b.down == nil || b.down.Size() < n {
		if b.down != nil {
			b.down.Free()
		}
		var err error
		if b.down, err = b.dev.NewBuffer(max(n, 1<<20), vk.Readback); err != nil {
			return err
		}
	}
	if err := b.drainExperts(); err != nil { // products still deferred may write m
		return err
	}
	if err := b.record(); err != nil {
		return err
	}
	b.cb.Copy(b.down, 0, m.buf, uint64(4*m.lo), n)
	b.cb.HostBarrier()
	if err := b.flush(); err != nil {
		return err
	}
	copy(f32b(m.host[m.lo:m.hi]), b.down.Bytes()[:n])
	m.dev = false
	return nil
}

// in returns the device copy of s for reading, uploading what the host
// owns.
func (b *Backend) in(s []float32) (F32, error) {
	m, off, err := b.mirrorOf(s)
	if err != nil {
		return F32{}, err
	}
	lo, hi := off, off+len(s)
	if m.dev && lo >= m.lo && hi <= m.hi {
		return F32{Buf: m.buf, Off: off}, nil
	}
	if err := b.sync(m); err != nil {
		return F32{}, err
	}
	if err := b.upload(m.buf, uint64(4*lo), f32b(s)); err != nil {
		return F32{}, err
	}
	m.dev, m.lo, m.hi = true, lo, hi
	return F32{Buf: m.buf, Off: off}, nil
}

// out returns the device copy of s for an op to write: afterwards the
// device owns s's range.
func (b *Backend) out(s []float32) (F32, error) {
	m, off, err := b.mirrorOf(s)
	if err != nil {
		return F32{}, err
	}
	lo, hi := off, off+len(s)
	switch {
	case !m.dev:
		m.dev, m.lo, m.hi = true, lo, hi
	case lo <= m.hi && hi >= m.lo: // overlapping or adjacent: one range
		m.lo, m.hi = min(m.lo, lo), max(m.hi, hi)
	default:
		if err := b.sync(m); err != nil {
			return F32{}, err
		}
		m.dev, m.lo, m.hi = true, lo, hi
	}
	return F32{Buf: m.buf, Off: off}, nil
}

// ToHost implements model.HostSync: it runs what is recorded and copies
// x's allocation's device-owned values to the host. It returns (and
// clears) the first error of the ops since the last call.
func (b *Backend) ToHost(x []float32) error {
	if b.err != nil {
		err := b.err
		b.err = nil
		b.flush()
		return err
	}
	if cap(x) == 0 {
		return b.flush()
	}
	all := x[:cap(x)]
	m := b.mirrors[uintptr(unsafe.Pointer(&all[0]))+uintptr(4*len(all))]
	if m == nil {
		return b.flush()
	}
	return b.sync(m)
}

// f32s views 4-aligned bytes as floats.
func f32s(p []byte) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(&p[0])), len(p)/4)
}

// i32s views 4-aligned bytes as int32s.
func i32s(p []byte) []int32 {
	return unsafe.Slice((*int32)(unsafe.Pointer(&p[0])), len(p)/4)
}
