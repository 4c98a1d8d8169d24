// iq_dequant.glsl: the block layouts of the lattice ("i-quant") types
// IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and IQ1_M, shared by their
// matrix-vector and matrix-matrix shaders. The including shader defines
// its type's macro and includes mul_mat_vec_head.glsl or mm_head.glsl
// (the W buffer, w_u8, w_u16, w_f16) first. It gets BLOCK_BYTES, the
// bytes of a super-block of 256 weights, and dq8(bb, g, lo, hi): the
// weights 8g..8g+7 (g < 32) of the super-block at byte bb, as quant/iq.go
// dequantizes them (ggml-quants.c's dequantize_row_iq*): the same float32
// operations in the same order, so they are the CPU's values bit for bit.
//
// Every type keeps one scale per 8 weights or coarser, so a group of 8
// decodes its scale once. Super-blocks start only 2-aligned (66, 74, 82,
// 98, 110, 50 bytes): words are read as two halves (iq_u32).
//
// The grid and the sign table are binding 3 (gpu/iq_tables.go writes them
// from package quant's tables): grid point k of an 8-wide grid (IQ2_*,
// IQ1_*) is words 2k (elements 0-3) and 2k+1 (4-7), one signed byte an
// element; of a 4-wide grid (IQ3_*) word k; ggml's ksigns_iq2xs[i] is
// word SIGNS + i.

layout(std430, binding = 3) readonly buffer IQTable { uint iqt[]; };

// iq_u32 reads 4 bytes at an even byte offset b.
uint iq_u32(uint b) { return w_u16(b) | (w_u16(b + 2u) << 16); }

// iq_ubytes returns the bytes of v as floats, low byte first; iq_sbytes
// as signed bytes.
vec4 iq_ubytes(uint v) { return vec4((uvec4(v) >> uvec4(0u, 8u, 16u, 24u)) & 0xFFu); }
vec4 iq_sbytes(uint v) { return vec4(ivec4(uvec4(v) << uvec4(24u, 16u, 8u, 0u)) >> 24); }

// iq_signs returns -1 where bit j (j < 4) of s is set, else +1 (ggml tests
// kmask_iq2xs[j] = 1<<j against the sign byte).
vec4 iq_signs(uint s) { return vec4(1.0) - 2.0 * vec4((uvec4(s) >> uvec4(0u, 1u, 2u, 3u)) & 1u); }

#if defined(IQ2_XXS)
// IQ2_XXS: f16 d, then per 32 weights (sub-block ib) two little-endian
// uint32s: four 8-bit grid indices, then four 7-bit sign indices (bits
// 7l..7l+6) and a 4-bit scale (top nibble). w = d·(0.5+ls)/4 · grid · sign
// (dequantize_row_iq2_xxs).
const uint BLOCK_BYTES = 66u, SIGNS = 512u;
void dq8(uint bb, uint g, out vec4 lo, out vec4 hi) {
	const uint ib = g >> 2, l = g & 3u;
	const uint aux = iq_u32(bb + 6u + 8u * ib);
	const float db = (w_f16(bb) * (0.5 + float(aux >> 28))) * 0.25;
	const uint k = w_u8(bb + 2u + 8u * ib + l);
	const uint s = iqt[SIGNS + ((aux >> (7u * l)) & 127u)];
	lo = db * iq_ubytes(iqt[2u * k]) * iq_signs(s);
	hi = db * iq_ubytes(iqt[2u * k + 1u]) * iq_signs(s >> 4);
}
#elif defined(IQ2_XS)
// IQ2_XS: f16 d, 32 uint16s (a 9-bit grid index and a 7-bit sign index
// per 8 weights), then 8 bytes of two 4-bit scales per 32 weights (low
// nibble: the first 16). w = d·(0.5+ls)/4 · grid · sign
// (dequantize_row_iq2_xs).
const uint BLOCK_BYTES = 74u, SIGNS = 1024u;
void dq8(uint bb, uint g, out vec4 lo, out vec4 hi) {
	const uint ib = g >> 2, l = g & 3u;
	const uint sc = w_u8(bb + 66u + ib) >> (4u * (l >> 1));
	const float db = (w_f16(bb) * (0.5 + float(sc & 15u))) * 0.25;
	const uint q = w_u16(bb + 2u + 2u * g);
	const uint k = q & 511u, s = iqt[SIGNS + (q >> 9)];
	lo = db * iq_ubytes(iqt[2u * k]) * iq_signs(s);
	hi = db * iq_ubytes(iqt[2u * k + 1u]) * iq_signs(s >> 4);
}
#elif defined(IQ2_S)
// IQ2_S: f16 d, 32 bytes of the low 8 bits of 10-bit grid indices, 32
// plain sign bytes, 8 bytes of the indices' high 2 bits (qh[ib], bits
// 2l..2l+1), 8 bytes of scales as IQ2_XS (dequantize_row_iq2_s).
const uint BLOCK_BYTES = 82u;
void dq8(uint bb, uint g, out vec4 lo, out vec4 hi) {
	const uint ib = g >> 2, l = g & 3u;
	const uint sc = w_u8(bb + 74u + ib) >> (4u * (l >> 1));
	const float db = (w_f16(bb) * (0.5 + float(sc & 15u))) * 0.25;
	const uint k = w_u8(bb + 2u + g) | ((w_u8(bb + 66u + ib) << (8u - 2u * l)) & 0x300u);
	const uint s = w_u8(bb + 34u + g);
	lo = db * iq_ubytes(iqt[2u * k]) * iq_signs(s);
	hi = db * iq_ubytes(iqt[2u * k + 1u]) * iq_signs(s >> 4);
}
#elif defined(IQ3_XXS)
// IQ3_XXS: f16 d, 64 bytes of 8-bit grid indices (one per 4 weights), then
// per 32 weights a uint32 of four 7-bit sign indices and a 4-bit scale
// (top nibble). w = d·(0.5+ls)/2 · grid · sign (dequantize_row_iq3_xxs).
const uint BLOCK_BYTES = 98u, SIGNS = 256u;
void dq8(uint bb, uint g, out vec4 lo, out vec4 hi) {
	const uint ib = g >> 2, l = g & 3u;
	const uint aux = iq_u32(bb + 66u + 4u * ib);
	const float db = (w_f16(bb) * (0.5 + float(aux >> 28))) * 0.5;
	const uint s = iqt[SIGNS + ((aux >> (7u * l)) & 127u)];
	const uint k = w_u16(bb + 2u + 2u * g);
	lo = db * iq_ubytes(iqt[k & 0xFFu]) * iq_signs(s);
	hi = db * iq_ubytes(iqt[k >> 8]) * iq_signs(s >> 4);
}
#elif defined(IQ3_S)
// IQ3_S: f16 d, 64 bytes of the low 8 bits of 9-bit grid indices (one per
// 4 weights), 8 bytes of their high bits (one byte per 32), 32 plain sign
// bytes, 4 bytes of 4-bit scales (two per byte). w = d·(1+2ls) · grid ·
// sign (dequantize_row_iq3_s).
const uint BLOCK_BYTES = 110u;
void dq8(uint bb, uint g, out vec4 lo, out vec4 hi) {
	const uint ib = g >> 2, l = g & 3u;
	const float db = w_f16(bb) * float(1u + 2u * ((w_u8(bb + 106u + (ib >> 1)) >> (4u * (ib & 1u))) & 15u));
	const uint qh = w_u8(bb + 66u + ib);
	const uint k = w_u16(bb + 2u + 2u * g);
	const uint k0 = (k & 0xFFu) | ((qh << (8u - 2u * l)) & 256u);
	const uint k1 = (k >> 8) | ((qh << (7u - 2u * l)) & 256u);
	const uint s = w_u8(bb + 74u + g);
	lo = db * iq_ubytes(iqt[k0]) * iq_signs(s);
	hi = db * iq_ubytes(iqt[k1]) * iq_signs(s >> 4);
}
#elif defined(IQ1_S)
// IQ1_S: f16 d, 32 bytes of the low 8 bits of 11-bit grid indices, then
// per 32 weights a uint16: the 4 high 3-bit parts (bits 3l..3l+2), a 3-bit
// scale (bits 12-14) and the sign of the ±1/8 shift (bit 15).
// w = d·(2ls+1) · (grid ± 1/8) (dequantize_row_iq1_s).
const uint BLOCK_BYTES = 50u;
void dq8(uint bb, uint g, out vec4 lo, out vec4 hi) {
	const uint ib = g >> 2, l = g & 3u;
	const uint qh = w_u16(bb + 34u + 2u * ib);
	const float dl = w_f16(bb) * float(2u * ((qh >> 12) & 7u) + 1u);
	const float delta = (qh & 0x8000u) != 0u ? -0.125 : 0.125;
	const uint k = w_u8(bb + 2u + g) | (((qh >> (3u * l)) & 7u) << 8);
	lo = dl * (iq_sbytes(iqt[2u * k]) + delta);
	hi = dl * (iq_sbytes(iqt[2u * k + 1u]) + delta);
}
#elif defined(IQ1_M)
// IQ1_M: 32 bytes of the low 8 bits of 11-bit grid indices, 16 bytes qh
// (per 16 weights: the high 3 bits of two indices in bits 0-2 and 4-6,
// their shift signs in bits 3 and 7), then four uint16s of two 3-bit
// scales per 16 weights (bits 3m..3m+2) whose top nibbles hold the f16
// super-block scale. w = d·(2ls+1) · (grid ± 1/8) (dequantize_row_iq1_m).
const uint BLOCK_BYTES = 56u;
void dq8(uint bb, uint g, out vec4 lo, out vec4 hi) {
	const uint ib = g >> 2, l = g & 3u;
	const uint s0 = w_u16(bb + 48u), s1 = w_u16(bb + 50u), s2 = w_u16(bb + 52u), s3 = w_u16(bb + 54u);
	const float d = unpackHalf2x16((s0 >> 12) | ((s1 >> 8) & 0xF0u) | ((s2 >> 4) & 0xF00u) | (s3 & 0xF000u)).x;
	const uint sc = w_u16(bb + 48u + 2u * (ib >> 1));
	const float dl = d * float(2u * ((sc >> (6u * (ib & 1u) + 3u * (l >> 1))) & 7u) + 1u);
	const uint qh = w_u8(bb + 32u + 2u * ib + (l >> 1)) >> (4u * (l & 1u));
	const float delta = (qh & 8u) != 0u ? -0.125 : 0.125;
	const uint k = w_u8(bb + g) | ((qh & 7u) << 8);
	lo = dl * (iq_sbytes(iqt[2u * k]) + delta);
	hi = dl * (iq_sbytes(iqt[2u * k + 1u]) + delta);
}
#else
#error "iq_dequant.glsl: define one of IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M"
#endif
