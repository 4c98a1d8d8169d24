// Matrix-vector product, MXFP4 weights against F32 activations. An MXFP4
// block (17 bytes, 32 weights) holds an E8M0 scale byte e and 16 bytes of
// FP4 E2M1 codes laid out as Q4_0's (byte j: weight j low, j+16 high);
// weight = 2^(e-128)·kvalues_mxfp4[code] (ggml's dequantize_row_mxfp4).
// Blocks start at any byte (w_word).
//
// Four slots share a block, slot k taking code bytes 4k..4k+3 (weights
// 4k..4k+3 and 4k+16..4k+19): the slot's 8 activations are read once for
// all NUM_ROWS rows.
#define ROWS_DOT
#include "mul_mat_vec_head.glsl"
#include "quant4.glsl"

void rows_dot(uint tid) {
	const uint nslot = 4u * (p.cols / 32u);
	for (uint s = tid; s < nslot; s += BLOCK) {
		const uint i = s >> 2, k = s & 3u;
		vec4 xa[NUM_COLS], xb[NUM_COLS];
		for (uint c = 0; c < NUM_COLS; c++) {
			const uint xi = x_vec(c) + 32u * i + 4u * k;
			xa[c] = x4(xi);
			xb[c] = x4(xi + 16u);
		}
		for (uint r = 0; r < NUM_ROWS; r++) {
			const uint bb = w_row_byte(r) + 17u * i;
			const float d = e8m0_half(w_u8(bb));
			const uint q = w_word(bb + 1u + 4u * k);
			const vec4 qa = lut16(lo_codes(q), KV_MXFP4), qb = lut16(hi_codes(q), KV_MXFP4);
			for (uint c = 0; c < NUM_COLS; c++) {
				acc[r][c] = fma(d, dot(qa, xa[c]) + dot(qb, xb[c]), acc[r][c]);
			}
		}
	}
}
