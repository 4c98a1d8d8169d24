// flash_attn.glsl: the tiled prefill attention of flash_attn_f32.comp,
// flash_attn_f16.comp and flash_attn_q8_0.comp, which define KV_T (the
// cache's element storage), k_at and v_at (the value at an element index)
// before including it, as attn.glsl's variants do.
//
// The same causal attention as attn.glsl (softmax(q·kᵀ·scale)·v over the
// cells (seq, j) with lo ≤ j ≤ pos, lo = pos-window+1 with a sliding
// window, else 0; a sink logit is a score with no value), for many query
// rows at once, tiled as ggml-vulkan's flash_attn.comp (scalar path): a
// workgroup takes BR query rows that read one KV head and walks their
// cells BC at a time, loading each step's K rows and then V rows into
// shared memory once for all BR rows, with the online softmax per row
// (running maximum m and sum l; a step rescales the row's accumulator by
// exp(m_old - m_new)). The query rows of the group that reads KV head kh
// are numbered i = t·G + g (t the batch row, g the head within the group
// of G = n_head/n_head_kv heads sharing kh, head kh·G + g): workgroup
// (x, kh) takes i in [x·BR, x·BR + BR), so grouped heads share the loads.
//
// A tile's rows may belong to several sequences (a batch mixing them):
// the tile walks the cells of each sequence it holds in turn, from the
// smallest lo to the largest pos of that sequence's rows, each row masking
// the cells outside its own [lo, pos] (score -Inf, weight 0). A V row no
// row of the tile uses is loaded as zeros, so a cell never written cannot
// reach a result even as 0·NaN.
//
// Cache layout: cell (seq, j) is row seq·n_ctx + j of K (kdim values: the
// KV heads' dk values back to back) and of V (vdim values).
//
// Threads: WG = 32, each making a block of the step's scores and a block
// of the accumulators from values it loads once per use (register
// blocking: on lavapipe every shared-memory read of a per-invocation
// address is a gather of 8 scalar loads, so the shader's speed there is
// its FMAs per shared read). Scores: thread tid makes columns
// tid%CT + k·CT of the rows tid/CT + k·(WG/CT). Weighted sums: thread tid
// keeps the values d = tid%DTH + j·DTH of the rows tid/DTH + k·RTH. Shared
// memory: BR·DK + BC·max(DK, DV) + BR·BC floats and a few per-row values;
// the host picks (BR, BC) within the device's limit (lavapipe: 32 KiB).
// The head sizes DK and DV are specialization constants (the push
// constants' dk and dv are the same numbers, kept for attn.glsl's layout):
// with constant trip counts and divisors the compiler unrolls the loops
// and keeps the accumulators in registers, which on lavapipe (a CPU
// running 8 invocations per SIMD vector) is most of the shader's speed.

layout(local_size_x = 32) in;
const uint WG = 32;
layout(constant_id = 0) const uint BR = 16;    // query rows per tile, a multiple of WG/CT and of RTH, at most WG
layout(constant_id = 1) const uint BC = 32;    // cells per step, a multiple of CT, at most WG
layout(constant_id = 2) const uint DK = 64;  // key head size (p.dk)
layout(constant_id = 3) const uint DV = 64;  // value head size (p.dv)
const uint KW = DK > DV ? DK : DV;           // width of a shared K or V row
const uint CT = 8;         // threads across the step's cells in the scores
const uint SC = BC / CT;       // score columns per thread
const uint SR = BR / (WG / CT); // score rows per thread
const uint DTH = 8;        // threads across a value row
const uint RTH = WG / DTH; // threads across the tile's rows in the weighted sum
const uint AR = BR / RTH;     // accumulator rows per thread
const uint AD = (DV + DTH - 1) / DTH; // accumulator values per row and thread

layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { KV_T k[]; };
layout(std430, binding = 2) readonly buffer V { KV_T v[]; };
layout(std430, binding = 3) readonly buffer I { int idx[]; }; // per row: seq, pos
layout(std430, binding = 4) readonly buffer S { float sinks[]; };
layout(std430, binding = 5) writeonly buffer O { float o[]; };

layout(push_constant) uniform Push {
	uint q_off;   // float offset of row 0 (n_head·dk per row)
	uint o_off;   // float offset of row 0 (n_head·dv per row)
	uint idx_off; // int offset of row 0's (seq, pos)
	uint n_head;
	uint n_head_kv;
	uint dk;
	uint dv;
	uint n_ctx;
	float scale;
	uint window;    // 0: none
	uint has_sinks; // 0: binding 4 is ignored
	uint sink_off;
	uint n_rows; // batch rows t
} p;

float k_at(uint e);
float v_at(uint e);

shared float qs[BR * DK];    // the tile's query rows
shared float kvs[BC * KW];   // the step's K rows, then its V rows
shared float ss[BR * BC];    // scores, then softmax weights
shared float ms[BR];         // running maximum per row
shared float ls[BR];         // running sum per row
shared float as[BR];         // this step's rescale factor per row
shared int rseq[BR];         // per row: sequence (-1: past the batch)
shared int rlo[BR];          // first cell
shared int rpos[BR];         // last cell (the row's position)
shared uint used[BC];        // 1: some row of the tile attends this cell

void main() {
	const uint tid = gl_LocalInvocationID.x;
	const uint kh = gl_WorkGroupID.y;
	const uint G = p.n_head / p.n_head_kv;
	const uint i0 = gl_WorkGroupID.x * BR;
	const uint nq = p.n_rows * G;
	const uint kdim = p.n_head_kv * DK;
	const uint vdim = p.n_head_kv * DV;
	const float ninf = -1.0 / 0.0;

	if (tid < BR) {
		const uint i = i0 + tid;
		int sq = -1, lo = 0, pos = -1;
		float m = ninf, l = 0.0;
		if (i < nq) {
			const uint t = i / G;
			sq = idx[p.idx_off + 2u * t];
			pos = idx[p.idx_off + 2u * t + 1u];
			if (p.window > 0u) {
				lo = max(0, pos - int(p.window) + 1);
			}
			if (p.has_sinks != 0u) {
				m = sinks[p.sink_off + kh * G + i % G];
				l = 1.0;
			}
		}
		rseq[tid] = sq;
		rlo[tid] = lo;
		rpos[tid] = pos;
		ms[tid] = m;
		ls[tid] = l;
	}
	for (uint e = tid; e < BR * DK; e += WG) {
		const uint r = e / DK;
		const uint d = e - r * DK;
		const uint i = i0 + r;
		float x = 0.0;
		if (i < nq) {
			x = q[p.q_off + ((i / G) * p.n_head + kh * G + i % G) * DK + d];
		}
		qs[r * DK + d] = x;
	}
	const uint dl = tid % DTH;
	const uint rl = tid / DTH;
	float acc[AR * AD];
	for (uint a = 0; a < AR * AD; a++) {
		acc[a] = 0.0;
	}
	barrier();

	const uint c = tid % BC; // the cell whose used flag this thread sets (tid < BC)
	for (uint r0 = 0; r0 < BR; r0++) {
		// each sequence of the tile once, at its first row
		const int sq = rseq[r0];
		bool seen = sq < 0;
		for (uint r1 = 0; r1 < r0; r1++) {
			seen = seen || rseq[r1] == sq;
		}
		if (seen) {
			continue;
		}
		int lo = rlo[r0], hi = rpos[r0];
		for (uint r = r0 + 1u; r < BR; r++) {
			if (rseq[r] == sq) {
				lo = min(lo, rlo[r]);
				hi = max(hi, rpos[r]);
			}
		}
		const uint cell0 = uint(sq) * p.n_ctx;
		for (int base = lo; base <= hi; base += int(BC)) {
			const uint cnt = uint(min(int(BC), hi - base + 1));
			for (uint e = tid; e < BC * DK; e += WG) {
				const uint cc = e / DK;
				const uint d = e - cc * DK;
				kvs[cc * KW + d] = cc < cnt ? k_at((cell0 + uint(base) + cc) * kdim + kh * DK + d) : 0.0;
			}
			barrier();

			float dot[SR * SC];
			for (uint a = 0; a < SR * SC; a++) {
				dot[a] = 0.0;
			}
			for (uint d = 0; d < DK; d++) {
				float qv[SR], kv[SC];
				for (uint kr = 0; kr < SR; kr++) {
					qv[kr] = qs[(tid / CT + kr * (WG / CT)) * DK + d];
				}
				for (uint kc = 0; kc < SC; kc++) {
					kv[kc] = kvs[(tid % CT + kc * CT) * KW + d];
				}
				for (uint kr = 0; kr < SR; kr++) {
					for (uint kc = 0; kc < SC; kc++) {
						dot[kr * SC + kc] = fma(qv[kr], kv[kc], dot[kr * SC + kc]);
					}
				}
			}
			for (uint kr = 0; kr < SR; kr++) {
				const uint r = tid / CT + kr * (WG / CT);
				for (uint kc = 0; kc < SC; kc++) {
					const uint cc = tid % CT + kc * CT;
					const int jc = base + int(cc);
					const bool ok = rseq[r] == sq && jc >= rlo[r] && jc <= rpos[r];
					ss[r * BC + cc] = ok ? dot[kr * SC + kc] * p.scale : ninf;
				}
			}
			const int j = base + int(c);
			if (tid < BC) {
				bool u = false;
				for (uint r = 0; r < BR; r++) {
					u = u || (rseq[r] == sq && j >= rlo[r] && j <= rpos[r]);
				}
				used[tid] = u ? 1u : 0u;
			}
			barrier();

			if (tid < BR) {
				const uint r = tid;
				const float mOld = ms[r];
				float mx = mOld;
				for (uint cc = 0; cc < BC; cc++) {
					mx = max(mx, ss[r * BC + cc]);
				}
				float alpha = 1.0, sum = 0.0;
				if (mx == ninf) { // nothing to attend yet (a row of another sequence, or past the batch)
					for (uint cc = 0; cc < BC; cc++) {
						ss[r * BC + cc] = 0.0;
					}
				} else {
					alpha = exp(mOld - mx);
					for (uint cc = 0; cc < BC; cc++) {
						const float w = exp(ss[r * BC + cc] - mx);
						ss[r * BC + cc] = w;
						sum += w;
					}
				}
				ms[r] = mx;
				ls[r] = ls[r] * alpha + sum;
				as[r] = alpha;
			}
			for (uint e = tid; e < BC * DV; e += WG) {
				const uint cc = e / DV;
				const uint d = e - cc * DV;
				kvs[cc * KW + d] = cc < cnt && used[cc] != 0u ? v_at((cell0 + uint(base) + cc) * vdim + kh * DV + d) : 0.0;
			}
			barrier();

			for (uint kr = 0; kr < AR; kr++) {
				const float alpha = as[rl + kr * RTH];
				for (uint jd = 0; jd < AD; jd++) {
					acc[kr * AD + jd] *= alpha;
				}
			}
			for (uint cc = 0; cc < cnt; cc++) {
				float w[AR], vv[AD];
				for (uint kr = 0; kr < AR; kr++) {
					w[kr] = ss[(rl + kr * RTH) * BC + cc];
				}
				for (uint jd = 0; jd < AD; jd++) {
					// past DV (DV not a multiple of DTH): stale values in a lane never written out
					vv[jd] = kvs[cc * KW + min(dl + jd * DTH, KW - 1u)];
				}
				for (uint kr = 0; kr < AR; kr++) {
					for (uint jd = 0; jd < AD; jd++) {
						acc[kr * AD + jd] = fma(w[kr], vv[jd], acc[kr * AD + jd]);
					}
				}
			}
			barrier();
		}
	}

	for (uint kr = 0; kr < AR; kr++) {
		const uint r = rl + kr * RTH;
		const uint i = i0 + r;
		if (i < nq) {
			const float l = ls[r];
			const uint ob = p.o_off + ((i / G) * p.n_head + kh * G + i % G) * DV + dl;
			for (uint jd = 0; jd < AD; jd++) {
				if (dl + jd * DTH < DV) {
					o[ob + jd * DTH] = acc[kr * AD + jd] / l;
				}
			}
		}
	}
}
