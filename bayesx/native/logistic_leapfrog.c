/* Fused leapfrog trajectories for Gaussian-prior logistic regression (see logistic_leapfrog.h),
 * in double and single precision. Built at first use by bayesx/native/build.py. */
#include <math.h>
#include <stddef.h>

#define REAL double
#define SUFFIX f64
#define EXP exp
#define LOG log
#include "logistic_leapfrog.h"
#undef REAL
#undef SUFFIX
#undef EXP
#undef LOG

#define REAL float
#define SUFFIX f32
#define EXP expf
#define LOG logf
#include "logistic_leapfrog.h"
