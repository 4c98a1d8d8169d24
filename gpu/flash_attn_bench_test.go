//go:build cgo

package gpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/flowinfer/flowinfer/gpu/vk"
)

// BenchmarkAttentionPrefill times the attention of one prompt at
// llama-1b's shape (32 query heads on 8 KV heads of 64, f16 cache): n rows
// (FLOWINFER_BENCH_N, default 512) of one sequence at positions 0..n-1.
// tiled is one Attention call (flash_attn_f16.comp); rows is the per-row
// shader attn_f16.comp, as n calls of one row recorded without barriers
// (Attention sends several rows to the tiled shader). One iteration is a
// submit and a fence wait; us/run is wall time, cpu-us/run the process's
// CPU time (lavapipe's work), device-us/run the device's timestamps.
func BenchmarkAttentionPrefill(b *testing.B) {
	n := 512
	if v := os.Getenv("FLOWINFER_BENCH_N"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 2 {
			b.Fatalf("FLOWINFER_BENCH_N=%q: want a row count of at least 2", v)
		}
	}
	r := benchRig(b)
	s := AttnShape{NHead: 32, NHeadKV: 8, DK: 64, DV: 64, NCtx: n, Scale: 0.125, F16: true}
	rng := rand.New(rand.NewPCG(1, 2))
	// host-visible buffers, filled here (the shaders read them in place)
	mk := func(words int, f func(i int) uint32) *vk.Buffer {
		buf, err := r.d.NewBuffer(uint64(4*words), vk.Upload)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(buf.Free)
		bs := buf.Bytes()
		for i := range words {
			binary.LittleEndian.PutUint32(bs[4*i:], f(i))
		}
		return buf
	}
	rnd := func(int) uint32 { return math.Float32bits(2*rng.Float32() - 1) }
	half := func(int) uint32 { // two f16 values in [-1, 1)
		h := func() uint32 { return uint32(0x3800 | rng.IntN(0x400) | rng.IntN(2)<<15) } // ±[0.5, 1)
		return h() | h()<<16
	}
	q := F32{Buf: mk(n*s.NHead*s.DK, rnd)}
	kc := F32{Buf: mk(n*s.NHeadKV*s.DK/2, half)}
	vc := F32{Buf: mk(n*s.NHeadKV*s.DV/2, half)}
	idx := F32{Buf: mk(2*n, func(i int) uint32 {
		if i%2 == 0 {
			return 0
		}
		return uint32(i / 2)
	})}
	out, err := r.d.NewBuffer(uint64(4*n*s.NHead*s.DV), vk.DeviceLocal)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(out.Free)
	qp, err := r.d.NewQueryPool(2)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(qp.Destroy)
	for _, tiled := range []bool{true, false} {
		name := "rows"
		if tiled {
			name = "tiled"
		}
		b.Run(fmt.Sprintf("n=%d/%s", n, name), func(b *testing.B) {
			if err := r.cb.Begin(); err != nil {
				b.Fatal(err)
			}
			r.cb.ResetQueries(qp, 0, 2)
			r.cb.Timestamp(qp, 0)
			if tiled {
				if err := r.k.Attention(r.cb, F32{Buf: out}, q, kc, vc, idx, F32{}, n, s); err != nil {
					b.Fatal(err)
				}
			} else {
				for t := range n {
					o := F32{Buf: out, Off: t * s.NHead * s.DV}
					qt, it := F32{Buf: q.Buf, Off: t * s.NHead * s.DK}, F32{Buf: idx.Buf, Off: 2 * t}
					if err := r.k.Attention(r.cb, o, qt, kc, vc, it, F32{}, 1, s); err != nil {
						b.Fatal(err)
					}
				}
			}
			r.cb.Timestamp(qp, 1)
			if err := r.cb.End(); err != nil {
				b.Fatal(err)
			}
			cpu0 := processCPU(b)
			r.replay(b)
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/run")
			b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-us/run")
			ts, err := qp.Ticks(0, 2)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(r.d.Elapsed(vk.Compute, ts[0], ts[1]).Microseconds()), "device-us/run")
		})
	}
}
