package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

func randUnit(rng *rand.Rand, d int) []float32 {
	v := make([]float32, d)
	var s float64
	for i := range v {
		g := rng.NormFloat64()
		v[i] = float32(g)
		s += g * g
	}
	for i := range v {
		v[i] /= float32(math.Sqrt(s))
	}
	return v
}

// TestTurboDistortion: on random unit vectors of 128 dimensions the plain
// quantizer's mean squared error is the Lloyd-Max figure gen_turbo.go
// computed (within 3%) and the paper's (0.117, 0.030, 0.009 at 2, 3, 4
// bits; within 15%: its 3-bit figure is rounded down); the stored scale
// (the norm correction) never does worse.
func TestTurboDistortion(t *testing.T) {
	paper := map[int]float64{2: 0.117, 3: 0.030, 4: 0.009}
	const d, trials = 128, 4000
	for _, b := range []int{2, 3, 4} {
		tq, err := NewTurbo(d, b, 7)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, uint64(b)))
		row := make([]byte, tq.RowBytes())
		u, rec := make([]float32, tq.Padded()), make([]float32, tq.Padded())
		var plain, corrected, ip, ipRef float64
		for range trials {
			x := randUnit(rng, d)
			if err := tq.Encode(row, x, rec); err != nil {
				t.Fatal(err)
			}
			tq.Rotate(u, x)
			tq.DecodeRotated(rec, row)
			q := randUnit(rng, d)
			qr := make([]float32, tq.Padded())
			tq.Rotate(qr, q)
			for i := range u {
				lp := float64(tq.levels[code(row[2:], i, b)]) // |x| = 1: the plain reconstruction
				plain += (float64(u[i]) - lp) * (float64(u[i]) - lp)
				corrected += (float64(u[i]) - float64(rec[i])) * (float64(u[i]) - float64(rec[i]))
			}
			ip += float64(tq.DotRotated(qr, row)) * float64(dot(q, x))
			ipRef += float64(dot(q, x)) * float64(dot(q, x))
		}
		plain /= trials
		corrected /= trials
		t.Logf("%d bits: MSE plain %.5f (Lloyd-Max %.5f, paper %.3f), with the norm correction %.5f; <q,x̂> ≈ %.3f <q,x>",
			b, plain, turboMSE[d][b], paper[b], corrected, ip/ipRef)
		if r := plain / turboMSE[d][b]; r < 0.97 || r > 1.03 {
			t.Errorf("%d bits: MSE %.5f, Lloyd-Max says %.5f", b, plain, turboMSE[d][b])
		}
		if r := plain / paper[b]; r < 0.85 || r > 1.15 {
			t.Errorf("%d bits: MSE %.5f, the paper says %.3f", b, plain, paper[b])
		}
		if corrected > plain*1.001 {
			t.Errorf("%d bits: the norm correction raised the MSE from %.5f to %.5f", b, plain, corrected)
		}
	}
}

func dot(a, b []float32) float32 {
	var s float32
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// TestTurboRoundTrip: odd and padded lengths, any norm; the rotation is
// orthogonal; DotRotated and AccumulateRotated+Unrotate equal the plain
// computations on decoded rows.
func TestTurboRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, d := range []int{1, 17, 64, 80, 96, 128, 200} {
		for _, b := range []int{2, 3, 4} {
			tq, err := NewTurbo(d, b, uint64(d*10+b))
			if err != nil {
				t.Fatal(err)
			}
			n := tq.Padded()
			sc := make([]float32, n)
			x := randUnit(rng, d)
			for i := range x {
				x[i] *= 7.5 // not a unit vector
			}
			// the rotation is orthogonal and undone by Unrotate
			r, back := make([]float32, n), make([]float32, d)
			tq.Rotate(r, x)
			if math.Abs(float64(dot(r, r)-dot(x, x))) > 1e-3*float64(dot(x, x)) {
				t.Errorf("d=%d: |Rx|² %v, |x|² %v", d, dot(r, r), dot(x, x))
			}
			tq.Unrotate(back, r)
			for i := range x {
				if math.Abs(float64(back[i]-x[i])) > 1e-4 {
					t.Fatalf("d=%d: unrotate[%d] = %v, want %v", d, i, back[i], x[i])
				}
			}
			const rows = 5
			enc := make([][]byte, rows)
			dec := make([][]float32, rows)
			for k := range rows {
				v := randUnit(rng, d)
				enc[k] = make([]byte, tq.RowBytes())
				if err := tq.Encode(enc[k], v, sc); err != nil {
					t.Fatal(err)
				}
				dec[k] = make([]float32, d)
				tq.Decode(dec[k], enc[k], sc)
				// a coarse bound on the error of one unit vector
				var e float64
				for i := range v {
					e += float64((v[i] - dec[k][i]) * (v[i] - dec[k][i]))
				}
				if d >= 64 && e > 4*turboMSE[0][b] {
					t.Errorf("d=%d b=%d: squared error %.4f", d, b, e)
				}
			}
			q := randUnit(rng, d)
			qr := make([]float32, n)
			tq.Rotate(qr, q)
			acc := make([]float32, n)
			want := make([]float32, d)
			for k := range rows {
				got, ref := tq.DotRotated(qr, enc[k]), dot(q, dec[k])
				if math.Abs(float64(got-ref)) > 1e-4 {
					t.Errorf("d=%d b=%d: DotRotated %v, on the decoded row %v", d, b, got, ref)
				}
				w := float32(k+1) / 10
				tq.AccumulateRotated(acc, w, enc[k])
				for i := range want {
					want[i] += w * dec[k][i]
				}
			}
			got := make([]float32, d)
			tq.Unrotate(got, acc)
			for i := range got {
				if math.Abs(float64(got[i]-want[i])) > 1e-4 {
					t.Fatalf("d=%d b=%d: accumulated[%d] %v, want %v", d, b, i, got[i], want[i])
				}
			}
		}
	}
	// a zero vector encodes and decodes to zeros
	tq, _ := NewTurbo(64, 3, 1)
	row, sc, out := make([]byte, tq.RowBytes()), make([]float32, 64), make([]float32, 64)
	if err := tq.Encode(row, make([]float32, 64), sc); err != nil {
		t.Fatal(err)
	}
	tq.Decode(out, row, sc)
	for _, v := range out {
		if v != 0 {
			t.Fatalf("zero vector decoded to %v", out)
		}
	}
}

func TestTurboErrors(t *testing.T) {
	for _, c := range []struct{ d, b int }{{0, 3}, {64, 1}, {64, 5}, {1 << 17, 3}} {
		if _, err := NewTurbo(c.d, c.b, 1); err == nil {
			t.Errorf("NewTurbo(%d, %d): no error", c.d, c.b)
		}
	}
	tq, _ := NewTurbo(64, 4, 1)
	if err := tq.Encode(make([]byte, 3), make([]float32, 64), make([]float32, 64)); err != ErrTurboShort {
		t.Errorf("short row: %v", err)
	}
}
