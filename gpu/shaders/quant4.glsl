// quant4.glsl: decoding helpers of the MXFP4, IQ4_NL, IQ4_XS, Q4_1, Q5_0,
// Q5_1, Q2_K and Q3_K shaders (mat-vec and matrix-matrix), included after
// mul_mat_vec_head.glsl or mm_head.glsl (it reads their W buffer).

// w_word reads the 4 bytes at any byte offset b, low byte first (MXFP4's
// 17-byte blocks start at any offset): one word, or parts of two.
uint w_word(uint b) {
	const uint i = b >> 2, s = (b & 3u) * 8u;
	if (s == 0u) {
		return w[i];
	}
	return (w[i] >> s) | (w[i + 1u] << (32u - s));
}

// The 16 levels of IQ4_NL and IQ4_XS (ggml's kvalues_iq4nl: -127, -104,
// -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113) and of
// MXFP4 (ggml's kvalues_mxfp4, the E2M1 values doubled: 0, 1, 2, 3, 4, 6,
// 8, 12 and their negatives) as int8 bytes, four to a word, level i in
// byte i&3 of word i>>2.
const uvec4 KV_IQ4NL = uvec4(0xBFAD9881u, 0xF6EADDCFu, 0x26190D01u, 0x71594535u);
const uvec4 KV_MXFP4 = uvec4(0x03020100u, 0x0C080604u, 0xFDFEFF00u, 0xF4F8FAFCu);

// lut16 maps four 4-bit codes to their levels in the table kv. It selects
// the word by the code's two high bits and shifts out the byte, all in
// vector operations: a lane-indexed array would be read lane by lane on a
// CPU device (lavapipe).
vec4 lut16(uvec4 c, uvec4 kv) {
	const bvec4 b2 = notEqual(c & 4u, uvec4(0u)), b3 = notEqual(c & 8u, uvec4(0u));
	const uvec4 wv = mix(mix(uvec4(kv.x), uvec4(kv.y), b2), mix(uvec4(kv.z), uvec4(kv.w), b2), b3);
	return vec4(ivec4(wv << (24u - 8u * (c & 3u))) >> 24);
}

// lo_codes and hi_codes are the low and high nibbles of the four bytes
// of q, low byte first.
uvec4 lo_codes(uint q) { return (uvec4(q) >> uvec4(0u, 8u, 16u, 24u)) & 0xFu; }
uvec4 hi_codes(uint q) { return (uvec4(q) >> uvec4(4u, 12u, 20u, 28u)) & 0xFu; }

// e8m0_half is half an MXFP4 block's E8M0 scale, 2^(e-128) (ggml's
// GGML_E8M0_TO_FP32_HALF: the half undoes the doubled levels); e < 2
// gives the subnormals 2^-128 and 2^-127.
float e8m0_half(uint e) {
	return e < 2u ? uintBitsToFloat(0x00200000u << e) : uintBitsToFloat((e - 1u) << 23);
}

// bits4 spreads bits 0..3 of h to bit 0 of bytes 0..3 (the fifth bits of
// Q5_0 and Q5_1 for four consecutive weights).
uint bits4(uint h) {
	return (h & 1u) | ((h & 2u) << 7) | ((h & 4u) << 14) | ((h & 8u) << 21);
}
