/* Neal's funnel (bayesx.targets.toy, name funnel) as a density for the NUTS kernel (nuts.h), in
 * k dimensions: v = u_0 ~ N(0, 3^2) and x_j = u_j | v ~ N(0, e^v) for j = 1 .. k - 1. With S = sum_j x_j^2,
 *     log pi  = -v^2 / 18 - e^{-v} S / 2 - (k - 1) v / 2 + constant
 *     d/dv    = -v / 9 + e^{-v} S / 2 - (k - 1) / 2,      d/dx_j = -x_j e^{-v}
 * The constant (the normalizers, -log 3 - k log(2 pi) / 2) comes from the caller. Its gradient costs
 * O(k), so on PyTorch a NUTS leaf is all dispatch; here it is all arithmetic. Included once per
 * precision by logistic_leapfrog.c, after nuts.h. */

typedef struct { REAL constant; } CAT(funnel_model, SUFFIX);

static REAL CAT(funnel_log_prob_grad, SUFFIX)(const void *model, int k, const REAL *u, REAL *g, REAL *scratch) {
    (void)scratch;
    const REAL v = u[0], w = EXP(-v), half_rest = (REAL)0.5 * (REAL)(k - 1);
    REAL s = 0;
    for (int j = 1; j < k; j++) {
        s += u[j] * u[j];
        g[j] = -u[j] * w;
    }
    g[0] = -v / (REAL)9 + (REAL)0.5 * w * s - half_rest;
    return ((const CAT(funnel_model, SUFFIX) *)model)->constant - v * v / (REAL)18 - (REAL)0.5 * w * s - half_rest * v;
}

/* log pi and its gradient at every chain's point u (chains x k). */
void CAT(funnel_density, SUFFIX)(int chains, int k, REAL constant, const REAL *u_all, REAL *g_all, REAL *log_prob) {
    const CAT(funnel_model, SUFFIX) model = {constant};
    for (int ch = 0; ch < chains; ch++)
        log_prob[ch] = CAT(funnel_log_prob_grad, SUFFIX)(&model, k, u_all + (size_t)ch * k, g_all + (size_t)ch * k, NULL);
}

/* One NUTS transition of every chain; the arguments after `constant` are those of logistic_nuts. */
void CAT(funnel_nuts, SUFFIX)(int threads, int chains, int k, REAL constant, const REAL *inv_mass, int mass_dense,
                              REAL eps, int max_depth, const uint64_t *seeds, REAL *u_all, const REAL *p_all,
                              REAL *g_all, REAL *lp_all, REAL *info, int *failed) {
    const CAT(funnel_model, SUFFIX) model = {constant};
    const DENSITY density = {CAT(funnel_log_prob_grad, SUFFIX), NULL, &model, 0};
    CAT(nuts_chains, SUFFIX)(threads, 1, chains, k, &density, inv_mass, mass_dense, eps, max_depth, seeds, u_all, p_all,
                             g_all, lp_all, info, failed);
}
