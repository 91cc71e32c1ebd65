/* What every native kernel's translation unit needs before density.h: the C headers, the thread id, name
 * pasting for the per-precision copies (CAT(name, SUFFIX)), NUTS's random numbers, and finiteness tests
 * that survive -ffast-math. Included once, by kernels.c (or by any C file that compiles the kernels
 * against a density of its own). */
#ifndef BAYESX_COMMON_H
#define BAYESX_COMMON_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#define THREAD_ID omp_get_thread_num()
#else
#define THREAD_ID 0   /* built without OpenMP: the pragmas are ignored and one thread runs */
#endif

/* The uniforms of one chain's NUTS tree, counter-based: uniform number n of a chain's transition is the
 * n-th output of splitmix64 (Steele, Lea and Flood 2014, "Fast splittable pseudorandom number generators")
 * started from the chain's 64-bit seed, which the caller draws from its generator once per chain and
 * transition. Being a function of (seed, n) alone, the same number is had in whatever order a tree
 * consumes them: bayesx/kernels/nuts.py computes the same function in PyTorch (tree_uniforms), so the C
 * and PyTorch trees take the same decisions (nuts.h says which n each decision reads). */
static inline uint64_t splitmix64_at(uint64_t seed, uint64_t n) {
    uint64_t z = seed + (n + 1) * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The top `bits` bits of splitmix64_at as a uniform on the open interval (0, 1), (m + 1/2) 2^-bits, exact
 * in a real of bits + 1 significant bits (52 for double, 23 for float): never 0 or 1 after rounding. */
static inline double nuts_uniform_bits(uint64_t seed, uint64_t n, int bits) {
    const uint64_t m = splitmix64_at(seed, n) >> (64 - bits);
    return ((double)m + 0.5) * ldexp(1.0, -bits);
}

/* Whether x is finite, read from its bits: -ffast-math lets the compiler assume that isnan and
 * isinf are false, so they cannot be trusted here. */
static inline int finite_f64(double x) { uint64_t b; memcpy(&b, &x, sizeof b); return (b & 0x7ff0000000000000ULL) != 0x7ff0000000000000ULL; }
static inline int finite_f32(float x) { uint32_t b; memcpy(&b, &x, sizeof b); return (b & 0x7f800000U) != 0x7f800000U; }
/* NaN and +inf, from the bits too (a density's faults that NUTS counts, nuts.h) */
static inline int nan_f64(double x) { uint64_t b; memcpy(&b, &x, sizeof b); return !finite_f64(x) && (b & 0x000fffffffffffffULL); }
static inline int nan_f32(float x) { uint32_t b; memcpy(&b, &x, sizeof b); return !finite_f32(x) && (b & 0x007fffffU); }
static inline int posinf_f64(double x) { uint64_t b; memcpy(&b, &x, sizeof b); return b == 0x7ff0000000000000ULL; }
static inline int posinf_f32(float x) { uint32_t b; memcpy(&b, &x, sizeof b); return b == 0x7f800000U; }

/* Subnormal arithmetic, off for the span of one density evaluation: FLUSH_SUBNORMALS_BEGIN sets the SSE
 * control register's flush-to-zero and denormals-are-zero bits on the calling thread (each OpenMP thread
 * sets its own), FLUSH_SUBNORMALS_END restores what the caller had. The logistic form's residuals of rows
 * predicted beyond exp's floor are ~1e-38 in single precision, and their products with the design are
 * subnormal; Intel cores run each subnormal result through a microcode assist (about 100 cycles), AMD's
 * Zen 4 does not (results/native_gradient_cause.md). Such terms are 1e-38 of the gradient, so flushing
 * them changes nothing a sampler can see. Only the logistic form uses it: a compiled density may rely on
 * subnormals (log of a tiny exp), so its arithmetic is left as PyTorch's. A no-op off x86, and where
 * BAYESX_KEEP_SUBNORMALS is defined (experiments/bench_gradient.py --builds times the difference). */
#if (defined(__SSE__) || defined(__x86_64__)) && !defined(BAYESX_KEEP_SUBNORMALS)
#include <xmmintrin.h>
#define FLUSH_SUBNORMALS_BEGIN const unsigned int saved_csr_ = _mm_getcsr(); _mm_setcsr(saved_csr_ | 0x8040u);
#define FLUSH_SUBNORMALS_END _mm_setcsr(saved_csr_);
#else
#define FLUSH_SUBNORMALS_BEGIN
#define FLUSH_SUBNORMALS_END
#endif

#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)

#endif
