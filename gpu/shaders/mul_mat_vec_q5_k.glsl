// Matrix-vector product, Q5_K weights against F32 activations. A Q5_K
// super-block (176 bytes, 256 weights) holds f16 d and dmin, 12 bytes of
// packed 6-bit scales and mins (as Q4_K), 32 bytes qh of fifth bits and
// 128 bytes of 4-bit quants: sub-block s (32 weights) takes the low (s
// even) or high nibble of chunk s/2 and bit s of qh[l]; weight =
// d·sc·q - dmin·m (ggml's dequantize_row_q5_K).
//
// The work is split as Q4_K's (mul_mat_vec_q4_k.comp): slot (v, l) of a
// super-block takes quant words l of chunks v and v+2 and qh word l, 16
// weights of sub-blocks 2v, 2v+1, 2v+4 and 2v+5; its activations are read
// once for all NUM_ROWS rows.
#define ROWS_DOT
#include "mul_mat_vec_head.glsl"

void rows_dot(uint tid) {
	const uint nslot = 16u * (p.cols / 256u);
	for (uint s = tid; s < nslot; s += BLOCK) {
		const uint i = s >> 4, v = (s >> 3) & 1u, l = s & 7u;
		const uint xo = 256u * i + 64u * v + 4u * l; // sub-block 2v's 4 activations
		vec4 xa[NUM_COLS], xb[NUM_COLS], xc[NUM_COLS], xd[NUM_COLS], xs[NUM_COLS];
		for (uint c = 0; c < NUM_COLS; c++) {
			const uint xi = x_vec(c) + xo;
			xa[c] = x4(xi);        // sub-block 2v
			xb[c] = x4(xi + 32u);  // 2v+1
			xc[c] = x4(xi + 128u); // 2v+4
			xd[c] = x4(xi + 160u); // 2v+5
			xs[c] = vec4(sum4(xa[c]), sum4(xb[c]), sum4(xc[c]), sum4(xd[c]));
		}
		const uint sh = 16u * v;
		for (uint r = 0; r < NUM_ROWS; r++) {
			const uint wb = w_row(r) + 44u * i; // 176 bytes a super-block
			const vec2 dm = unpackHalf2x16(w[wb]);
			// scales and mins of sub-blocks 2v, 2v+1, 2v+4, 2v+5 (ggml's
			// get_scale_min_k4; see mul_mat_vec_q4_k.comp)
			const uint a = w[wb + 1u] >> sh, b = w[wb + 2u] >> sh, e = w[wb + 3u] >> sh;
			const vec4 sc = vec4(a & 63u, (a >> 8) & 63u, (e & 0xFu) | ((a >> 2) & 0x30u), ((e >> 8) & 0xFu) | ((a >> 10) & 0x30u));
			const vec4 mn = vec4(b & 63u, (b >> 8) & 63u, ((e >> 4) & 0xFu) | ((b >> 2) & 0x30u), ((e >> 12) & 0xFu) | ((b >> 10) & 0x30u));
			const uint h = w[wb + 4u + l] >> (2u * v); // bits 2v, 2v+1, 2v+4, 2v+5 at 0, 1, 4, 5 of each byte
			const uint q0 = w[wb + 12u + 8u * v + l], q1 = w[wb + 28u + 8u * v + l];
			const vec4 qa = bytes4((q0 & 0x0F0F0F0Fu) | ((h << 4) & 0x10101010u));
			const vec4 qb = bytes4(((q0 >> 4) & 0x0F0F0F0Fu) | ((h << 3) & 0x10101010u));
			const vec4 qc = bytes4((q1 & 0x0F0F0F0Fu) | (h & 0x10101010u));
			const vec4 qd = bytes4(((q1 >> 4) & 0x0F0F0F0Fu) | ((h >> 1) & 0x10101010u));
			for (uint c = 0; c < NUM_COLS; c++) {
				const vec4 d4 = vec4(dot(qa, xa[c]), dot(qb, xb[c]), dot(qc, xc[c]), dot(qd, xd[c]));
				acc[r][c] += dm.x * dot(sc, d4) - dm.y * dot(mn, xs[c]);
			}
		}
	}
}
