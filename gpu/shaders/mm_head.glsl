// mm_head.glsl: bindings, push constants and the tiled loop shared by the
// matrix-matrix shaders (one per weight type, mm_<type>.comp), for a
// prompt's many activation vectors at once (prefill), as ggml-vulkan's
// mul_mm.comp. Each workgroup of 256 threads makes a tile of BM output rows
// by BN vectors (tokens): per step of BK = 32 weights along a row it
// dequantizes the BM×BK weight tile into shared memory (wval4, defined by
// the including shader: four consecutive weights of a row) and copies the
// BN×BK activation tile beside it, then every thread accumulates its
// TM rows × TN vectors of outputs in float32 from the two tiles (register
// blocking: TM + TN shared-memory reads per TM·TN products). Rows, weights per row
// and vectors need not be multiples of the tile: what lies outside is
// read as zero and not written.
//
// With Q8_ACT defined before the include (MXFP4, whose CPU product
// quantizes the activations to Q8_0 first, as ggml's vec_dot_type), a
// step is one block: wval4 returns the block's integer levels and wscale
// its scale, the activation tile holds each vector's block quantized to
// Q8_0 (q8_0_quant.glsl, bit for bit as the CPU) with its fp16 scale, a
// step's products are summed as integers (exact in float32) and added
// times the two scales, as ggml's vec_dot does per block.
//
// Workgroup (x, y, z): first row = BM·(y·numGroups.x + x) (two dimensions
// so that large vocabularies stay under the 65535-group limit), z the
// group of BN vectors. The push constants are the mat-vec shaders' (the
// Go side records both the same way).

#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_ballot : require

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint BM = 128; // rows per tile
layout(constant_id = 1) const uint BN = 128; // vectors per tile
layout(constant_id = 2) const uint TM = 8;   // rows per thread
// SG: nonzero when every subgroup's lanes share one vector group cg and
// number at least TN ≤ 8 (the Go side sets it from the device's subgroup
// size): the activations are then read once per lane and broadcast, TN
// values for one shared-memory read (on lavapipe, whose lanes are SIMD
// lanes, a shared read costs about a scalar load per lane, a broadcast a
// register shuffle). 0: each thread reads its TN activations itself.
layout(constant_id = 3) const uint SG = 0;
const uint BK = 32;                         // weights per step: one block or sub-block of every quantized type
const uint THREADS = 256;
const uint RG = BM / TM;          // row groups (divides THREADS)
const uint CG = THREADS / RG;     // vector groups (divides BN)
const uint TN = BN / CG;          // vectors per thread
const uint TN_MAX = 16;           // at most (the Go side checks)
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
	uint n_vec;     // activation vectors
} p;

// Byte-addressed reads of W; b is a byte offset.
uint w_u8(uint b) { return (w[b >> 2] >> ((b & 3u) * 8u)) & 0xFFu; }
uint w_u16(uint b) { return (w[b >> 2] >> ((b & 2u) * 8u)) & 0xFFFFu; } // b even
float w_f16(uint b) { return unpackHalf2x16(w_u16(b)).x; }
int w_i8(uint b) { return int(w_u8(b) << 24) >> 24; }

// wval4 returns weights k..k+3 of the row starting at byte rb (k a
// multiple of 4, k < p.cols; weights at or past p.cols are 0).
vec4 wval4(uint rb, uint k);

#ifdef Q8_ACT
// wscale returns the scale of the block holding weight k of the row
// starting at byte rb (k < p.cols, a multiple of 32).
float wscale(uint rb, uint k);
#include "q8_0_quant.glsl"
shared float wsc[BM]; // the step's block scale of each row
shared float xsc[BN]; // the step's Q8_0 scale of each vector
#endif

// The tiles, k-major: ws[k·BM + row], xs[k·BN + vector].
shared float ws[BK * BM];
shared float xs[BK * BN];

void main() {
	const uint first = BM * (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x);
	if (first >= p.rows) {
		return; // the whole workgroup leaves: no barrier is skipped by part of it
	}
	const uint tid = gl_LocalInvocationID.x;
	const uint t0 = gl_WorkGroupID.z * BN;
	// this thread's outputs: rows rg + i·RG (i < TM), vectors cg + j·CG (j < TN)
	const uint rg = tid % RG, cg = tid / RG;
	float acc[TM * TN];
	[[unroll]] for (uint i = 0; i < TM * TN; i++) {
		acc[i] = 0.0;
	}
	for (uint k0 = 0; k0 < p.cols; k0 += BK) {
		// the weight tile, four weights at a time
		for (uint u = tid; u < BM * (BK / 4); u += THREADS) {
			const uint tr = u % BM, tk = (u / BM) * 4;
			const uint row = first + tr, k = k0 + tk;
			vec4 v = vec4(0.0);
			if (row < p.rows && k < p.cols) {
				v = wval4(p.w_off + row * p.row_bytes, k);
			}
			ws[tk * BM + tr] = v.x;
			ws[(tk + 1) * BM + tr] = v.y;
			ws[(tk + 2) * BM + tr] = v.z;
			ws[(tk + 3) * BM + tr] = v.w;
		}
#ifdef Q8_ACT
		for (uint u = tid; u < BM; u += THREADS) {
			const uint row = first + u;
			wsc[u] = row < p.rows ? wscale(p.w_off + row * p.row_bytes, k0) : 0.0;
		}
		// the activation tile: one vector's block per invocation, quantized
		for (uint tc = tid; tc < BN; tc += THREADS) {
			const uint t = t0 + tc;
			if (t >= p.n_vec) {
				for (uint tk = 0; tk < BK; tk++) {
					xs[tk * BN + tc] = 0.0;
				}
				xsc[tc] = 0.0;
				continue;
			}
			const uint xb = p.x_off + t * p.cols + k0;
			uint amax = 0u;
			for (uint tk = 0; tk < BK; tk++) {
				amax = amax_bits(amax, x[xb + tk]);
			}
			uint h;
			float id;
			q8_scales(amax, h, id);
			xsc[tc] = unpackHalf2x16(h).x;
			for (uint tk = 0; tk < BK; tk++) {
				precise const float f = x[xb + tk] * id;
				xs[tk * BN + tc] = float(q8(f));
			}
		}
		barrier();
		float s[TM * TN];
		for (uint i = 0; i < TM * TN; i++) {
			s[i] = 0.0;
		}
#else
		// the activation tile
		for (uint u = tid; u < BN * BK; u += THREADS) {
			const uint tc = u / BK, tk = u % BK;
			const uint t = t0 + tc, k = k0 + tk;
			xs[tk * BN + tc] = (t < p.n_vec && k < p.cols) ? x[p.x_off + t * p.cols + k] : 0.0;
		}
		barrier();
#endif
		for (uint kk = 0; kk < BK; kk++) {
			float a[TM], b[TN_MAX]; // b[TN_MAX]: a constant size for the broadcasts' constant indices
			[[unroll]] for (uint i = 0; i < TM; i++) {
				a[i] = ws[kk * BM + rg + i * RG];
			}
			if (SG != 0) {
				// One read per lane, then broadcasts: lane j of the
				// subgroup reads vector j's value (every lane shares cg).
				const float bl = xs[kk * BN + cg + (gl_SubgroupInvocationID % TN) * CG];
				b[0] = subgroupBroadcast(bl, 0);
				if (TN > 1) b[1] = subgroupBroadcast(bl, 1);
				if (TN > 2) b[2] = subgroupBroadcast(bl, 2);
				if (TN > 3) b[3] = subgroupBroadcast(bl, 3);
				if (TN > 4) b[4] = subgroupBroadcast(bl, 4);
				if (TN > 5) b[5] = subgroupBroadcast(bl, 5);
				if (TN > 6) b[6] = subgroupBroadcast(bl, 6);
				if (TN > 7) b[7] = subgroupBroadcast(bl, 7);
			} else {
				[[unroll]] for (uint j = 0; j < TN; j++) {
					b[j] = xs[kk * BN + cg + j * CG];
				}
			}
			[[unroll]] for (uint i = 0; i < TM; i++) {
				[[unroll]] for (uint j = 0; j < TN; j++) {
#ifdef Q8_ACT
					s[i * TN + j] += a[i] * b[j];
#else
					acc[i * TN + j] = fma(a[i], b[j], acc[i * TN + j]);
#endif
				}
			}
		}
#ifdef Q8_ACT
		for (uint i = 0; i < TM; i++) {
			for (uint j = 0; j < TN; j++) {
				acc[i * TN + j] += (xsc[cg + j * CG] * wsc[rg + i * RG]) * s[i * TN + j];
			}
		}
#endif
		barrier();
	}
	[[unroll]] for (uint i = 0; i < TM; i++) {
		const uint row = first + rg + i * RG;
		if (row >= p.rows) {
			break;
		}
		[[unroll]] for (uint j = 0; j < TN; j++) {
			const uint t = t0 + cg + j * CG;
			if (t < p.n_vec) {
				y[p.y_off + t * p.rows + row] = acc[i * TN + j];
			}
		}
	}
}
