//go:build cgo

// CPU feature detection for the kernel dispatch. Compiled for the baseline
// ISA: it only asks the CPU (cpuid, and xgetbv for OS support of the wide
// registers, both done by GCC's __builtin_cpu_supports).

#include "kern.h"

static int detect(void) {
	__builtin_cpu_init();
	int f = 0;
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
	    __builtin_cpu_supports("f16c")) {
		f |= FI_AVX2;
	}
	// The AVX-512 path also runs the AVX2 code for what it has no kernel of.
	if ((f & FI_AVX2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
	    __builtin_cpu_supports("avx512vnni")) {
		f |= FI_AVX512;
		if (__builtin_cpu_supports("avx512bf16")) f |= FI_AVX512BF16;
	}
	if (__builtin_cpu_is("amd")) f |= FI_AMD;
#ifdef FI_SIMDE
	// Test build: kern_avx512.c runs on SIMDe's portable intrinsics.
	if (f & FI_AVX2) f |= FI_AVX512 | FI_AVX512BF16;
#endif
	return f;
}

int fi_cpu_features(void) {
	// Every thread computes the same value: a relaxed race is harmless.
	static int cached = -1;
	int f = __atomic_load_n(&cached, __ATOMIC_RELAXED);
	if (f < 0) {
		f = detect();
		__atomic_store_n(&cached, f, __ATOMIC_RELAXED);
	}
	return f;
}
