// mul_mat_vec_iq.glsl: rows_dot of the lattice types' matrix-vector
// shaders (mul_mat_vec_iq*.comp), after mul_mat_vec_head.glsl (ROWS_DOT)
// and iq_dequant.glsl. Sixteen slots share a super-block of 256 weights,
// slot h taking weights 16h..16h+15 (two groups of 8, whose scale is one:
// every type scales 16 weights or more alike), as ggml-vulkan's
// mul_mat_vec_iq2_xxs splits it. A slot reads its 16 activations once for
// all NUM_ROWS rows.

void rows_dot(uint tid) {
	const uint nslot = 16u * (p.cols / 256u);
	for (uint s = tid; s < nslot; s += BLOCK) {
		const uint i = s >> 4, h = s & 15u;
		vec4 xa[NUM_COLS], xb[NUM_COLS], xc[NUM_COLS], xd[NUM_COLS];
		for (uint c = 0; c < NUM_COLS; c++) {
			const uint xi = x_vec(c) + 256u * i + 16u * h;
			xa[c] = x4(xi);
			xb[c] = x4(xi + 4u);
			xc[c] = x4(xi + 8u);
			xd[c] = x4(xi + 12u);
		}
		for (uint r = 0; r < NUM_ROWS; r++) {
			const uint bb = w_row_byte(r) + BLOCK_BYTES * i;
			vec4 a, b, c4, d4;
			dq8(bb, 2u * h, a, b);
			dq8(bb, 2u * h + 1u, c4, d4);
			for (uint c = 0; c < NUM_COLS; c++) {
				acc[r][c] += (dot(a, xa[c]) + dot(b, xb[c])) + (dot(c4, xc[c]) + dot(d4, xd[c]));
			}
		}
	}
}
