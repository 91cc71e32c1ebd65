/* The native kernels, in double and single precision: NUTS transitions (nuts.h) and leapfrog trajectories
 * (leapfrog.h) for any density with a native gradient (density.h), on the one density written in C, the
 * logistic form (logistic_form.h; bayesx.targets.forms: Gaussian-prior logistic regression, its
 * restriction to a subspace, and with no rows a Gaussian), and on densities compiled from PyTorch code
 * (compiled_density.h). Built by
 * bayesx/native/build.py (at install, else at first use); bayesx_signature at the end states every
 * exported function's parameter types. */
#include "common.h"

/* Scratch numbers (of the kernel's precision) one thread of logistic_density needs: the form's n + k, and
 * k more for M^-1 p; logistic_leapfrog needs twice as many per thread (a pair of chains). */
int logistic_work_size(int n, int k) { return n + 2 * k; }

/* Whether the chains of one call can run on several threads. */
int logistic_openmp(void) {
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}

#define REAL double
#define SUFFIX f64
#define EXP exp
#define LOG log
#define EXP_FLOOR (-708.0)   /* exp(-708) = 3.3e-308, still a normal double */
#include "density.h"
#include "nuts.h"
#include "leapfrog.h"
#include "logistic_form.h"
#include "compiled_density.h"
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
#include "density.h"
#include "nuts.h"
#include "leapfrog.h"
#include "logistic_form.h"
#include "compiled_density.h"

/* Every exported function's parameter types, one letter each (i int, p pointer, d double, f float), then
 * "->" and its return type (v nothing, i int). bayesx/native/entry_points.py declares the same and checks
 * its declarations against these when it loads the library: change a function above, change its line
 * here and there. */
#define FORM(real) "ppppip" real  /* A^T, c, y, P, P dense, b, constant */
#define SIGNATURES(suffix, real) \
    {"logistic_density_" suffix, "iiii" FORM(real) "pppp->v"}, \
    {"logistic_leapfrog_" suffix, "iiiiii" FORM(real) "pippppipp->v"}, \
    {"logistic_nuts_" suffix, "iiiii" FORM(real) "pi" real "ippppppp->v"}, \
    {"compiled_density_" suffix, "iiipippp->v"}, \
    {"compiled_leapfrog_" suffix, "iiiipipippppipp->v"}, \
    {"compiled_nuts_" suffix, "iiipipi" real "ippppppp->v"}, \
    {"compiled_scratch_" suffix, "pi->i"},
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
