//go:build cgo

package gpu

import (
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/gpu/vk"
	"github.com/flowinfer/flowinfer/quant"
)

// BenchmarkOpsLlamaShapes times single ops at the shapes of llama.cpp's
// test-backend-ops perf mode (make_test_cases_perf), to compare with
// `test-backend-ops perf -b Vulkan0 -o OP` on the same device: each op is
// recorded opsPerSubmit times (barriers between) into one command buffer,
// and one iteration is a submit and a fence wait; us/run is the wall time
// per op, device-us/run the device's timestamps around all of them per op.
// FLOWINFER_BENCH_MV=threads,rows runs the mat-vec shaders with that
// variant (SetMatVecVariant) instead of their defaults.
// cpu-us/run is the process's CPU time (user and system) per op: on a CPU
// device (lavapipe) the op's work, which on a loaded machine varies less
// than the wall time. RMS_NORM has no perf case at llama.cpp's commit; its shape here is one
// token row of llama 3 8B's width and a 512-token batch.
func BenchmarkOpsLlamaShapes(b *testing.B) {
	// MUL_MAT at these shapes takes tenths of a second on lavapipe: 4 a
	// submit.
	const opsPerSubmit, mulMatOps = 10, 4
	r := benchRig(b)
	mk := func(n uint64) *vk.Buffer {
		buf, err := r.d.NewBuffer(n, vk.DeviceLocal)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(buf.Free)
		return buf
	}
	qp, err := r.d.NewQueryPool(2)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(qp.Destroy)
	// warm: one untimed submit first (lavapipe compiles a pipeline's
	// shader at its first dispatch; the matrix-matrix cases set it).
	warm := false
	benchN := func(b *testing.B, opsPerSubmit int, op func() error) {
		if err := r.cb.Begin(); err != nil {
			b.Fatal(err)
		}
		r.cb.ResetQueries(qp, 0, 2)
		r.cb.Timestamp(qp, 0)
		for range opsPerSubmit {
			if err := op(); err != nil {
				b.Fatal(err)
			}
			r.cb.Barrier()
		}
		r.cb.Timestamp(qp, 1)
		if err := r.cb.End(); err != nil {
			b.Fatal(err)
		}
		if warm {
			if err := r.d.Submit(r.cb, nil, nil, r.f); err != nil {
				b.Fatal(err)
			}
			if err := r.f.Wait(time.Minute); err != nil {
				b.Fatal(err)
			}
			if err := r.f.Reset(); err != nil {
				b.Fatal(err)
			}
		}
		cpu0 := processCPU(b)
		b.ResetTimer()
		r.replay(b)
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*opsPerSubmit), "us/run")
		b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N*opsPerSubmit), "cpu-us/run")
		ts, err := qp.Ticks(0, 2)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(r.d.Elapsed(vk.Compute, ts[0], ts[1]).Microseconds())/float64(opsPerSubmit), "device-us/run")
	}
	bench := func(b *testing.B, op func() error) { benchN(b, opsPerSubmit, op) }
	// The weight types of a Q4_K_M file, then MXFP4 (gpt-oss experts),
	// IQ4_XS, Q3_K and two lattice types, at test_mul_mat's perf shape.
	for _, typ := range []quant.Type{quant.Q4_K, quant.Q6_K, quant.Q8_0, quant.Q4_0, quant.Q5_K, quant.F16, quant.MXFP4, quant.IQ4_XS, quant.Q3_K, quant.IQ2_XXS, quant.IQ3_S} {
		for _, n := range []int{1, 8} {
			const m, k = 4096, 14336
			b.Run(fmt.Sprintf("MUL_MAT/type_a=%s/m=%d/n=%d/k=%d", typ, m, n, k), func(b *testing.B) {
				rb, _ := quant.RowBytes(typ, k)
				w := Weight{Buf: mk(uint64(m * rb)), Type: typ, Rows: m, Cols: k}
				x, y := F32{Buf: mk(uint64(4 * n * k))}, F32{Buf: mk(uint64(4 * n * m))}
				if v := os.Getenv("FLOWINFER_BENCH_MV"); v != "" {
					var th, rw int
					if _, err := fmt.Sscanf(v, "%d,%d", &th, &rw); err != nil {
						b.Fatalf("FLOWINFER_BENCH_MV=%q: want threads,rows: %v", v, err)
					}
					if err := r.k.SetMatVecVariant(typ, th, rw); err != nil {
						b.Fatal(err)
					}
				}
				benchN(b, mulMatOps, func() error { return r.k.MatVec(r.cb, y, w, x, n) })
			})
		}
	}
	// The matrix-matrix products of a llama-1b prompt (MatMat, one op per
	// submit: a 512-vector product takes seconds of CPU on lavapipe), the
	// shapes of its attention (2048×2048) and FFN (8192×2048, 2048×8192)
	// weights, to compare with the same MUL_MAT through ggml-vulkan.
	for _, typ := range []quant.Type{quant.Q4_K, quant.Q6_K, quant.Q8_0} {
		for _, s := range [][3]int{{2048, 512, 2048}, {2048, 32, 2048}, {8192, 512, 2048}, {2048, 512, 8192}} {
			m, n, k := s[0], s[1], s[2]
			b.Run(fmt.Sprintf("MUL_MAT_MM/type_a=%s/m=%d/n=%d/k=%d", typ, m, n, k), func(b *testing.B) {
				rb, _ := quant.RowBytes(typ, k)
				w := Weight{Buf: mk(uint64(m * rb)), Type: typ, Rows: m, Cols: k}
				x, y := F32{Buf: mk(uint64(4 * n * k))}, F32{Buf: mk(uint64(4 * n * m))}
				if v := os.Getenv("FLOWINFER_BENCH_MM"); v != "" {
					var rows, vecs, per int
					if _, err := fmt.Sscanf(v, "%d,%d,%d", &rows, &vecs, &per); err != nil {
						b.Fatalf("FLOWINFER_BENCH_MM=%q: want rows,vectors,perThread: %v", v, err)
					}
					if err := r.k.SetMatMatTile(rows, vecs, per); err != nil {
						b.Fatal(err)
					}
				}
				warm = true
				defer func() { warm = false }()
				benchN(b, 1, func() error { return r.k.MatMat(r.cb, y, w, x, n) })
			})
		}
	}
	for _, s := range [][2]int{{4096, 1}, {4096, 512}} {
		b.Run(fmt.Sprintf("RMS_NORM/ne=[%d,%d]", s[0], s[1]), func(b *testing.B) {
			x, y, g := F32{Buf: mk(uint64(4 * s[0] * s[1]))}, F32{Buf: mk(uint64(4 * s[0] * s[1]))}, F32{Buf: mk(uint64(4 * s[0]))}
			bench(b, func() error { return r.k.RMSNorm(r.cb, y, x, g, s[1], s[0], 1e-5) })
		})
	}
	for _, s := range [][2]int{{32768, 1}, {131072, 4}} {
		b.Run(fmt.Sprintf("SOFT_MAX/ne=[%d,%d]", s[0], s[1]), func(b *testing.B) {
			x := F32{Buf: mk(uint64(4 * s[0] * s[1]))}
			bench(b, func() error { return r.k.Softmax(r.cb, x, s[1], s[0]) })
		})
	}
	for _, s := range [][3]int{{200000, 1, 1}, {200000, 1, 40}, {65000, 16, 40}} {
		b.Run(fmt.Sprintf("TOP_K/ne=[%d,%d]/k=%d", s[0], s[1], s[2]), func(b *testing.B) {
			cols, rows, k := s[0], s[1], s[2]
			src := F32{Buf: mk(uint64(4 * cols * rows))}
			segs := (cols + topKSeg - 1) / topKSeg
			sv, si := [2]F32{{Buf: mk(uint64(4 * rows * segs * k))}, {Buf: mk(uint64(4 * rows * segs * k))}}, [2]F32{{Buf: mk(uint64(4 * rows * segs * k))}, {Buf: mk(uint64(4 * rows * segs * k))}}
			bench(b, func() error {
				// the rounds Backend.TopK records
				in, n := src, cols
				var inI *F32
				for round := 0; ; round++ {
					c, err := r.k.TopKPass(r.cb, sv[round%2], si[round%2], in, inI, rows, n, n, k)
					if err != nil || c == 1 {
						return err
					}
					r.cb.Barrier()
					in, inI, n = sv[round%2], &si[round%2], c*k
				}
			})
		})
	}
}

// processCPU returns the CPU time (user and system) the process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
