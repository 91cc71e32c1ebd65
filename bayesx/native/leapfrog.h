/* Leapfrog trajectories of every chain in one call, for any density with a native gradient (a DENSITY,
 * density.h). Included once per precision by kernels.c (REAL, SUFFIX as there), after density.h.
 *
 * Kinetic energy K(p) = p^T M^-1 p / 2, M^-1 dense (k x k) or diagonal (k). One trajectory of L steps of
 * size eps, the inner momentum half steps fused:
 *     p += eps/2 grad(u);  repeat L times { u += eps M^-1 p;  p += eps grad(u) }  (the last: eps/2)
 * log pi is asked of the density only at the ends; the inner steps need only its gradient. */

/* K(p) = p^T M^-1 p / 2, with v = M^-1 p written to v. */
static REAL CAT(kinetic, SUFFIX)(int k, const REAL *restrict inv_mass, int mass_dense, const REAL *restrict p,
                                 REAL *restrict v) {
    CAT(apply, SUFFIX)(k, inv_mass, mass_dense, p, v);
    REAL s = 0;
    for (int j = 0; j < k; j++) s += p[j] * v[j];
    return (REAL)0.5 * s;
}

/* Numbers one chain's trajectory needs: the density's scratch and M^-1 p. */
static size_t CAT(leapfrog_size, SUFFIX)(const DENSITY *density, int k) { return density->scratch + (size_t)k; }

/* Runs every chain's trajectory in place, the chains split over `threads` OpenMP threads, in groups of
 * `group` (1, or 2 in lock-step with their gradients evaluated together by log_prob_grad2: all chains
 * take the same number of steps, so a pair loses nothing). u, p (chains x k) hold the start point and
 * momentum and on return the end point and momentum; g (chains x k) holds grad log pi at the start when
 * start_known (else it is computed first) and on return the gradient at the end. out (4 x chains)
 * receives, per chain, log pi at the start and at the end and the Hamiltonian H = -log pi + K at the
 * start and at the end; with start_known the first row must already hold log pi at the start. eps holds
 * one step size per chain. work must hold threads x 2 x leapfrog_size(density, k) numbers. */
static void CAT(leapfrog_chains, SUFFIX)(int threads, int group, int chains, int k, const DENSITY *density, int steps,
                                         const REAL *inv_mass, int mass_dense, const REAL *eps, REAL *u_all,
                                         REAL *p_all, REAL *g_all, int start_known, REAL *out, REAL *work) {
    if (group != 2 || !density->log_prob_grad2) group = 1;
    const int tasks = (chains + group - 1) / group;
    const size_t size = CAT(leapfrog_size, SUFFIX)(density, k);
    #pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (int task = 0; task < tasks; task++) {
        const int first = task * group, members = first + group <= chains ? group : chains - first;
        REAL *w = work + (size_t)THREAD_ID * 2 * size;
        REAL *scratch[2], *v[2], *u[2], *p[2], *g[2], e[2], lp[2] = {0, 0};
        for (int m = 0; m < members; m++) {
            const int ch = first + m;
            scratch[m] = w + m * size;
            v[m] = scratch[m] + density->scratch;
            u[m] = u_all + (size_t)ch * k;
            p[m] = p_all + (size_t)ch * k;
            g[m] = g_all + (size_t)ch * k;
            e[m] = eps[ch];
        }
        /* the gradient at every member's u, and log pi into lp when want */
        #define GRADIENTS(want)                                                                                   \
            if (members == 2)                                                                                     \
                lp[0] = density->log_prob_grad2(density->model, k, u[0], u[1], g[0], g[1], &lp[1], scratch[0],    \
                                                scratch[1], want);                                                \
            else                                                                                                  \
                lp[0] = density->log_prob_grad(density->model, k, u[0], g[0], scratch[0], want)
        if (!start_known) {
            GRADIENTS(1);
            for (int m = 0; m < members; m++) out[first + m] = lp[m];
        }
        for (int m = 0; m < members; m++) {
            out[2 * chains + first + m] = CAT(kinetic, SUFFIX)(k, inv_mass, mass_dense, p[m], v[m]) - out[first + m];
            for (int j = 0; j < k; j++) p[m][j] += (REAL)0.5 * e[m] * g[m][j];
        }
        for (int s = 0; s < steps; s++) {
            for (int m = 0; m < members; m++) {
                CAT(apply, SUFFIX)(k, inv_mass, mass_dense, p[m], v[m]);
                for (int j = 0; j < k; j++) u[m][j] += e[m] * v[m][j];
            }
            const int final_step = s == steps - 1;
            GRADIENTS(final_step);
            for (int m = 0; m < members; m++) {
                const REAL h = final_step ? (REAL)0.5 * e[m] : e[m];
                for (int j = 0; j < k; j++) p[m][j] += h * g[m][j];
            }
        }
        #undef GRADIENTS
        for (int m = 0; m < members; m++) {
            const int ch = first + m;
            out[chains + ch] = lp[m];
            out[3 * chains + ch] = CAT(kinetic, SUFFIX)(k, inv_mass, mass_dense, p[m], v[m]) - out[chains + ch];
        }
    }
}
