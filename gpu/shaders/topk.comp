#version 450
// One round of a top-k reduction over rows: each invocation ranks a
// segment of at most SEG elements of one row (workgroup y: the row) and
// writes the k best of them, best first, in the order the CPU sampler
// ranks tokens: larger value first, lower id among equal values
// (stages/sample's better). NaN counts as -Inf (the sampler never picks
// either); -Inf elements still rank, so every output slot holds a
// distinct id, or -1 where the segment had fewer than k elements. The
// first round reads a row of logits (the id is the index); later rounds
// read the (value, id) pairs of the round before, until one segment per
// row is left. The cnt invocations of a workgroup share its cnt·SEG
// elements interleaved (invocation t takes t, t+cnt, ...), so neighbouring
// invocations read neighbouring floats.
//
// Each invocation keeps its k best in a sorted private list: most
// elements lose to the list's last entry at once, so a segment costs
// about SEG compares. No shared memory and no barriers (on a CPU device
// such as lavapipe, a barrier costs more than the whole scan).

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint BLOCK = 32;
layout(constant_id = 1) const uint SEG = 1024;

const uint MAXK = 64;

layout(std430, binding = 0) readonly buffer SV { float sv[]; };
layout(std430, binding = 1) readonly buffer SI { int si[]; };
layout(std430, binding = 2) writeonly buffer DV { float dv[]; };
layout(std430, binding = 3) writeonly buffer DI { int di[]; };

layout(push_constant) uniform Push {
	uint n;        // elements per row in the source
	uint k;        // elements kept per segment (at most MAXK)
	uint s_off;    // element offset of row 0 in sv (and si)
	uint s_stride; // elements from one source row to the next
	uint d_off;    // element offset of row 0 in dv and di
	uint has_ids;  // 0: an element's id is its index in the row
	uint segs;     // segments per row (the output row holds segs*k)
} p;

// better reports whether (av, aid) ranks before (bv, bid); id -1 ranks
// after everything.
bool better(float av, int aid, float bv, int bid) {
	return aid >= 0 && (bid < 0 || av > bv || (av == bv && aid < bid));
}

void main() {
	const uint seg = gl_GlobalInvocationID.x;
	const uint row = gl_WorkGroupID.y;
	if (seg >= p.segs) {
		return;
	}
	const float ninf = -1.0 / 0.0;
	float lv[MAXK];
	int li[MAXK];
	uint m = 0; // entries in the list
	const uint g0 = gl_WorkGroupID.x * BLOCK; // the workgroup's first segment
	const uint cnt = min(BLOCK, p.segs - g0);  // its segments
	const uint end = min((g0 + cnt) * SEG, p.n);
	const uint s0 = p.s_off + row * p.s_stride;
	for (uint i = g0 * SEG + gl_LocalInvocationID.x; i < end; i += cnt) {
		float v = sv[s0 + i];
		const int id = p.has_ids != 0 ? si[s0 + i] : int(i);
		if (isnan(v)) {
			v = ninf;
		}
		if (id < 0 || (m == p.k && !better(v, id, lv[m - 1], li[m - 1]))) {
			continue;
		}
		uint j = m < p.k ? m : m - 1; // the slot freed: the end, or the worst
		while (j > 0 && better(v, id, lv[j - 1], li[j - 1])) {
			lv[j] = lv[j - 1];
			li[j] = li[j - 1];
			j--;
		}
		lv[j] = v;
		li[j] = id;
		m = min(m + 1, p.k);
	}
	const uint d = p.d_off + (row * p.segs + seg) * p.k;
	for (uint j = 0; j < p.k; j++) {
		dv[d + j] = j < m ? lv[j] : ninf;
		di[d + j] = j < m ? li[j] : -1;
	}
}
