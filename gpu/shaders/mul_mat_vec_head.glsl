// mul_mat_vec_head.glsl: bindings, push constants and the row reduction
// shared by the matrix-vector shaders (one per weight type, as
// ggml-vulkan's mul_mat_vec*.comp). Each workgroup of BLOCK threads makes
// NUM_ROWS outputs of one activation vector: every thread accumulates its
// share of each row's dot product (row_dot, defined by the including shader
// before main), then a shared-memory tree adds the BLOCK partial sums.
//
// Workgroup (x, y, z): rows first = NUM_ROWS·(y·numGroups.x + x) (two
// dimensions so that large vocabularies stay under the 65535-group limit),
// z is the activation vector.

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint BLOCK = 32;   // threads, a power of two
layout(constant_id = 1) const uint NUM_ROWS = 1; // rows per workgroup

// The weights as 32-bit words: block layouts are read byte by byte so no
// 8- or 16-bit storage feature is needed.
layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
	uint rows;      // output rows
	uint cols;      // weights per row
	uint row_bytes; // bytes per weight row
	uint w_off;     // byte offset of row 0 in W
	uint x_off;     // float offset of vector 0 in X (vector t at x_off + t·cols)
	uint y_off;     // float offset of output 0 in Y (vector t at y_off + t·rows)
} p;

// Byte-addressed reads of W; b is a byte offset.
uint w_u8(uint b) { return (w[b >> 2] >> ((b & 3u) * 8u)) & 0xFFu; }
uint w_u16(uint b) { return (w[b >> 2] >> ((b & 2u) * 8u)) & 0xFFFFu; } // b even
float w_f16(uint b) { return unpackHalf2x16(w_u16(b)).x; }

shared float red[BLOCK * NUM_ROWS];

float row_dot(uint rb, uint xb, uint tid);

void main() {
	const uint first = NUM_ROWS * (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x);
	if (first >= p.rows) {
		return; // the whole workgroup leaves: no barrier is skipped by part of it
	}
	const uint tid = gl_LocalInvocationID.x;
	const uint xb = p.x_off + gl_WorkGroupID.z * p.cols;
	for (uint r = 0; r < NUM_ROWS; r++) {
		const uint row = first + r;
		red[r * BLOCK + tid] = row < p.rows ? row_dot(p.w_off + row * p.row_bytes, xb, tid) : 0.0;
	}
	barrier();
	for (uint s = BLOCK / 2; s > 0; s >>= 1) {
		if (tid < s) {
			for (uint r = 0; r < NUM_ROWS; r++) {
				red[r * BLOCK + tid] += red[r * BLOCK + tid + s];
			}
		}
		barrier();
	}
	if (tid == 0) {
		for (uint r = 0; r < NUM_ROWS && first + r < p.rows; r++) {
			y[p.y_off + gl_WorkGroupID.z * p.rows + first + r] = red[r * BLOCK];
		}
	}
}
