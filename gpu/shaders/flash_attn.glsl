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
// Threads: WG = 64. Scores: thread tid makes column c = tid % BC of the
// rows tid/BC + k·(WG/BC). Weighted sums: thread tid keeps the values
// d = tid%DTH + j·DTH of the rows tid/DTH + k·RTH in registers. Shared
// memory: (BR + BC)·DMAX + BR·BC floats and a few per-row values; the host
// picks (BR, BC, DMAX) within the device's limit (lavapipe: 32 KiB).

layout(local_size_x = 64) in;
const uint WG = 64;
layout(constant_id = 0) const uint BR = 16;    // query rows per tile, a multiple of WG/BC and of RTH
layout(constant_id = 1) const uint BC = 32;    // cells per step, dividing WG
layout(constant_id = 2) const uint DMAX = 128; // dk, dv ≤ DMAX, a multiple of DTH
const uint DTH = 16;       // threads across a value row
const uint RTH = WG / DTH; // threads across the tile's rows in the weighted sum
const uint SR = BR * BC / WG; // score rows per thread
const uint AR = BR / RTH;     // accumulator rows per thread
const uint AD = DMAX / DTH;   // accumulator values per row and thread

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

shared float qs[BR * DMAX];  // the tile's query rows
shared float kvs[BC * DMAX]; // the step's K rows, then its V rows
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
	const uint kdim = p.n_head_kv * p.dk;
	const uint vdim = p.n_head_kv * p.dv;
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
	for (uint e = tid; e < BR * p.dk; e += WG) {
		const uint r = e / p.dk;
		const uint d = e - r * p.dk;
		const uint i = i0 + r;
		float x = 0.0;
		if (i < nq) {
			x = q[p.q_off + ((i / G) * p.n_head + kh * G + i % G) * p.dk + d];
		}
		qs[r * DMAX + d] = x;
	}
	const uint dl = tid % DTH;
	const uint rl = tid / DTH;
	const uint nd = p.dv > dl ? (p.dv - dl + DTH - 1u) / DTH : 0u; // values of a row this thread keeps
	float acc[AR * AD];
	for (uint a = 0; a < AR * AD; a++) {
		acc[a] = 0.0;
	}
	barrier();

	const uint c = tid % BC; // the score column of this thread
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
			for (uint e = tid; e < BC * p.dk; e += WG) {
				const uint cc = e / p.dk;
				const uint d = e - cc * p.dk;
				kvs[cc * DMAX + d] = cc < cnt ? k_at((cell0 + uint(base) + cc) * kdim + kh * p.dk + d) : 0.0;
			}
			barrier();

			const int j = base + int(c);
			for (uint kr = 0; kr < SR; kr++) {
				const uint r = tid / BC + kr * (WG / BC);
				float dot = 0.0;
				for (uint d = 0; d < p.dk; d++) {
					dot = fma(qs[r * DMAX + d], kvs[c * DMAX + d], dot);
				}
				const bool ok = rseq[r] == sq && j >= rlo[r] && j <= rpos[r];
				ss[r * BC + c] = ok ? dot * p.scale : ninf;
			}
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
			for (uint e = tid; e < BC * p.dv; e += WG) {
				const uint cc = e / p.dv;
				const uint d = e - cc * p.dv;
				kvs[cc * DMAX + d] = cc < cnt && used[cc] != 0u ? v_at((cell0 + uint(base) + cc) * vdim + kh * p.dv + d) : 0.0;
			}
			barrier();

			for (uint kr = 0; kr < AR; kr++) {
				const float alpha = as[rl + kr * RTH];
				for (uint jd = 0; jd < nd; jd++) {
					acc[kr * AD + jd] *= alpha;
				}
			}
			for (uint cc = 0; cc < cnt; cc++) {
				for (uint kr = 0; kr < AR; kr++) {
					const float w = ss[(rl + kr * RTH) * BC + cc];
					for (uint jd = 0; jd < nd; jd++) {
						acc[kr * AD + jd] = fma(w, kvs[cc * DMAX + dl + jd * DTH], acc[kr * AD + jd]);
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
			const uint ob = p.o_off + ((i / G) * p.n_head + kh * G + i % G) * p.dv + dl;
			for (uint jd = 0; jd < nd; jd++) {
				o[ob + jd * DTH] = acc[kr * AD + jd] / l;
			}
		}
	}
}
