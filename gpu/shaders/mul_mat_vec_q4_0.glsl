// Matrix-vector product, Q4_0 weights against F32 activations. A Q4_0
// block (18 bytes, 32 weights) holds an f16 scale d and 16 bytes of
// quants: byte j's low nibble is weight j, its high nibble weight j+16;
// weight = d·(q - 8) (ggml's dequantize_row_q4_0). Blocks are only 2-byte
// aligned (w_u32).
//
// Four slots share a block, slot k taking quant bytes 4k..4k+3 (weights
// 4k..4k+3 and 4k+16..4k+19): the slot's 8 activations and their sum are
// read once for all NUM_ROWS rows.
#define ROWS_DOT
#include "mul_mat_vec_head.glsl"

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
			const uint bb = w_row_byte(r) + 18u * i;
			const float d = w_f16(bb);
			const uint q = w_u32(bb + 2u + 4u * k);
			const vec4 qa = bytes4(q & 0x0F0F0F0Fu), qb = bytes4((q >> 4) & 0x0F0F0F0Fu);
			for (uint c = 0; c < NUM_COLS; c++) {
				// Σ(q-8)·x = Σq·x - 8·Σx
				acc[r][c] = fma(d, dot(qa, xa[c]) + dot(qb, xb[c]) - 8.0 * xs[c], acc[r][c]);
			}
		}
	}
}
