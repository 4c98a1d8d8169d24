// Matrix-vector product, Q6_K weights against F32 activations. A Q6_K
// super-block (210 bytes, 256 weights) holds 128 bytes ql of low 4-bit
// halves, 64 bytes qh of high 2-bit pairs, 16 int8 scales (one per 16
// weights) and an f16 d; weight = d·scale·(q - 32) with q = 6 bits
// (ggml's dequantize_row_q6_K). Each 128-weight half has four groups of
// 32: group g takes the low (g < 2) or high nibble of ql[(g&1)·32 + l]
// and bits 2g..2g+1 of qh[l]. Blocks are only 2-byte aligned (w_u32).
//
// As ggml-vulkan's mul_mat_vec_q6_k, 16 slots share a super-block: slot
// (h, k) takes l = 4k..4k+3 of half h, 4 weights of each group, so its 16
// activations (read once for all NUM_ROWS rows) and their sums are
// shared by the rows, and each row's quants are three 4-byte reads.
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
		const uint is = k >> 2; // l/16: which scale of each group
		for (uint r = 0; r < NUM_ROWS; r++) {
			const uint bb = w_row_byte(r) + 210u * i;
			const uint ql0 = w_u32(bb + 64u * h + 4u * k), ql1 = w_u32(bb + 64u * h + 32u + 4u * k);
			const uint qh = w_u32(bb + 128u + 32u * h + 4u * k);
			// int8 scales 8h + is + 2g
			const uint s0 = w_u32(bb + 192u + 8u * h), s1 = w_u32(bb + 196u + 8u * h);
			const vec4 sc = vec4(ivec4(uvec4(s0, s0, s1, s1) << uvec4(24u - 8u * is, 8u - 8u * is, 24u - 8u * is, 8u - 8u * is)) >> 24);
			const float d = w_f16(bb + 208u);
			const vec4 qa = bytes4((ql0 & 0x0F0F0F0Fu) | ((qh << 4) & 0x30303030u));
			const vec4 qb = bytes4((ql1 & 0x0F0F0F0Fu) | ((qh << 2) & 0x30303030u));
			const vec4 qc = bytes4(((ql0 >> 4) & 0x0F0F0F0Fu) | (qh & 0x30303030u));
			const vec4 qd = bytes4(((ql1 >> 4) & 0x0F0F0F0Fu) | ((qh >> 2) & 0x30303030u));
			for (uint c = 0; c < NUM_COLS; c++) {
				// Σ(q-32)·x = Σq·x - 32·Σx
				const vec4 d4 = vec4(dot(qa, xa[c]), dot(qb, xb[c]), dot(qc, xc[c]), dot(qd, xd[c])) - 32.0 * xs[c];
				acc[r][c] += d * dot(sc, d4);
			}
		}
	}
}
