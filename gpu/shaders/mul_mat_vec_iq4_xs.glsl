// Matrix-vector product, IQ4_XS weights against F32 activations. An
// IQ4_XS super-block (136 bytes, 256 weights) holds an f16 d, a 16-bit
// scales_h (bits 2b, 2b+1: the high bits of sub-block b's scale), 4 bytes
// scales_l (nibble b&1 of byte b>>1: the low bits) and 128 bytes of 4-bit
// codes, 16 per sub-block of 32 laid out as IQ4_NL's; weight =
// d·(ls - 32)·kvalues_iq4nl[code] (ggml's dequantize_row_iq4_xs). Rows are
// whole words.
//
// 16 slots share a super-block, slot (b, h) taking code words 2h and
// 2h+1 of sub-block b: weights 8h..8h+7 and 8h+16..8h+23 of it, whose 16
// activations are read once for all NUM_ROWS rows.
#define ROWS_DOT
#include "mul_mat_vec_head.glsl"
#include "quant4.glsl"

void rows_dot(uint tid) {
	const uint nslot = 16u * (p.cols / 256u);
	for (uint s = tid; s < nslot; s += BLOCK) {
		const uint i = s >> 4, b = (s >> 1) & 7u, h = s & 1u;
		vec4 xa[NUM_COLS], xb[NUM_COLS], xc[NUM_COLS], xd[NUM_COLS];
		for (uint c = 0; c < NUM_COLS; c++) {
			const uint xi = x_vec(c) + 256u * i + 32u * b + 8u * h;
			xa[c] = x4(xi);
			xb[c] = x4(xi + 4u);
			xc[c] = x4(xi + 16u);
			xd[c] = x4(xi + 20u);
		}
		for (uint r = 0; r < NUM_ROWS; r++) {
			const uint wb = w_row(r) + 34u * i; // 136 bytes a super-block
			const uint w0 = w[wb];
			const float d = unpackHalf2x16(w0).x;
			const uint ls = ((w[wb + 1u] >> (4u * b)) & 0xFu) | (((w0 >> (16u + 2u * b)) & 3u) << 4);
			const uint q0 = w[wb + 2u + 4u * b + 2u * h], q1 = w[wb + 3u + 4u * b + 2u * h];
			const vec4 qa = lut16(lo_codes(q0), KV_IQ4NL), qb = lut16(lo_codes(q1), KV_IQ4NL);
			const vec4 qc = lut16(hi_codes(q0), KV_IQ4NL), qd = lut16(hi_codes(q1), KV_IQ4NL);
			const float dl = d * float(int(ls) - 32);
			for (uint c = 0; c < NUM_COLS; c++) {
				acc[r][c] = fma(dl, (dot(qa, xa[c]) + dot(qb, xb[c])) + (dot(qc, xc[c]) + dot(qd, xd[c])), acc[r][c]);
			}
		}
	}
}
