// Matrix-vector product, Q2_K weights against F32 activations. A Q2_K
// super-block (84 bytes, 256 weights) holds 16 scale bytes (low nibble a
// 4-bit scale, high nibble a 4-bit min, one per 16 weights), 64 bytes of
// 2-bit quants and f16 d and dmin. Each 128-weight half h has four groups
// of 32: group g takes bits 2g..2g+1 of qs[32h + l] and scale byte
// 8h + 2g + l/16; weight = d·sc·q - dmin·m (ggml's dequantize_row_q2_K).
// Rows are whole words.
//
// As ggml-vulkan's mul_mat_vec_q2_k, 16 slots share a super-block: slot
// (h, k) takes quant word k of half h (l = 4k..4k+3), 4 weights of each
// group, so its 16 activations and their four sums are read once for all
// NUM_ROWS rows.
#define ROWS_DOT
#include "mul_mat_vec_head.glsl"

void rows_dot(uint tid) {
	const uint nslot = 16u * (p.cols / 256u);
	for (uint s = tid; s < nslot; s += BLOCK) {
		const uint i = s >> 4, h = (s >> 3) & 1u, k = s & 7u;
		const uint xo = 256u * i + 128u * h + 4u * k; // group 0's 4 activations
		vec4 xa[NUM_COLS], xb[NUM_COLS], xc[NUM_COLS], xd[NUM_COLS], xs[NUM_COLS];
		for (uint c = 0; c < NUM_COLS; c++) {
			const uint xi = x_vec(c) + xo;
			xa[c] = x4(xi);       // group 0
			xb[c] = x4(xi + 32u); // 1
			xc[c] = x4(xi + 64u); // 2
			xd[c] = x4(xi + 96u); // 3
			xs[c] = vec4(sum4(xa[c]), sum4(xb[c]), sum4(xc[c]), sum4(xd[c]));
		}
		const uint sh = 8u * (k >> 2); // l/16: which scale byte of each group
		for (uint r = 0; r < NUM_ROWS; r++) {
			const uint wb = w_row(r) + 21u * i; // 84 bytes a super-block
			// scale bytes 8h + 2g + l/16 for g = 0..3
			const uint s0 = w[wb + 2u * h] >> sh, s1 = w[wb + 2u * h + 1u] >> sh;
			const uvec4 sm = uvec4(s0, s0 >> 16, s1, s1 >> 16) & 0xFFu;
			const vec4 sc = vec4(sm & 0xFu), mn = vec4(sm >> 4);
			const vec2 dm = unpackHalf2x16(w[wb + 20u]);
			const uint q = w[wb + 4u + 8u * h + k];
			const vec4 qa = bytes4(q & 0x03030303u), qb = bytes4((q >> 2) & 0x03030303u);
			const vec4 qc = bytes4((q >> 4) & 0x03030303u), qd = bytes4((q >> 6) & 0x03030303u);
			for (uint c = 0; c < NUM_COLS; c++) {
				const vec4 d4 = vec4(dot(qa, xa[c]), dot(qb, xb[c]), dot(qc, xc[c]), dot(qd, xd[c]));
				acc[r][c] += dm.x * dot(sc, d4) - dm.y * dot(mn, xs[c]);
			}
		}
	}
}
