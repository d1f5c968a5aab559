/* Packing mode's pod loop, compiled (engine/native_packing.py says when it applies).

   It follows run_packing (engine/packing.py) pod by pod: the shared filter (policies/base.py feasible_nodes), the
   built-in scores (first-fit and best-fit of policies/placement.py, FGD of policies/fgd.py, PWR and PWR+FGD of
   policies/pwr.py), ties to the smallest seeded rank, the same GPUs, the same allocation, and the columns of the
   fragmentation/power observer (experiments/fgd_pwr.py FragPowerObserver). Integer arithmetic is the Python
   code's; every floating-point operation is done in the Python code's order, so the results are bit for bit the
   same; compile without -ffast-math or contraction (engine/kernels.py).

   The one operation C cannot promise to round as numpy does is exp() in FGD's sigmoid score. The score is
   int64(100 * sigmoid(x)); two exp implementations accurate to a few ULP give values of 100 * sigmoid(x) that
   differ by far less than 1e-12 (|v| <= 100, relative error about 1e-15), so truncation can only differ when the
   value lies within that distance of an integer. Such values (about one in 10^7) are handed back to the Python
   code (the exact_score callback), which computes them with numpy as the Python path does. */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MILLI 1000
#define MAX_SPEC_CPU 128000.0
#define MAX_SPEC_GPU 8000.0
#define SIGMOID_MARGIN 1e-9 /* values of 100 * sigmoid this close to an integer are recomputed by numpy */

enum { PLACE_FIRST_FIT = 0, PLACE_BEST_FIT = 1, PLACE_WEIGHTED = 2 };
enum { GPUS_BEST = 0, GPUS_FGD = 1, GPUS_PWR = 2 };
enum { OK = 0, ERR_MEMORY = 2, ERR_CALLBACK = 3 };

typedef int64_t (*exact_score_fn)(int64_t delta_scaled);

/* FragModel (policies/fgd.py): thresholds, GPU classes, model access; mirrored by native_packing.py (_Frag). */
typedef struct {
    int64_t n_thr, n_cls, scale, div, access_rows, all_access;
    const int64_t *thr, *cls_t, *cls_cpu, *cls_num, *cls_w, *node_model;
    const uint8_t *acc; /* [access_rows, n_cls]; a node of model code -1 reads the last row */
} Frag;

/* BinaryPowerModel (energy/binary.py); mirrored by native_packing.py (_Power). */
typedef struct {
    double cpu_max_w, cpu_idle_w;
    int64_t milli_per_core, cores_per_socket;
    const double *gpu_idle_w, *gpu_max_w;
    const int64_t *gpu_count, *real_cores, *sockets;
} Power;

/* Field order and types are mirrored by engine/native_packing.py (_Packing); ws_packing_size() checks it. */
typedef struct {
    int64_t n_pods, n_nodes, width, n_jobs;
    int64_t placement, w_pwr, w_fgd, gpus_by, rank_weight, n_classes, observe, total_milli;
    int64_t fgd_zero_score; /* numpy's sigmoid score of a zero change (50), measured by the caller */
    int64_t allocated_milli, nodes_busy, arrived, error, exact_calls;
    const int64_t *order;
    /* per job */
    const int64_t *num_gpu, *gpu_milli, *cpu_milli, *mem_mib, *mask_id, *req_class;
    const int64_t *feas_class; /* equal ids, equal filter (RequestBook.request_class) */
    int64_t n_feas_classes, candidate_budget; /* budget: node entries over all candidate lists */
    const uint8_t *never_fits;
    /* cluster */
    const uint8_t *node_masks; /* [masks, nodes] */
    const int64_t *rank;
    const uint8_t *available;
    /* cluster state (ClusterState's arrays), updated in place */
    int64_t *gpu_left, *cpu_left, *mem_left, *free_gpus, *gpu_left_total, *max_gpu_left, *jobs_on_node;
    int64_t *pod_kinds; /* [nodes, width + 1] */
    /* policy models */
    Frag fgd;
    Power pwr;
    /* the observer's models and per-node values (updated in place) and totals */
    Frag obs_frag;
    Power obs_power;
    int64_t *obs_frag_scaled;
    double *obs_node_power;
    int64_t obs_frag_total;
    double obs_power_total;
    exact_score_fn exact_score;
    /* written, per pod */
    uint8_t *placed;
    int64_t *out_node, *out_gpus; /* out_gpus: [pods, width], the first num_gpu used */
    double *series;               /* rows of 4 (+3 with the observer) */
} Packing;

int64_t ws_packing_size(void) { return (int64_t)sizeof(Packing); }

/* Scores of the FGD cache for one request class, valid while the node's version equals the stamp. */
typedef struct {
    int64_t *score, *gpu, *stamp, *pwr, *pwr_stamp;
} ClassCache;

/* The nodes that may still pass the filter for one request class, in index order. Packing only allocates, so a
   node that fails a request's filter fails it for the rest of the run and leaves the list. Classes beyond the
   memory budget (Packing.candidate_budget) scan every node. */
typedef struct {
    int64_t *nodes, n;
} Candidates;

typedef struct {
    Packing *p;
    int64_t *nodes, *all_nodes, *raw, *total, *version, *cnt, *sm, *cnt1, *sm1;
    Candidates *cand;
    int64_t cand_used;
    /* per node, valid while version == node_stamp: FGD threshold statistics [n * T], idle milli and f0 */
    int64_t *node_cnt, *node_sm, *node_idle, *node_f0, *node_stamp;
    ClassCache *cache;
} Loop;

static int64_t floordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

/* ----- FGD (policies/fgd.py FragModel) ------------------------------------------------------------------------- */
static void frag_stats(const Frag *f, const int64_t *row, int64_t width, int64_t *cnt, int64_t *sm, int64_t *idle) {
    int64_t id = 0;
    for (int64_t t = 0; t < f->n_thr; t++) cnt[t] = sm[t] = 0;
    for (int64_t g = 0; g < width; g++) {
        int64_t v = row[g];
        if (v > 0) id += v;
        for (int64_t t = 0; t < f->n_thr; t++)
            if (v >= f->thr[t]) {
                cnt[t]++;
                sm[t] += v;
            }
    }
    *idle = id;
}

static int64_t frag_from_stats(const Frag *f, const int64_t *cnt, const int64_t *sm, int64_t idle, int64_t cpu,
                               int64_t code) {
    const uint8_t *acc = f->acc + (code >= 0 ? code : f->access_rows - 1) * f->n_cls;
    int64_t red = 0;
    for (int64_t c = 0; c < f->n_cls; c++) {
        int64_t t = f->cls_t[c];
        if (cnt[t] >= f->cls_num[c] && cpu >= f->cls_cpu[c] && (f->all_access || acc[c])) red += sm[t] * f->cls_w[c];
    }
    return f->scale * idle - red;
}

static int64_t node_frag(const Frag *f, const Packing *p, int64_t n, int64_t *cnt, int64_t *sm) {
    int64_t idle;
    frag_stats(f, p->gpu_left + n * p->width, p->width, cnt, sm, &idle);
    return frag_from_stats(f, cnt, sm, idle, p->cpu_left[n], f->node_model[n]);
}

/* sigmoid_score: int64(sigmoid(delta / (div * 1000)) * 100); values near an integer are numpy's (see the top).
   Returns -1 when the callback fails; *exact_calls counts its calls. Exported for the tests. */
int64_t ws_sigmoid_score(int64_t delta, int64_t div, int64_t zero_score, exact_score_fn exact, int64_t *exact_calls) {
    if (delta == 0) return zero_score;
    double x = (double)delta / ((double)div * 1000.0);
    double v = (1.0 / (1.0 + exp(-x))) * 100.0;
    double k = floor(v);
    if (!(v - k >= SIGMOID_MARGIN && (k + 1.0) - v >= SIGMOID_MARGIN)) {
        (*exact_calls)++;
        int64_t s = exact(delta);
        return s < 0 ? -1 : s;
    }
    return (int64_t)v;
}

static int64_t sigmoid_score(Packing *p, int64_t delta) {
    int64_t s = ws_sigmoid_score(delta, p->fgd.div, p->fgd_zero_score, p->exact_score, &p->exact_calls);
    if (s < 0) p->error = ERR_CALLBACK;
    return s;
}

/* FragModel.fgd_scores for one node: the score and, for a share pod, the GPU reaching it first (-1 otherwise). */
static int64_t fgd_node_score(Loop *L, int64_t n, int64_t job, int64_t *gpu_out) {
    Packing *p = L->p;
    const Frag *f = &p->fgd;
    int64_t T = f->n_thr, W = p->width;
    int64_t *cnt = L->node_cnt + n * T, *sm = L->node_sm + n * T, *cnt1 = L->cnt1, *sm1 = L->sm1;
    const int64_t *row = p->gpu_left + n * W;
    int64_t code = f->node_model[n];
    int64_t ng = p->num_gpu[job], milli = p->gpu_milli[job], cpu = p->cpu_milli[job];
    if (L->node_stamp[n] != L->version[n]) { /* the node's statistics, shared by every request class */
        frag_stats(f, row, W, cnt, sm, &L->node_idle[n]);
        L->node_f0[n] = frag_from_stats(f, cnt, sm, L->node_idle[n], p->cpu_left[n], code);
        L->node_stamp[n] = L->version[n];
    }
    int64_t idle = L->node_idle[n], f0 = L->node_f0[n];
    int64_t cpu1 = p->cpu_left[n] - cpu;
    *gpu_out = -1;
    if (ng == 0 || milli <= 0) return sigmoid_score(p, f0 - frag_from_stats(f, cnt, sm, idle, cpu1, code));
    if (milli >= MILLI) {
        int64_t take = ng * MILLI;
        for (int64_t t = 0; t < T; t++) {
            cnt1[t] = cnt[t] - ng;
            sm1[t] = sm[t] - take;
        }
        return sigmoid_score(p, f0 - frag_from_stats(f, cnt1, sm1, idle - take, cpu1, code));
    }
    /* share pod (ng == 1; several partial GPUs never reach the kernel): one hypothetical state per GPU */
    int64_t best = -1, best_g = 0;
    for (int64_t g = 0; g < W; g++) {
        int64_t v = row[g], v1 = v - milli;
        if (v < milli) continue; /* scored -1 */
        for (int64_t t = 0; t < T; t++) {
            int64_t ge0 = v >= f->thr[t], ge1 = v1 >= f->thr[t];
            cnt1[t] = cnt[t] - ge0 + ge1;
            sm1[t] = sm[t] - (ge0 ? v : 0) + (ge1 ? v1 : 0);
        }
        int64_t s = sigmoid_score(p, f0 - frag_from_stats(f, cnt1, sm1, idle - milli, cpu1, code));
        if (s > best) {
            best = s;
            best_g = g;
        }
    }
    *gpu_out = best_g;
    return best;
}

static ClassCache *class_cache(Loop *L, int64_t cls) {
    ClassCache *c = &L->cache[cls];
    if (c->score == NULL) {
        int64_t n = L->p->n_nodes;
        c->score = malloc((size_t)n * sizeof(int64_t));
        c->gpu = malloc((size_t)n * sizeof(int64_t));
        c->stamp = malloc((size_t)n * sizeof(int64_t));
        c->pwr = malloc((size_t)n * sizeof(int64_t));
        c->pwr_stamp = malloc((size_t)n * sizeof(int64_t));
        if (!c->score || !c->gpu || !c->stamp || !c->pwr || !c->pwr_stamp) return NULL;
        for (int64_t i = 0; i < n; i++) c->stamp[i] = c->pwr_stamp[i] = -1;
    }
    return c;
}

/* The cached FGD score of (class, node), computed when the node changed since. */
static inline int64_t fgd_cached(Loop *L, ClassCache *c, int64_t n, int64_t job) {
    if (c->stamp[n] != L->version[n]) {
        c->score[n] = fgd_node_score(L, n, job, &c->gpu[n]);
        c->stamp[n] = L->version[n];
    }
    return c->score[n];
}

/* ----- PWR (policies/pwr.py, energy/binary.py) ----------------------------------------------------------------- */
static double cpu_power(const Power *w, int64_t n, int64_t cpu_left) {
    int64_t idle_cores = floordiv(cpu_left, w->milli_per_core);
    int64_t working = w->real_cores[n] - idle_cores;
    int64_t active = -floordiv(-working, w->cores_per_socket);
    return w->cpu_max_w * (double)active + w->cpu_idle_w * (double)(w->sockets[n] - active);
}

static double node_power(const Power *w, int64_t n, int64_t cpu_left, int64_t free) {
    double gpu = w->gpu_idle_w[n] * (double)free + w->gpu_max_w[n] * (double)(w->gpu_count[n] - free);
    return cpu_power(w, n, cpu_left) + gpu;
}

static int64_t pwr_raw(const Packing *p, int64_t n, int64_t job) {
    const Power *w = &p->pwr;
    int64_t ng = p->num_gpu[job], milli = p->gpu_milli[job], cl = p->cpu_left[n];
    double d_cpu = cpu_power(w, n, cl - p->cpu_milli[job]) - cpu_power(w, n, cl);
    double extra = w->gpu_max_w[n] - w->gpu_idle_w[n];
    double d_gpu = 0.0;
    if (ng == 0 || milli <= 0) {
        d_gpu = 0.0;
    } else if (milli < MILLI) { /* share pod: free unless a busy GPU fits */
        const int64_t *row = p->gpu_left + n * p->width;
        int busy_fit = 0;
        for (int64_t g = 0; g < p->width; g++)
            if (row[g] >= milli && row[g] < MILLI) busy_fit = 1;
        d_gpu = busy_fit ? 0.0 : extra;
    } else {
        d_gpu = (double)ng * extra;
    }
    return (int64_t)(-(d_cpu + d_gpu));
}

/* min_max_normalise (policies/placement.py) in place. */
static void normalise(int64_t *raw, int64_t k, int64_t all_equal) {
    int64_t lo = raw[0], hi = raw[0];
    for (int64_t i = 1; i < k; i++) {
        if (raw[i] < lo) lo = raw[i];
        if (raw[i] > hi) hi = raw[i];
    }
    for (int64_t i = 0; i < k; i++) raw[i] = hi == lo ? all_equal : (raw[i] - lo) * 100 / (hi - lo);
}

/* ----- placing one pod (PlacementPolicy.place) ------------------------------------------------------------------ */
static int score_nodes(Loop *L, int64_t job, int64_t k) {
    Packing *p = L->p;
    int64_t *raw = L->raw, *total = L->total;
    int64_t ng = p->num_gpu[job], milli = p->gpu_milli[job], cpu = p->cpu_milli[job];
    if (p->placement == PLACE_FIRST_FIT) {
        for (int64_t i = 0; i < k; i++) total[i] = 100;
        return OK;
    }
    if (p->placement == PLACE_BEST_FIT) {
        int64_t demand = ng * milli;
        for (int64_t i = 0; i < k; i++) {
            int64_t n = L->nodes[i];
            double leftover = 0.5 * (double)(p->cpu_left[n] - cpu) / MAX_SPEC_CPU +
                              0.5 * (double)(p->gpu_left_total[n] - demand) / MAX_SPEC_GPU;
            total[i] = (int64_t)((1.0 - leftover) * 100.0);
        }
        normalise(total, k, 0);
        return OK;
    }
    int nothing = ng == 0 && cpu == 0 && p->mem_mib[job] == 0; /* "requests nothing": both score 100 */
    for (int64_t i = 0; i < k; i++) total[i] = 0;
    ClassCache *c = NULL;
    if (!nothing) {
        c = class_cache(L, p->req_class[job]);
        if (c == NULL) return ERR_MEMORY;
    }
    if (p->w_pwr) {
        if (nothing) {
            for (int64_t i = 0; i < k; i++) raw[i] = 100;
        } else {
            for (int64_t i = 0; i < k; i++) {
                int64_t n = L->nodes[i];
                if (c->pwr_stamp[n] != L->version[n]) {
                    c->pwr[n] = pwr_raw(p, n, job);
                    c->pwr_stamp[n] = L->version[n];
                }
                raw[i] = c->pwr[n];
            }
            normalise(raw, k, 100);
        }
        for (int64_t i = 0; i < k; i++) total[i] += p->w_pwr * raw[i];
    }
    if (p->w_fgd) {
        if (nothing) {
            for (int64_t i = 0; i < k; i++) total[i] += p->w_fgd * 100;
        } else {
            for (int64_t i = 0; i < k; i++) total[i] += p->w_fgd * fgd_cached(L, c, L->nodes[i], job);
        }
    }
    return OK;
}

/* GPUs on the chosen node (choose_gpus); returns their number. */
static int64_t choose_gpus(Loop *L, int64_t job, int64_t node, int64_t *out) {
    Packing *p = L->p;
    int64_t ng = p->num_gpu[job], milli = p->gpu_milli[job], W = p->width;
    const int64_t *row = p->gpu_left + node * W;
    if (ng == 0) return 0;
    if (milli >= MILLI) { /* gpus_best for whole GPUs: the lowest-index fully free GPUs */
        int64_t k = 0;
        for (int64_t g = 0; g < W && k < ng; g++)
            if (row[g] == MILLI) out[k++] = g;
        return k;
    }
    if (p->gpus_by == GPUS_FGD) {
        ClassCache *c = class_cache(L, p->req_class[job]);
        if (c == NULL) {
            p->error = ERR_MEMORY;
            return 0;
        }
        fgd_cached(L, c, node, job);
        out[0] = c->gpu[node];
        return 1;
    }
    if (p->gpus_by == GPUS_PWR) { /* pwr_share_gpu: the first fitting busy GPU, else the first fitting one */
        int64_t first = -1;
        for (int64_t g = 0; g < W; g++) {
            if (row[g] < milli) continue;
            if (row[g] < MILLI) {
                out[0] = g;
                return 1;
            }
            if (first < 0) first = g;
        }
        out[0] = first;
        return 1;
    }
    /* gpus_best for a share pod: the fitting GPU with least left, first index on ties */
    int64_t best = 0, best_left = MILLI + 2;
    for (int64_t g = 0; g < W; g++) {
        int64_t left = row[g] >= milli ? row[g] : MILLI + 1;
        if (left < best_left) {
            best_left = left;
            best = g;
        }
    }
    out[0] = best;
    return 1;
}

/* Returns the node, or -1 when the pod fits nowhere; out receives the GPUs, *n_gpus their number. */
static int64_t place(Loop *L, int64_t job, int64_t *out, int64_t *n_gpus) {
    Packing *p = L->p;
    int64_t mid = p->mask_id[job];
    const uint8_t *mask = mid >= 0 ? p->node_masks + mid * p->n_nodes : NULL;
    int64_t ng = p->num_gpu[job], milli = p->gpu_milli[job], cpu = p->cpu_milli[job], mem = p->mem_mib[job];
    Candidates *c = &L->cand[p->feas_class[job]];
    if (c->nodes == NULL && L->cand_used + p->n_nodes <= p->candidate_budget) {
        c->nodes = malloc((size_t)p->n_nodes * sizeof(int64_t));
        if (c->nodes != NULL) {
            for (int64_t n = 0; n < p->n_nodes; n++) c->nodes[n] = n;
            c->n = p->n_nodes;
            L->cand_used += p->n_nodes;
        }
    }
    int64_t k = 0;
    if (c->nodes != NULL) { /* keep the nodes that pass, in order: they are this pod's candidates */
        for (int64_t i = 0; i < c->n; i++) {
            int64_t n = c->nodes[i];
            if ((mask == NULL || mask[n]) && p->available[n] && p->cpu_left[n] >= cpu && p->mem_left[n] >= mem &&
                (ng == 0 || (milli >= MILLI ? p->free_gpus[n] >= ng : p->max_gpu_left[n] >= milli)))
                c->nodes[k++] = n;
        }
        c->n = k;
        L->nodes = c->nodes;
    } else {
        L->nodes = L->all_nodes;
        for (int64_t n = 0; n < p->n_nodes; n++) {
            if ((mask == NULL || mask[n]) && p->available[n] && p->cpu_left[n] >= cpu && p->mem_left[n] >= mem &&
                (ng == 0 || (milli >= MILLI ? p->free_gpus[n] >= ng : p->max_gpu_left[n] >= milli)))
                L->nodes[k++] = n;
        }
    }
    if (k == 0) return -1;
    int64_t node = L->nodes[0];
    if (k > 1) {
        int rc = score_nodes(L, job, k);
        if (rc != OK) {
            p->error = rc;
            return -1;
        }
        int64_t best = 0, best_key = L->total[0] * p->rank_weight - p->rank[L->nodes[0]];
        for (int64_t i = 1; i < k; i++) {
            int64_t key = L->total[i] * p->rank_weight - p->rank[L->nodes[i]];
            if (key > best_key) {
                best_key = key;
                best = i;
            }
        }
        node = L->nodes[best];
    }
    *n_gpus = choose_gpus(L, job, node, out);
    return node;
}

/* ClusterState.allocate */
static void allocate(Loop *L, int64_t node, const int64_t *gpus, int64_t n_gpus, int64_t milli, int64_t cpu,
                     int64_t mem) {
    Packing *p = L->p;
    int64_t W = p->width, *row = p->gpu_left + node * W;
    for (int64_t i = 0; i < n_gpus; i++) row[gpus[i]] -= milli;
    p->cpu_left[node] -= cpu;
    p->mem_left[node] -= mem;
    if (p->jobs_on_node[node] == 0) p->nodes_busy++;
    p->jobs_on_node[node]++;
    p->allocated_milli += milli * n_gpus;
    if (n_gpus) {
        p->pod_kinds[node * (W + 1) + (milli < MILLI ? 0 : n_gpus)]++;
        int64_t free = 0, total = 0, mx = row[0];
        for (int64_t g = 0; g < W; g++) {
            if (row[g] == MILLI) free++;
            if (row[g] > 0) total += row[g];
            if (row[g] > mx) mx = row[g];
        }
        p->free_gpus[node] = free;
        p->gpu_left_total[node] = total;
        p->max_gpu_left[node] = mx;
    }
    L->version[node]++;
}

int64_t ws_packing(Packing *p) {
    int64_t N = p->n_nodes, W = p->width;
    int64_t T = p->fgd.n_thr > p->obs_frag.n_thr ? p->fgd.n_thr : p->obs_frag.n_thr;
    if (T < 1) T = 1;
    Loop L = {.p = p};
    L.all_nodes = L.nodes = malloc((size_t)N * sizeof(int64_t));
    L.cand = calloc((size_t)(p->n_feas_classes > 0 ? p->n_feas_classes : 1), sizeof(Candidates));
    L.raw = malloc((size_t)N * sizeof(int64_t));
    L.total = malloc((size_t)N * sizeof(int64_t));
    L.version = calloc((size_t)N, sizeof(int64_t));
    L.cnt = malloc((size_t)T * sizeof(int64_t));
    L.sm = malloc((size_t)T * sizeof(int64_t));
    L.cnt1 = malloc((size_t)T * sizeof(int64_t));
    L.sm1 = malloc((size_t)T * sizeof(int64_t));
    L.cache = calloc((size_t)(p->n_classes > 0 ? p->n_classes : 1), sizeof(ClassCache));
    L.node_cnt = malloc((size_t)(N * T) * sizeof(int64_t));
    L.node_sm = malloc((size_t)(N * T) * sizeof(int64_t));
    L.node_idle = malloc((size_t)N * sizeof(int64_t));
    L.node_f0 = malloc((size_t)N * sizeof(int64_t));
    L.node_stamp = malloc((size_t)N * sizeof(int64_t));
    p->error = OK;
    if (L.node_stamp)
        for (int64_t n = 0; n < N; n++) L.node_stamp[n] = -1;
    if (!L.nodes || !L.cand || !L.raw || !L.total || !L.version || !L.cnt || !L.sm || !L.cnt1 || !L.sm1 || !L.cache ||
        !L.node_cnt || !L.node_sm || !L.node_idle || !L.node_f0 || !L.node_stamp) {
        p->error = ERR_MEMORY;
        goto done;
    }
    int64_t cols = p->observe ? 7 : 4;
    for (int64_t i = 0; i < p->n_pods && p->error == OK; i++) {
        int64_t job = p->order[i];
        int64_t *gpus = p->out_gpus + i * W, n_gpus = 0;
        p->arrived += p->num_gpu[job] * p->gpu_milli[job];
        int64_t node = p->never_fits[job] ? -1 : place(&L, job, gpus, &n_gpus);
        if (p->error != OK) break;
        p->out_node[i] = node;
        p->placed[i] = node >= 0;
        if (node >= 0) {
            allocate(&L, node, gpus, n_gpus, p->gpu_milli[job], p->cpu_milli[job], p->mem_mib[job]);
            if (p->observe) { /* FragPowerObserver.after_pod */
                int64_t f = node_frag(&p->obs_frag, p, node, L.cnt, L.sm);
                double w = node_power(&p->obs_power, node, p->cpu_left[node], p->free_gpus[node]);
                p->obs_frag_total += f - p->obs_frag_scaled[node];
                p->obs_power_total += w - p->obs_node_power[node];
                p->obs_frag_scaled[node] = f;
                p->obs_node_power[node] = w;
            }
        }
        double *row = p->series + i * cols;
        row[0] = (double)i;
        row[1] = (double)p->arrived;
        row[2] = (double)p->allocated_milli;
        row[3] = node >= 0 ? 1.0 : 0.0;
        if (p->observe) {
            row[4] = (double)p->obs_frag_total / (double)p->obs_frag.div;
            row[5] = (double)(p->total_milli - p->allocated_milli);
            row[6] = p->obs_power_total;
        }
    }
done:
    if (L.cache)
        for (int64_t c = 0; c < p->n_classes; c++) {
            free(L.cache[c].score);
            free(L.cache[c].gpu);
            free(L.cache[c].stamp);
            free(L.cache[c].pwr);
            free(L.cache[c].pwr_stamp);
        }
    free(L.cache);
    if (L.cand)
        for (int64_t c = 0; c < p->n_feas_classes; c++) free(L.cand[c].nodes);
    free(L.cand);
    free(L.all_nodes);
    free(L.raw);
    free(L.total);
    free(L.version);
    free(L.cnt);
    free(L.sm);
    free(L.cnt1);
    free(L.sm1);
    free(L.node_cnt);
    free(L.node_sm);
    free(L.node_idle);
    free(L.node_f0);
    free(L.node_stamp);
    return p->error;
}
