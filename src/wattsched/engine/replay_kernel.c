/* The simulator's event loop for queue + placement runs, compiled (engine/native_replay.py says when it applies).

   It follows Simulator.run (engine/temporal.py) with QueuePlacementScheduler (policies/adapters.py) step by step:
   arrivals in order, completions from a heap ordered by (time, push sequence), a scheduling pass after every batch
   that brought an arrival or a release, the recorder's row after every batch. Placement is the built-in policies'
   (policies/base.py, policies/placement.py, core/capacity.py): the same filter, the same integer scores, ties to
   the smallest seeded rank, the same GPUs. Every floating-point operation is the Python code's, in its order, so
   the results are bit for bit the same; compile without -ffast-math or contraction (engine/kernels.py).

   Shared GPUs (a one-GPU pod taking 0 < milli < 1000 of its GPU) follow Simulator._take, start, _finish and
   _neighbours_changed: the pod takes the fitting GPU with least milli left; a job's speed is its solo rate times
   the time-slicing factor of its co-runners (perf.colocation SharingModel.speed, summed in the GPU's residents
   order); whenever a GPU's residents change, its running jobs whose rate moved are settled, re-rated and get a new
   completion event (the old one goes stale by its version), in the iteration order of the Python set the
   simulator builds of them (emulated by set_order: equal completion times pop in push order). */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MILLI 1000
#define MAX_SPEC_CPU 128000.0
#define MAX_SPEC_GPU 8000.0
#define STALL_LIMIT_S (3650.0 * 86400.0)
#define FAILED_MEMO_SIZE 32
#define LINEAR_PROBES 9 /* CPython's setobject.c */
#define PERTURB_SHIFT 5
#define SET_MIN_SIZE 8

enum { QUEUE_BLOCK = 0, QUEUE_EVERY = 1 };
enum { PLACE_FIRST_FIT = 0, PLACE_BEST_FIT = 1, PLACE_CONSOLIDATED = 2 };
enum { ROUNDS_NONE = 0, ROUNDS_TIRESIAS = 1 };
/* ERR_CONTENDED: the run left what the kernel mirrors (the caller runs it again in Python, from the start). */
enum { OK = 0, ERR_STALLED = 1, ERR_MEMORY = 2, ERR_PLACEMENT = 3, ERR_CONTENDED = 4 };

/* Field order and types are mirrored by engine/native_replay.py (_Replay); ws_replay_size() checks the size. */
typedef struct {
    /* sizes and modes */
    int64_t n_jobs, n_nodes, width, n_cols; /* n_cols: GPU model codes + 1 (tables indexed by code + 1) */
    int64_t queue_mode, placement, rank_weight, track_idle, n_recorders;
    int64_t status_pending, status_running, status_done, status_unschedulable;
    int64_t phase_running, phase_released;
    /* scalars, read and updated */
    double now, last_time, gpu_seconds, last_start;
    int64_t released, allocated_milli, nodes_busy, release_epoch;
    /* scalars, written */
    int64_t n_log, n_series, n_allocs, n_shares, n_gpus, n_pending, arrivals, decisions, error;
    /* arrivals in order */
    const double *arrival_time;
    const int64_t *arrival_job;
    /* per job */
    const uint8_t *never_fits;
    const double *priority;
    const int64_t *num_gpu, *gpu_milli, *cpu_milli, *mem_mib, *mask_id; /* mask_id -1: any node */
    const uint8_t *gang;
    const double *rate_tab, *load_tab; /* tables [job, code + 1] */
    /* cluster */
    const uint8_t *node_masks; /* [masks, nodes] */
    const int64_t *node_code, *rank;
    const uint8_t *available;
    /* cluster state, updated in place */
    int64_t *gpu_left, *cpu_left, *mem_left, *free_gpus, *gpu_left_total, *max_gpu_left, *jobs_on_node;
    int64_t *pod_kinds; /* [nodes, width + 1] */
    double *idle_since;
    /* per job, updated in place */
    int8_t *status;
    double *start_s, *end_s;
    int64_t *alloc_of_job;
    /* written */
    double *log;    /* rows of 8: time, job, alloc, load, rate, phase, setting, lost */
    double *series; /* rows of 5: time, allocated GPUs, running jobs, queue length, nodes in use */
    int64_t *alloc_share_start, *share_node, *share_cpu, *share_mem, *share_gpu_start, *share_gpus;
    int64_t *pending_out;
    /* shared GPUs and per-job progress */
    int64_t max_residents, n_pushes, log_cap;
    double interference, busy_scale;
    const double *util; /* per job: the utilisation time-slicing divides */
    int64_t *version;   /* per job, updated: completion events of other versions are stale */
    double *rate, *remaining, *last_update; /* per job, updated */
    int64_t *alloc_milli;                   /* per allocation: milli-GPU on each of its GPUs (written) */
    /* allocation rounds (ROUNDS_TIRESIAS: Tiresias while it never contends, see tiresias_pass) */
    int64_t round_mode, rounds, round_decisions, rounds_stopped, capacity_gpus, series_cap, series_owned, round_push;
    double round_s, round_origin, next_round; /* next_round: the pending round's time (INFINITY: none) */
    const int64_t *spec_gpu_count, *spec_cpu, *spec_mem, *switch_id; /* per node (consolidated gangs) */
} Replay;

int64_t ws_replay_size(void) { return (int64_t)sizeof(Replay); }

/* A gang's candidate node in lexsort((rank, -usable)) order: most usable GPUs first, ties to the smaller rank. */
typedef struct {
    int64_t usable, rank, pos;
} GangKey;

typedef struct {
    Replay *r;
    /* completions: a binary heap on (time, sequence) */
    double *heap_t;
    int64_t *heap_seq, *heap_job, *heap_ver, heap_n, heap_cap, seq;
    /* waiting jobs in (priority, job) order */
    int64_t *pend, pend_n;
    int64_t running;
    /* the adapter's memo of requests that failed since the last release (QueuePlacementScheduler.try_start) */
    int64_t failed[FAILED_MEMO_SIZE][6], failed_n, failed_epoch;
    /* placement scratch */
    int64_t *nodes, *raw, *usable;
    GangKey *keys;
    int64_t *tmp_node, *tmp_cpu, *tmp_mem, *tmp_ngpu, *tmp_gpus;
    /* per GPU slot (node * width + slot): the jobs sharing it, in the order they came (Simulator._residents) */
    int64_t *res, *res_n;
    /* set_order scratch */
    int64_t *set_key, *set_used, *set_out;
    int64_t set_cap;
    int oom;
} Loop;

/* ----- completions heap ------------------------------------------------------------------------------------ */
static int heap_less(const Loop *L, int64_t a, int64_t b) {
    if (L->heap_t[a] != L->heap_t[b]) return L->heap_t[a] < L->heap_t[b];
    return L->heap_seq[a] < L->heap_seq[b];
}

static void heap_swap(Loop *L, int64_t a, int64_t b) {
    double t = L->heap_t[a];
    L->heap_t[a] = L->heap_t[b];
    L->heap_t[b] = t;
    int64_t s = L->heap_seq[a];
    L->heap_seq[a] = L->heap_seq[b];
    L->heap_seq[b] = s;
    int64_t j = L->heap_job[a];
    L->heap_job[a] = L->heap_job[b];
    L->heap_job[b] = j;
    int64_t v = L->heap_ver[a];
    L->heap_ver[a] = L->heap_ver[b];
    L->heap_ver[b] = v;
}

static int grow(void **p, int64_t count, size_t size) {
    void *q = realloc(*p, (size_t)count * size);
    if (!q) return 0;
    *p = q;
    return 1;
}

static void heap_push(Loop *L, double t, int64_t job, int64_t version) {
    if (L->heap_n == L->heap_cap) {
        int64_t cap = L->heap_cap + L->heap_cap / 2 + 16;
        if (!grow((void **)&L->heap_t, cap, sizeof(double)) || !grow((void **)&L->heap_seq, cap, sizeof(int64_t)) ||
            !grow((void **)&L->heap_job, cap, sizeof(int64_t)) || !grow((void **)&L->heap_ver, cap, sizeof(int64_t))) {
            L->oom = 1;
            return;
        }
        L->heap_cap = cap;
    }
    int64_t i = L->heap_n++;
    L->heap_t[i] = t;
    L->heap_seq[i] = L->seq++;
    L->heap_job[i] = job;
    L->heap_ver[i] = version;
    L->r->n_pushes++;
    while (i > 0) {
        int64_t parent = (i - 1) / 2;
        if (!heap_less(L, i, parent)) break;
        heap_swap(L, i, parent);
        i = parent;
    }
}

static int64_t heap_pop(Loop *L, int64_t *version) {
    int64_t job = L->heap_job[0];
    *version = L->heap_ver[0];
    L->heap_n--;
    if (L->heap_n > 0) {
        L->heap_t[0] = L->heap_t[L->heap_n];
        L->heap_seq[0] = L->heap_seq[L->heap_n];
        L->heap_job[0] = L->heap_job[L->heap_n];
        L->heap_ver[0] = L->heap_ver[L->heap_n];
        int64_t i = 0;
        for (;;) {
            int64_t l = 2 * i + 1, rgt = l + 1, m = i;
            if (l < L->heap_n && heap_less(L, l, m)) m = l;
            if (rgt < L->heap_n && heap_less(L, rgt, m)) m = rgt;
            if (m == i) break;
            heap_swap(L, i, m);
            i = m;
        }
    }
    return job;
}

/* ----- the queue: (priority, job) order, as the simulator's SortedList ---------------------------------------- */
static int key_less(const double *prio, int64_t a, int64_t b) {
    if (prio[a] != prio[b]) return prio[a] < prio[b];
    return a < b;
}

static int64_t pend_position(const Loop *L, int64_t job) { /* first index whose key is not less than job's */
    const double *prio = L->r->priority;
    int64_t lo = 0, hi = L->pend_n;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (key_less(prio, L->pend[mid], job)) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static void enqueue(Loop *L, int64_t job) {
    int64_t i = pend_position(L, job);
    memmove(L->pend + i + 1, L->pend + i, (size_t)(L->pend_n - i) * sizeof(int64_t));
    L->pend[i] = job;
    L->pend_n++;
}

static void remove_at(Loop *L, int64_t i) {
    memmove(L->pend + i, L->pend + i + 1, (size_t)(L->pend_n - i - 1) * sizeof(int64_t));
    L->pend_n--;
}

/* ----- cluster state (core/cluster.py ClusterState) ------------------------------------------------------------ */
static void refresh_node(Replay *r, int64_t node) {
    const int64_t *row = r->gpu_left + node * r->width;
    int64_t free = 0, total = 0, top = row[0];
    for (int64_t g = 0; g < r->width; g++) {
        int64_t v = row[g];
        if (v == MILLI) free++;
        if (v > 0) total += v;
        if (v > top) top = v;
    }
    r->free_gpus[node] = free;
    r->gpu_left_total[node] = total;
    r->max_gpu_left[node] = top;
}

static int64_t pod_kind(int64_t num_gpus_here, int64_t milli) { return milli < MILLI ? 0 : num_gpus_here; }

static void allocate(Replay *r, int64_t node, const int64_t *gpus, int64_t ngpu, int64_t milli, int64_t cpu,
                     int64_t mem) {
    int64_t *row = r->gpu_left + node * r->width;
    for (int64_t k = 0; k < ngpu; k++) row[gpus[k]] -= milli;
    r->cpu_left[node] -= cpu;
    r->mem_left[node] -= mem;
    if (r->jobs_on_node[node] == 0) r->nodes_busy++;
    r->jobs_on_node[node]++;
    r->allocated_milli += milli * ngpu;
    if (ngpu) {
        r->pod_kinds[node * (r->width + 1) + pod_kind(ngpu, milli)]++;
        refresh_node(r, node);
    }
}

static void release(Replay *r, int64_t node, const int64_t *gpus, int64_t ngpu, int64_t milli, int64_t cpu,
                    int64_t mem) {
    int64_t *row = r->gpu_left + node * r->width;
    for (int64_t k = 0; k < ngpu; k++) row[gpus[k]] += milli;
    r->cpu_left[node] += cpu;
    r->mem_left[node] += mem;
    r->jobs_on_node[node]--;
    if (r->jobs_on_node[node] == 0) r->nodes_busy--;
    r->allocated_milli -= milli * ngpu;
    r->release_epoch++;
    if (ngpu) {
        r->pod_kinds[node * (r->width + 1) + pod_kind(ngpu, milli)]--;
        refresh_node(r, node);
    }
}

/* ----- placement (policies/base.py PlacementPolicy.place) ------------------------------------------------------ */

/* numpy's float floor division (npy_divmod), which core/capacity.py gang_gpus uses through `//`. */
static double np_floor_divide(double a, double b) {
    double mod = fmod(a, b);
    double div = (a - mod) / b;
    if (mod) {
        if ((b < 0) != (mod < 0)) div -= 1.0;
    }
    double floordiv;
    if (div) {
        floordiv = floor(div);
        if (div - floordiv > 0.5) floordiv += 1.0;
    } else {
        floordiv = copysign(0.0, a / b);
    }
    return floordiv;
}

/* gpus_best for whole GPUs: the lowest-index fully free GPUs of the node. */
static int64_t take_free_gpus(const Replay *r, int64_t node, int64_t count, int64_t *out) {
    const int64_t *row = r->gpu_left + node * r->width;
    int64_t k = 0;
    for (int64_t g = 0; g < r->width && k < count; g++)
        if (row[g] == MILLI) out[k++] = g;
    return k;
}

/* The GPUs a gang job may take on a node with `gpus` GPUs and `cpu_free`, `mem_free` left: its CPU and memory
   per GPU bound them (planning.py gang_gpus). */
static int64_t gpus_served(int64_t gpus, int64_t cpu_free, int64_t mem_free, int64_t cpu, int64_t mem, int64_t ng) {
    if (cpu > 0) {
        int64_t by_cpu = (int64_t)np_floor_divide((double)cpu_free, (double)cpu / (double)ng);
        if (by_cpu < gpus) gpus = by_cpu;
    }
    if (mem > 0) {
        int64_t by_mem = (int64_t)np_floor_divide((double)mem_free, (double)mem / (double)ng);
        if (by_mem < gpus) gpus = by_mem;
    }
    return gpus;
}

/* A gang job's shares as fill_gang builds them, node by node. */
typedef struct {
    int64_t ng, remaining, cpu, mem, cpu_rest, mem_rest, shares, gpus_used;
} GangFill;

/* Adds the share of `node` (up to `usable` GPUs, CPU and memory pro rata, the last share taking the rest) to the
   tmp_* arrays; returns 1 once the job has all its GPUs. */
static int fill_share(Loop *L, GangFill *f, int64_t node, int64_t usable) {
    int64_t take = usable < f->remaining ? usable : f->remaining;
    if (take <= 0) return 0;
    f->remaining -= take;
    int64_t c = f->remaining == 0 ? f->cpu_rest : (int64_t)((double)f->cpu / (double)f->ng * (double)take);
    int64_t m = f->remaining == 0 ? f->mem_rest : (int64_t)((double)f->mem / (double)f->ng * (double)take);
    f->cpu_rest -= c;
    f->mem_rest -= m;
    L->tmp_node[f->shares] = node;
    L->tmp_cpu[f->shares] = c;
    L->tmp_mem[f->shares] = m;
    L->tmp_ngpu[f->shares] = take_free_gpus(L->r, node, take, L->tmp_gpus + f->gpus_used);
    f->gpus_used += L->tmp_ngpu[f->shares];
    f->shares++;
    return f->remaining == 0;
}

static int gang_order(const void *pa, const void *pb) {
    const GangKey *a = pa, *b = pb;
    if (a->usable != b->usable) return a->usable > b->usable ? -1 : 1;
    return (a->rank > b->rank) - (a->rank < b->rank);
}

/* Fills the tmp_* share arrays; returns the number of shares, 0 when the job does not fit now. */
static int64_t place_gang(Loop *L, int64_t job) {
    Replay *r = L->r;
    const uint8_t *mask = r->mask_id[job] >= 0 ? r->node_masks + r->mask_id[job] * r->n_nodes : NULL;
    int64_t ng = r->num_gpu[job], cpu = r->cpu_milli[job], mem = r->mem_mib[job];
    int64_t k = 0, total = 0;
    for (int64_t n = 0; n < r->n_nodes; n++) {
        if ((mask == NULL || mask[n]) && r->available[n] && r->free_gpus[n] > 0) {
            int64_t usable = gpus_served(r->free_gpus[n], r->cpu_left[n], r->mem_left[n], cpu, mem, ng);
            L->nodes[k] = n;
            L->usable[k] = usable;
            L->keys[k].usable = usable;
            L->keys[k].rank = r->rank[n];
            L->keys[k].pos = k;
            total += usable;
            k++;
        }
    }
    if (k == 0 || total < ng) return 0;
    qsort(L->keys, (size_t)k, sizeof(GangKey), gang_order);
    GangFill f = {ng, ng, cpu, mem, cpu, mem, 0, 0};
    for (int64_t i = 0; i < k; i++) {
        int64_t pos = L->keys[i].pos;
        if (fill_share(L, &f, L->nodes[pos], L->usable[pos])) return f.shares;
    }
    return 0;
}

/* planning.py Consolidated.place_gang: whole free nodes under one switch, the switch with the fewest GPUs that
   suffice (ties to the smallest rank), its nodes by rank, each taking what its CPU and memory serve (gang_gpus
   on the node's full capacity), filled as fill_gang does. */
static int switch_rank_order(const void *pa, const void *pb) {
    const GangKey *a = pa, *b = pb; /* usable: switch id here */
    if (a->usable != b->usable) return a->usable < b->usable ? -1 : 1;
    return (a->rank > b->rank) - (a->rank < b->rank);
}

static int64_t place_gang_consolidated(Loop *L, int64_t job) {
    Replay *r = L->r;
    const uint8_t *mask = r->mask_id[job] >= 0 ? r->node_masks + r->mask_id[job] * r->n_nodes : NULL;
    int64_t ng = r->num_gpu[job], cpu = r->cpu_milli[job], mem = r->mem_mib[job];
    int64_t k = 0;
    for (int64_t n = 0; n < r->n_nodes; n++) {
        if ((mask == NULL || mask[n]) && r->available[n] && r->free_gpus[n] == r->spec_gpu_count[n] &&
            r->spec_gpu_count[n] > 0 && r->cpu_left[n] == r->spec_cpu[n] && r->mem_left[n] == r->spec_mem[n]) {
            L->nodes[n] = gpus_served(r->spec_gpu_count[n], r->spec_cpu[n], r->spec_mem[n], cpu, mem, ng); /* by node */
            L->keys[k].usable = r->switch_id[n];
            L->keys[k].rank = r->rank[n];
            L->keys[k].pos = n;
            k++;
        }
    }
    if (k == 0) return 0;
    qsort(L->keys, (size_t)k, sizeof(GangKey), switch_rank_order);
    int64_t best_start = -1, best_end = -1, best_gpus = 0, best_rank = 0;
    for (int64_t i = 0; i < k;) {
        int64_t e = i, gpus = 0;
        while (e < k && L->keys[e].usable == L->keys[i].usable) gpus += L->nodes[L->keys[e++].pos];
        int64_t min_rank = L->keys[i].rank; /* ranks ascend within a switch */
        if (gpus >= ng && (best_start < 0 || gpus < best_gpus || (gpus == best_gpus && min_rank < best_rank))) {
            best_start = i;
            best_end = e;
            best_gpus = gpus;
            best_rank = min_rank;
        }
        i = e;
    }
    if (best_start < 0) return 0;
    GangFill f = {ng, ng, cpu, mem, cpu, mem, 0, 0};
    for (int64_t i = best_start; i < best_end; i++) {
        int64_t node = L->keys[i].pos;
        if (fill_share(L, &f, node, L->nodes[node])) return f.shares;
    }
    return 0;
}

static int64_t place(Loop *L, int64_t job) {
    Replay *r = L->r;
    if (r->gang[job]) return r->placement == PLACE_CONSOLIDATED ? place_gang_consolidated(L, job) : place_gang(L, job);
    const uint8_t *mask = r->mask_id[job] >= 0 ? r->node_masks + r->mask_id[job] * r->n_nodes : NULL;
    int64_t ng = r->num_gpu[job], cpu = r->cpu_milli[job], mem = r->mem_mib[job];
    int64_t k = 0;
    int64_t milli = r->gpu_milli[job];
    int share = ng > 0 && milli < MILLI;
    for (int64_t n = 0; n < r->n_nodes; n++) {
        if ((mask == NULL || mask[n]) && r->available[n] && r->cpu_left[n] >= cpu && r->mem_left[n] >= mem &&
            (ng == 0 || (share ? r->max_gpu_left[n] >= milli : r->free_gpus[n] >= ng)))
            L->nodes[k++] = n;
    }
    if (k == 0) return 0;
    int64_t node = L->nodes[0];
    if (k > 1) {
        int64_t *raw = L->raw;
        if (r->placement == PLACE_BEST_FIT) {
            int64_t demand = ng * r->gpu_milli[job];
            for (int64_t i = 0; i < k; i++) {
                int64_t n = L->nodes[i];
                double leftover = 0.5 * (double)(r->cpu_left[n] - cpu) / MAX_SPEC_CPU +
                                  0.5 * (double)(r->gpu_left_total[n] - demand) / MAX_SPEC_GPU;
                raw[i] = (int64_t)((1.0 - leftover) * 100.0);
            }
            int64_t lo = raw[0], hi = raw[0];
            for (int64_t i = 1; i < k; i++) {
                if (raw[i] < lo) lo = raw[i];
                if (raw[i] > hi) hi = raw[i];
            }
            for (int64_t i = 0; i < k; i++) raw[i] = hi == lo ? 0 : (raw[i] - lo) * 100 / (hi - lo);
        } else if (r->placement == PLACE_CONSOLIDATED) { /* planning.py Consolidated.score: fullest node */
            for (int64_t i = 0; i < k; i++) raw[i] = -r->free_gpus[L->nodes[i]];
        } else {
            for (int64_t i = 0; i < k; i++) raw[i] = 100;
        }
        int64_t best = 0, best_key = raw[0] * r->rank_weight - r->rank[L->nodes[0]];
        for (int64_t i = 1; i < k; i++) {
            int64_t key = raw[i] * r->rank_weight - r->rank[L->nodes[i]];
            if (key > best_key) {
                best_key = key;
                best = i;
            }
        }
        node = L->nodes[best];
    }
    L->tmp_node[0] = node;
    L->tmp_cpu[0] = cpu;
    L->tmp_mem[0] = mem;
    if (share) { /* gpus_best: the fitting GPU with least milli left, first index on ties */
        const int64_t *row = r->gpu_left + node * r->width;
        int64_t best_g = 0, best_v = MILLI + 2;
        for (int64_t g = 0; g < r->width; g++) {
            int64_t v = row[g] >= milli ? row[g] : MILLI + 1;
            if (v < best_v) {
                best_v = v;
                best_g = g;
            }
        }
        L->tmp_gpus[0] = best_g;
        L->tmp_ngpu[0] = 1;
    } else {
        L->tmp_ngpu[0] = ng > 0 ? take_free_gpus(r, node, ng, L->tmp_gpus) : 0;
    }
    return 1;
}

/* ----- the iteration order of a Python set of ints (CPython 3.11 Objects/setobject.c) --------------------------- */

/* A set built empty and filled by set.update(list) of small non-negative ints (hash(k) == k): set_add_entry's
   linear probes then perturbed steps, a resize to the smallest power of two above 4 x used once fill*5 >= mask*3
   (entries re-inserted in table order by set_insert_clean), iteration in table order. Writes the items in that
   order to L->set_out and returns how many (duplicates count once). tests/unit/test_native_replay.py checks it
   against real sets. */
static void set_insert_clean(int64_t *key, int64_t *used, uint64_t mask, int64_t k) {
    uint64_t perturb = (uint64_t)k, i = (uint64_t)k & mask;
    for (;;) {
        if (!used[i]) goto found;
        if (i + LINEAR_PROBES <= mask) {
            for (uint64_t j = 1; j <= LINEAR_PROBES; j++)
                if (!used[i + j]) {
                    i += j;
                    goto found;
                }
        }
        perturb >>= PERTURB_SHIFT;
        i = (i * 5 + 1 + perturb) & mask;
    }
found:
    used[i] = 1;
    key[i] = k;
}

static int64_t set_order(Loop *L, const int64_t *items, int64_t n) {
    int64_t need = SET_MIN_SIZE;
    while (need <= 4 * n + 4) need <<= 1;
    if (need > L->set_cap) {
        if (!grow((void **)&L->set_key, need, sizeof(int64_t)) || !grow((void **)&L->set_used, need, sizeof(int64_t)) ||
            !grow((void **)&L->set_out, need, sizeof(int64_t))) {
            L->oom = 1;
            return 0;
        }
        L->set_cap = need;
    }
    int64_t *key = L->set_key, *used = L->set_used;
    uint64_t mask = SET_MIN_SIZE - 1;
    int64_t fill = 0;
    memset(used, 0, (size_t)(mask + 1) * sizeof(int64_t));
    for (int64_t t = 0; t < n; t++) {
        int64_t k = items[t];
        uint64_t perturb = (uint64_t)k, i = (uint64_t)k & mask;
        int present = 0;
        for (;;) {
            uint64_t probes = (i + LINEAR_PROBES <= mask) ? LINEAR_PROBES : 0, e = i;
            int found = 0;
            for (uint64_t p = 0; p <= probes; p++, e++) {
                if (!used[e]) {
                    found = 1;
                    break;
                }
                if (key[e] == k) {
                    present = 1;
                    break;
                }
            }
            if (present) break;
            if (found) {
                used[e] = 1;
                key[e] = k;
                break;
            }
            perturb >>= PERTURB_SHIFT;
            i = (i * 5 + 1 + perturb) & mask;
        }
        if (present) continue;
        fill++;
        if ((uint64_t)fill * 5 >= mask * 3) { /* set_table_resize(so, used * 4): re-insert in table order */
            uint64_t size = SET_MIN_SIZE;
            while (size <= (uint64_t)fill * 4) size <<= 1;
            int64_t *out = L->set_out, m = 0;
            for (uint64_t e = 0; e <= mask; e++)
                if (used[e]) out[m++] = key[e];
            mask = size - 1;
            memset(used, 0, (size_t)size * sizeof(int64_t));
            for (int64_t e = 0; e < m; e++) set_insert_clean(key, used, mask, out[e]);
        }
    }
    int64_t m = 0;
    for (uint64_t e = 0; e <= mask; e++)
        if (used[e]) L->set_out[m++] = key[e];
    return m;
}

/* For the tests: the order in which Python iterates set(items) built by update from a list. */
int64_t ws_set_order(const int64_t *items, int64_t n, int64_t *out) {
    Loop L;
    memset(&L, 0, sizeof L);
    int64_t m = set_order(&L, items, n);
    if (!L.oom) memcpy(out, L.set_out, (size_t)m * sizeof(int64_t));
    free(L.set_key);
    free(L.set_used);
    free(L.set_out);
    return L.oom ? -1 : m;
}

/* ----- starting and finishing jobs (Simulator.start, Simulator._finish) ----------------------------------------- */
static void log_row(Loop *L, double t, int64_t job, int64_t alloc, double load, double rate, int64_t phase) {
    Replay *r = L->r;
    if (r->n_log == r->log_cap) {
        int64_t cap = r->log_cap + r->log_cap / 2 + 64;
        if (!grow((void **)&r->log, cap * 8, sizeof(double))) {
            L->oom = 1;
            return;
        }
        r->log_cap = cap;
    }
    double *row = r->log + r->n_log * 8;
    row[0] = t;
    row[1] = (double)job;
    row[2] = (double)alloc;
    row[3] = load;
    row[4] = rate;
    row[5] = (double)phase;
    row[6] = 0.0; /* setting: the default one */
    row[7] = 0.0;
    r->n_log++;
}

static int64_t share_of(const Replay *r, int64_t job) { return r->gpu_milli[job] > 0 ? r->gpu_milli[job] : MILLI; }

/* The GPU slot a running shared job holds. */
static int64_t slot_of(const Replay *r, int64_t job) {
    int64_t s = r->alloc_share_start[r->alloc_of_job[job]];
    return r->share_node[s] * r->width + r->share_gpus[r->share_gpu_start[s]];
}

/* Simulator._current_rate for a running job: its solo rate, times the time-slicing factor on a shared GPU. */
static double current_rate(const Loop *L, int64_t job) {
    const Replay *r = L->r;
    int64_t alloc = r->alloc_of_job[job];
    int64_t column = r->node_code[r->share_node[r->alloc_share_start[alloc]]] + 1;
    double rate = r->rate_tab[job * r->n_cols + column];
    if (share_of(r, job) < MILLI && r->num_gpu[job] > 0) {
        /* PerformanceModel.predicted_shared_factor over the GPU's other residents, SharingModel.speed */
        int64_t slot = slot_of(r, job);
        const int64_t *res = L->res + slot * r->max_residents;
        double others = 0.0;
        int64_t count = 0;
        for (int64_t i = 0; i < L->res_n[slot]; i++)
            if (res[i] != job) {
                others += r->util[res[i]];
                count++;
            }
        double factor = 1.0;
        if (count) {
            double scale = r->busy_scale, mine = r->util[job] * scale;
            double busy = mine + others * scale;
            double speed = 1.0 / ((busy < 1.0 ? 1.0 : busy) + r->interference * (busy - mine));
            factor = speed < factor ? speed : factor;
        }
        rate *= factor;
    }
    return rate;
}

/* Simulator._neighbours_changed for the residents of one GPU (a Python set of them, skipping `skip`): every running
   job whose rate moved is settled, re-rated, gets a new completion event and a log row. Loads do not move (the
   sharing model's power overlap is 1: loads add up). */
static void neighbours_changed(Loop *L, int64_t slot, int64_t skip) {
    Replay *r = L->r;
    int64_t m = set_order(L, L->res + slot * r->max_residents, L->res_n[slot]);
    for (int64_t i = 0; i < m && !L->oom; i++) {
        int64_t k = L->set_out[i];
        if (k == skip || r->status[k] != r->status_running) continue;
        double rate = current_rate(L, k);
        if (rate == r->rate[k]) continue;
        double now = r->now, elapsed = now - r->last_update[k];
        if (elapsed > 0) {
            double left = r->remaining[k] - elapsed * r->rate[k];
            r->remaining[k] = 0.0 > left ? 0.0 : left;
        }
        r->last_update[k] = now;
        r->rate[k] = rate;
        r->version[k]++;
        heap_push(L, now + r->remaining[k] / rate, k, r->version[k]);
        int64_t alloc = r->alloc_of_job[k];
        int64_t column = r->node_code[r->share_node[r->alloc_share_start[alloc]]] + 1;
        log_row(L, now, k, alloc, r->load_tab[k * r->n_cols + column], rate, r->phase_running);
    }
}

static void start(Loop *L, int64_t job, int64_t shares) {
    Replay *r = L->r;
    int64_t alloc = r->n_allocs++, ngpu = 0, gpu_at = 0, milli = share_of(r, job);
    r->alloc_share_start[alloc] = r->n_shares;
    r->alloc_milli[alloc] = milli;
    for (int64_t s = 0; s < shares; s++) {
        int64_t node = L->tmp_node[s], n = L->tmp_ngpu[s];
        allocate(r, node, L->tmp_gpus + gpu_at, n, milli, L->tmp_cpu[s], L->tmp_mem[s]);
        int64_t at = r->n_shares++;
        r->share_node[at] = node;
        r->share_cpu[at] = L->tmp_cpu[s];
        r->share_mem[at] = L->tmp_mem[s];
        r->share_gpu_start[at] = r->n_gpus;
        for (int64_t g = 0; g < n; g++) r->share_gpus[r->n_gpus++] = L->tmp_gpus[gpu_at + g];
        gpu_at += n;
        ngpu += n;
    }
    r->alloc_share_start[alloc + 1] = r->n_shares;
    r->share_gpu_start[r->n_shares] = r->n_gpus;
    r->alloc_of_job[job] = alloc;
    int shared = milli < MILLI && ngpu > 0;
    int64_t slot = shared ? L->tmp_node[0] * r->width + L->tmp_gpus[0] : -1;
    if (shared) L->res[slot * r->max_residents + L->res_n[slot]++] = job;
    int64_t column = r->node_code[L->tmp_node[0]] + 1;
    double load = ngpu ? r->load_tab[job * r->n_cols + column] : 0.0;
    double rate = shared ? current_rate(L, job) : r->rate_tab[job * r->n_cols + column];
    double now = r->now;
    r->status[job] = (int8_t)r->status_running;
    r->start_s[job] = now;
    r->last_start = now;
    L->running++;
    r->rate[job] = rate;
    r->last_update[job] = now;
    r->version[job]++;
    heap_push(L, now + r->remaining[job] / rate, job, r->version[job]);
    log_row(L, now, job, alloc, load, rate, r->phase_running);
    if (r->track_idle)
        for (int64_t s = 0; s < shares; s++) r->idle_since[L->tmp_node[s]] = INFINITY;
    if (shared) neighbours_changed(L, slot, job);
}

static void finish(Loop *L, int64_t job) {
    Replay *r = L->r;
    int64_t alloc = r->alloc_of_job[job], milli = r->alloc_milli[alloc];
    int64_t first = r->alloc_share_start[alloc], last = r->alloc_share_start[alloc + 1];
    int64_t slot = -1;
    r->remaining[job] = 0.0;
    r->last_update[job] = r->now;
    r->version[job]++;
    for (int64_t s = first; s < last; s++) {
        int64_t g0 = r->share_gpu_start[s], n = r->share_gpu_start[s + 1] - g0;
        release(r, r->share_node[s], r->share_gpus + g0, n, milli, r->share_cpu[s], r->share_mem[s]);
        if (milli < MILLI && n > 0) slot = r->share_node[s] * r->width + r->share_gpus[g0];
    }
    if (slot >= 0) { /* list.remove: the first occurrence, the others keep their order */
        int64_t *res = L->res + slot * r->max_residents, n = L->res_n[slot], i = 0;
        while (i < n && res[i] != job) i++;
        memmove(res + i, res + i + 1, (size_t)(n - i - 1) * sizeof(int64_t));
        L->res_n[slot]--;
    }
    if (r->track_idle)
        for (int64_t s = first; s < last; s++)
            if (r->jobs_on_node[r->share_node[s]] == 0) r->idle_since[r->share_node[s]] = r->now;
    r->rate[job] = 0.0;
    r->status[job] = (int8_t)r->status_done;
    r->end_s[job] = r->now;
    L->running--;
    r->released = 1;
    log_row(L, r->now, job, -1, 0.0, 0.0, r->phase_released);
    if (slot >= 0) neighbours_changed(L, slot, job);
}

/* QueuePlacementScheduler.try_start, with its memo of failed requests. */
static int try_start(Loop *L, int64_t job) {
    Replay *r = L->r;
    if (L->failed_epoch != r->release_epoch) {
        L->failed_n = 0;
        L->failed_epoch = r->release_epoch;
    }
    int64_t sig[6] = {r->mask_id[job], r->num_gpu[job], r->gpu_milli[job], r->cpu_milli[job],
                      r->mem_mib[job], r->gang[job]};
    for (int64_t f = 0; f < L->failed_n; f++) {
        const int64_t *o = L->failed[f];
        if (sig[0] == o[0] && sig[5] == o[5] && sig[1] >= o[1] && sig[2] >= o[2] && sig[3] >= o[3] &&
            sig[4] >= o[4])
            return 0;
    }
    int64_t shares = place(L, job);
    if (shares == 0) {
        if (L->failed_n < FAILED_MEMO_SIZE) memcpy(L->failed[L->failed_n++], sig, sizeof sig);
        return 0;
    }
    start(L, job, shares);
    return 1;
}

static void queue_pass(Loop *L) {
    int64_t i = 0;
    while (i < L->pend_n) {
        int64_t job = L->pend[i];
        if (try_start(L, job)) {
            remove_at(L, i);
        } else if (L->r->queue_mode == QUEUE_BLOCK) {
            return;
        } else {
            i++;
        }
    }
}

/* ----- Tiresias while it never contends (policies/allocation/tiresias.py) ---------------------------------------
   Nothing it started was ever stopped, so no waiting job has attained service (all in one queue, the starvation
   guard has nobody to reset), and while the GPUs of the waiting and running jobs fit in the cluster's its decision
   is _start_waiting: every waiting job in (submission, index) order placed by Consolidated on what is left, the
   placed ones started in that order; skipped when the last decision tried them all and nothing changed since.
   Whenever the GPUs asked for exceed the cluster's (its _by_priority path), or jobs wait with nothing running (the
   simulator's stall watch), the kernel stops with ERR_CONTENDED. */
typedef struct {
    int64_t active_gpus; /* GPUs of the waiting and running jobs */
    int all_tried, changed;
} TiresiasState;

static int tiresias_pass(Loop *L, TiresiasState *T) {
    Replay *r = L->r;
    int changed = T->changed;
    T->changed = 0;
    if (L->pend_n == 0) {
        T->all_tried = 0;
        return OK;
    }
    if (T->active_gpus > r->capacity_gpus) return ERR_CONTENDED;
    if (T->all_tried && !changed) return OK;
    /* Plan.place's memo: a request shape that found no place fails again within the decision. */
    int64_t failed[FAILED_MEMO_SIZE][6], failed_n = 0;
    int64_t i = 0;
    while (i < L->pend_n && !L->oom) {
        int64_t job = L->pend[i];
        int64_t sig[6] = {r->mask_id[job], r->num_gpu[job], r->gpu_milli[job], r->cpu_milli[job],
                          r->mem_mib[job], r->gang[job]};
        int known = 0;
        for (int64_t f = 0; f < failed_n && !known; f++) known = memcmp(failed[f], sig, sizeof sig) == 0;
        int64_t shares = known ? 0 : place(L, job);
        if (shares == 0) {
            if (!known && failed_n < FAILED_MEMO_SIZE) memcpy(failed[failed_n++], sig, sizeof sig);
            i++;
            continue;
        }
        start(L, job, shares);
        remove_at(L, i);
    }
    T->all_tried = 1; /* Consolidated.monotone_failures */
    return OK;
}

/* RoundScheduler._round: count the round, ask for a decision after this timestamp's events, and set the next
   round (skipping empty stretches to the grid point at or after the next arrival; none after the last). */
static void round_due(Loop *L, int64_t ai, int *pass_due) {
    Replay *r = L->r;
    r->rounds++;
    *pass_due = 1;
    double now = r->now, next_arrival = ai < r->n_jobs ? r->arrival_time[ai] : INFINITY, next;
    if (L->pend_n || L->running || next_arrival <= now) {
        next = now + r->round_s;
    } else if (!isfinite(next_arrival)) {
        r->rounds_stopped = 1;
        r->next_round = INFINITY;
        return;
    } else {
        double k = ceil((next_arrival - r->round_origin) / r->round_s - 1e-12);
        double on_grid = r->round_origin + k * r->round_s, later = now + r->round_s;
        next = later > on_grid ? later : on_grid;
    }
    r->next_round = next;
    r->round_push = ++r->n_pushes; /* its heap sequence number, counted from the simulator's at the start */
}

static int series_row(Loop *L) {
    Replay *r = L->r;
    if (r->n_series == r->series_cap) { /* rounds add rows: continue in a buffer of the kernel's own */
        int64_t cap = r->series_cap + r->series_cap / 2 + 64;
        double *grown = r->series_owned ? realloc(r->series, (size_t)cap * 5 * sizeof(double))
                                        : malloc((size_t)cap * 5 * sizeof(double));
        if (!grown) {
            L->oom = 1;
            return 0;
        }
        if (!r->series_owned) memcpy(grown, r->series, (size_t)r->n_series * 5 * sizeof(double));
        r->series = grown;
        r->series_owned = 1;
        r->series_cap = cap;
    }
    double *row = r->series + r->n_series * 5;
    row[0] = r->now;
    row[1] = (double)r->allocated_milli / 1000.0;
    row[2] = (double)L->running;
    row[3] = (double)L->pend_n;
    row[4] = (double)r->nodes_busy;
    r->n_series++;
    return 1;
}

/* ----- the loop (Simulator.run) ----------------------------------------------------------------------------------- */
int64_t ws_replay(Replay *r, int64_t gpu_mem_slots) {
    int64_t J = r->n_jobs, N = r->n_nodes;
    Loop L;
    memset(&L, 0, sizeof L);
    L.r = r;
    L.failed_epoch = -1;
    L.heap_t = malloc((size_t)(J + 1) * sizeof(double));
    L.heap_seq = malloc((size_t)(J + 1) * sizeof(int64_t));
    L.heap_job = malloc((size_t)(J + 1) * sizeof(int64_t));
    L.heap_ver = malloc((size_t)(J + 1) * sizeof(int64_t));
    L.heap_cap = J + 1;
    int64_t slots = N * r->width;
    L.res = malloc((size_t)(slots * r->max_residents + 1) * sizeof(int64_t));
    L.res_n = calloc((size_t)(slots + 1), sizeof(int64_t));
    r->log_cap = 2 * J + 16;
    r->log = malloc((size_t)r->log_cap * 8 * sizeof(double));
    L.pend = malloc((size_t)(J + 1) * sizeof(int64_t));
    L.nodes = malloc((size_t)(N + 1) * sizeof(int64_t));
    L.raw = malloc((size_t)(N + 1) * sizeof(int64_t));
    L.usable = malloc((size_t)(N + 1) * sizeof(int64_t));
    L.keys = malloc((size_t)(N + 1) * sizeof(GangKey));
    L.tmp_node = malloc((size_t)(N + 1) * sizeof(int64_t));
    L.tmp_cpu = malloc((size_t)(N + 1) * sizeof(int64_t));
    L.tmp_mem = malloc((size_t)(N + 1) * sizeof(int64_t));
    L.tmp_ngpu = malloc((size_t)(N + 1) * sizeof(int64_t));
    L.tmp_gpus = malloc((size_t)(gpu_mem_slots + 1) * sizeof(int64_t));
    r->error = OK;
    if (!L.heap_t || !L.heap_seq || !L.heap_job || !L.heap_ver || !L.pend || !L.nodes || !L.raw || !L.usable ||
        !L.keys || !L.tmp_node || !L.tmp_cpu || !L.tmp_mem || !L.tmp_ngpu || !L.tmp_gpus || !L.res || !L.res_n ||
        !r->log) {
        r->error = ERR_MEMORY;
        goto done;
    }
    int64_t ai = 0;
    int rounds = r->round_mode == ROUNDS_TIRESIAS, pass_due = 0;
    TiresiasState T = {0, 0, 0};
    while (ai < J || L.running > 0 || (rounds && L.pend_n > 0 && isfinite(r->next_round))) {
        double t_arrival = ai < J ? r->arrival_time[ai] : INFINITY;
        double t_event = L.heap_n ? L.heap_t[0] : INFINITY;
        double t = t_arrival < t_event ? t_arrival : t_event;
        if (rounds && r->next_round < t) t = r->next_round;
        if (t > r->now) {
            if (r->n_recorders) {
                r->gpu_seconds += (double)r->allocated_milli / 1000.0 * (t - r->now);
                r->last_time = t;
            }
            r->now = t;
        }
        while (L.heap_n && L.heap_t[0] <= t) {
            int64_t version, job = heap_pop(&L, &version);
            if (version == r->version[job] && r->status[job] == r->status_running) {
                finish(&L, job);
                T.active_gpus -= r->num_gpu[job];
                T.changed = 1;
            }
        }
        if (rounds && r->next_round <= t) round_due(&L, ai, &pass_due);
        if (L.oom) break;
        if (ai >= J && L.running == 0 && t - r->last_start > STALL_LIMIT_S) {
            r->error = ERR_STALLED;
            break;
        }
        int arrived = 0;
        while (ai < J && r->arrival_time[ai] <= t) {
            int64_t job = r->arrival_job[ai++];
            if (r->never_fits[job]) {
                r->status[job] = (int8_t)r->status_unschedulable;
                continue;
            }
            r->status[job] = (int8_t)r->status_pending;
            enqueue(&L, job);
            r->arrivals++;
            T.active_gpus += r->num_gpu[job];
            T.changed = 1;
            arrived = 1;
        }
        if (arrived || r->released || pass_due) {
            r->released = 0;
            pass_due = 0;
            if (rounds) {
                r->round_decisions++;
                if (tiresias_pass(&L, &T) != OK || (L.pend_n > 0 && L.running == 0)) {
                    r->error = ERR_CONTENDED;
                    break;
                }
            } else if (L.pend_n) {
                queue_pass(&L);
            }
            r->decisions++;
        }
        if (r->n_recorders && !series_row(&L)) break;
    }
    memcpy(r->pending_out, L.pend, (size_t)L.pend_n * sizeof(int64_t));
    r->n_pending = L.pend_n;
    if (L.oom) r->error = ERR_MEMORY;
    if (r->log && r->n_log < r->log_cap) { /* give back the unused capacity */
        double *fitted = realloc(r->log, (size_t)(r->n_log > 0 ? r->n_log : 1) * 8 * sizeof(double));
        if (fitted) r->log = fitted;
    }
done:
    free(L.heap_ver);
    free(L.res);
    free(L.res_n);
    free(L.set_key);
    free(L.set_used);
    free(L.set_out);
    free(L.heap_t);
    free(L.heap_seq);
    free(L.heap_job);
    free(L.pend);
    free(L.nodes);
    free(L.raw);
    free(L.usable);
    free(L.keys);
    free(L.tmp_node);
    free(L.tmp_cpu);
    free(L.tmp_mem);
    free(L.tmp_ngpu);
    free(L.tmp_gpus);
    return r->error;
}

/* The log buffer ws_replay leaves in Replay.log (the caller copies it out first). */
void ws_free(void *p) { free(p); }
