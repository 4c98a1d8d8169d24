//go:build cgo

// Transposed K tiles (quant.TileRows) read by row: fi_untile, and the
// scores of rows no tiled kernel reads in place, untransposed a tile at a
// time and met by the row kernels.

#include <stdint.h>
#include <string.h>

#include "kern.h"

// UNTILE copies the tile's rows [lo, hi) to d (rb bytes apart), units of
// type T: each unit's run of 16 rows is read once.
#define UNTILE(T)                                                                                                      \
	do {                                                                                                               \
		for (int64_t p = 0; p < rb / (int64_t)sizeof(T); p++) {                                                        \
			T run[16];                                                                                                 \
			memcpy(run, t + p * 16 * sizeof(T), sizeof(run));                                                          \
			for (int64_t r = lo; r < hi; r++) memcpy(d + (r - lo) * rb + p * sizeof(T), &run[r], sizeof(T));            \
		}                                                                                                              \
	} while (0)

// fi_untile: see kern.h.
void fi_untile(const uint8_t *src, int64_t rb, int64_t u, int64_t r0, int64_t n, uint8_t *dst) {
	for (int64_t i = r0 / 16; i * 16 < r0 + n; i++) {
		const int64_t lo = i * 16 < r0 ? r0 - i * 16 : 0, hi = r0 + n - i * 16 < 16 ? r0 + n - i * 16 : 16;
		const uint8_t *t = src + i * 16 * rb;
		uint8_t *d = dst + (i * 16 + lo - r0) * rb;
		switch (u) {
		case 1: UNTILE(uint8_t); break;
		case 2: UNTILE(uint16_t); break;
		case 4: UNTILE(uint32_t); break;
		default:
			for (int64_t r = lo; r < hi; r++) {
				for (int64_t p = 0; p < rb; p += u) memcpy(d + (r - lo) * rb + p, t + (p / u * 16 + r) * u, (size_t)u);
			}
		}
	}
}

// fi_attn_scores_t_rows: see kern.h.
int fi_attn_scores_t_rows(int avx512, int t, int bits, const float *levels, const uint8_t *src, int64_t rb, int64_t u,
                          int64_t r0, int64_t n, int64_t dim, const float *q, int64_t G, float *s, int64_t ls) {
	if (rb > 4 * FI_AD_MAXDIM) return -1;
	uint8_t buf[16 * 4 * FI_AD_MAXDIM];
	for (int64_t j = 0; j < n;) {
		const int64_t r = r0 + j, m = 16 - r % 16 < n - j ? 16 - r % 16 : n - j; // the rest of r's tile
		fi_untile(src, rb, u, r, m, buf);
		const int rc = avx512 ? fi_attn_scores_avx512(t, bits, levels, buf, rb, m, dim, q, G, s + j, ls)
		                      : fi_attn_scores_avx2(t, bits, levels, buf, rb, m, dim, q, G, s + j, ls);
		if (rc != 0) return rc;
		j += m;
	}
	return 0;
}
