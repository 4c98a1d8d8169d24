// Matrix-vector product, Q8_0 weights against F32 activations. A Q8_0
// block (34 bytes, 32 weights) holds an f16 scale d and 32 int8 quants;
// weight = d·q (ggml's dequantize_row_q8_0). Blocks are only 2-byte
// aligned (w_u32).
//
// Four slots share a block, slot k taking its quants 8k..8k+7: the
// slot's 8 activations are read once for all NUM_ROWS rows.
#define ROWS_DOT
#include "mul_mat_vec_head.glsl"

void rows_dot(uint tid) {
	const uint nslot = 4u * (p.cols / 32u);
	for (uint s = tid; s < nslot; s += BLOCK) {
		const uint i = s >> 2, k = s & 3u;
		vec4 xa[NUM_COLS], xb[NUM_COLS];
		for (uint c = 0; c < NUM_COLS; c++) {
			const uint xi = x_vec(c) + 32u * i + 8u * k;
			xa[c] = x4(xi);
			xb[c] = x4(xi + 4u);
		}
		for (uint r = 0; r < NUM_ROWS; r++) {
			const uint bb = w_row_byte(r) + 34u * i;
			const float d = w_f16(bb);
			const vec4 qa = sbytes4(w_u32(bb + 2u + 8u * k)), qb = sbytes4(w_u32(bb + 6u + 8u * k));
			for (uint c = 0; c < NUM_COLS; c++) {
				acc[r][c] = fma(d, dot(qa, xa[c]) + dot(qb, xb[c]), acc[r][c]);
			}
		}
	}
}
