// Block layouts of the quantized types we compute with, as plain Go structs
// mirroring ggml-common.h. The structs document the layouts and pin them: the
// kernels do not cast bytes to these structs (tensor data can sit at any
// offset of a mapping); they read bytes at the offsets taken from the
// structs below, so a layout and the code reading it cannot drift apart.
//
// All multi-byte fields are little-endian. "fp16" fields are IEEE half
// floats (ggml_half), read with FP16ToFP32.

package quant

import "unsafe"

// blockQ4_0 holds 32 weights as 4-bit codes q with one fp16 scale:
// x = d * (q - 8). 18 bytes per 32 weights: 4.5 bits per weight.
// qs[j] holds element j in its low nibble and element j+16 in its high nibble.
type blockQ4_0 struct {
	d  uint16   // fp16 scale
	qs [16]byte // nibbles
}

// blockQ4_1 holds 32 weights as 4-bit codes q with an fp16 scale and an
// fp16 minimum: x = d*q + m. 20 bytes per 32 weights: 5 bits per weight.
type blockQ4_1 struct {
	d  uint16   // fp16 scale
	m  uint16   // fp16 min
	qs [16]byte // nibbles, as in blockQ4_0
}

// blockQ5_0 holds 32 weights as 5-bit codes q (4 low bits in qs, the fifth
// in qh) with one fp16 scale: x = d * (q - 16). 22 bytes per 32 weights:
// 5.5 bits per weight. Bit j of the little-endian uint32 qh is the fifth bit
// of element j.
type blockQ5_0 struct {
	d  uint16   // fp16 scale
	qh [4]byte  // fifth bits
	qs [16]byte // low nibbles, as in blockQ4_0
}

// blockQ5_1 holds 32 weights as 5-bit codes q with an fp16 scale and an
// fp16 minimum: x = d*q + m. 24 bytes per 32 weights: 6 bits per weight.
type blockQ5_1 struct {
	d  uint16   // fp16 scale
	m  uint16   // fp16 min
	qh [4]byte  // fifth bits, as in blockQ5_0
	qs [16]byte // low nibbles
}

// blockQ8_0 holds 32 values as int8 with one fp16 scale: x = d*q. 34 bytes
// per 32 values: 8.5 bits per weight. It is also the activation type
// (vec_dot_type) of Q4_0, Q5_0 and Q8_0 weights.
type blockQ8_0 struct {
	d  uint16   // fp16 scale
	qs [32]int8 // values
}

// blockQ8_1 holds 32 values as int8 with an fp16 scale d and s = d*sum(qs)
// in fp16: x = d*q. 36 bytes per 32 values: 9 bits per weight. It is the
// activation type of Q4_1 and Q5_1 weights; ggml has no dequantizer for it.
type blockQ8_1 struct {
	d  uint16   // fp16 scale
	s  uint16   // fp16 d * sum(qs)
	qs [32]int8 // values
}

// blockQ2_K is a super-block of 256 weights in 16 sub-blocks of 16. Each
// sub-block has a 4-bit scale and a 4-bit min (scales[j]: low nibble scale,
// high nibble min); x = d*sc*q - dmin*m with 2-bit q. 84 bytes per 256
// weights: 2.625 bits per weight.
type blockQ2_K struct {
	scales [16]byte // 4-bit scales (low) and mins (high)
	qs     [64]byte // 2-bit codes, 4 per byte
	d      uint16   // fp16 super-block scale of the scales
	dmin   uint16   // fp16 super-block scale of the mins
}

// blockQ3_K is a super-block of 256 weights in 16 sub-blocks of 16 with
// 6-bit signed scales: x = d * (sc-32) * (q - 4) with 3-bit q (2 low bits in
// qs, the high bit in hmask; a set bit means "no -4"). 110 bytes per 256
// weights: 3.4375 bits per weight.
type blockQ3_K struct {
	hmask  [32]byte // high bits
	qs     [64]byte // low 2 bits, 4 per byte
	scales [12]byte // 16 6-bit scales, packed
	d      uint16   // fp16 super-block scale
}

// blockQ4_K is a super-block of 256 weights in 8 sub-blocks of 32, each with
// a 6-bit scale and a 6-bit min packed in scales: x = d*sc*q - dmin*m with
// 4-bit q. 144 bytes per 256 weights: 4.5 bits per weight.
type blockQ4_K struct {
	d      uint16    // fp16 super-block scale of the scales
	dmin   uint16    // fp16 super-block scale of the mins
	scales [12]byte  // 8 6-bit scales and 8 6-bit mins, packed
	qs     [128]byte // 4-bit codes
}

// blockQ5_K is a super-block of 256 weights like blockQ4_K with a fifth bit
// per weight in qh: x = d*sc*q - dmin*m with 5-bit q. 176 bytes per 256
// weights: 5.5 bits per weight.
type blockQ5_K struct {
	d      uint16    // fp16 super-block scale of the scales
	dmin   uint16    // fp16 super-block scale of the mins
	scales [12]byte  // as in blockQ4_K
	qh     [32]byte  // fifth bits
	qs     [128]byte // low 4 bits
}

// blockQ6_K is a super-block of 256 weights in 16 sub-blocks of 16 with
// 8-bit signed scales: x = d * sc * (q - 32) with 6-bit q (4 low bits in ql,
// 2 high bits in qh). 210 bytes per 256 weights: 6.5625 bits per weight.
type blockQ6_K struct {
	ql     [128]byte // low 4 bits
	qh     [64]byte  // high 2 bits
	scales [16]int8  // sub-block scales
	d      uint16    // fp16 super-block scale
}

// blockQ8_K is a super-block of 256 int8 values with a float32 scale and
// the sums of each group of 16 values: x = d*q. 292 bytes per 256 values:
// 9.125 bits per weight. It is the activation type of every K-quant and is
// never stored in files.
type blockQ8_K struct {
	d     float32   // scale (float32, not fp16)
	qs    [256]int8 // values
	bsums [16]int16 // sums of qs in groups of 16
}

// Byte offsets of the fields, taken from the structs above.
const (
	offQ4_1M  = int(unsafe.Offsetof(blockQ4_1{}.m))
	offQ4_1Qs = int(unsafe.Offsetof(blockQ4_1{}.qs))
	offQ4_0Qs = int(unsafe.Offsetof(blockQ4_0{}.qs))
	offQ5_0Qh = int(unsafe.Offsetof(blockQ5_0{}.qh))
	offQ5_0Qs = int(unsafe.Offsetof(blockQ5_0{}.qs))
	offQ5_1M  = int(unsafe.Offsetof(blockQ5_1{}.m))
	offQ5_1Qh = int(unsafe.Offsetof(blockQ5_1{}.qh))
	offQ5_1Qs = int(unsafe.Offsetof(blockQ5_1{}.qs))
	offQ8_0Qs = int(unsafe.Offsetof(blockQ8_0{}.qs))
	offQ8_1S  = int(unsafe.Offsetof(blockQ8_1{}.s))
	offQ8_1Qs = int(unsafe.Offsetof(blockQ8_1{}.qs))

	offQ2_KScales = int(unsafe.Offsetof(blockQ2_K{}.scales))
	offQ2_KQs     = int(unsafe.Offsetof(blockQ2_K{}.qs))
	offQ2_KD      = int(unsafe.Offsetof(blockQ2_K{}.d))
	offQ2_KDmin   = int(unsafe.Offsetof(blockQ2_K{}.dmin))

	offQ3_KHmask  = int(unsafe.Offsetof(blockQ3_K{}.hmask))
	offQ3_KQs     = int(unsafe.Offsetof(blockQ3_K{}.qs))
	offQ3_KScales = int(unsafe.Offsetof(blockQ3_K{}.scales))
	offQ3_KD      = int(unsafe.Offsetof(blockQ3_K{}.d))

	offQ4_KDmin   = int(unsafe.Offsetof(blockQ4_K{}.dmin))
	offQ4_KScales = int(unsafe.Offsetof(blockQ4_K{}.scales))
	offQ4_KQs     = int(unsafe.Offsetof(blockQ4_K{}.qs))

	offQ5_KDmin   = int(unsafe.Offsetof(blockQ5_K{}.dmin))
	offQ5_KScales = int(unsafe.Offsetof(blockQ5_K{}.scales))
	offQ5_KQh     = int(unsafe.Offsetof(blockQ5_K{}.qh))
	offQ5_KQs     = int(unsafe.Offsetof(blockQ5_K{}.qs))

	offQ6_KQl     = int(unsafe.Offsetof(blockQ6_K{}.ql))
	offQ6_KQh     = int(unsafe.Offsetof(blockQ6_K{}.qh))
	offQ6_KScales = int(unsafe.Offsetof(blockQ6_K{}.scales))
	offQ6_KD      = int(unsafe.Offsetof(blockQ6_K{}.d))

	offQ8_KQs    = int(unsafe.Offsetof(blockQ8_K{}.qs))
	offQ8_KBsums = int(unsafe.Offsetof(blockQ8_K{}.bsums))
)

// Block sizes in bytes, taken from the structs (the types table in types.go
// states the same numbers; a test checks they agree).
const (
	sizeQ4_0 = int(unsafe.Sizeof(blockQ4_0{}))
	sizeQ4_1 = int(unsafe.Sizeof(blockQ4_1{}))
	sizeQ5_0 = int(unsafe.Sizeof(blockQ5_0{}))
	sizeQ5_1 = int(unsafe.Sizeof(blockQ5_1{}))
	sizeQ8_0 = int(unsafe.Sizeof(blockQ8_0{}))
	sizeQ8_1 = int(unsafe.Sizeof(blockQ8_1{}))
	sizeQ2_K = int(unsafe.Sizeof(blockQ2_K{}))
	sizeQ3_K = int(unsafe.Sizeof(blockQ3_K{}))
	sizeQ4_K = int(unsafe.Sizeof(blockQ4_K{}))
	sizeQ5_K = int(unsafe.Sizeof(blockQ5_K{}))
	sizeQ6_K = int(unsafe.Sizeof(blockQ6_K{}))
	sizeQ8_K = int(unsafe.Sizeof(blockQ8_K{}))
)

// qk is the block size of the 32-element types (Q4_0 ... Q8_1).
const qk = 32

// le16 reads a little-endian uint16.
func le16(b []byte) uint16 { return uint16(b[0]) | uint16(b[1])<<8 }

// put16 writes a little-endian uint16.
func put16(b []byte, v uint16) { b[0] = byte(v); b[1] = byte(v >> 8) }

// fp16 reads a little-endian fp16 and widens it.
func fp16(b []byte) float32 { return FP16ToFP32(le16(b)) }

// le32 reads a little-endian uint32.
func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// put32 writes a little-endian uint32.
func put32(b []byte, v uint32) {
	b[0] = byte(v)
	b[1] = byte(v >> 8)
	b[2] = byte(v >> 16)
	b[3] = byte(v >> 24)
}
