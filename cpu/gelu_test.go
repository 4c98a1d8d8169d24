package cpu_test

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/quant"
)

// ggmlGeluSHA256 is the SHA-256 of ggml's GELU table as ggml's CPU backend
// uses it: for each of the 65536 float16 bit patterns h in order, as a
// little-endian uint16, the float16 result of ggml_gelu(h) for finite h
// with -10 < h < 10 (the inputs that read the table), 0 for the others.
// Made with llama.cpp d32676d77's libggml-cpu (x86-64, -march=native, on
// the machine of the goldens): a throwaway C program computing
// ggml_gelu and ggml_geglu_split(x, 1) of every such h, both giving this.
const ggmlGeluSHA256 = "49ad2524dc37a6de4afa8dd0e41d2d1b40e0911e980db4ee655d43a03b15d6db"

// TestGeluTable: our GELU table is ggml's, entry for entry (by its hash),
// and a few entries have the values ggml gives.
func TestGeluTable(t *testing.T) {
	tab := cpu.GeluTable()
	buf := make([]byte, 2<<16)
	for i := range 1 << 16 {
		x := quant.FP16ToFP32(uint16(i))
		if math.IsNaN(float64(x)) || x <= -10 || x >= 10 {
			continue
		}
		h := quant.FP32ToFP16(tab[i])
		if quant.FP16ToFP32(h) != tab[i] {
			t.Fatalf("entry %#04x = %v is not a float16 value", i, tab[i])
		}
		binary.LittleEndian.PutUint16(buf[2*i:], h)
	}
	if got := fmt.Sprintf("%x", sha256.Sum256(buf)); got != ggmlGeluSHA256 {
		t.Errorf("table SHA-256 %s, ggml's %s", got, ggmlGeluSHA256)
	}
	for _, c := range []struct {
		h    uint16
		want float32
	}{{0x3c00, 0.8413086}, {0xbc00, -0.15881348}, {0x4000, 1.9550781}, {0xbffe, -0.045562744}, {0x3800, 0.34570312}} {
		if got := tab[c.h]; got != c.want {
			t.Errorf("gelu(%v) = %v, ggml %v", quant.FP16ToFP32(c.h), got, c.want)
		}
	}
}

// TestBackendGeGLUScale: the Backend's GeGLU and Scale equal Ref's bit for
// bit (both are the same table lookup or product per element; only the
// split across workers differs), on odd and aligned sizes below and above
// the parallel threshold, inputs beyond ±10 included, outputs guarded.
func TestBackendGeGLUScale(t *testing.T) {
	ref := cpu.NewRef()
	for _, threads := range testThreads {
		be := newBackend(t, threads)
		for _, n := range []int{1, 5, 7, 13, 128, 256, 4096, 3*10240 + 5} {
			name := fmt.Sprintf("threads=%d/n=%d", threads, n)
			gate, up := randomF32(n, 21), randomF32(n, 22)
			for i := range gate {
				gate[i] *= 6 // a few beyond ±10: the ends ggml does not look up
			}
			want := make([]float32, n)
			got, check := guarded(n)
			ref.GeGLU(want, gate, up)
			be.GeGLU(got, gate, up)
			check(t)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s geglu[%d] of (%v, %v): %v, Ref %v", name, i, gate[i], up[i], got[i], want[i])
				}
			}
			// in place, as the FFN calls it
			inPlace := append([]float32(nil), gate...)
			be.GeGLU(inPlace, inPlace, up)
			for i := range want {
				if math.Float32bits(inPlace[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s in-place geglu[%d]: %v, want %v", name, i, inPlace[i], want[i])
				}
			}
			copy(want, up)
			copy(got, up)
			ref.Scale(want, 50.596443)
			be.Scale(got, 50.596443)
			check(t)
			for i := range want {
				if got[i] != want[i] || want[i] != up[i]*50.596443 {
					t.Fatalf("%s scale[%d]: %v, Ref %v", name, i, got[i], want[i])
				}
			}
		}
	}
}

// TestRefGeGLU: Ref's GeGLU is ggml_vec_geglu_f32: 0 at or below -10, the
// input times up at or above 10, the table's value times up between, with
// the input rounded to float16 first.
func TestRefGeGLU(t *testing.T) {
	ref := cpu.NewRef()
	gate := []float32{-10, -10.5, 10, 12, 1, 1.0001, -1.999, 0}
	up := []float32{3, -3, 3, 2, 2, 2, -1, 5} // -10.5·-3: +0, as ggml writes it
	out := make([]float32, len(gate))
	ref.GeGLU(out, gate, up)
	tab := cpu.GeluTable()
	want := []float32{0, 0, 30, 24, 0.8413086 * 2, tab[quant.FP32ToFP16(1.0001)] * 2, -tab[quant.FP32ToFP16(-1.999)], 0}
	for i := range out {
		if math.Float32bits(out[i]) != math.Float32bits(want[i]) {
			t.Errorf("geglu(%v, %v) = %v, want %v", gate[i], up[i], out[i], want[i])
		}
	}
}
