//go:build cgo

package gpu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/gpu/vk"
	"github.com/flowinfer/flowinfer/model"
	"github.com/flowinfer/flowinfer/quant"
)

// The op tests follow llama.cpp's test-backend-ops: the same random inputs
// go through a shader on the Vulkan device (lavapipe in CI) and through
// package cpu's plain-Go reference; outputs are compared by normalized mean
// squared error against a per-op threshold, NaN/Inf fail, and guard floats
// around every output catch out-of-bounds writes.
//
// Thresholds (test-backend-ops: 5e-4 for mul_mat, 1e-7 for everything
// else, its test_case default):
//   - mat-vec against cpu.Ref: 5e-4 as test_mul_mat. Ref converts the
//     activations to the weight's dot type (F16, Q8_0, Q8_K) as ggml's CPU
//     backend does; the shaders use float32 activations, so most of the
//     difference is that rounding. Checked only on outputs of at least 16
//     values (test_mul_mat's smallest, m=16): the NMSE of one or a few dot
//     products is the squared relative error of each, which exceeds 5e-4
//     whenever a random dot product lands near zero (seen: 1.1e-3 for one
//     Q4_K row of 256, with the exact comparison at 4.5e-12).
//   - mat-vec against cpu.Ref with Exact set (dequantized weights, float32
//     activations): 1e-7, the default, since only summation order differs.
//   - RMS norm, SwiGLU, add: 1e-7, the default.
const (
	minNMSEOutputs  = 16
	nmseMatVec      = 5e-4
	nmseMatVecExact = 1e-7
	nmseDefault     = 1e-7
)

// guard floats on each side of an output, and their bit pattern (a finite
// value no op produces from the inputs here).
const (
	guardN    = 64
	guardBits = 0xDEADBEEF
)

type rig struct {
	t   *testing.T
	d   *vk.Device
	k   *Kernels
	cb  *vk.CommandBuffer
	f   *vk.Fence
	qp  *vk.QueryPool
	rng *rand.Rand
}

// newRig opens device 0, skipping the test when there is no Vulkan loader
// or device. FLOWINFER_VK_VALIDATION=1 turns on the validation layer.
func newRig(t *testing.T) *rig {
	t.Helper()
	in, err := vk.NewInstance(vk.Config{Validation: os.Getenv("FLOWINFER_VK_VALIDATION") == "1"})
	if errors.Is(err, vk.ErrNoLoader) || errors.Is(err, vk.ErrNoCgo) {
		t.Skipf("no Vulkan loader (install libvulkan1 and mesa-vulkan-drivers for lavapipe): %v", err)
	}
	if errors.Is(err, vk.ErrNoDevice) {
		t.Skipf("no Vulkan device (install mesa-vulkan-drivers for lavapipe): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Close)
	if len(in.Devices()) == 0 {
		t.Skip("Vulkan loader present but no Vulkan device (install mesa-vulkan-drivers for lavapipe)")
	}
	d, err := in.OpenDevice(0, vk.DeviceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	r := &rig{t: t, d: d, k: NewKernels(d), rng: rand.New(rand.NewPCG(7, 11))}
	t.Cleanup(r.k.Close)
	if r.cb, err = d.NewCommandBuffer(vk.Compute); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.cb.Free)
	if r.f, err = d.NewFence(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.f.Destroy)
	if r.qp, err = d.NewQueryPool(2); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.qp.Destroy)
	return r
}

func (r *rig) floats(n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = 2*r.rng.Float32() - 1
	}
	return x
}

func f32bytes(x []float32) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))
}

// buffer makes a device-local buffer holding b (padded to 4 bytes),
// uploaded through a staging buffer on the transfer queue.
func (r *rig) buffer(b []byte) *vk.Buffer {
	r.t.Helper()
	n := uint64((len(b) + 3) &^ 3)
	dst, err := r.d.NewBuffer(n, vk.DeviceLocal)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(dst.Free)
	st, err := r.d.NewBuffer(n, vk.Upload)
	if err != nil {
		r.t.Fatal(err)
	}
	defer st.Free()
	copy(st.Bytes(), b)
	cb, err := r.d.NewCommandBuffer(vk.Transfer)
	if err != nil {
		r.t.Fatal(err)
	}
	defer cb.Free()
	if err := cb.Begin(); err != nil {
		r.t.Fatal(err)
	}
	cb.Copy(dst, 0, st, 0, n)
	if err := cb.End(); err != nil {
		r.t.Fatal(err)
	}
	r.submit(cb)
	return dst
}

func (r *rig) submit(cb *vk.CommandBuffer) {
	r.t.Helper()
	if err := r.d.Submit(cb, nil, nil, r.f); err != nil {
		r.t.Fatal(err)
	}
	if err := r.f.Wait(time.Minute); err != nil {
		r.t.Fatal(err)
	}
	if err := r.f.Reset(); err != nil {
		r.t.Fatal(err)
	}
}

// guarded makes an output buffer of n floats between guards, all set to
// the guard pattern; the output starts at float guardN.
func (r *rig) guarded(n int) F32 {
	g := make([]float32, n+2*guardN)
	for i := range g {
		g[i] = math.Float32frombits(guardBits)
	}
	return F32{Buf: r.buffer(f32bytes(g)), Off: guardN}
}

// run records one op between timestamps, runs it, and returns the device
// time it took.
func (r *rig) run(op func(cb *vk.CommandBuffer) error) time.Duration {
	r.t.Helper()
	if err := r.cb.Begin(); err != nil {
		r.t.Fatal(err)
	}
	r.cb.ResetQueries(r.qp, 0, 2)
	r.cb.Timestamp(r.qp, 0)
	if err := op(r.cb); err != nil {
		r.t.Fatal(err)
	}
	r.cb.Timestamp(r.qp, 1)
	if err := r.cb.End(); err != nil {
		r.t.Fatal(err)
	}
	r.submit(r.cb)
	ts, err := r.qp.Ticks(0, 2)
	if err != nil {
		r.t.Fatal(err)
	}
	return r.d.Elapsed(vk.Compute, ts[0], ts[1])
}

// read copies a guarded output back through a readback buffer, fails on
// a changed guard, and returns the n output floats.
func (r *rig) read(out F32, n int) []float32 {
	r.t.Helper()
	size := out.Buf.Size()
	rb, err := r.d.NewBuffer(size, vk.Readback)
	if err != nil {
		r.t.Fatal(err)
	}
	defer rb.Free()
	if err := r.cb.Begin(); err != nil {
		r.t.Fatal(err)
	}
	r.cb.Copy(rb, 0, out.Buf, 0, size)
	r.cb.HostBarrier()
	if err := r.cb.End(); err != nil {
		r.t.Fatal(err)
	}
	r.submit(r.cb)
	all := make([]float32, size/4)
	for i := range all {
		all[i] = math.Float32frombits(binary.LittleEndian.Uint32(rb.Bytes()[4*i:]))
	}
	for i, v := range all {
		inOut := i >= out.Off && i < out.Off+n
		if !inOut && math.Float32bits(v) != guardBits {
			r.t.Fatalf("guard float %d (output is [%d,%d)) overwritten with %v", i, out.Off, out.Off+n, v)
		}
	}
	return all[out.Off : out.Off+n]
}

// nmse is Σ(a-b)²/Σb²; NaN or Inf in either gives +Inf.
func nmse(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(g) || math.IsInf(g, 0) || math.IsNaN(w) || math.IsInf(w, 0) {
			return math.Inf(1)
		}
		num += (g - w) * (g - w)
		den += w * w
	}
	if den == 0 {
		return num
	}
	return num / den
}

func quantize(t *testing.T, typ quant.Type, src []float32, rows, cols int) []byte {
	t.Helper()
	rb, err := quant.RowBytes(typ, cols)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, rows*rb)
	if typ == quant.F32 {
		copy(out, f32bytes(src))
		return out
	}
	for r := range rows {
		if err := quant.QuantizeRow(typ, src[r*cols:(r+1)*cols], out[r*rb:(r+1)*rb]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func TestMatVec(t *testing.T) {
	r := newRig(t)
	type shape struct {
		rows, cols, n int
		only          []quant.Type // nil: every type
	}
	var shapes []shape
	for _, rows := range []int{1, 7, 64, 257} {
		for _, cols := range []int{32, 256, 2048 + 256} {
			shapes = append(shapes, shape{rows, cols, 1, nil})
		}
	}
	shapes = append(shapes, shape{7, 256, 3, nil})  // several vectors in one workgroup
	shapes = append(shapes, shape{5, 256, 11, nil}) // more than one workgroup of vectors (z), the last partial
	// More rows than one grid dimension holds (a vocabulary): the rows
	// continue in workgroup y.
	shapes = append(shapes, shape{65536 + 3, 32, 1, []quant.Type{quant.F32}})
	for _, typ := range []quant.Type{quant.F32, quant.F16, quant.Q8_0, quant.Q4_0, quant.Q4_K, quant.Q5_K, quant.Q6_K} {
		for _, s := range shapes {
			if s.cols%typ.BlockSize() != 0 || (s.only != nil && !slices.Contains(s.only, typ)) {
				continue
			}
			t.Run(fmt.Sprintf("type=%s/rows=%d/cols=%d/n=%d", typ, s.rows, s.cols, s.n), func(t *testing.T) {
				r.t = t
				r.checkMatVec(typ, s.rows, s.cols, s.n)
			})
		}
	}
}

// checkMatVec runs one mat-vec on random inputs and compares it with
// cpu.Ref, natively and with Exact set.
func (r *rig) checkMatVec(typ quant.Type, rows, cols, n int) {
	t := r.t
	wb := quantize(t, typ, r.floats(rows*cols), rows, cols)
	x := r.floats(n * cols)
	// The weights start 16 bytes into their buffer and x 5 floats in, so
	// the offsets are exercised.
	w := Weight{Buf: r.buffer(append(make([]byte, 16), wb...)), Off: 16, Type: typ, Rows: rows, Cols: cols}
	xb := F32{Buf: r.buffer(f32bytes(append(make([]float32, 5), x...))), Off: 5}
	y := r.guarded(n * rows)
	dt := r.run(func(cb *vk.CommandBuffer) error { return r.k.MatVec(cb, y, w, xb, n) })
	got := r.read(y, n*rows)

	mw := &model.Weight{Name: "w", Type: typ, Rows: rows, Cols: cols, RowBytes: len(wb) / rows, Data: wb}
	want := make([]float32, n*rows)
	cpu.NewRef().MatMul(want, mw, x, n)
	exact := make([]float32, n*rows)
	ref := cpu.NewRef()
	ref.Exact = true
	ref.MatMul(exact, mw, x, n)
	e, ee := nmse(got, want), nmse(got, exact)
	if len(want) >= minNMSEOutputs && e > nmseMatVec {
		t.Errorf("NMSE against cpu.Ref %.3g > %.0e", e, nmseMatVec)
	}
	if ee > nmseMatVecExact {
		t.Errorf("NMSE against cpu.Ref (Exact) %.3g > %.0e", ee, nmseMatVecExact)
	}
	t.Logf("NMSE %.2e (exact %.2e), %v on device", e, ee, dt)
}

// TestMatVecVariants runs each mat-vec shader with other threads and rows
// per workgroup (specialization constants): a last workgroup with fewer
// rows than it makes, threads beyond the blocks of a row.
func TestMatVecVariants(t *testing.T) {
	r := newRig(t)
	for _, typ := range []quant.Type{quant.F32, quant.F16, quant.Q8_0, quant.Q4_0, quant.Q4_K, quant.Q5_K, quant.Q6_K} {
		for _, v := range [][2]int{{16, 3}, {128, 2}, {32, 8}} {
			for _, rows := range []int{7, 65} {
				cols := 2048 + 256
				t.Run(fmt.Sprintf("type=%s/threads=%d/rows_per_group=%d/rows=%d", typ, v[0], v[1], rows), func(t *testing.T) {
					r.t = t
					if err := r.k.SetMatVecVariant(typ, v[0], v[1]); err != nil {
						t.Fatal(err)
					}
					r.checkMatVec(typ, rows, cols, 2)
				})
			}
		}
	}
	for _, bad := range [][2]int{{0, 1}, {24, 1}, {32, 0}, {32, 65}} {
		if err := r.k.SetMatVecVariant(quant.F32, bad[0], bad[1]); err == nil {
			t.Errorf("variant %v accepted", bad)
		}
	}
}

func TestRMSNorm(t *testing.T) {
	r := newRig(t)
	for _, s := range []struct {
		n, dim int
		weight bool
	}{{1, 32, true}, {7, 257, true}, {3, 2048 + 256, true}, {2, 64, false}} {
		t.Run(fmt.Sprintf("n=%d/dim=%d/weight=%v", s.n, s.dim, s.weight), func(t *testing.T) {
			r.t = t
			const eps = 1e-6
			x := r.floats(s.n * s.dim)
			xb := F32{Buf: r.buffer(f32bytes(x))}
			var g model.Vector
			var gb F32
			if s.weight {
				g = r.floats(s.dim)
				gb = F32{Buf: r.buffer(f32bytes(append(make([]float32, 3), g...))), Off: 3}
			}
			y := r.guarded(s.n * s.dim)
			dt := r.run(func(cb *vk.CommandBuffer) error { return r.k.RMSNorm(cb, y, xb, gb, s.n, s.dim, eps) })
			got := r.read(y, s.n*s.dim)
			want := make([]float32, s.n*s.dim)
			cpu.NewRef().RMSNorm(want, x, g, s.n, s.dim, eps)
			if e := nmse(got, want); e > nmseDefault {
				t.Errorf("NMSE %.3g > %.0e", e, nmseDefault)
			} else {
				t.Logf("NMSE %.2e, %v on device", e, dt)
			}
		})
	}
}

func TestSwiGLUAndAdd(t *testing.T) {
	r := newRig(t)
	for _, n := range []int{1, 7, 256, 2048 + 256 + 3} {
		t.Run(fmt.Sprintf("op=swiglu/n=%d", n), func(t *testing.T) {
			r.t = t
			g, u := r.floats(n), r.floats(n)
			for i := range g {
				g[i] *= 8 // reach the saturated ends of silu
			}
			gb, ub := F32{Buf: r.buffer(f32bytes(g))}, F32{Buf: r.buffer(f32bytes(u))}
			out := r.guarded(n)
			dt := r.run(func(cb *vk.CommandBuffer) error { return r.k.SwiGLU(cb, out, gb, ub, n) })
			got := r.read(out, n)
			want := make([]float32, n)
			cpu.NewRef().SwiGLU(want, g, u)
			if e := nmse(got, want); e > nmseDefault {
				t.Errorf("NMSE %.3g > %.0e", e, nmseDefault)
			} else {
				t.Logf("NMSE %.2e, %v on device", e, dt)
			}
		})
		t.Run(fmt.Sprintf("op=add/n=%d", n), func(t *testing.T) {
			r.t = t
			a, b := r.floats(n), r.floats(n)
			// dst is a guarded buffer holding a; src starts 1 float in.
			buf := make([]float32, n+2*guardN)
			for i := range buf {
				buf[i] = math.Float32frombits(guardBits)
			}
			copy(buf[guardN:], a)
			dst := F32{Buf: r.buffer(f32bytes(buf)), Off: guardN}
			src := F32{Buf: r.buffer(f32bytes(append([]float32{0}, b...))), Off: 1}
			dt := r.run(func(cb *vk.CommandBuffer) error { return r.k.Add(cb, dst, src, n) })
			got := r.read(dst, n)
			want := append([]float32(nil), a...)
			cpu.NewRef().Add(want, b)
			if e := nmse(got, want); e > nmseDefault {
				t.Errorf("NMSE %.3g > %.0e", e, nmseDefault)
			} else {
				t.Logf("NMSE %.2e, %v on device", e, dt)
			}
		})
	}
}

// TestBadArgs: shapes and offsets that do not fit are errors, not
// out-of-bounds dispatches.
func TestBadArgs(t *testing.T) {
	r := newRig(t)
	buf := r.buffer(make([]byte, 1024))
	if err := r.cb.Begin(); err != nil {
		t.Fatal(err)
	}
	defer r.cb.End()
	w := Weight{Buf: buf, Type: quant.Q4_K, Rows: 8, Cols: 256} // 8·144 bytes > 1024
	if err := r.k.MatVec(r.cb, F32{Buf: buf}, w, F32{Buf: buf}, 1); err == nil {
		t.Error("weights overrunning their buffer accepted")
	}
	// Q8_K, an activation type, has no weight shader
	w = Weight{Buf: buf, Type: quant.Q8_K, Rows: 1, Cols: 256}
	if err := r.k.MatVec(r.cb, F32{Buf: buf}, w, F32{Buf: buf}, 1); !errors.Is(err, vk.ErrUnsupported) {
		t.Errorf("Q8_K mat-vec: %v, want ErrUnsupported", err)
	}
	w = Weight{Buf: buf, Type: quant.Q8_0, Rows: 1, Cols: 33}
	if err := r.k.MatVec(r.cb, F32{Buf: buf}, w, F32{Buf: buf}, 1); err == nil {
		t.Error("Q8_0 row of 33 weights accepted")
	}
	if err := r.k.Add(r.cb, F32{Buf: buf, Off: 200}, F32{Buf: buf}, 100); err == nil {
		t.Error("add overrunning its destination accepted")
	}
	if err := r.k.RMSNorm(r.cb, F32{Buf: buf}, F32{Buf: buf}, F32{}, 2, 200, 1e-6); err == nil {
		t.Error("rms norm overrunning its input accepted")
	}
}
