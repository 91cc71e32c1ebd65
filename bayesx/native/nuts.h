/* NUTS: one transition of every chain, each chain on its own, for any density with a native gradient
 * (a DENSITY, density.h). Included once per precision by kernels.c (REAL, SUFFIX, EXP, LOG as there),
 * after density.h and before the densities that use it (logistic_form.h).
 *
 * The same algorithm as bayesx/kernels/nuts.py, decision for decision (tests/test_nuts_agreement.py
 * checks the two draw for draw): the No-U-Turn sampler of Hoffman and Gelman (2014, "The No-U-Turn
 * sampler", JMLR 15) in the multinomial variant of Betancourt (2017, "A conceptual introduction to
 * Hamiltonian Monte Carlo", arXiv:1701.02434, appendix A) as Stan runs it: leaves weighted by
 * exp(H0 - H), uniform progressive sampling inside a subtree and biased progressive sampling when a
 * subtree joins the trajectory; the generalized U-turn criterion on every merge of two balanced subtrees
 * and of the trajectory with its new subtree, with Stan's two extra checks across the merged halves
 * (each half with the adjacent leaf of the other; stan-dev/stan#2800); a subtree with a U-turn or a
 * divergence (H - H0 > 1000, or not finite) inside is discarded and the transition ends. Per chain: a
 * chain whose tree stops early frees its thread for the next chain (dynamic schedule) instead of waiting
 * in lock-step. The momentum comes from the caller; the uniforms from the chain's seed (common.h's
 * splitmix64_at): number nuts_uniform_index(d, 0) picks subtree d's direction, (d, 1) decides
 * its merge and (d, 2 + i) the progressive sampling at its leaf i. */

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

/* the criterion on (a + b) with end velocities va, vb; sum: k numbers of scratch */
static inline int CAT(turning_sum, SUFFIX)(int k, const REAL *a, const REAL *b, const REAL *va, const REAL *vb,
                                           REAL *sum) {
    for (int j = 0; j < k; j++) sum[j] = a[j] + b[j];
    return CAT(turning, SUFFIX)(k, sum, va, vb);
}

/* log(e^a + e^b) for a weight sum that may be empty (has_a = 0) */
static inline REAL CAT(log_add, SUFFIX)(int has_a, REAL a, REAL b) {
    if (!has_a) return b;
    const REAL hi = a > b ? a : b, lo = a > b ? b : a;
    return hi + LOG((REAL)1 + EXP(lo - hi));
}

/* The index of the uniform that decision j of subtree `depth` reads (0: direction, 1: merge, 2 + i:
 * leaf i): the subtrees' blocks of 2^d + 2 numbers one after another. */
#ifndef NUTS_UNIFORM_INDEX
#define NUTS_UNIFORM_INDEX
static inline uint64_t nuts_uniform_index(int depth, long j) {
    return ((uint64_t)1 << depth) - 1 + 2 * (uint64_t)depth + (uint64_t)j;
}
#endif

/* uniform number n of the chain with this seed, in the kernel's precision */
static inline REAL CAT(nuts_uniform, SUFFIX)(uint64_t seed, uint64_t n) {
    return (REAL)nuts_uniform_bits(seed, n, sizeof(REAL) == sizeof(double) ? 52 : 23);
}

#define NUTS_STACK_VECTORS 5  /* per level of the stack: rho, first p, first v, last p, last v */

/* Numbers one chain's tree needs: the density's scratch and 20 + 5 (max_depth + 1) vectors. */
static size_t CAT(nuts_size, SUFFIX)(size_t scratch, int k, int max_depth) {
    return scratch + (size_t)k * (20 + NUTS_STACK_VECTORS * ((size_t)max_depth + 1));
}

/* One chain's transition as a state machine that halts before every gradient evaluation, so that one
 * thread can grow two chains' trees in lock-step and evaluate their gradients together
 * (log_prob_grad2). The fields are the variables of the recursive algorithm's iterative form: the stack
 * holds the complete balanced subtrees of the subtree being built (a binary counter), each with its
 * summed momentum and its first and last leaves' momentum and velocity. */
typedef struct {
    const REAL *inv_mass;
    int k, mass_dense, max_depth;
    REAL eps;
    PHASE left, right, cur, *edge;
    REAL *draw_q, *draw_g, *sub_q, *sub_g, *rho, *sub_rho, *sum;
    REAL *node_rho, *node_first_p, *node_first_v, *node_last_p, *node_last_v;  /* the stack, level by level */
    REAL *fault_q;  /* the last leaf whose log pi or gradient is NaN or whose log pi is +inf */
    long n_nan, n_posinf;  /* leaves with a NaN log pi or gradient; with log pi = +inf */
    REAL h0, draw_lp, draw_h, sub_lp, sub_h, log_w, accept_sum, sub_log_w, e;
    long n_leaves, leaf;  /* leaves so far; this leaf's index in its subtree */
    int depth, divergent, moved, has_weight, broken, top;
    uint64_t seed;
} CAT(tree, SUFFIX);
#define TREE CAT(tree, SUFFIX)
#define STACK(t, field, level) ((t)->field + (size_t)(level) * (t)->k)

/* The first half of a leapfrog step from cur: p += e/2 grad; q += e M^-1 p. Then cur.q needs its gradient. */
static void CAT(tree_half_step, SUFFIX)(TREE *t) {
    PHASE *c = &t->cur;
    for (int j = 0; j < t->k; j++) c->p[j] += (REAL)0.5 * t->e * c->g[j];
    CAT(apply, SUFFIX)(t->k, t->inv_mass, t->mass_dense, c->p, c->v);
    for (int j = 0; j < t->k; j++) c->q[j] += t->e * c->v[j];
}

/* A new subtree of 2^depth leaves from the edge in a random direction, up to its first gradient;
 * 0 when the tree has reached max_depth (the transition is over). */
static int CAT(tree_start_subtree, SUFFIX)(TREE *t) {
    if (t->depth >= t->max_depth) return 0;
    const int forward = CAT(nuts_uniform, SUFFIX)(t->seed, nuts_uniform_index(t->depth, 0)) < (REAL)0.5;
    t->e = forward ? t->eps : -t->eps;
    t->edge = forward ? &t->right : &t->left;
    CAT(copy_phase, SUFFIX)(t->k, &t->cur, t->edge);
    memset(t->sub_rho, 0, sizeof(REAL) * t->k);
    t->sub_log_w = 0;
    t->has_weight = t->broken = t->top = 0;
    t->leaf = 0;
    CAT(tree_half_step, SUFFIX)(t);
    return 1;
}

/* Lays out a chain's tree in mem and starts its transition from (q0, p0) with gradient g0 and log pi lp0;
 * returns 1 (it needs its first gradient). */
static int CAT(tree_begin, SUFFIX)(TREE *t, REAL *vecs, int k, const REAL *inv_mass, int mass_dense, REAL eps,
                                   int max_depth, uint64_t seed, const REAL *q0, const REAL *p0, const REAL *g0, REAL lp0) {
    #define VECTOR(i) (vecs + (size_t)(i) * k)
    #define LEVELS(i) VECTOR(20 + (size_t)(i) * (max_depth + 1))
    *t = (TREE){.inv_mass = inv_mass, .k = k, .mass_dense = mass_dense, .max_depth = max_depth, .eps = eps,
                .left = {VECTOR(0), VECTOR(1), VECTOR(2), VECTOR(3), 0}, .right = {VECTOR(4), VECTOR(5), VECTOR(6), VECTOR(7), 0},
                .cur = {VECTOR(8), VECTOR(9), VECTOR(10), VECTOR(11), 0},
                .draw_q = VECTOR(12), .draw_g = VECTOR(13), .sub_q = VECTOR(14), .sub_g = VECTOR(15),
                .rho = VECTOR(16), .sub_rho = VECTOR(17), .sum = VECTOR(18), .fault_q = VECTOR(19),
                .node_rho = LEVELS(0), .node_first_p = LEVELS(1), .node_first_v = LEVELS(2),
                .node_last_p = LEVELS(3), .node_last_v = LEVELS(4), .seed = seed};
    #undef LEVELS
    #undef VECTOR
    memcpy(t->left.q, q0, sizeof(REAL) * k);
    memcpy(t->left.p, p0, sizeof(REAL) * k);
    memcpy(t->left.g, g0, sizeof(REAL) * k);
    CAT(apply, SUFFIX)(k, inv_mass, mass_dense, p0, t->left.v);
    t->left.lp = lp0;
    t->h0 = -lp0 + (REAL)0.5 * CAT(dot, SUFFIX)(k, p0, t->left.v);
    CAT(copy_phase, SUFFIX)(k, &t->right, &t->left);
    memcpy(t->rho, p0, sizeof(REAL) * k);
    memcpy(t->draw_q, q0, sizeof(REAL) * k);
    memcpy(t->draw_g, g0, sizeof(REAL) * k);
    t->draw_lp = lp0;
    t->draw_h = t->h0;
    t->log_w = 0;  /* the starting leaf has weight exp(H0 - H0) = 1 */
    return CAT(tree_start_subtree, SUFFIX)(t);
}

/* Counts cur as a fault where its log pi or gradient is NaN or its log pi is +inf, and keeps its position. */
static void CAT(tree_check_leaf, SUFFIX)(TREE *t) {
    const PHASE *c = &t->cur;
    int is_nan = CAT(nan, SUFFIX)(c->lp);
    for (int j = 0; j < t->k && !is_nan; j++) is_nan = CAT(nan, SUFFIX)(c->g[j]);
    const int is_posinf = CAT(posinf, SUFFIX)(c->lp);
    if (!is_nan && !is_posinf) return;
    t->n_nan += is_nan;
    t->n_posinf += is_posinf;
    memcpy(t->fault_q, c->q, sizeof(REAL) * t->k);
}

/* The U-turn checks of the balanced subtrees this leaf (cur) completes: on each merge of the stack's top
 * (the earlier half L) with the node ending at this leaf (R), the criterion on L + R and on each half with
 * the adjacent leaf of the other. Returns whether one of them turned. */
static int CAT(tree_stack_push, SUFFIX)(TREE *t) {
    const int k = t->k;
    const PHASE *c = &t->cur;
    int turned = 0;
    memcpy(STACK(t, node_rho, t->top), c->p, sizeof(REAL) * k);
    memcpy(STACK(t, node_first_p, t->top), c->p, sizeof(REAL) * k);
    memcpy(STACK(t, node_first_v, t->top), c->v, sizeof(REAL) * k);
    for (long bits = t->leaf; bits & 1; bits >>= 1) {
        const int l = t->top - 1, r = t->top;
        turned |= CAT(turning_sum, SUFFIX)(k, STACK(t, node_rho, l), STACK(t, node_rho, r), STACK(t, node_first_v, l),
                                           c->v, t->sum);
        turned |= CAT(turning_sum, SUFFIX)(k, STACK(t, node_rho, l), STACK(t, node_first_p, r),
                                           STACK(t, node_first_v, l), STACK(t, node_first_v, r), t->sum);
        turned |= CAT(turning_sum, SUFFIX)(k, STACK(t, node_rho, r), STACK(t, node_last_p, l),
                                           STACK(t, node_last_v, l), c->v, t->sum);
        REAL *rho_l = STACK(t, node_rho, l);
        const REAL *rho_r = STACK(t, node_rho, r);
        for (int j = 0; j < k; j++) rho_l[j] += rho_r[j];
        t->top--;
    }
    memcpy(STACK(t, node_last_p, t->top), c->p, sizeof(REAL) * k);
    memcpy(STACK(t, node_last_v, t->top), c->v, sizeof(REAL) * k);
    t->top++;
    return turned;
}

/* With cur's gradient and log pi in place: the leaf's second half step, its weight, the progressive
 * sampling and the U-turn checks; then the next leaf's first half step (returns 1: it needs a gradient),
 * or the end of the transition (returns 0). */
static int CAT(tree_leaf_done, SUFFIX)(TREE *t) {
    const int k = t->k;
    PHASE *c = &t->cur;
    CAT(tree_check_leaf, SUFFIX)(t);
    for (int j = 0; j < k; j++) c->p[j] += (REAL)0.5 * t->e * c->g[j];
    CAT(apply, SUFFIX)(k, t->inv_mass, t->mass_dense, c->p, c->v);
    const REAL h = -c->lp + (REAL)0.5 * CAT(dot, SUFFIX)(k, c->p, c->v);
    REAL delta = h - t->h0;
    if (!CAT(finite, SUFFIX)(delta) || delta > NUTS_BIG) delta = NUTS_BIG;
    t->n_leaves++;
    t->accept_sum += delta > 0 ? EXP(-delta) : (REAL)1;
    for (int j = 0; j < k; j++) t->sub_rho[j] += c->p[j];
    /* uniform progressive sampling among the subtree's leaves */
    const REAL new_log_w = CAT(log_add, SUFFIX)(t->has_weight, t->sub_log_w, -delta);
    const REAL u_leaf = CAT(nuts_uniform, SUFFIX)(t->seed, nuts_uniform_index(t->depth, 2 + t->leaf));
    if (LOG(u_leaf) < -delta - new_log_w) {
        memcpy(t->sub_q, c->q, sizeof(REAL) * k);
        memcpy(t->sub_g, c->g, sizeof(REAL) * k);
        t->sub_lp = c->lp;
        t->sub_h = h;
    }
    t->sub_log_w = new_log_w;
    t->has_weight = 1;
    int stop = delta > NUTS_DIVERGENCE;
    t->divergent |= stop;
    stop |= CAT(tree_stack_push, SUFFIX)(t);
    t->broken = stop;
    if (!stop && ++t->leaf < (1L << t->depth)) {
        CAT(tree_half_step, SUFFIX)(t);
        return 1;
    }
    /* the subtree is complete, or has a U-turn or a divergence inside (then it is discarded) */
    const int depth = t->depth++;
    if (t->broken) {
        CAT(copy_phase, SUFFIX)(k, t->edge, c);
        return 0;
    }
    /* biased progressive sampling: the new subtree's draw with probability min(1, W_new / W_old) */
    if (LOG(CAT(nuts_uniform, SUFFIX)(t->seed, nuts_uniform_index(depth, 1))) < t->sub_log_w - t->log_w) {
        memcpy(t->draw_q, t->sub_q, sizeof(REAL) * k);
        memcpy(t->draw_g, t->sub_g, sizeof(REAL) * k);
        t->draw_lp = t->sub_lp;
        t->draw_h = t->sub_h;
        t->moved = 1;
    }
    t->log_w = CAT(log_add, SUFFIX)(1, t->log_w, t->sub_log_w);
    /* the U-turn checks of the trajectory (old part O, its edge E next to the subtree S, its far end F)
     * with the subtree: O + S's first leaf, S + E, then O + S as a whole */
    const PHASE *far = t->edge == &t->right ? &t->left : &t->right;
    int turned = CAT(turning_sum, SUFFIX)(k, t->rho, STACK(t, node_first_p, 0), far->v, STACK(t, node_first_v, 0),
                                          t->sum);
    turned |= CAT(turning_sum, SUFFIX)(k, t->sub_rho, t->edge->p, t->edge->v, c->v, t->sum);
    for (int j = 0; j < k; j++) t->rho[j] += t->sub_rho[j];
    turned |= CAT(turning, SUFFIX)(k, t->rho, far->v, c->v);
    CAT(copy_phase, SUFFIX)(k, t->edge, c);
    if (turned) return 0;
    return CAT(tree_start_subtree, SUFFIX)(t);
}

/* Writes the drawn point and what the tree did (see nuts_chains) for chain ch of `chains`. */
static void CAT(tree_finish, SUFFIX)(const TREE *t, int chains, int ch, REAL *q0, REAL *g0, REAL *lp_all, REAL *info) {
    memcpy(q0, t->draw_q, sizeof(REAL) * t->k);
    memcpy(g0, t->draw_g, sizeof(REAL) * t->k);
    lp_all[ch] = t->draw_lp;
    info[ch] = t->accept_sum / (REAL)(t->n_leaves > 0 ? t->n_leaves : 1);
    info[chains + ch] = (REAL)t->moved;
    info[2 * chains + ch] = t->draw_h;
    info[3 * chains + ch] = (REAL)t->divergent;
    info[4 * chains + ch] = (REAL)t->n_leaves;
    info[5 * chains + ch] = (REAL)t->depth;
    info[6 * chains + ch] = (REAL)t->n_nan;
    info[7 * chains + ch] = (REAL)t->n_posinf;
    if (t->n_nan || t->n_posinf)
        for (int j = 0; j < t->k; j++) info[(8 + (size_t)j) * chains + ch] = t->fault_q[j];
}

/* u (chains x k), g and lp hold each chain's point, gradient and log pi (constant included); on return
 * the drawn point's. p (chains x k) is the momentum drawn for this transition. info ((8 + k) x chains)
 * receives the mean acceptance statistic over the leaves, whether the draw moved, H at the draw,
 * divergence, leapfrog steps, doublings, the leaves with a NaN log pi or gradient and those with log pi
 * = +inf, and (rows 8 to 8 + k, left as they were where there was none) the position of the last such leaf. *failed is set when scratch memory cannot be had.
 *
 * The chains are split into groups of `group` (1 or 2), one group per task on `threads` OpenMP threads
 * (dynamic schedule). A group of two grows its trees in lock-step, leaf by leaf, and evaluates both
 * gradients in one call of log_prob_grad2 while both trees are growing: a pair costs as many leaves as
 * its deeper tree, each gradient much less than alone. Otherwise a chain whose tree stops early frees
 * its thread for the next group. */
static void CAT(nuts_chains, SUFFIX)(int threads, int group, int chains, int k, const DENSITY *density,
                                     const REAL *inv_mass, int mass_dense, REAL eps, int max_depth,
                                     const uint64_t *seeds, REAL *u_all, const REAL *p_all, REAL *g_all, REAL *lp_all,
                                     REAL *info, int *failed) {
    if (group != 2 || !density->log_prob_grad2) group = 1;
    const int tasks = (chains + group - 1) / group;
    const size_t size = CAT(nuts_size, SUFFIX)(density->scratch, k, max_depth);
    #pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1)
    for (int task = 0; task < tasks; task++) {
        const int first = task * group, members = first + group <= chains ? group : chains - first;
        REAL *mem = malloc(sizeof(REAL) * size * (size_t)members);
        if (!mem) { *failed = 1; continue; }
        TREE trees[2];
        int growing[2] = {0, 0};
        for (int m = 0; m < members; m++) {
            const int ch = first + m;
            growing[m] = CAT(tree_begin, SUFFIX)(&trees[m], mem + size * (size_t)m + density->scratch, k, inv_mass,
                                                 mass_dense, eps, max_depth, seeds[ch], u_all + (size_t)ch * k,
                                                 p_all + (size_t)ch * k, g_all + (size_t)ch * k, lp_all[ch]);
        }
        while (growing[0] || growing[1]) {
            if (growing[0] && growing[1]) {
                PHASE *a = &trees[0].cur, *b = &trees[1].cur;
                a->lp = density->log_prob_grad2(density->model, k, a->q, b->q, a->g, b->g, &b->lp, mem, mem + size, 1);
            } else {
                for (int m = 0; m < members; m++) {
                    PHASE *c = &trees[m].cur;
                    if (growing[m]) c->lp = density->log_prob_grad(density->model, k, c->q, c->g, mem + size * (size_t)m, 1);
                }
            }
            for (int m = 0; m < members; m++)
                if (growing[m]) growing[m] = CAT(tree_leaf_done, SUFFIX)(&trees[m]);
        }
        for (int m = 0; m < members; m++) {
            const int ch = first + m;
            CAT(tree_finish, SUFFIX)(&trees[m], chains, ch, u_all + (size_t)ch * k, g_all + (size_t)ch * k, lp_all, info);
        }
        free(mem);
    }
}
