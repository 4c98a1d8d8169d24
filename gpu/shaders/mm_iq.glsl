// mm_iq.glsl: wval4 of the lattice types' matrix-matrix shaders
// (mm_iq*.comp), after mm_head.glsl and iq_dequant.glsl: the group of 8
// holding weights k..k+3, decoded whole, its half picked. Rows are whole
// super-blocks of 256, so k < p.cols means the whole group exists.

vec4 wval4(uint rb, uint k) {
	vec4 lo, hi;
	dq8(rb + BLOCK_BYTES * (k >> 8), (k >> 3) & 31u, lo, hi);
	return (k & 4u) != 0u ? hi : lo;
}
