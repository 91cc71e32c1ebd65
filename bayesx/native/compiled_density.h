/* A density compiled ahead of time from a user's PyTorch code (bayesx/native/compiled.py: the gradient
 * graph traced by make_fx, compiled by AOTInductor into a shared library) as a native DENSITY (density.h),
 * and its entry points: density and gradient, leapfrog trajectories (leapfrog.h) and NUTS transitions
 * (nuts.h) on it. Included once per precision by kernels.c, after the kernels.
 *
 * The compiled library's C interface (torch/csrc/inductor/aoti_runtime/interface.h) runs a model
 * container on tensor handles; the handles are made and read through torch's C shim
 * (torch/csrc/inductor/aoti_torch/c/shim.h). Python resolves both sets of functions and passes their
 * addresses in a compiled_model, so this file links against neither. One evaluation wraps u in a tensor
 * handle without copying, runs the container (which returns log pi and its gradient as new tensors),
 * copies the gradient out and frees the outputs: about 5.6 us for a 26-parameter regression on this
 * project's CPU (measured 2026-11-25), where the PyTorch NUTS tree spends about 300 us per leaf. */

#ifndef BAYESX_COMPILED_MODEL
#define BAYESX_COMPILED_MODEL
typedef int32_t (*aoti_blob_fn)(void *data, int64_t ndim, const int64_t *sizes, const int64_t *strides,
                                int64_t offset, int32_t dtype, int32_t device_type, int32_t device_index,
                                void **handle);
typedef int32_t (*aoti_data_fn)(void *handle, void **data);
typedef int32_t (*aoti_delete_fn)(void *handle);
typedef int32_t (*aoti_run_fn)(void *container, void **inputs, size_t n_inputs, void **outputs, size_t n_outputs,
                               void *stream, void *proxy_executor);
/* Where a compiled density failed, as PyTorch raises (Python reads it after each call and stops the run with it):
 * code 0 none, 1 an index out of bounds in plain C (detail: the bounds check's number, the index, the size, the
 * dimension; bayesx.native.codegen), 2 AOTInductor's run returned an error (its message is on stderr); position:
 * k numbers of REAL, the point. The first fault wins; every evaluation after it returns NaN at once, so the
 * kernels' call ends within a tree or trajectory. */
typedef struct {
    int64_t code;
    int64_t detail[4];
    void *position;
} compiled_fault;
enum { FAULT_NONE = 0, FAULT_INDEX = 1, FAULT_RUN = 2, FAULT_WRITING = -1 };
/* A compiled density as Python hands it over: the model container (one model per thread) and the
 * functions that run it and make, read and free tensor handles; dtype and device are the shim's codes. */
typedef struct {
    void *container;
    aoti_run_fn run;
    aoti_blob_fn blob;
    aoti_data_fn data;
    aoti_delete_fn free_tensor;
    int32_t dtype, device;
    compiled_fault *fault;
} compiled_model;

/* Whether a fault was recorded: the evaluation returns NaN without running. */
static inline int faulted(const compiled_fault *f) { return __atomic_load_n(&f->code, __ATOMIC_ACQUIRE) != 0; }
#endif

/* The evaluation at u failed: the first fault is recorded (code, detail, the point) and g is NaN; returns NaN,
 * which the kernels treat as a divergence until Python, after the call, stops the run. */
static REAL CAT(fail, SUFFIX)(compiled_fault *f, int64_t code, const int64_t *detail, int k, const REAL *u, REAL *g) {
    int64_t none = FAULT_NONE;
    if (__atomic_compare_exchange_n(&f->code, &none, FAULT_WRITING, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        for (int j = 0; j < 4; j++) f->detail[j] = detail ? detail[j] : 0;
        if (f->position) memcpy(f->position, u, sizeof(REAL) * (size_t)k);
        __atomic_store_n(&f->code, code, __ATOMIC_RELEASE);
    }
    for (int j = 0; j < k; j++) g[j] = (REAL)NAN;
    return (REAL)NAN;
}

/* g <- grad log pi(u), returns log pi(u); where the compiled code reports an error (the container's run fails: an
 * index out of bounds, say) the fault is recorded and the result is NaN. No scratch. */
static REAL CAT(compiled_log_prob_grad, SUFFIX)(const void *model, int k, const REAL *u, REAL *g, REAL *scratch,
                                                int want_log_prob) {
    const compiled_model *m = model;
    const int64_t size = k, stride = 1;
    void *input, *outputs[2];
    (void)scratch;
    (void)want_log_prob;
    if (faulted(m->fault)) return CAT(fail, SUFFIX)(m->fault, FAULT_RUN, NULL, k, u, g);
    if (m->blob((void *)u, 1, &size, &stride, 0, m->dtype, m->device, 0, &input)) return (REAL)NAN;
    if (m->run(m->container, &input, 1, outputs, 2, NULL, NULL)) return CAT(fail, SUFFIX)(m->fault, FAULT_RUN, NULL, k, u, g);
    REAL *lp, *grad;
    REAL value = (REAL)NAN;
    if (!m->data(outputs[0], (void **)&lp) && !m->data(outputs[1], (void **)&grad)) {
        memcpy(g, grad, sizeof(REAL) * (size_t)k);
        value = *lp;
    }
    m->free_tensor(outputs[0]);
    m->free_tensor(outputs[1]);
    return value;
}

/* A density written as plain C (bayesx/native/codegen.py): status = function(u, g, &lp, work, detail, data), log
 * pi(u) in lp and its gradient in g where the status is 0, else the failed bounds check in detail; `work` bytes of
 * workspace per call (aligned here to 64 bytes); `data` the density's data arrays, one read-only blob passed at run
 * time (NULL where all of its constants are in its source). Reentrant: chains may run on several threads. */
#ifndef BAYESX_GENERATED_MODEL
#define BAYESX_GENERATED_MODEL
typedef struct {
    void *function;
    size_t work;
    compiled_fault *fault;
    const void *data;
} generated_model;
/* The kinds of compiled model (bayesx.native.compiled's AOTINDUCTOR, PLAIN_C). */
enum { AOTINDUCTOR_MODEL = 0, PLAIN_C_MODEL = 1 };
#endif

static REAL CAT(generated_log_prob_grad, SUFFIX)(const void *model, int k, const REAL *u, REAL *g, REAL *scratch,
                                                 int want_log_prob) {
    const generated_model *m = model;
    int (*function)(const REAL *, REAL *, REAL *, void *, int64_t *, const void *) =
        (int (*)(const REAL *, REAL *, REAL *, void *, int64_t *, const void *))m->function;
    int64_t detail[4];
    REAL lp;
    (void)want_log_prob;
    if (faulted(m->fault)) return CAT(fail, SUFFIX)(m->fault, FAULT_INDEX, NULL, k, u, g);
    if (function(u, g, &lp, (void *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63), detail, m->data))
        return CAT(fail, SUFFIX)(m->fault, FAULT_INDEX, detail, k, u, g);
    return lp;
}

/* The density a compiled model is: AOTInductor's container (compiled_model, no scratch), or plain C
 * (generated_model, its workspace and 64 bytes for alignment as scratch). */
static DENSITY CAT(compiled_as_density, SUFFIX)(const void *model, int kind) {
    DENSITY density = {CAT(compiled_log_prob_grad, SUFFIX), NULL, model, 0};
    if (kind == PLAIN_C_MODEL) {
        density.log_prob_grad = CAT(generated_log_prob_grad, SUFFIX);
        density.scratch = (((const generated_model *)model)->work + 64) / sizeof(REAL) + 1;
    }
    return density;
}

/* log pi and its gradient at every chain's point u (chains x k), the chains split over `threads` threads
 * (an AOTInductor container must hold at least `threads` models). */
void CAT(compiled_density, SUFFIX)(int threads, int chains, int k, const void *model, int kind, const REAL *u_all,
                                   REAL *g_all, REAL *log_prob) {
    const DENSITY density = CAT(compiled_as_density, SUFFIX)(model, kind);
    #pragma omp parallel num_threads(threads) if (threads > 1)
    {
        REAL *scratch = density.scratch ? malloc(sizeof(REAL) * density.scratch) : NULL;
        #pragma omp for schedule(static)
        for (int ch = 0; ch < chains; ch++)
            log_prob[ch] = (density.scratch && !scratch)
                               ? (REAL)NAN
                               : density.log_prob_grad(model, k, u_all + (size_t)ch * k, g_all + (size_t)ch * k,
                                                       scratch, 1);
        free(scratch);
    }
}

/* Leapfrog trajectories of every chain (leapfrog.h); work must hold threads x 2 x (k + the density's scratch)
 * numbers (compiled_scratch). */
void CAT(compiled_leapfrog, SUFFIX)(int threads, int chains, int k, int steps, const void *model, int kind,
                                    const REAL *inv_mass, int mass_dense, const REAL *eps, REAL *u_all, REAL *p_all,
                                    REAL *g_all, int start_known, REAL *out, REAL *work) {
    const DENSITY density = CAT(compiled_as_density, SUFFIX)(model, kind);
    CAT(leapfrog_chains, SUFFIX)(threads, 1, chains, k, &density, steps, inv_mass, mass_dense, eps, u_all, p_all,
                                 g_all, start_known, out, work);
}

/* One NUTS transition of every chain (nuts.h), each chain's tree on its own; arguments as logistic_nuts's
 * after the form. */
void CAT(compiled_nuts, SUFFIX)(int threads, int chains, int k, const void *model, int kind, const REAL *inv_mass,
                                int mass_dense, REAL eps, int max_depth, const uint64_t *seeds, REAL *u_all,
                                const REAL *p_all, REAL *g_all, REAL *lp_all, REAL *info, int *failed) {
    const DENSITY density = CAT(compiled_as_density, SUFFIX)(model, kind);
    CAT(nuts_chains, SUFFIX)(threads, 1, chains, k, &density, inv_mass, mass_dense, eps, max_depth, seeds, u_all, p_all,
                             g_all, lp_all, info, failed);
}

/* Scratch numbers a compiled density needs per evaluation (a leapfrog call's work: threads x 2 x (k + this)). */
int CAT(compiled_scratch, SUFFIX)(const void *model, int kind) {
    return (int)CAT(compiled_as_density, SUFFIX)(model, kind).scratch;
}
