// Matrix-vector product, Q4_K weights against F32 activations. A Q4_K
// super-block (144 bytes, 256 weights) holds f16 d and dmin, 12 bytes of
// packed 6-bit scales and mins for its 8 sub-blocks of 32, and 128 bytes of
// 4-bit quants: byte l of chunk c (32 bytes) holds sub-block 2c in its low
// nibble and 2c+1 in its high one. weight = d·sc·q - dmin·m (ggml's
// dequantize_row_q4_K).
//
// The work is split as ggml-vulkan's mul_mat_vec_q4_k splits it: 16 slots
// per super-block, slot (v, l) taking quant words l of chunks v and v+2
// (v < 2, l < 8): 16 weights of sub-blocks 2v, 2v+1, 2v+4 and 2v+5, 4 of
// each, consecutive. A slot reads its 16 activations once for all NUM_ROWS
// rows and their four sums (for the mins) once, and each row's scales and
// quants as whole 32-bit words.
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
			const uint wb = w_row(r) + 36u * i; // 144 bytes a super-block
			const vec2 dm = unpackHalf2x16(w[wb]);
			// bytes 2v, 2v+1 of the scales (scales of sub-blocks 2v, 2v+1
			// and the top bits of 2v+4, 2v+5), of the mins, and of the low
			// bits of 2v+4, 2v+5 (ggml's get_scale_min_k4)
			const uint a = w[wb + 1u] >> sh, b = w[wb + 2u] >> sh, e = w[wb + 3u] >> sh;
			const vec4 sc = vec4(a & 63u, (a >> 8) & 63u, (e & 0xFu) | ((a >> 2) & 0x30u), ((e >> 8) & 0xFu) | ((a >> 10) & 0x30u));
			const vec4 mn = vec4(b & 63u, (b >> 8) & 63u, ((e >> 4) & 0xFu) | ((b >> 2) & 0x30u), ((e >> 12) & 0xFu) | ((b >> 10) & 0x30u));
			const uint q0 = w[wb + 4u + 8u * v + l], q1 = w[wb + 20u + 8u * v + l];
			const vec4 qa = bytes4(q0 & 0x0F0F0F0Fu), qb = bytes4((q0 >> 4) & 0x0F0F0F0Fu);
			const vec4 qc = bytes4(q1 & 0x0F0F0F0Fu), qd = bytes4((q1 >> 4) & 0x0F0F0F0Fu);
			for (uint c = 0; c < NUM_COLS; c++) {
				const vec4 d4 = vec4(dot(qa, xa[c]), dot(qb, xb[c]), dot(qc, xc[c]), dot(qd, xd[c]));
				acc[r][c] += dm.x * dot(sc, d4) - dm.y * dot(mn, xs[c]);
			}
		}
	}
}
