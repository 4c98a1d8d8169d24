// Matrix-vector product, Q5_1 weights against F32 activations. A Q5_1
// block (24 bytes, 32 weights) holds an f16 scale d, an f16 offset m, a
// 32-bit word qh of fifth bits (bit j for weight j) and 16 bytes of low
// nibbles as Q4_1's; weight = d·q + m (ggml's dequantize_row_q5_1). Rows
// are whole words.
//
// Four slots share a block, slot k taking quant word k (weights 4k..4k+3
// and 4k+16..4k+19), as mul_mat_vec_q4_1.comp.
#define ROWS_DOT
#include "mul_mat_vec_head.glsl"
#include "quant4.glsl"

void rows_dot(uint tid) {
	const uint nslot = 4u * (p.cols / 32u);
	for (uint s = tid; s < nslot; s += BLOCK) {
		const uint i = s >> 2, k = s & 3u;
		vec4 xa[NUM_COLS], xb[NUM_COLS];
		float xs[NUM_COLS];
		for (uint c = 0; c < NUM_COLS; c++) {
			const uint xi = x_vec(c) + 32u * i + 4u * k;
			xa[c] = x4(xi);
			xb[c] = x4(xi + 16u);
			xs[c] = sum4(xa[c]) + sum4(xb[c]);
		}
		for (uint r = 0; r < NUM_ROWS; r++) {
			const uint wb = w_row(r) + 6u * i; // 24 bytes a block
			const vec2 dm = unpackHalf2x16(w[wb]);
			const uint qh = w[wb + 1u] >> (4u * k);
			const uint q = w[wb + 2u + k];
			const vec4 qa = bytes4((q & 0x0F0F0F0Fu) | (bits4(qh) << 4));
			const vec4 qb = bytes4(((q >> 4) & 0x0F0F0F0Fu) | (bits4(qh >> 16) << 4));
			for (uint c = 0; c < NUM_COLS; c++) {
				acc[r][c] += dm.x * (dot(qa, xa[c]) + dot(qb, xb[c])) + dm.y * xs[c];
			}
		}
	}
}
