//go:build cgo

// CPU feature detection for the kernel dispatch. Compiled for the baseline
// ISA: it only asks the CPU (cpuid, and xgetbv for OS support of the wide
// registers, both done by GCC's __builtin_cpu_supports).

#include "kern.h"

int fi_cpu_features(void) {
	__builtin_cpu_init();
	int f = 0;
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
	    __builtin_cpu_supports("f16c")) {
		f |= FI_AVX2;
	}
	return f;
}
