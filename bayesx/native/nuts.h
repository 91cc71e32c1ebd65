/* NUTS: one transition of every chain, each chain on its own, for any density with a native gradient.
 * Included once per precision by logistic_leapfrog.c (REAL, SUFFIX, EXP, LOG as there), before the
 * densities (logistic_leapfrog.h, funnel.h) that use it.
 *
 * The algorithm of bayesx/kernels/nuts.py (multinomial sampling, Betancourt's generalized U-turn
 * criterion checked on the whole trajectory after each doubling and on every balanced sub-subtree,
 * a subtree with a U-turn or a divergence discarded), but per chain: a chain whose tree stops early
 * frees its thread for the next chain (dynamic schedule) instead of waiting in lock-step. The
 * momentum comes from the caller; the uniforms (direction, progressive sampling) from nuts_rng. */

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

/* A density NUTS can sample: log_prob_grad(model, k, u, g, scratch) sets g <- grad log pi(u) and returns
 * log pi(u) with its constant, using `scratch` numbers of scratch memory. */
typedef struct {
    REAL (*log_prob_grad)(const void *model, int k, const REAL *u, REAL *g, REAL *scratch);
    const void *model;
    size_t scratch;
} CAT(density, SUFFIX);
#define DENSITY CAT(density, SUFFIX)

#define NUTS_DIVERGENCE ((REAL)1000)
#define NUTS_BIG ((REAL)1e30)  /* an energy error that is not finite: divergent, weight exp(-1e30) = 0 */

typedef struct { REAL *q, *p, *g, *v; REAL lp; } CAT(phase, SUFFIX);
#define PHASE CAT(phase, SUFFIX)

static inline void CAT(copy_phase, SUFFIX)(int k, PHASE *dst, const PHASE *src) {
    memcpy(dst->q, src->q, sizeof(REAL) * k);
    memcpy(dst->p, src->p, sizeof(REAL) * k);
    memcpy(dst->g, src->g, sizeof(REAL) * k);
    memcpy(dst->v, src->v, sizeof(REAL) * k);
    dst->lp = src->lp;
}

static inline REAL CAT(dot, SUFFIX)(int k, const REAL *a, const REAL *b) {
    REAL s = 0;
    for (int j = 0; j < k; j++) s += a[j] * b[j];
    return s;
}

/* the generalized criterion: rho . v_a <= 0 or rho . v_b <= 0 */
static inline int CAT(turning, SUFFIX)(int k, const REAL *rho, const REAL *va, const REAL *vb) {
    return CAT(dot, SUFFIX)(k, rho, va) <= 0 || CAT(dot, SUFFIX)(k, rho, vb) <= 0;
}

/* log(e^a + e^b) for a weight sum that may be empty (has_a = 0) */
static inline REAL CAT(log_add, SUFFIX)(int has_a, REAL a, REAL b) {
    if (!has_a) return b;
    const REAL hi = a > b ? a : b, lo = a > b ? b : a;
    return hi + LOG((REAL)1 + EXP(lo - hi));
}

/* Numbers one chain's tree needs: the density's scratch and 18 + 2 (max_depth + 1) vectors. */
static size_t CAT(nuts_size, SUFFIX)(size_t scratch, int k, int max_depth) {
    return scratch + (size_t)k * (18 + 2 * ((size_t)max_depth + 1));
}

/* u (chains x k), g and lp hold each chain's point, gradient and log pi (constant included); on return
 * the drawn point's. p (chains x k) is the momentum drawn for this transition. info (6 x chains)
 * receives the mean acceptance statistic over the leaves, whether the draw moved, H at the draw,
 * divergence, leapfrog steps and doublings. *failed is set when scratch memory cannot be had. */
static void CAT(nuts_chains, SUFFIX)(int threads, int chains, int k, const DENSITY *density, const REAL *inv_mass,
                                     int mass_dense, REAL eps, int max_depth, const uint64_t *seeds, REAL *u_all,
                                     const REAL *p_all, REAL *g_all, REAL *lp_all, REAL *info, int *failed) {
    #pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1)
    for (int ch = 0; ch < chains; ch++) {
        REAL *mem = malloc(sizeof(REAL) * CAT(nuts_size, SUFFIX)(density->scratch, k, max_depth));
        if (!mem) { *failed = 1; continue; }
        REAL *scratch = mem, *vecs = mem + density->scratch;
        #define VECTOR(i) (vecs + (size_t)(i) * k)
        PHASE left = {VECTOR(0), VECTOR(1), VECTOR(2), VECTOR(3), 0}, right = {VECTOR(4), VECTOR(5), VECTOR(6), VECTOR(7), 0};
        PHASE cur = {VECTOR(8), VECTOR(9), VECTOR(10), VECTOR(11), 0};
        REAL *draw_q = VECTOR(12), *draw_g = VECTOR(13), *sub_q = VECTOR(14), *sub_g = VECTOR(15);
        REAL *rho = VECTOR(16), *sub_rho = VECTOR(17);
        REAL *node_rho = VECTOR(18), *node_first = VECTOR(18 + max_depth + 1);  /* stacks of (rho, first velocity) */
        #undef VECTOR
        REAL *q0 = u_all + (size_t)ch * k, *g0 = g_all + (size_t)ch * k;
        const REAL *p0 = p_all + (size_t)ch * k;
        nuts_rng rng;
        nuts_rng_seed(&rng, seeds[ch]);

        memcpy(left.q, q0, sizeof(REAL) * k);
        memcpy(left.p, p0, sizeof(REAL) * k);
        memcpy(left.g, g0, sizeof(REAL) * k);
        CAT(apply, SUFFIX)(k, inv_mass, mass_dense, p0, left.v);
        left.lp = lp_all[ch];
        const REAL h0 = -left.lp + (REAL)0.5 * CAT(dot, SUFFIX)(k, p0, left.v);
        CAT(copy_phase, SUFFIX)(k, &right, &left);
        memcpy(rho, p0, sizeof(REAL) * k);
        memcpy(draw_q, q0, sizeof(REAL) * k);
        memcpy(draw_g, g0, sizeof(REAL) * k);
        REAL draw_lp = left.lp, draw_h = h0, sub_lp = 0, sub_h = 0;
        REAL log_w = 0, accept_sum = 0;  /* the starting leaf has weight exp(H0 - H0) = 1 */
        long n_leaves = 0;
        int depth = 0, divergent = 0, moved = 0;

        for (int d = 0; d < max_depth; d++) {
            const int forward = nuts_uniform(&rng) < 0.5;
            const REAL e = forward ? eps : -eps;
            PHASE *edge = forward ? &right : &left;
            CAT(copy_phase, SUFFIX)(k, &cur, edge);
            memset(sub_rho, 0, sizeof(REAL) * k);
            REAL sub_log_w = 0;
            int has_weight = 0, broken = 0, top = 0;
            for (long i = 0; i < (1L << d); i++) {
                for (int j = 0; j < k; j++) cur.p[j] += (REAL)0.5 * e * cur.g[j];
                CAT(apply, SUFFIX)(k, inv_mass, mass_dense, cur.p, cur.v);
                for (int j = 0; j < k; j++) cur.q[j] += e * cur.v[j];
                cur.lp = density->log_prob_grad(density->model, k, cur.q, cur.g, scratch);
                for (int j = 0; j < k; j++) cur.p[j] += (REAL)0.5 * e * cur.g[j];
                CAT(apply, SUFFIX)(k, inv_mass, mass_dense, cur.p, cur.v);
                const REAL h = -cur.lp + (REAL)0.5 * CAT(dot, SUFFIX)(k, cur.p, cur.v);
                REAL delta = h - h0;
                if (!CAT(finite, SUFFIX)(delta) || delta > NUTS_BIG) delta = NUTS_BIG;
                n_leaves++;
                accept_sum += delta > 0 ? EXP(-delta) : (REAL)1;
                for (int j = 0; j < k; j++) sub_rho[j] += cur.p[j];
                /* uniform progressive sampling among the subtree's leaves */
                const REAL new_log_w = CAT(log_add, SUFFIX)(has_weight, sub_log_w, -delta);
                if (LOG((REAL)nuts_uniform(&rng)) < -delta - new_log_w) {
                    memcpy(sub_q, cur.q, sizeof(REAL) * k);
                    memcpy(sub_g, cur.g, sizeof(REAL) * k);
                    sub_lp = cur.lp;
                    sub_h = h;
                }
                sub_log_w = new_log_w;
                has_weight = 1;
                int stop = delta > NUTS_DIVERGENCE;
                divergent |= stop;
                /* U-turn checks of the balanced sub-subtrees this leaf completes */
                memcpy(node_rho + (size_t)top * k, cur.p, sizeof(REAL) * k);
                memcpy(node_first + (size_t)top * k, cur.v, sizeof(REAL) * k);
                for (long bits = i; bits & 1; bits >>= 1) {
                    REAL *below = node_rho + (size_t)(top - 1) * k, *mine = node_rho + (size_t)top * k;
                    for (int j = 0; j < k; j++) below[j] += mine[j];
                    top--;
                    stop |= CAT(turning, SUFFIX)(k, below, node_first + (size_t)top * k, cur.v);
                }
                top++;
                if (stop) { broken = 1; break; }
            }
            CAT(copy_phase, SUFFIX)(k, edge, &cur);
            depth++;
            if (broken) break;
            /* biased progressive sampling: the new subtree's draw with probability min(1, W_new / W_old) */
            if (LOG((REAL)nuts_uniform(&rng)) < sub_log_w - log_w) {
                memcpy(draw_q, sub_q, sizeof(REAL) * k);
                memcpy(draw_g, sub_g, sizeof(REAL) * k);
                draw_lp = sub_lp;
                draw_h = sub_h;
                moved = 1;
            }
            log_w = CAT(log_add, SUFFIX)(1, log_w, sub_log_w);
            for (int j = 0; j < k; j++) rho[j] += sub_rho[j];
            if (CAT(turning, SUFFIX)(k, rho, left.v, right.v)) break;
        }
        memcpy(q0, draw_q, sizeof(REAL) * k);
        memcpy(g0, draw_g, sizeof(REAL) * k);
        lp_all[ch] = draw_lp;
        info[ch] = accept_sum / (REAL)(n_leaves > 0 ? n_leaves : 1);
        info[chains + ch] = (REAL)moved;
        info[2 * chains + ch] = draw_h;
        info[3 * chains + ch] = (REAL)divergent;
        info[4 * chains + ch] = (REAL)n_leaves;
        info[5 * chains + ch] = (REAL)depth;
        free(mem);
    }
}
