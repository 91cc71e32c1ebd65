/* What every native kernel shares: the density interface and products with a metric. Included once per
 * precision by kernels.c (REAL, SUFFIX as there), before the kernels (nuts.h, leapfrog.h) and the
 * densities (logistic_form.h). */

/* out <- M u for M dense (k x k, row-major) or diagonal (k). */
static void CAT(apply, SUFFIX)(int k, const REAL *restrict m, int dense, const REAL *restrict u, REAL *restrict out) {
    if (dense) {
        for (int j = 0; j < k; j++) {
            const REAL *restrict row = m + (size_t)j * k;
            REAL s = 0;
            for (int i = 0; i < k; i++) s += row[i] * u[i];
            out[j] = s;
        }
    } else {
        for (int j = 0; j < k; j++) out[j] = m[j] * u[j];
    }
}

/* A density the native kernels (NUTS, nuts.h; leapfrog trajectories, leapfrog.h) move on, whatever it is:
 * log_prob_grad(model, k, u, g, scratch, want_log_prob) sets g <- grad log pi(u) and returns log pi(u)
 * with its constant when want_log_prob (else the return value may be anything: a trajectory's inner steps
 * need only the gradient), using `scratch` numbers of scratch memory. log_prob_grad2 (or NULL) does the
 * same for two points at once (a, b; log pi(b) written to *lp_b, each with its own scratch): where a
 * density's gradient streams data from memory, two points in one pass cost much less than two passes. */
typedef struct {
    REAL (*log_prob_grad)(const void *model, int k, const REAL *u, REAL *g, REAL *scratch, int want_log_prob);
    REAL (*log_prob_grad2)(const void *model, int k, const REAL *ua, const REAL *ub, REAL *ga, REAL *gb, REAL *lp_b,
                           REAL *scratch_a, REAL *scratch_b, int want_log_prob);
    const void *model;
    size_t scratch;
} CAT(density, SUFFIX);
#define DENSITY CAT(density, SUFFIX)

