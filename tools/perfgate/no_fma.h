// Force-included (-include) into every translation unit of the gate's build, compiled with
// -mno-fma.
//
// Why: valgrind 3.19 emulates each FMA instruction with a software helper, about 1 us per 256-bit
// vfmadd (measured: 20M of them take 18 s under --tool=none), which would make a 128-token prefill
// of the default model take half an hour under callgrind. So the gate's build turns every FMA
// intrinsic into a multiply and an add (the same work, one more instruction each) and -mno-fma
// stops the compiler from contracting a*b+c on its own. The counts remain a faithful measure of how
// much work each workload does; the numbers differ from the shipped build only in that split.
#pragma once
#if defined(__x86_64__) && defined(__cplusplus)
#include <immintrin.h>

// The kernels that would otherwise need __FMA__ (the AVX2 int8 ones: matmul_amx_i8.cpp) build with
// these macros in its place, so the gate counts the kernels the shipped AVX2 build runs.
#define OSSA_FMA_EMULATED 1

#define _mm_fmadd_ps(a, b, c) _mm_add_ps(_mm_mul_ps((a), (b)), (c))
#define _mm_fmadd_pd(a, b, c) _mm_add_pd(_mm_mul_pd((a), (b)), (c))
#define _mm_fmadd_ss(a, b, c) _mm_add_ss(_mm_mul_ss((a), (b)), (c))
#define _mm_fmadd_sd(a, b, c) _mm_add_sd(_mm_mul_sd((a), (b)), (c))
#define _mm_fmsub_ps(a, b, c) _mm_sub_ps(_mm_mul_ps((a), (b)), (c))
#define _mm_fnmadd_ps(a, b, c) _mm_sub_ps((c), _mm_mul_ps((a), (b)))
#define _mm256_fmadd_ps(a, b, c) _mm256_add_ps(_mm256_mul_ps((a), (b)), (c))
#define _mm256_fmadd_pd(a, b, c) _mm256_add_pd(_mm256_mul_pd((a), (b)), (c))
#define _mm256_fmsub_ps(a, b, c) _mm256_sub_ps(_mm256_mul_ps((a), (b)), (c))
#define _mm256_fmsub_pd(a, b, c) _mm256_sub_pd(_mm256_mul_pd((a), (b)), (c))
#define _mm256_fnmadd_ps(a, b, c) _mm256_sub_ps((c), _mm256_mul_ps((a), (b)))
#define _mm256_fnmadd_pd(a, b, c) _mm256_sub_pd((c), _mm256_mul_pd((a), (b)))
#endif
