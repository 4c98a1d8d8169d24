// attn.glsl: the attention shader of attn_f32.comp and attn_f16.comp,
// which define KV_T (the cache's element storage), k_at and v_at (the
// value at an element index) before including it.
//
// Causal attention of query rows against a KV cache, one workgroup
// per (head, row): softmax(q·kᵀ·scale)·v over the cells (seq, j) with
// lo ≤ j ≤ pos, where lo = pos-window+1 with a sliding window, else 0.
// Positions go in chunks of BLOCK with the online softmax (running
// maximum m and sum l; each chunk rescales the accumulator by
// exp(m_old - m_new)), as ggml-vulkan's flash_attn does per tile. A sink
// logit (gpt-oss) starts m at the sink and l at 1: a score with no value.
// Grouped-query heads: head h reads KV head h / (n_head / n_head_kv).
//
// Cache layout: cell (seq, j) is row seq·n_ctx + j of K (kdim floats: the
// KV heads' dk values back to back) and of V (vdim floats).

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint BLOCK = 64; // a power of two
const uint MAX_DV = 512;

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
} p;

float k_at(uint e);
float v_at(uint e);

shared float sc[BLOCK];
shared float red[BLOCK];
shared float acc[MAX_DV];

void main() {
	const uint h = gl_WorkGroupID.x;
	const uint t = gl_WorkGroupID.y;
	const uint tid = gl_LocalInvocationID.x;
	const uint kh = h / (p.n_head / p.n_head_kv);
	const uint seq = uint(idx[p.idx_off + 2u * t]);
	const int pos = idx[p.idx_off + 2u * t + 1u];
	int lo = 0;
	if (p.window > 0u) {
		lo = max(0, pos - int(p.window) + 1);
	}
	const uint kdim = p.n_head_kv * p.dk;
	const uint vdim = p.n_head_kv * p.dv;
	const uint qb = p.q_off + (t * p.n_head + h) * p.dk;
	const uint cell0 = seq * p.n_ctx;
	float m = -1.0 / 0.0;
	float l = 0.0;
	if (p.has_sinks != 0u) {
		m = sinks[p.sink_off + h];
		l = 1.0;
	}
	for (uint d = tid; d < p.dv; d += BLOCK) {
		acc[d] = 0.0;
	}
	for (int base = lo; base <= pos; base += int(BLOCK)) {
		const int j = base + int(tid);
		float s = -1.0 / 0.0;
		if (j <= pos) {
			const uint kb = (cell0 + uint(j)) * kdim + kh * p.dk;
			float dot = 0.0;
			for (uint i = 0; i < p.dk; i++) {
				dot = fma(q[qb + i], k_at(kb + i), dot);
			}
			s = dot * p.scale;
		}
		red[tid] = s;
		barrier();
		for (uint r = BLOCK / 2; r > 0; r >>= 1) {
			if (tid < r) {
				red[tid] = max(red[tid], red[tid + r]);
			}
			barrier();
		}
		const float mNew = max(m, red[0]);
		barrier();
		const float alpha = exp(m - mNew);
		const float e = j <= pos ? exp(s - mNew) : 0.0;
		sc[tid] = e;
		red[tid] = e;
		barrier();
		for (uint r = BLOCK / 2; r > 0; r >>= 1) {
			if (tid < r) {
				red[tid] += red[tid + r];
			}
			barrier();
		}
		l = l * alpha + red[0];
		m = mNew;
		const uint cnt = uint(min(int(BLOCK), pos - base + 1));
		for (uint d = tid; d < p.dv; d += BLOCK) {
			float a = acc[d] * alpha;
			for (uint jj = 0; jj < cnt; jj++) {
				a = fma(sc[jj], v_at((cell0 + uint(base) + jj) * vdim + kh * p.dv + d), a);
			}
			acc[d] = a;
		}
		barrier();
	}
	const uint ob = p.o_off + (t * p.n_head + h) * p.dv;
	for (uint d = tid; d < p.dv; d += BLOCK) {
		o[ob + d] = acc[d] / l;
	}
}
