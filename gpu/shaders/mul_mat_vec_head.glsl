// mul_mat_vec_head.glsl: bindings, push constants and the row reduction
// shared by the matrix-vector shaders (one per weight type, as
// ggml-vulkan's mul_mat_vec*.comp). Each workgroup of BLOCK threads makes
// NUM_ROWS outputs of each of up to NUM_COLS activation vectors: every
// thread accumulates its share of each dot product in acc, then one
// barrier and one thread per output add the BLOCK partial sums.
//
// Workgroup (x, y, z): rows first = NUM_ROWS·(y·numGroups.x + x) (two
// dimensions so that large vocabularies stay under the 65535-group limit),
// z the group of NUM_COLS activation vectors: each weight is decoded once
// and multiplied by every vector of the group (a prompt's rows), as
// ggml-vulkan's mul_mat_vec does with its NUM_COLS.
//
// A shader defines either rows_dot (ROWS_DOT defined before the include:
// the quantized and F16 shaders), which takes all NUM_ROWS rows at once so
// that each activation it reads serves every row (on lavapipe, which runs
// a workgroup's invocations as SIMD lanes of a CPU thread and reads
// per-lane addresses lane by lane, that and 32-bit weight reads instead of
// byte reads made the mat-vec 2-4 times faster: docs/decisions.md), or
// row_dot, one row at a time (F32, BF16).

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint BLOCK = 32;   // threads, a power of two
layout(constant_id = 1) const uint NUM_ROWS = 1; // rows per workgroup
layout(constant_id = 2) const uint NUM_COLS = 1; // vectors per workgroup

// The weights as 32-bit words: block layouts are read byte by byte so no
// 8- or 16-bit storage feature is needed.
layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };

#ifdef BY_ID
// Expert ids (a MoE layer's routing, left on the device by its top-k).
layout(std430, binding = 3) readonly buffer I { uint ids[]; };
#endif

layout(push_constant) uniform Push {
	uint rows;      // output rows
	uint cols;      // weights per row
	uint row_bytes; // bytes per weight row
	uint w_off;     // byte offset of row 0 in W
	uint x_off;     // float offset of vector 0 in X (vector t at x_off + t·cols)
	uint y_off;     // float offset of output 0 in Y (vector t at y_off + t·rows)
	uint n_vec;     // activation vectors
#ifdef BY_ID
	uint id_off;    // workgroup z's matrix is number ids[id_off + z] ...
	uint id_stride; // ... at w_off + that · id_stride bytes
	uint x_stride;  // workgroup z's vector at x_off + z·x_stride (0: one for all)
#endif
} p;

// The workgroup's offsets: the push constants', or with BY_ID (a MoE
// layer's experts picked on the device, NUM_COLS 1 and one vector per
// workgroup z) the matrix of expert ids[id_off + z], vector z (or the one
// vector) and output z.
uint w_off, x_off, y_off;

// Byte-addressed reads of W; b is a byte offset.
uint w_u8(uint b) { return (w[b >> 2] >> ((b & 3u) * 8u)) & 0xFFu; }
uint w_u16(uint b) { return (w[b >> 2] >> ((b & 2u) * 8u)) & 0xFFFFu; } // b even
float w_f16(uint b) { return unpackHalf2x16(w_u16(b)).x; }
// w_u32 reads 4 bytes at an even byte offset b (block types of 18, 34 or
// 210 bytes start only 2-aligned): one word, or the halves of two.
uint w_u32(uint b) {
	const uint i = b >> 2;
	if ((b & 2u) == 0u) {
		return w[i];
	}
	return (w[i] >> 16) | (w[i + 1u] << 16);
}

// bytes4 returns the bytes of v as floats, low byte first; sbytes4 as
// signed bytes.
vec4 bytes4(uint v) { return vec4((uvec4(v) >> uvec4(0u, 8u, 16u, 24u)) & 0xFFu); }
vec4 sbytes4(uint v) { return vec4(ivec4(uvec4(v) << uvec4(24u, 16u, 8u, 0u)) >> 24); }

// x4 reads 4 activations from float offset i.
vec4 x4(uint i) { return vec4(x[i], x[i + 1u], x[i + 2u], x[i + 3u]); }

// sum4 adds v's components.
float sum4(vec4 v) { return (v.x + v.y) + (v.z + v.w); }

shared float red[BLOCK * NUM_ROWS * NUM_COLS];

// The invocation's partial sums, acc[r][c] for row first+r and vector
// c0+c, and how many vectors this workgroup has (≤ NUM_COLS).
float acc[NUM_ROWS][NUM_COLS];
uint nc;
uint first, c0;

#ifdef ROWS_DOT
// rows_dot (the including shader's) adds the invocation's share of all
// NUM_ROWS·NUM_COLS dot products to acc at once, so that each activation
// read serves every row. It runs every row and vector even in the last,
// partial workgroups, reading the last row or vector again (w_row, x_vec
// clamp): the loops then have constant bounds, which the device compiler
// unrolls, and their extra results are not written.
void rows_dot(uint tid);

// w_row_byte is the first byte of the workgroup's row r, w_row its word
// (for the types whose rows start 4-aligned).
uint w_row_byte(uint r) { return w_off + min(first + r, p.rows - 1u) * p.row_bytes; }
uint w_row(uint r) { return w_row_byte(r) >> 2; }

// x_vec is the float offset of the workgroup's vector c.
uint x_vec(uint c) { return x_off + min(c0 + c, p.n_vec - 1u) * p.cols; }
#else
// row_dot (the including shader's) adds the invocation's share of row r's
// dot product with each vector c < nc to acc[r][c]; rb is the row's first
// byte, xb vector 0's first float.
void row_dot(uint r, uint rb, uint xb, uint tid);
#endif

void main() {
	first = NUM_ROWS * (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x);
	if (first >= p.rows) {
		return; // the whole workgroup leaves: no barrier is skipped by part of it
	}
	const uint tid = gl_LocalInvocationID.x;
#ifdef BY_ID
	const uint z = gl_WorkGroupID.z;
	w_off = p.w_off + ids[p.id_off + z] * p.id_stride;
	x_off = p.x_off + z * p.x_stride;
	y_off = p.y_off + z * p.rows;
	c0 = 0u;
#else
	w_off = p.w_off;
	x_off = p.x_off;
	y_off = p.y_off;
	c0 = gl_WorkGroupID.z * NUM_COLS;
#endif
	nc = min(NUM_COLS, p.n_vec - c0);
	for (uint r = 0; r < NUM_ROWS; r++) {
		for (uint c = 0; c < NUM_COLS; c++) {
			acc[r][c] = 0.0;
		}
	}
#ifdef ROWS_DOT
	rows_dot(tid);
#else
	const uint xb = x_off + c0 * p.cols;
	for (uint r = 0; r < NUM_ROWS; r++) {
		if (first + r < p.rows) {
			row_dot(r, w_off + (first + r) * p.row_bytes, xb, tid);
		}
	}
#endif
	for (uint r = 0; r < NUM_ROWS; r++) {
		for (uint c = 0; c < NUM_COLS; c++) {
			red[(r * NUM_COLS + c) * BLOCK + tid] = acc[r][c];
		}
	}
	barrier();
	// One barrier, then each output's BLOCK partial sums are added by one
	// invocation: a tree would take log2(BLOCK) barriers, each of which a
	// CPU device (lavapipe) pays for by switching every invocation out and
	// back in.
	for (uint i = tid; i < NUM_ROWS * NUM_COLS; i += BLOCK) {
		const uint r = i / NUM_COLS, c = i % NUM_COLS;
		if (first + r < p.rows && c < nc) {
			float s = 0.0;
			for (uint t = 0; t < BLOCK; t++) {
				s += red[i * BLOCK + t];
			}
			y[y_off + (c0 + c) * p.rows + first + r] = s;
		}
	}
}
