/* Fused leapfrog trajectories for Gaussian-prior logistic regression (see logistic_leapfrog.h),
 * in double and single precision. Built at first use by bayesx/native/build.py. */
#include <math.h>
#include <stddef.h>

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

#define REAL double
#define SUFFIX f64
#define EXP exp
#define LOG log
#define EXP_FLOOR (-708.0)   /* exp(-708) = 3.3e-308, still a normal double */
#include "logistic_leapfrog.h"
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
#include "logistic_leapfrog.h"
