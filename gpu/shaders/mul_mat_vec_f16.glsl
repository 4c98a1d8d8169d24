// Matrix-vector product, F16 weights against F32 activations. Slot k of a
// row takes its weights 8k..8k+7 (four 4-byte reads: rows start 2-byte
// aligned at least, w_u32), its 8 activations read once for all NUM_ROWS
// rows; the last cols mod 8 weights go one by one.
#define ROWS_DOT
#include "mul_mat_vec_head.glsl"

void rows_dot(uint tid) {
	const uint nslot = p.cols / 8u;
	for (uint s = tid; s < nslot; s += BLOCK) {
		vec4 xa[NUM_COLS], xb[NUM_COLS];
		for (uint c = 0; c < NUM_COLS; c++) {
			const uint xi = x_vec(c) + 8u * s;
			xa[c] = x4(xi);
			xb[c] = x4(xi + 4u);
		}
		for (uint r = 0; r < NUM_ROWS; r++) {
			const uint bb = w_row_byte(r) + 16u * s;
			const vec4 wa = vec4(unpackHalf2x16(w_u32(bb)), unpackHalf2x16(w_u32(bb + 4u)));
			const vec4 wb = vec4(unpackHalf2x16(w_u32(bb + 8u)), unpackHalf2x16(w_u32(bb + 12u)));
			for (uint c = 0; c < NUM_COLS; c++) {
				acc[r][c] += dot(wa, xa[c]) + dot(wb, xb[c]);
			}
		}
	}
	for (uint i = 8u * nslot + tid; i < p.cols; i += BLOCK) {
		for (uint r = 0; r < NUM_ROWS; r++) {
			const float wv = w_f16(w_row_byte(r) + 2u * i);
			for (uint c = 0; c < NUM_COLS; c++) {
				acc[r][c] = fma(wv, x[x_vec(c) + i], acc[r][c]);
			}
		}
	}
}
