/* The logistic form (bayesx.targets.forms.LogisticForm) as a native DENSITY (density.h), and its exported
 * entry points: its density and gradient, leapfrog trajectories (leapfrog.h) and NUTS transitions (nuts.h)
 * on it. Included once per precision by kernels.c (REAL = double / float, SUFFIX = f64 / f32), after the
 * kernels. Nothing here moves a chain: the kernels do, on whatever DENSITY they are given.
 *
 * Density, for u in R^k (one chain):
 *     l       = c + A u                                  (n logits; A is n x k, given as A^T)
 *     log pi  = sum_i [y_i l_i - softplus(l_i)] - u^T P u / 2 - b^T u      (+ a constant)
 *     grad    = A^T (y - sigmoid(l)) - P u - b
 * P is dense (k x k) or diagonal (k).
 */

/* The two products with A take four rows of A^T at a time, on whole 32-byte SIMD vectors (GCC/Clang
 * vector extensions: AVX2's width; the compiler splits them where the machine's vectors are narrower).
 * 64-byte vectors, which the compiler splits into two AVX2 halves, made the products 3x slower on this
 * project's AMD EPYC (0.73 against 0.24 ns per design entry and gradient in double, 550 x 500,
 * measured 2026-11-24); blocking the rows so that a slab of A^T stays in L2 between the two products
 * was slower still, so the products are compute-bound, not memory-bound. Four rows at once
 * read r once per four rows and keep four independent sums in flight, where one dot product at a
 * time waits on the latency of its own additions. The last 1-3 rows repeat a row (with weight 0, or
 * a discarded sum) so that every group runs the same code. */
typedef REAL CAT(vec, SUFFIX) __attribute__((vector_size(32)));
#define VEC CAT(vec, SUFFIX)
#define LANES ((int)(32 / sizeof(REAL)))

static inline VEC CAT(load, SUFFIX)(const REAL *p) { VEC v; __builtin_memcpy(&v, p, sizeof v); return v; }
static inline void CAT(store, SUFFIX)(REAL *p, VEC v) { __builtin_memcpy(p, &v, sizeof v); }
static inline REAL CAT(hsum, SUFFIX)(VEC v) {
    REAL s = 0;
    for (int b = 0; b < LANES; b++) s += v[b];
    return s;
}

/* The rows j .. j+3 of A^T (k x n), the missing ones (past k) replaced by row k - 1. */
static inline void CAT(four_rows, SUFFIX)(int n, int k, int j, const REAL *At, const REAL *a[4]) {
    for (int t = 0; t < 4; t++) a[t] = At + (size_t)(j + t < k ? j + t : k - 1) * n;
}

/* r += A u, for A^T given as At (k x n, row-major). */
static void CAT(add_product, SUFFIX)(int n, int k, const REAL *restrict At, const REAL *restrict u, REAL *restrict r) {
    const int whole = n - n % LANES;
    for (int j = 0; j < k; j += 4) {
        const REAL *a[4];
        CAT(four_rows, SUFFIX)(n, k, j, At, a);
        const REAL u0 = u[j], u1 = j + 1 < k ? u[j + 1] : 0, u2 = j + 2 < k ? u[j + 2] : 0, u3 = j + 3 < k ? u[j + 3] : 0;
        for (int i = 0; i < whole; i += LANES) {
            VEC x = CAT(load, SUFFIX)(r + i);
            x += CAT(load, SUFFIX)(a[0] + i) * u0 + CAT(load, SUFFIX)(a[1] + i) * u1
               + CAT(load, SUFFIX)(a[2] + i) * u2 + CAT(load, SUFFIX)(a[3] + i) * u3;
            CAT(store, SUFFIX)(r + i, x);
        }
        for (int i = whole; i < n; i++) r[i] += a[0][i] * u0 + a[1][i] * u1 + a[2][i] * u2 + a[3][i] * u3;
    }
}

/* g <- A^T r. */
static void CAT(transpose_product, SUFFIX)(int n, int k, const REAL *restrict At, const REAL *restrict r,
                                           REAL *restrict g) {
    const int whole = n - n % LANES;
    for (int j = 0; j < k; j += 4) {
        const REAL *a[4];
        CAT(four_rows, SUFFIX)(n, k, j, At, a);
        VEC s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
        for (int i = 0; i < whole; i += LANES) {
            const VEC x = CAT(load, SUFFIX)(r + i);
            s0 += CAT(load, SUFFIX)(a[0] + i) * x;
            s1 += CAT(load, SUFFIX)(a[1] + i) * x;
            s2 += CAT(load, SUFFIX)(a[2] + i) * x;
            s3 += CAT(load, SUFFIX)(a[3] + i) * x;
        }
        REAL t[4] = {CAT(hsum, SUFFIX)(s0), CAT(hsum, SUFFIX)(s1), CAT(hsum, SUFFIX)(s2), CAT(hsum, SUFFIX)(s3)};
        for (int i = whole; i < n; i++)
            for (int q = 0; q < 4; q++) t[q] += a[q][i] * r[i];
        for (int q = 0; q < 4 && j + q < k; q++) g[j + q] = t[q];
    }
}

/* The two products for two points at once (ra += A ua, rb += A ub; ga <- A^T ra, gb <- A^T rb): each
 * group of four rows of A^T is loaded once for both, so a pair costs about 0.6x two single products
 * where the design streams from L3 (measured 2026-11-24, 550 x 500 double: 0.067 against 0.11 ns per
 * entry and point) and 0.65x where it sits in L2 (digits, 288 x 64). */
static void CAT(add_product2, SUFFIX)(int n, int k, const REAL *restrict At, const REAL *restrict ua,
                                      const REAL *restrict ub, REAL *restrict ra, REAL *restrict rb) {
    const int whole = n - n % LANES;
    for (int j = 0; j < k; j += 4) {
        const REAL *a[4];
        CAT(four_rows, SUFFIX)(n, k, j, At, a);
        REAL wa[4], wb[4];
        for (int t = 0; t < 4; t++) {
            wa[t] = j + t < k ? ua[j + t] : 0;
            wb[t] = j + t < k ? ub[j + t] : 0;
        }
        for (int i = 0; i < whole; i += LANES) {
            const VEC a0 = CAT(load, SUFFIX)(a[0] + i), a1 = CAT(load, SUFFIX)(a[1] + i);
            const VEC a2 = CAT(load, SUFFIX)(a[2] + i), a3 = CAT(load, SUFFIX)(a[3] + i);
            VEC x = CAT(load, SUFFIX)(ra + i), z = CAT(load, SUFFIX)(rb + i);
            x += a0 * wa[0] + a1 * wa[1] + a2 * wa[2] + a3 * wa[3];
            z += a0 * wb[0] + a1 * wb[1] + a2 * wb[2] + a3 * wb[3];
            CAT(store, SUFFIX)(ra + i, x);
            CAT(store, SUFFIX)(rb + i, z);
        }
        for (int i = whole; i < n; i++) {
            ra[i] += a[0][i] * wa[0] + a[1][i] * wa[1] + a[2][i] * wa[2] + a[3][i] * wa[3];
            rb[i] += a[0][i] * wb[0] + a[1][i] * wb[1] + a[2][i] * wb[2] + a[3][i] * wb[3];
        }
    }
}

static void CAT(transpose_product2, SUFFIX)(int n, int k, const REAL *restrict At, const REAL *restrict ra,
                                            const REAL *restrict rb, REAL *restrict ga, REAL *restrict gb) {
    const int whole = n - n % LANES;
    for (int j = 0; j < k; j += 4) {
        const REAL *a[4];
        CAT(four_rows, SUFFIX)(n, k, j, At, a);
        VEC s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0}, t0 = {0}, t1 = {0}, t2 = {0}, t3 = {0};
        for (int i = 0; i < whole; i += LANES) {
            const VEC x = CAT(load, SUFFIX)(ra + i), z = CAT(load, SUFFIX)(rb + i);
            const VEC a0 = CAT(load, SUFFIX)(a[0] + i), a1 = CAT(load, SUFFIX)(a[1] + i);
            const VEC a2 = CAT(load, SUFFIX)(a[2] + i), a3 = CAT(load, SUFFIX)(a[3] + i);
            s0 += a0 * x; s1 += a1 * x; s2 += a2 * x; s3 += a3 * x;
            t0 += a0 * z; t1 += a1 * z; t2 += a2 * z; t3 += a3 * z;
        }
        REAL sa[4] = {CAT(hsum, SUFFIX)(s0), CAT(hsum, SUFFIX)(s1), CAT(hsum, SUFFIX)(s2), CAT(hsum, SUFFIX)(s3)};
        REAL sb[4] = {CAT(hsum, SUFFIX)(t0), CAT(hsum, SUFFIX)(t1), CAT(hsum, SUFFIX)(t2), CAT(hsum, SUFFIX)(t3)};
        for (int i = whole; i < n; i++)
            for (int q = 0; q < 4; q++) {
                sa[q] += a[q][i] * ra[i];
                sb[q] += a[q][i] * rb[i];
            }
        for (int q = 0; q < 4 && j + q < k; q++) {
            ga[j + q] = sa[q];
            gb[j + q] = sb[q];
        }
    }
}

/* -|l|, floored at EXP_FLOOR: below it exp's result would leave the normal range, where the vector
 * exp of libmvec falls back to scalar code for the whole vector (4x slower steps were measured with
 * logits in the thousands). The floor changes sigmoid(l) and softplus(l) by less than exp(EXP_FLOOR). */
static inline REAL CAT(neg_abs, SUFFIX)(REAL l) {
    const REAL m = l > 0 ? -l : l;
    return m > EXP_FLOOR ? m : EXP_FLOOR;
}

/* r <- y - sigmoid(l) from the logits l, in place; returns sum_i [y_i l_i - softplus(l_i)] when
 * want_log_lik. */
static REAL CAT(residual_of_logits, SUFFIX)(int n, const REAL *restrict y, REAL *restrict r, int want_log_lik) {
    REAL log_lik = 0;
    if (want_log_lik) {
        for (int i = 0; i < n; i++) {
            const REAL l = r[i];
            const REAL pos = l > 0 ? l : (REAL)0;
            log_lik += y[i] * l - (pos + LOG((REAL)1 + EXP(CAT(neg_abs, SUFFIX)(l))));
        }
    }
    /* sigmoid(l) from e = exp(-|l|) <= 1, so nothing overflows (fast-math may not keep inf) */
    for (int i = 0; i < n; i++) {
        const REAL l = r[i];
        const REAL e = EXP(CAT(neg_abs, SUFFIX)(l));
        const REAL inv = (REAL)1 / ((REAL)1 + e);
        r[i] = y[i] - (l > 0 ? inv : e * inv);
    }
    return log_lik;
}

/* r <- y - sigmoid(c + A u); returns sum_i [y_i l_i - softplus(l_i)] when want_log_lik. */
static REAL CAT(residual, SUFFIX)(int n, int k, const REAL *restrict At, const REAL *restrict c,
                                  const REAL *restrict y, const REAL *restrict u, REAL *restrict r,
                                  int want_log_lik) {
    for (int i = 0; i < n; i++) r[i] = c ? c[i] : (REAL)0;
    CAT(add_product, SUFFIX)(n, k, At, u, r);
    return CAT(residual_of_logits, SUFFIX)(n, y, r, want_log_lik);
}

/* g -= P u + b (P u in pu); returns the prior's u^T P u / 2 + b^T u. */
static REAL CAT(add_prior, SUFFIX)(int k, const REAL *restrict prec, int prec_dense, const REAL *restrict shift,
                                   const REAL *restrict u, REAL *restrict g, REAL *restrict pu) {
    CAT(apply, SUFFIX)(k, prec, prec_dense, u, pu);
    REAL prior = 0;
    for (int j = 0; j < k; j++) {
        const REAL bj = shift ? shift[j] : (REAL)0;
        g[j] -= pu[j] + bj;
        prior += u[j] * ((REAL)0.5 * pu[j] + bj);
    }
    return prior;
}

/* g <- grad log pi(u); returns log pi(u) without its constant when want_log_prob. Not inlined: its callers
 * flush subnormals around it (common.h), and no arithmetic may move across that. */
__attribute__((noinline)) static REAL CAT(gradient, SUFFIX)(int n, int k, const REAL *restrict At, const REAL *restrict c,
                                  const REAL *restrict y, const REAL *restrict prec, int prec_dense,
                                  const REAL *restrict shift, const REAL *restrict u, REAL *restrict g,
                                  REAL *restrict r, REAL *restrict pu, int want_log_prob) {
    const REAL log_lik = CAT(residual, SUFFIX)(n, k, At, c, y, u, r, want_log_prob);
    CAT(transpose_product, SUFFIX)(n, k, At, r, g);
    return log_lik - CAT(add_prior, SUFFIX)(k, prec, prec_dense, shift, u, g, pu);
}

/* gradient() for two points at once, the design read once per product; returns log pi(ua) and writes
 * log pi(ub) to *lp_b (both without the constant when want_log_prob, else 0). */
__attribute__((noinline)) static REAL CAT(gradient2, SUFFIX)(int n, int k, const REAL *restrict At, const REAL *restrict c,
                                   const REAL *restrict y, const REAL *restrict prec, int prec_dense,
                                   const REAL *restrict shift, const REAL *ua, const REAL *ub, REAL *ga, REAL *gb,
                                   REAL *ra, REAL *rb, REAL *pua, REAL *pub, int want_log_prob, REAL *lp_b) {
    for (int i = 0; i < n; i++) ra[i] = rb[i] = c ? c[i] : (REAL)0;
    CAT(add_product2, SUFFIX)(n, k, At, ua, ub, ra, rb);
    const REAL lik_a = CAT(residual_of_logits, SUFFIX)(n, y, ra, want_log_prob);
    const REAL lik_b = CAT(residual_of_logits, SUFFIX)(n, y, rb, want_log_prob);
    CAT(transpose_product2, SUFFIX)(n, k, At, ra, rb, ga, gb);
    *lp_b = lik_b - CAT(add_prior, SUFFIX)(k, prec, prec_dense, shift, ub, gb, pub);
    return lik_a - CAT(add_prior, SUFFIX)(k, prec, prec_dense, shift, ua, ga, pua);
}

/* log pi (plus constant) and its gradient at every chain's point u (chains x k), the chains split
 * over `threads` OpenMP threads. work must hold threads x logistic_work_size(n, k) numbers. */
void CAT(logistic_density, SUFFIX)(int threads, int chains, int n, int k, const REAL *At, const REAL *c,
                                   const REAL *y, const REAL *prec, int prec_dense, const REAL *shift,
                                   REAL constant, const REAL *u_all, REAL *g_all, REAL *log_prob, REAL *work) {
    #pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (int ch = 0; ch < chains; ch++) {
        REAL *w = work + (size_t)THREAD_ID * logistic_work_size(n, k);
        FLUSH_SUBNORMALS_BEGIN
        log_prob[ch] = constant + CAT(gradient, SUFFIX)(n, k, At, c, y, prec, prec_dense, shift, u_all + (size_t)ch * k,
                                                        g_all + (size_t)ch * k, w, w + n, 1);
        FLUSH_SUBNORMALS_END
    }
}

/* The logistic form as a DENSITY; scratch: r (n) and P u (k). */
typedef struct {
    int n;
    const REAL *At, *c, *y, *prec;
    int prec_dense;
    const REAL *shift;
    REAL constant;
} CAT(logistic_model, SUFFIX);

static REAL CAT(logistic_log_prob_grad, SUFFIX)(const void *model, int k, const REAL *u, REAL *g, REAL *scratch,
                                                int want_log_prob) {
    const CAT(logistic_model, SUFFIX) *m = model;
    FLUSH_SUBNORMALS_BEGIN
    const REAL lp = CAT(gradient, SUFFIX)(m->n, k, m->At, m->c, m->y, m->prec, m->prec_dense, m->shift, u, g, scratch,
                                          scratch + m->n, want_log_prob);
    FLUSH_SUBNORMALS_END
    return m->constant + lp;
}

/* Two points' log pi and gradients, the design read once per product (gradient2). */
static REAL CAT(logistic_log_prob_grad2, SUFFIX)(const void *model, int k, const REAL *ua, const REAL *ub, REAL *ga,
                                                 REAL *gb, REAL *lp_b, REAL *scratch_a, REAL *scratch_b,
                                                 int want_log_prob) {
    const CAT(logistic_model, SUFFIX) *m = model;
    FLUSH_SUBNORMALS_BEGIN
    const REAL lp_a = CAT(gradient2, SUFFIX)(m->n, k, m->At, m->c, m->y, m->prec, m->prec_dense, m->shift, ua, ub, ga, gb,
                                             scratch_a, scratch_b, scratch_a + m->n, scratch_b + m->n, want_log_prob,
                                             lp_b);
    FLUSH_SUBNORMALS_END
    *lp_b += m->constant;
    return m->constant + lp_a;
}

/* The logistic form's model and DENSITY, built on the caller's stack. */
#define LOGISTIC_DENSITY(model, density)                                                                          \
    const CAT(logistic_model, SUFFIX) model = {n, At, c, y, prec, prec_dense, shift, constant};                   \
    const DENSITY density = {CAT(logistic_log_prob_grad, SUFFIX), CAT(logistic_log_prob_grad2, SUFFIX), &model,   \
                             (size_t)n + (size_t)k}

/* Leapfrog trajectories of every chain on the logistic form (leapfrog.h's leapfrog_chains; pairs: two chains
 * in lock-step per task). work must hold threads x 2 x logistic_work_size(n, k) numbers. */
void CAT(logistic_leapfrog, SUFFIX)(int threads, int pairs, int chains, int n, int k, int steps, const REAL *At,
                                    const REAL *c, const REAL *y, const REAL *prec, int prec_dense,
                                    const REAL *shift, REAL constant, const REAL *inv_mass, int mass_dense,
                                    const REAL *eps, REAL *u_all, REAL *p_all, REAL *g_all, int start_known,
                                    REAL *out, REAL *work) {
    LOGISTIC_DENSITY(model, density);
    CAT(leapfrog_chains, SUFFIX)(threads, pairs ? 2 : 1, chains, k, &density, steps, inv_mass, mass_dense, eps, u_all,
                                 p_all, g_all, start_known, out, work);
}

/* One NUTS transition of every chain (nuts.h; pairs: grow two chains' trees in lock-step per task, their
 * gradients evaluated together). u (chains x k), g and lp hold each chain's point, gradient and log pi
 * (constant included); on return the drawn point's. p (chains x k) is the momentum drawn for this
 * transition. info (6 x chains) receives the mean acceptance statistic over the leaves, whether the
 * draw moved, H at the draw, divergence, leapfrog steps and doublings. *failed is set when scratch
 * memory cannot be had. */
void CAT(logistic_nuts, SUFFIX)(int threads, int pairs, int chains, int n, int k, const REAL *At, const REAL *c,
                                const REAL *y, const REAL *prec, int prec_dense, const REAL *shift, REAL constant,
                                const REAL *inv_mass, int mass_dense, REAL eps, int max_depth, const uint64_t *seeds,
                                REAL *u_all, const REAL *p_all, REAL *g_all, REAL *lp_all, REAL *info, int *failed) {
    LOGISTIC_DENSITY(model, density);
    CAT(nuts_chains, SUFFIX)(threads, pairs ? 2 : 1, chains, k, &density, inv_mass, mass_dense, eps, max_depth, seeds,
                             u_all, p_all, g_all, lp_all, info, failed);
}

#undef LOGISTIC_DENSITY
#undef VEC
#undef LANES
