/* The native kernels, in double and single precision: NUTS for any density with a native gradient
 * (nuts.h), and the densities and fused leapfrog trajectories of the logistic form
 * (logistic_leapfrog.h; bayesx.targets.forms: Gaussian-prior logistic regression, its restriction to
 * a subspace, and with no rows a Gaussian). Built by bayesx/native/build.py (at install, else at first
 * use); bayesx_signature at the end states every exported function's parameter types. */
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

/* Scratch numbers (of the kernel's precision) one thread of the functions below needs. */
int logistic_work_size(int n, int k) { return n + 2 * k; }

/* Whether the chains of one call can run on several threads. */
int logistic_openmp(void) {
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}

/* The uniforms of one chain's NUTS tree: xoshiro256+ (Blackman and Vigna 2018) seeded through
 * splitmix64 from one 64-bit seed per chain and transition, drawn by the caller from its generator. */
typedef struct { uint64_t s[4]; } nuts_rng;

static inline uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline void nuts_rng_seed(nuts_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

/* uniform on [0, 1) with 53 random bits */
static inline double nuts_uniform(nuts_rng *r) {
    const uint64_t out = r->s[0] + r->s[3], t = r->s[1] << 17;
    r->s[2] ^= r->s[0];
    r->s[3] ^= r->s[1];
    r->s[1] ^= r->s[2];
    r->s[0] ^= r->s[3];
    r->s[2] ^= t;
    r->s[3] = (r->s[3] << 45) | (r->s[3] >> 19);
    return (double)(out >> 11) * 0x1.0p-53;
}

/* Whether x is finite, read from its bits: -ffast-math lets the compiler assume that isnan and
 * isinf are false, so they cannot be trusted here. */
static inline int finite_f64(double x) { uint64_t b; memcpy(&b, &x, sizeof b); return (b & 0x7ff0000000000000ULL) != 0x7ff0000000000000ULL; }
static inline int finite_f32(float x) { uint32_t b; memcpy(&b, &x, sizeof b); return (b & 0x7f800000U) != 0x7f800000U; }

#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)

#define REAL double
#define SUFFIX f64
#define EXP exp
#define LOG log
#define EXP_FLOOR (-708.0)   /* exp(-708) = 3.3e-308, still a normal double */
#include "nuts.h"
#include "logistic_leapfrog.h"
#undef DENSITY
#undef PHASE
#undef NUTS_DIVERGENCE
#undef NUTS_BIG
#undef REAL
#undef SUFFIX
#undef EXP
#undef LOG
#undef EXP_FLOOR

#define REAL float
#define SUFFIX f32
#define EXP expf
#define LOG logf
#define EXP_FLOOR (-87.0f)   /* expf(-87) = 1.6e-38, still a normal float */
#include "nuts.h"
#include "logistic_leapfrog.h"

/* Every exported function's parameter types, one letter each (i int, p pointer, d double, f float), then
 * "->" and its return type (v nothing, i int). bayesx/native/entry_points.py declares the same and checks
 * its declarations against these when it loads the library: change a function above, change its line
 * here and there. */
#define FORM(real) "ppppip" real  /* A^T, c, y, P, P dense, b, constant */
#define SIGNATURES(suffix, real) \
    {"logistic_density_" suffix, "iiii" FORM(real) "pppp->v"}, \
    {"logistic_leapfrog_" suffix, "iiiiii" FORM(real) "pippppipp->v"}, \
    {"logistic_nuts_" suffix, "iiiii" FORM(real) "pi" real "ippppppp->v"},
static const char *const signatures[][2] = {
    SIGNATURES("f64", "d")
    SIGNATURES("f32", "f")
    {"logistic_work_size", "ii->i"},
    {"logistic_openmp", "->i"},
};

/* The signature of exported function `name`, or NULL where there is none. */
const char *bayesx_signature(const char *name) {
    for (size_t i = 0; i < sizeof signatures / sizeof signatures[0]; i++)
        if (strcmp(signatures[i][0], name) == 0) return signatures[i][1];
    return NULL;
}
