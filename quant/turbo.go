package quant

//go:generate go run gen_turbo.go

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
)

// Turbo is a TurboQuant codec (Zandieh et al., 2025, "TurboQuant: Online
// Vector Quantization with Near-optimal Distortion Rate") for vectors of
// one length, as the KV cache stores them per head: a seeded randomized
// Hadamard rotation spreads the vector's energy evenly over its
// coordinates, whose law is then (nearly) that of a uniform unit vector's
// (gen_turbo.go), and each rotated coordinate is replaced by the index of
// its Lloyd-Max level for that law, in bits bits. A row is a float16 scale
// followed by the packed indices.
//
// The scale is the norm correction: not the vector's norm r but the
// least-squares fit r·<y,ĉ>/|ĉ|² of the levels ĉ to the scaled rotated
// unit vector y, which can only lower the error of the plain quantizer
// (whose mean squared error on unit vectors is turboMSE: 0.117, 0.034 and
// 0.0093 at 2, 3 and 4 bits for 128 dimensions, the paper's figures).
//
// Attention reads rows without decompressing them: a query rotated once
// (Rotate) is dotted with the levels in the rotated domain (DotRotated),
// and softmax-weighted values are accumulated there (AccumulateRotated)
// and rotated back once (Unrotate): the rotation is orthogonal, so inner
// products are preserved.
type Turbo struct {
	dim, n int       // vector length; n: padded to a power of two
	bits   int       // per coordinate
	signs  []float32 // the rotation's random diagonal (±1), seeded
	levels []float32 // 1<<bits Lloyd-Max levels for n, ascending, scaled by 1/√n
	bounds []float32 // midpoints between levels (same scale)
}

// NewTurbo returns a codec for vectors of dim values at bits (2, 3 or 4)
// bits per coordinate; its rotation is derived from seed (give each layer
// and head its own).
func NewTurbo(dim, b int, seed uint64) (*Turbo, error) {
	if dim < 1 || dim > 1<<16 {
		return nil, fmt.Errorf("quant: turbo: dimension %d out of range (1 to 65536)", dim)
	}
	if b < 2 || b > 4 {
		return nil, fmt.Errorf("quant: turbo: %d bits per coordinate (supported: 2, 3, 4)", b)
	}
	n := 1 << bits.Len(uint(dim-1))
	table, ok := turboLevels[n]
	if !ok {
		table = turboLevels[0] // the normal limit
		if n < 8 {
			table = turboLevels[8]
		}
	}
	t := &Turbo{dim: dim, n: n, bits: b, signs: make([]float32, n)}
	s := seed
	for i := range t.signs {
		if splitmix(&s)&1 == 0 {
			t.signs[i] = 1
		} else {
			t.signs[i] = -1
		}
	}
	inv := float32(1 / math.Sqrt(float64(n)))
	for _, l := range table[b] {
		t.levels = append(t.levels, l*inv)
	}
	if b >= 3 {
		onGrid(t.levels)
	}
	for i := 1; i < len(t.levels); i++ {
		t.bounds = append(t.bounds, (t.levels[i-1]+t.levels[i])/2)
	}
	return t, nil
}

// onGrid moves each of the levels to the nearest multiple of cs =
// max|level|/127, so that a level is cs times an int8. The decode scores
// of 4-bit K rows and the decode V sums of 3- and 4-bit rows sum int16
// values times those int8s (cpu's kern_qint.go): on the grid they meet the
// same levels as every other reader of the codes. A level moves by at most
// cs/2, 0.4% of the largest level. On TestTurboDistortion's 4000 random
// unit vectors of 128 dimensions the grid costs little: mean squared error
// 0.00923 at 4 bits against 0.00922 off the grid (plain), 0.00907 against
// 0.00906 (with the norm correction); at 3 bits 0.03400 against 0.03398
// and 0.03355 against 0.03352. 2-bit levels stay where Lloyd-Max puts them
// (no integer kernel reads them).
func onGrid(levels []float32) {
	var m float32
	for _, l := range levels {
		m = max(m, float32(math.Abs(float64(l))))
	}
	cs := m / 127
	if cs == 0 {
		return
	}
	for i, l := range levels {
		levels[i] = cs * float32(math.RoundToEven(float64(l/cs)))
	}
}

// splitmix64 step: a seeded stream of well-mixed words.
func splitmix(s *uint64) uint64 {
	*s += 0x9e3779b97f4a7c15
	z := *s
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// Dim is the vector length; Padded the rotated length (a power of two):
// rotated vectors (Rotate, DotRotated, AccumulateRotated) have Padded
// values.
func (t *Turbo) Dim() int    { return t.dim }
func (t *Turbo) Padded() int { return t.n }
func (t *Turbo) Bits() int   { return t.bits }

// Levels returns the codebook (1<<Bits values, ascending) in the rotated
// domain: code c of a row with scale s decodes to s·Levels()[c]. Callers
// must not modify it.
func (t *Turbo) Levels() []float32 { return t.levels }

// RowBytes is the size of one encoded vector.
func (t *Turbo) RowBytes() int { return 2 + (t.n*t.bits+7)/8 }

// Rotate writes R x (Padded values) to dst: x zero-padded, multiplied by
// the random signs, then by the normalized Walsh-Hadamard matrix.
func (t *Turbo) Rotate(dst, x []float32) {
	t.Sign(dst, x)
	fwht(dst[:t.n])
}

// Unrotate writes the first Dim values of R^T y to dst (y is modified).
func (t *Turbo) Unrotate(dst, y []float32) {
	fwht(y[:t.n]) // the normalized Hadamard matrix is its own inverse
	t.Unsign(dst, y)
}

// Sign is Rotate's first step: dst (Padded values) is x zero-padded and
// multiplied by the random signs. A caller with a transform of its own
// (cpu's SIMD Hadamard) rotates with Sign, then its transform.
func (t *Turbo) Sign(dst, x []float32) {
	dst = dst[:t.n]
	for i := range dst {
		if i < t.dim {
			dst[i] = x[i] * t.signs[i]
		} else {
			dst[i] = 0
		}
	}
}

// Unsign is Unrotate's last step: dst's first Dim values are y's (already
// transformed) multiplied by the random signs.
func (t *Turbo) Unsign(dst, y []float32) {
	for i := range t.dim {
		dst[i] = y[i] * t.signs[i]
	}
}

// Hadamard applies the orthonormal Walsh-Hadamard transform to v in
// place (len(v) a power of two): the fast transform scaled by 1/√n, its
// own inverse. The KV cache rotates q8_0 and q4_0 rows with it, as
// llama.cpp does (model.KVLayer's RotK and RotV).
func Hadamard(v []float32) { fwht(v) }

// fwht is the in-place fast Walsh-Hadamard transform, scaled by 1/√n so
// that it is orthogonal (and its own inverse).
func fwht(v []float32) {
	n := len(v)
	for h := 1; h < n; h <<= 1 {
		for i := 0; i < n; i += h << 1 {
			for j := i; j < i+h; j++ {
				a, b := v[j], v[j+h]
				v[j], v[j+h] = a+b, a-b
			}
		}
	}
	s := float32(1 / math.Sqrt(float64(n)))
	for i := range v {
		v[i] *= s
	}
}

// ErrTurboShort: a buffer is shorter than the codec needs.
var ErrTurboShort = errors.New("quant: turbo: buffer too short")

// Encode writes x's row to dst (RowBytes); scratch holds Padded values.
func (t *Turbo) Encode(dst []byte, x, scratch []float32) error {
	if len(dst) < t.RowBytes() || len(x) < t.dim || len(scratch) < t.n {
		return ErrTurboShort
	}
	u := scratch[:t.n]
	t.Rotate(u, x)
	codes := dst[2:t.RowBytes()]
	clear(codes)
	// the least-squares scale of the levels: <u,ĉ>/|ĉ|² (levels are
	// stored for a unit vector; u is not normalized, so this is r·<y,ĉ>/|ĉ|²
	// in the doc's terms)
	var r2 float64
	for _, v := range u {
		r2 += float64(v) * float64(v)
	}
	inv := float32(0)
	if r2 > 0 {
		inv = float32(1 / math.Sqrt(r2))
	}
	var dot, sq float64
	for i, v := range u {
		c := t.nearest(v * inv) // levels are for a unit vector
		putCode(codes, i, t.bits, c)
		l := float64(t.levels[c])
		dot += float64(v) * l
		sq += l * l
	}
	scale := float32(0)
	if sq > 0 {
		scale = float32(dot / sq)
	}
	h := FP32ToFP16(scale)
	dst[0], dst[1] = byte(h), byte(h>>8)
	return nil
}

// nearest returns the index of the level nearest v, a coordinate of a
// rotated unit vector.
func (t *Turbo) nearest(v float32) int {
	c := 0
	for c < len(t.bounds) && v > t.bounds[c] {
		c++
	}
	return c
}

// putCode stores code c of coordinate i.
func putCode(codes []byte, i, b, c int) {
	bit := i * b
	codes[bit>>3] |= byte(c << (bit & 7))
	if bit&7+b > 8 {
		codes[bit>>3+1] |= byte(c >> (8 - bit&7))
	}
}

// code returns coordinate i's code.
func code(codes []byte, i, b int) int {
	bit := i * b
	v := int(codes[bit>>3]) >> (bit & 7)
	if bit&7+b > 8 {
		v |= int(codes[bit>>3+1]) << (8 - bit&7)
	}
	return v & (1<<b - 1)
}

// scaleOf returns a row's scale.
func scaleOf(row []byte) float32 { return FP16ToFP32(uint16(row[0]) | uint16(row[1])<<8) }

// DecodeRotated writes the row's reconstruction in the rotated domain
// (Padded values) to dst.
func (t *Turbo) DecodeRotated(dst []float32, row []byte) {
	s := scaleOf(row)
	codes := row[2:]
	for i := range dst[:t.n] {
		dst[i] = s * t.levels[code(codes, i, t.bits)]
	}
}

// Decode writes the row's reconstruction (Dim values) to dst; scratch
// holds Padded values.
func (t *Turbo) Decode(dst []float32, row []byte, scratch []float32) {
	t.DecodeRotated(scratch, row)
	t.Unrotate(dst, scratch)
}

// DotRotated returns <q, x̂> for a row x̂, given qRot = Rotate(q).
func (t *Turbo) DotRotated(qRot []float32, row []byte) float32 {
	codes := row[2:]
	var sum float32
	for i, q := range qRot[:t.n] {
		sum += q * t.levels[code(codes, i, t.bits)]
	}
	return sum * scaleOf(row)
}

// AccumulateRotated adds w·x̂ in the rotated domain to acc (Padded values).
func (t *Turbo) AccumulateRotated(acc []float32, w float32, row []byte) {
	w *= scaleOf(row)
	codes := row[2:]
	for i := range acc[:t.n] {
		acc[i] += w * t.levels[code(codes, i, t.bits)]
	}
}
