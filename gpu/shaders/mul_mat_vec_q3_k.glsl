// Matrix-vector product, Q3_K weights against F32 activations. A Q3_K
// super-block (110 bytes, 256 weights) holds 32 bytes hmask of high bits,
// 64 bytes qs of 2-bit low parts, 12 bytes of packed 6-bit scales (one per
// 16 weights, stored +32) and an f16 d. Each 128-weight half h has four
// groups of 32: group g takes bits 2g..2g+1 of qs[32h + l], bit 4h + g of
// hmask[l] and scale 8h + 2g + l/16; q3 = low + 4·high - 4 in [-4, 3],
// weight = d·(scale - 32)·q3 (ggml's dequantize_row_q3_K). Blocks are only
// 2-byte aligned (w_u32).
//
// As ggml-vulkan's mul_mat_vec_q3_k, 16 slots share a super-block: slot
// (h, k) takes l = 4k..4k+3 of half h, 4 weights of each group, so its 16
// activations and their four sums are read once for all NUM_ROWS rows.
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
		const uint sh = 8u * (k >> 2); // l/16: which scale of each group
		for (uint r = 0; r < NUM_ROWS; r++) {
			const uint bb = w_row_byte(r) + 110u * i;
			// Scales 8h + 2g + l/16 (g = 0..3), as ggml's kmask unpacking:
			// scale j < 8 has low bits in byte j's low nibble, j ≥ 8 in byte
			// j-8's high one, and high bits 2·(j/4) of byte 8 + j%4. Half h's
			// scales 8h..8h+3 are bytes of sa, 8h+4..8h+7 of sb.
			const uint a0 = w_u32(bb + 96u), a1 = w_u32(bb + 100u), t = w_u32(bb + 104u);
			const uint sa = ((a0 >> (4u * h)) & 0x0F0F0F0Fu) | (((t >> (4u * h)) & 0x03030303u) << 4);
			const uint sb = ((a1 >> (4u * h)) & 0x0F0F0F0Fu) | (((t >> (4u * h + 2u)) & 0x03030303u) << 4);
			const vec4 sc = vec4((uvec4(sa, sa >> 16, sb, sb >> 16) >> sh) & 0xFFu) - 32.0;
			const float d = w_f16(bb + 108u);
			const uint q = w_u32(bb + 32u + 32u * h + 4u * k);
			const uint hm = w_u32(bb + 4u * k) >> (4u * h); // bit g of each byte: group g's high bit
			const vec4 qa = bytes4((q & 0x03030303u) | ((hm << 2) & 0x04040404u));
			const vec4 qb = bytes4(((q >> 2) & 0x03030303u) | ((hm << 1) & 0x04040404u));
			const vec4 qc = bytes4(((q >> 4) & 0x03030303u) | (hm & 0x04040404u));
			const vec4 qd = bytes4(((q >> 6) & 0x03030303u) | ((hm >> 1) & 0x04040404u));
			for (uint c = 0; c < NUM_COLS; c++) {
				// Σ(q-4)·x = Σq·x - 4·Σx
				const vec4 d4 = vec4(dot(qa, xa[c]), dot(qb, xb[c]), dot(qc, xc[c]), dot(qd, xd[c])) - 4.0 * xs[c];
				acc[r][c] += d * dot(sc, d4);
			}
		}
	}
}
