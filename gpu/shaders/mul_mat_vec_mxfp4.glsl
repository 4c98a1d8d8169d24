// Matrix-vector product, MXFP4 weights against F32 activations quantized
// to Q8_0 first, as ggml's CPU product does (MXFP4's vec_dot_type is
// Q8_0; ggml_vec_dot_mxfp4_q8_0). An MXFP4 block (17 bytes, 32 weights)
// holds an E8M0 scale byte e and 16 bytes of FP4 E2M1 codes laid out as
// Q4_0's (byte j: weight j low, j+16 high); weight = 2^(e-128)·
// kvalues_mxfp4[code] (ggml's dequantize_row_mxfp4). Blocks start at any
// byte (w_word).
//
// Each invocation takes whole blocks: it quantizes the block's 32
// activations of each vector (q8_0_quant.glsl, bit for bit as the CPU),
// then for every row adds fp16(d)·2^(e-128)·Σ level·q, the sum of
// integers (at most 32·12·128 in magnitude, exact in float32).
#define ROWS_DOT
#include "mul_mat_vec_head.glsl"
#include "quant4.glsl"
#include "q8_0_quant.glsl"

void rows_dot(uint tid) {
	const uint nb = p.cols / 32u;
	for (uint i = tid; i < nb; i += BLOCK) {
		// the block's activations of each vector as Q8_0: xq[c][k] holds
		// quants 4k..4k+3, xd[c] the scale
		vec4 xq[NUM_COLS][8];
		float xd[NUM_COLS];
		for (uint c = 0; c < NUM_COLS; c++) {
			const uint xi = x_vec(c) + 32u * i;
			vec4 xv[8];
			uint amax = 0u;
			for (uint k = 0; k < 8u; k++) {
				xv[k] = x4(xi + 4u * k);
				amax = amax_bits(amax_bits(amax_bits(amax_bits(amax, xv[k].x), xv[k].y), xv[k].z), xv[k].w);
			}
			uint h;
			float id;
			q8_scales(amax, h, id);
			xd[c] = unpackHalf2x16(h).x;
			for (uint k = 0; k < 8u; k++) {
				precise const vec4 f = xv[k] * id;
				xq[c][k] = vec4(q8(f.x), q8(f.y), q8(f.z), q8(f.w));
			}
		}
		for (uint r = 0; r < NUM_ROWS; r++) {
			const uint bb = w_row_byte(r) + 17u * i;
			const float e = e8m0_half(w_u8(bb));
			float s[NUM_COLS];
			for (uint c = 0; c < NUM_COLS; c++) {
				s[c] = 0.0;
			}
			for (uint k = 0; k < 4u; k++) {
				const uint q = w_word(bb + 1u + 4u * k);
				const vec4 qa = lut16(lo_codes(q), KV_MXFP4), qb = lut16(hi_codes(q), KV_MXFP4);
				for (uint c = 0; c < NUM_COLS; c++) {
					s[c] += dot(qa, xq[c][k]) + dot(qb, xq[c][k + 4u]);
				}
			}
			for (uint c = 0; c < NUM_COLS; c++) {
				acc[r][c] += (xd[c] * e) * s[c];
			}
		}
	}
}
