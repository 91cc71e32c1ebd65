/* Body of the fused leapfrog trajectory for a Gaussian-prior logistic-regression density.
 * Included twice by logistic_leapfrog.c, with REAL = double / float and SUFFIX = f64 / f32.
 *
 * Density, for u in R^k (one chain):
 *     l       = c + A u                                  (n logits; A is n x k, given as A^T)
 *     log pi  = sum_i [y_i l_i - softplus(l_i)] - u^T P u / 2 - b^T u      (+ a constant)
 *     grad    = A^T (y - sigmoid(l)) - P u - b
 * Kinetic energy K(p) = p^T M^-1 p / 2.  P and M^-1 are dense (k x k) or diagonal (k).
 * One trajectory of L leapfrog steps of size eps, with the inner momentum half steps fused:
 *     p += eps/2 grad(u);  repeat L times { u += eps M^-1 p;  p += eps grad(u) }  (last: eps/2)
 */

#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)

/* r <- y - sigmoid(c + A u); returns sum_i [y_i l_i - softplus(l_i)] when want_log_lik. */
static REAL CAT(residual, SUFFIX)(int n, int k, const REAL *restrict At, const REAL *restrict c,
                                  const REAL *restrict y, const REAL *restrict u, REAL *restrict r,
                                  int want_log_lik) {
    for (int i = 0; i < n; i++) r[i] = c ? c[i] : (REAL)0;
    for (int j = 0; j < k; j++) {
        const REAL *restrict a = At + (size_t)j * n;
        const REAL uj = u[j];
        for (int i = 0; i < n; i++) r[i] += a[i] * uj;
    }
    REAL log_lik = 0;
    if (want_log_lik) {
        for (int i = 0; i < n; i++) {
            const REAL l = r[i];
            const REAL pos = l > 0 ? l : (REAL)0;
            log_lik += y[i] * l - (pos + LOG((REAL)1 + EXP(-(l > 0 ? l : -l))));
        }
    }
    /* sigmoid(l) from e = exp(-|l|) <= 1, so nothing overflows (fast-math may not keep inf) */
    for (int i = 0; i < n; i++) {
        const REAL l = r[i];
        const REAL e = EXP(-(l > 0 ? l : -l));
        const REAL inv = (REAL)1 / ((REAL)1 + e);
        r[i] = y[i] - (l > 0 ? inv : e * inv);
    }
    return log_lik;
}

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

/* g <- grad log pi(u); returns log pi(u) without its constant when want_log_prob. */
static REAL CAT(gradient, SUFFIX)(int n, int k, const REAL *restrict At, const REAL *restrict c,
                                  const REAL *restrict y, const REAL *restrict prec, int prec_dense,
                                  const REAL *restrict shift, const REAL *restrict u, REAL *restrict g,
                                  REAL *restrict r, REAL *restrict pu, int want_log_prob) {
    const REAL log_lik = CAT(residual, SUFFIX)(n, k, At, c, y, u, r, want_log_prob);
    CAT(apply, SUFFIX)(k, prec, prec_dense, u, pu);
    REAL prior = 0;
    for (int j = 0; j < k; j++) {
        const REAL *restrict a = At + (size_t)j * n;
        REAL s = 0;
        for (int i = 0; i < n; i++) s += a[i] * r[i];
        const REAL bj = shift ? shift[j] : (REAL)0;
        g[j] = s - pu[j] - bj;
        prior += u[j] * ((REAL)0.5 * pu[j] + bj);
    }
    return log_lik - prior;
}

/* log pi (without the constant) and its gradient at every chain's point u (chains x k). work must
 * hold n + k numbers. */
void CAT(logistic_density, SUFFIX)(int chains, int n, int k, const REAL *At, const REAL *c, const REAL *y,
                                   const REAL *prec, int prec_dense, const REAL *shift, const REAL *u_all,
                                   REAL *g_all, REAL *log_prob, REAL *work) {
    for (int ch = 0; ch < chains; ch++)
        log_prob[ch] = CAT(gradient, SUFFIX)(n, k, At, c, y, prec, prec_dense, shift, u_all + (size_t)ch * k,
                                             g_all + (size_t)ch * k, work, work + n, 1);
}

/* Runs every chain's trajectory in place: u, p, g (chains x k) hold the start point, its momentum
 * and grad log pi there, and on return the end point, its momentum and gradient; log_prob
 * (chains) receives log pi at the end point (without the constant). eps holds one step size per
 * chain. work must hold n + 2 k numbers. */
void CAT(logistic_leapfrog, SUFFIX)(int chains, int n, int k, int steps, const REAL *At, const REAL *c,
                                    const REAL *y, const REAL *prec, int prec_dense, const REAL *shift,
                                    const REAL *inv_mass, int mass_dense, const REAL *eps, REAL *u_all,
                                    REAL *p_all, REAL *g_all, REAL *log_prob, REAL *work) {
    REAL *r = work, *v = work + n, *pu = work + n + k;
    for (int ch = 0; ch < chains; ch++) {
        REAL *u = u_all + (size_t)ch * k, *p = p_all + (size_t)ch * k, *g = g_all + (size_t)ch * k;
        const REAL e = eps[ch];
        REAL lp = 0;
        for (int j = 0; j < k; j++) p[j] += (REAL)0.5 * e * g[j];
        for (int s = 0; s < steps; s++) {
            CAT(apply, SUFFIX)(k, inv_mass, mass_dense, p, v);
            for (int j = 0; j < k; j++) u[j] += e * v[j];
            const int last = s == steps - 1;
            lp = CAT(gradient, SUFFIX)(n, k, At, c, y, prec, prec_dense, shift, u, g, r, pu, last);
            const REAL h = last ? (REAL)0.5 * e : e;
            for (int j = 0; j < k; j++) p[j] += h * g[j];
        }
        log_prob[ch] = lp;
    }
}

#undef CAT
#undef CAT_
