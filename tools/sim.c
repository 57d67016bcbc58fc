/* The trace-driven simulator (sim.h). */
#include "tools/sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "policy/choose.h"
#include "policy/evict_driver.h"
#include "policy/predict_common.h"
#include "vmm/error.h"

static const char *const default_policy[MVM_ROLE_COUNT] = {
    [MVM_ROLE_ROUTE] = "none", [MVM_ROLE_EVICT] = "lru", [MVM_ROLE_ASSIGN] = "gpu",
    [MVM_ROLE_PREDICT] = NULL, [MVM_ROLE_CONFIG] = NULL, [MVM_ROLE_PLACE] = NULL};

void mvm_sim_config_init(mvm_sim_config *c)
{
    memset(c, 0, sizeof *c);
    c->page_bytes = 2u << 20;
    c->prefetch_depth = 0; /* 0: top_k */
    c->admit = 1;
}

/* A module instance of one role. */
struct module {
    const void *ops;  /* the role's ops table */
    void *self;
};

/* Pending prefetch on the copy engine: issued, not started. */
struct pending {
    uint32_t x;
    double issued;
    int forecast; /* asked by the predict module for the next layer (cut_prefetches) */
};

struct sim {
    const mvm_trace *t;
    const mvm_cost *cost;
    const mvm_sim_config *cfg;
    mvm_pshape shape;
    mvm_pview view;
    uint32_t L, E, K, n_total;
    uint32_t *resident;      /* [L*E] pages resident (or reserved by a load in flight); set
                                through set_resident, which keeps ... */
    uint64_t *resident_bits; /* ... [(L*E + 63) / 64] a bit each where it is not 0 (the evict
                                driver's) */
    uint8_t *busy;           /* [L*E] used by the current layer, or loading */
    uint8_t *held;           /* [L*E] held by the config module (its table): never evicted */
    double *ready;           /* [L*E] when the pages in `resident` are all there */
    uint32_t *landed;        /* [L*E] the route module's residency: `resident` where it is
                                there when the layer routes, the routing layer's row only */
    uint8_t *by_prefetch;    /* [L*E] brought by a prefetch, not yet used */
    uint8_t *spec;           /* [L*E] asked for by the window (queued or copied) */
    uint32_t *spec_keep;     /* [L*E] its pages before the window's copy: what its layer
                                keeps when it does not use it (the buffer is not cache) */
    uint32_t *cand;          /* [L*E + 1] candidates for eviction */
    mvm_evict_driver victims; /* the evict module over resident, busy and cand */
    struct pending *queue;   /* prefetches not started, FIFO */
    uint32_t n_queue, cap_queue;
    uint8_t *queued;         /* [L*E] in queue */
    double copy_free, gpu_free, cpu_free;
    double link_free;        /* read-ahead: when the device's reads over the bus end */
    struct module mod[MVM_ROLE_COUNT];
    /* per-step scratch */
    int32_t *experts;        /* [K] */
    float *weights, *next_scores;
    uint32_t *counts;        /* [E] */
    uint8_t *where;          /* [E] */
    uint8_t *own;            /* [L*E] device_routed: read resident by the current token */
    uint32_t pool;           /* read-through: free slabs reserved (their pages are in
                                used_pages) for the token's misses */
    uint32_t tok_misses;     /* read-through: misses of the token so far */
    double *load_ready;      /* [E] when an expert's on-demand load ends */
    double *top_share;       /* [E] the share of its pages resident before that load */
    uint32_t *prefetch;      /* [E] */
    uint64_t *layer_pages;   /* [L] config budgets (UINT64_MAX: none) */
    float *theta;            /* [L] */
    mvm_sim_result r;
};

/* ---- residency ------------------------------------------------------------------------- */

static uint32_t ppe(const struct sim *s) { return s->shape.pages_per_expert; }

static uint64_t layer_used(const struct sim *s, uint32_t l)
{
    uint64_t n = 0;
    for (uint32_t e = 0; e < s->E; e++)
        n += s->resident[l * s->E + e];
    return n;
}

static void set_resident(struct sim *s, uint32_t x, uint32_t pages)
{
    s->resident[x] = pages;
    mvm_evict_mark(s->resident_bits, x, pages);
}

static void drop(struct sim *s, uint32_t x, uint32_t keep)
{
    if (s->resident[x] <= keep)
        return;
    s->view.used_pages -= s->resident[x] - keep;
    set_resident(s, x, keep);
    if (keep == 0)
        s->by_prefetch[x] = 0;
}

/* A candidate whose copy has landed by the view's now (a load in flight cannot be taken
 * back). */
static bool landed_by_now(void *ctx, uint32_t x)
{
    const struct sim *s = ctx;
    return s->ready[x] <= s->view.now;
}

/* Frees pages until `need` more fit — in layer `l`'s budget too when config set one and
 * `cached` (what stays resident must fit the layer's budget; an on-demand load the GPU
 * needs now only has to fit the device, as MoEpic's buffer slots do, and is trimmed to the
 * layer's budget after use). Only experts no step is using and no copy is filling are
 * candidates. 0 on success. */
static int make_room(struct sim *s, uint32_t l, uint32_t need, double now, int cached)
{
    for (;;) {
        int global = s->view.used_pages + need > s->view.capacity_pages;
        int local = cached && s->layer_pages[l] != UINT64_MAX &&
                    layer_used(s, l) + need > s->layer_pages[l];
        if (!global && !local)
            return 0;
        s->view.now = now;
        mvm_evict_collect(&s->victims, local ? l * s->E : 0, local ? (l + 1) * s->E : s->n_total,
                          UINT32_MAX, landed_by_now, s);
        uint32_t x;
        if (!mvm_evict_pick(&s->victims, &s->view, l, &x))
            return -1;
        drop(s, x, 0);
    }
}

/* ---- the copy engine --------------------------------------------------------------------- */

/* x's missing pages over the serial copy engine from `start`, into room already made: an
 * on-demand load or not (a prefetch, a table's copy); returns when they have landed. */
static double copy_in(struct sim *s, uint32_t x, double start, int demand)
{
    uint32_t need = ppe(s) - s->resident[x];
    uint64_t bytes = (uint64_t)need * s->cfg->page_bytes;
    double d = mvm_cost_load_bytes(s->cost, bytes);
    s->view.used_pages += need;
    set_resident(s, x, ppe(s));
    s->ready[x] = start + d;
    s->copy_free = start + d;
    s->r.copy_busy += d;
    if (demand) {
        s->r.loads++;
        s->r.bytes_loaded += bytes;
    } else {
        s->r.prefetches++;
        s->r.bytes_prefetched += bytes;
    }
    return start + d;
}

/* Starts queued prefetches that begin before `until` (FIFO, each when the engine is free). */
static void run_prefetches(struct sim *s, double until)
{
    uint32_t done = 0;
    while (done < s->n_queue) {
        struct pending *p = &s->queue[done];
        double start = fmax(s->copy_free, p->issued);
        if (start >= until)
            break;
        uint32_t x = p->x;
        s->queued[x] = 0;
        done++;
        /* The window's copies go to its buffer, the free pages: they evict nothing. */
        if (s->spec[x] ? s->view.used_pages + ppe(s) - s->resident[x] > s->view.capacity_pages
                       : make_room(s, x / s->E, ppe(s) - s->resident[x], start, 1) != 0) {
            s->spec[x] = 0;
            continue; /* no room now: the prefetch is dropped */
        }
        s->spec_keep[x] = s->resident[x];
        copy_in(s, x, start, 0);
        /* A prefetch that starts while the step that uses it runs (its access counted as a
         * miss at routing, the copy still queued) was used, late; else it waits for one. */
        if (s->busy[x])
            s->r.prefetch_used++;
        else
            s->by_prefetch[x] = 1;
    }
    memmove(s->queue, s->queue + done, (s->n_queue - done) * sizeof *s->queue);
    s->n_queue -= done;
}

/* An on-demand load of the rest of x, asked at `now`; returns when it is resident, or -1
 * when no room can be made. */
static double load_now(struct sim *s, uint32_t x, double now)
{
    run_prefetches(s, now);
    if (s->queued[x]) { /* promoted: taken out of the prefetch queue */
        uint32_t i = 0;
        while (s->queue[i].x != x)
            i++;
        memmove(s->queue + i, s->queue + i + 1, (s->n_queue - i - 1) * sizeof *s->queue);
        s->n_queue--;
        s->queued[x] = 0;
    }
    if (s->resident[x] == ppe(s))
        return fmax(now, s->ready[x]); /* in flight or done */
    uint32_t need = ppe(s) - s->resident[x];
    if (make_room(s, x / s->E, need, now, 0) != 0)
        return -1;
    double ready = copy_in(s, x, fmax(s->copy_free, now), 1);
    if (s->view.used_pages > s->r.peak_pages)
        s->r.peak_pages = s->view.used_pages;
    return ready;
}

static int queue_prefetch(struct sim *s, uint32_t x, double now, int forecast)
{
    if (s->resident[x] == ppe(s) || s->queued[x])
        return 0;
    if (s->n_queue == s->cap_queue)
        return 0; /* bounded: older predictions are still ahead */
    s->queue[s->n_queue++] = (struct pending){x, now, forecast};
    s->queued[x] = 1;
    return 1;
}

/* Admission (policy/admit.h): an expert layer l ran from its home is offered to the cache,
 * one a step at most, and (admit 1) only while the copy engine is idle at `now` with
 * nothing queued. Read-through's reads in place admitted themselves: only what the CPU ran
 * is offered then (--device-cpu; the engine's residency.c, admit). */
static void admit(struct sim *s, uint32_t l, double now)
{
    const int through = s->cfg->device_routed >= 2;
    for (uint32_t e = 0; s->cfg->admit && e < s->E; e++) {
        uint32_t x = l * s->E + e;
        if (!s->counts[e] ||
            (s->where[e] != MVM_RUN_CPU && (through || s->where[e] != MVM_RUN_ZEROCOPY)) ||
            (s->cfg->admit == 1 && (s->n_queue || s->copy_free > now)) ||
            s->resident[x] == ppe(s) || s->queued[x])
            continue;
        s->view.now = now;
        mvm_evict_collect(&s->victims, 0, s->n_total, x, landed_by_now, s);
        if (mvm_evict_admit(&s->victims, &s->view, x, ppe(s) - s->resident[x]) &&
            queue_prefetch(s, x, now, 0)) {
            s->r.admitted++;
            return; /* one a step */
        }
    }
}

/* The config module's table (PreScope's hot experts), asked for after a configure that
 * changed something: each of its experts not resident is copied in, making room among what
 * is not held. At init (before the first token) that takes no time, as a table from an
 * offline profile is filled before serving; later, the copy engine carries it after what
 * is queued. An expert no room can be made for loads when next used, and stays. */
static void hold_table(struct sim *s, double now, int at_init)
{
    const mvm_config_ops *co = s->mod[MVM_ROLE_CONFIG].ops;
    co->hold(s->mod[MVM_ROLE_CONFIG].self, s->held);
    for (uint32_t x = 0; x < s->n_total; x++) {
        uint32_t need = ppe(s) - s->resident[x];
        if (!s->held[x] || !need || s->queued[x] || make_room(s, x / s->E, need, now, 0))
            continue;
        if (!at_init) {
            copy_in(s, x, fmax(s->copy_free, now), 0);
        } else { /* there before the clock starts */
            s->view.used_pages += need;
            set_resident(s, x, ppe(s));
            s->ready[x] = 0;
        }
    }
}

/* ---- one layer of one token ---------------------------------------------------------- */

/* The route module's choice for the step, at t_attn_end, and the hits judged before anything
 * this layer does: was each expert there when routed? Marks the step's experts busy. */
static void route_step(struct sim *s, mvm_pstep *step, double t_attn_end)
{
    const uint32_t l = step->layer;
    s->view.now = t_attn_end;
    /* A load still in flight is no substitute (route_importance.c, reading 9). */
    mvm_pview landed = s->view;
    landed.resident = s->landed;
    uint32_t *row = s->landed + (size_t)l * s->E;
    for (uint32_t e = 0; e < s->E; e++)
        row[e] = s->ready[l * s->E + e] <= t_attn_end ? s->resident[l * s->E + e] : 0;
    const mvm_route_ops *ro = s->mod[MVM_ROLE_ROUTE].ops;
    s->r.substitutions += ro->route(s->mod[MVM_ROLE_ROUTE].self, &landed, step);
    memset(row, 0, s->E * sizeof *row);
    memset(s->counts, 0, s->E * sizeof *s->counts);
    for (uint32_t k = 0; k < s->K; k++)
        s->counts[s->experts[k]]++;

    /* Hits are judged before anything this layer does: was it there when routed? */
    for (uint32_t e = 0; e < s->E; e++) {
        if (!s->counts[e])
            continue;
        uint32_t x = l * s->E + e;
        s->r.accesses++;
        /* (routed on the device: where its token's table said, read resident or in place) */
        int hit = s->cfg->device_routed ? s->own[x]
                                        : s->resident[x] == ppe(s) && s->ready[x] <= t_attn_end;
        s->r.hits += hit;
        s->r.misses += !hit;
        s->tok_misses += !hit;
        s->r.partial_hits += !hit && !s->cfg->device_routed && s->resident[x] > 0 &&
                             s->ready[x] <= t_attn_end;
        if (s->by_prefetch[x]) {
            s->r.prefetch_used++;
            s->r.prefetch_hits += hit;
            s->by_prefetch[x] = 0;
        }
        s->busy[x] = 1;
    }
}

/* Predictions for the next MVM_ASSIGN_AHEAD layers, as far as the predictor reaches (their
 * number), and the assign module's places and prefetches in *a. */
static uint32_t assign_step(struct sim *s, const mvm_pstep *step, mvm_assignment *a)
{
    const uint32_t l = step->layer;
    const mvm_predict_ops *po = s->mod[MVM_ROLE_PREDICT].ops;
    uint32_t n_ahead = 0;
    while (po && n_ahead < MVM_ASSIGN_AHEAD && l + 1 + n_ahead < s->L &&
           po->predict(s->mod[MVM_ROLE_PREDICT].self, step, l + 1 + n_ahead,
                       s->next_scores + (size_t)n_ahead * s->E))
        n_ahead++;
    *a = (mvm_assignment){.where = s->where, .prefetch = s->prefetch,
                          .cap_prefetch = MVM_ASSIGN_AHEAD * s->E};
    memset(s->where, 0, s->E);
    const mvm_assign_ops *ao = s->mod[MVM_ROLE_ASSIGN].ops;
    ao->assign(s->mod[MVM_ROLE_ASSIGN].self, &s->view, step, n_ahead ? s->next_scores : NULL,
               n_ahead, a);
    return n_ahead;
}

/* Read-through (device_routed 2): a miss read in place with nothing of it resident takes a
 * free slab of the token's pool, its kernels storing what they read; resident (shielded
 * while its layer runs) once its read ends at `end`, read there from the next token. */
static void read_through(struct sim *s, uint32_t x, double end)
{
    if (s->cfg->device_routed < 2 || !s->pool || s->resident[x] || s->queued[x])
        return;
    s->pool--; /* its pages were counted when the pool was reserved */
    set_resident(s, x, ppe(s));
    s->ready[x] = end;
    s->r.read_through++;
}

/* Read-ahead (device_routed 3): x, a prediction for the next layer made at `issue` (this
 * layer's attention end), copied by the device into a free slab of the token's pool over
 * the link, after the reads already on it; read there by its layer (own), which waits for
 * the copy. Nothing where the pool is empty or x is there or on its way. */
static void read_ahead(struct sim *s, uint32_t x, double issue)
{
    if (!s->pool || s->resident[x] || s->queued[x])
        return;
    s->pool--; /* its pages were counted when the pool was reserved */
    const uint64_t bytes = (uint64_t)ppe(s) * s->cfg->page_bytes;
    const double start = fmax(s->link_free, issue);
    s->link_free = start + (double)bytes / s->cost->m.zerocopy_bw;
    set_resident(s, x, ppe(s));
    s->ready[x] = s->link_free;
    s->own[x] = s->busy[x] = s->by_prefetch[x] = 1;
    s->r.prefetches++;
    s->r.bytes_prefetched += bytes;
}

/* Layer l's experts from t_attn_end, where the assign module put them; the time the layer
 * ends. */
static double run_experts(struct sim *s, uint32_t l, double t_attn_end)
{
    /* Experts, in three passes. 0: the resident ones on the GPU, CPU and zero-copy ones on
     * their own resources. 1: loads are issued in expert order (the copy engine is serial)
     * while the GPU computes the resident prefix of each partly resident expert: MoEpic's
     * split (§3.2), the top segment's rows run while the bottom's copy is on the bus, the
     * prefix's share of the expert's compute being its share of the pages.
     * 2: each loaded expert's rest, as soon as its copy ends and the GPU is free. */
    double gpu = t_attn_end, cpu = fmax(s->cpu_free, t_attn_end), stall = 0;
    /* Reads in place run beside the resident experts' compute, in the same launches: a
     * kernel reading over the bus waits on the link, not on the SMs or HBM that the others
     * use (the link's share with the copy engine is not modelled). */
    double zc = s->cfg->device_routed == 3 ? fmax(t_attn_end, s->link_free) : t_attn_end;
    for (int pass = 0; pass < 3; pass++)
        for (uint32_t e = 0; e < s->E; e++) {
            uint32_t x = l * s->E + e, n = s->counts[e];
            if (!n)
                continue;
            if (pass == 0) {
                int resident = s->resident[x] == ppe(s);
                if (s->where[e] == MVM_RUN_NONE)
                    s->where[e] = MVM_RUN_GPU; /* a module that left it out: the default */
                if (s->where[e] == MVM_RUN_GPU && !resident)
                    s->where[e] = MVM_RUN_GPU_LOAD; /* the module assumed a residency it lacks */
                if (s->where[e] == MVM_RUN_CPU) {
                    cpu += mvm_cost_cpu(s->cost, n);
                    s->r.cpu_runs++;
                } else if (s->where[e] == MVM_RUN_ZEROCOPY) {
                    const double on_cpu = s->cfg->device_cpu && s->cfg->device_routed
                                              ? cpu + mvm_cost_cpu(s->cost, n)
                                              : INFINITY;
                    if (on_cpu < zc + mvm_cost_zerocopy(s->cost, n)) {
                        cpu = on_cpu; /* the CPU's threads end it first */
                        s->r.cpu_runs++;
                        s->where[e] = MVM_RUN_CPU;
                        continue;
                    }
                    zc += mvm_cost_zerocopy(s->cost, n);
                    s->r.zerocopy_runs++;
                    read_through(s, x, zc);
                } else if (s->where[e] == MVM_RUN_GPU) { /* resident, maybe still arriving */
                    double ready = fmax(gpu, s->ready[x]);
                    stall += ready - gpu;
                    gpu = ready + mvm_cost_gpu(s->cost, n);
                }
            } else if (s->where[e] == MVM_RUN_GPU_LOAD && pass == 1) {
                double top = (double)s->resident[x] / (double)ppe(s);
                double ready = load_now(s, x, t_attn_end);
                if (ready < 0) { /* no room: run it where no device memory is needed */
                    if (s->cfg->zerocopy) {
                        zc += mvm_cost_zerocopy(s->cost, n);
                        s->r.zerocopy_runs++;
                    } else {
                        cpu += mvm_cost_cpu(s->cost, n);
                        s->r.cpu_runs++;
                    }
                    s->where[e] = s->cfg->zerocopy ? MVM_RUN_ZEROCOPY : MVM_RUN_CPU;
                    continue;
                }
                s->load_ready[e] = ready;
                s->top_share[e] = top;
                gpu += top * mvm_cost_gpu(s->cost, n);
            } else if (s->where[e] == MVM_RUN_GPU_LOAD) {
                if (s->load_ready[e] > gpu) {
                    stall += s->load_ready[e] - gpu;
                    gpu = s->load_ready[e];
                }
                gpu += (1 - s->top_share[e]) * mvm_cost_gpu(s->cost, n);
            }
        }
    if (s->cfg->device_routed == 3) /* read-ahead's copies go after these reads */
        s->link_free = fmax(s->link_free, zc);
    if (zc > gpu) /* the reads in place outlast the rest: its stalls are hidden */
        stall = 0, gpu = zc;
    double end = fmax(gpu, cpu);
    s->r.t_gpu += gpu - t_attn_end - stall;
    s->r.t_stall += stall;
    s->r.t_cpu_wait += end - gpu;
    s->gpu_free = end;
    s->cpu_free = cpu;
    return end;
}

/* After layer l's step ends at `end`: prefetches (the assign module's plan a, else the
 * n_ahead predictions' top experts), the modules' observations, MoEpic's split, the layer's
 * budget, DALI's wishes and admission. */
static void end_step(struct sim *s, const mvm_pstep *step, const mvm_assignment *a,
                     uint32_t n_ahead, double t_attn_end, double end)
{
    const uint32_t l = step->layer;
    /* Prefetches: the assign module's plan, else the prediction's top experts; in the
     * window, the experts the module ranks (its shares' where it does not rank), as many as
     * the buffer's pages hold, until cut_prefetches ends them. */
    const int window = s->cfg->prefetch_window;
    uint32_t depth = s->cfg->prefetch_depth ? s->cfg->prefetch_depth : s->K;
    uint64_t buffer = (uint64_t)depth * ppe(s);
    if (window)
        depth = s->E;
    const mvm_predict_ops *po = s->mod[MVM_ROLE_PREDICT].ops;
    int ranked = window && n_ahead && po->rank &&
                 po->rank(s->mod[MVM_ROLE_PREDICT].self, step, l + 1, s->next_scores);
    for (uint32_t i = 0; i < a->n_prefetch; i++)
        queue_prefetch(s, a->prefetch[i], t_attn_end, 0);
    /* the scratch of the assign module's plan, which is empty here */
    uint32_t n = n_ahead && a->n_prefetch == 0
                     ? mvm_predict_order(s->next_scores, s->E, depth,
                                         window && !ranked ? 0 : -INFINITY, s->prefetch)
                     : 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t x = (l + 1) * s->E + s->prefetch[i], need = ppe(s) - s->resident[x];
        if (s->cfg->device_routed == 3) {
            read_ahead(s, x, t_attn_end);
            continue;
        }
        if (window && need > buffer)
            break; /* the buffer is full */
        if (window)
            buffer -= need;
        if (queue_prefetch(s, x, t_attn_end, 1))
            s->spec[x] = (uint8_t)window;
    }

    const mvm_evict_ops *ev = s->mod[MVM_ROLE_EVICT].ops;
    s->view.now = end;
    ev->observe(s->mod[MVM_ROLE_EVICT].self, &s->view, step);
    if (po && po->observe)
        po->observe(s->mod[MVM_ROLE_PREDICT].self, step);
    const mvm_config_ops *co = s->mod[MVM_ROLE_CONFIG].ops;
    if (co)
        co->observe(s->mod[MVM_ROLE_CONFIG].self, &s->view, step);
    for (uint32_t e = 0; e < s->E; e++) {
        uint32_t x = l * s->E + e;
        s->busy[x] = 0;
        /* The window's copies the layer did not use leave with its buffer. */
        if (s->spec[x] && !s->counts[e]) {
            drop(s, x, s->spec_keep[x]);
            s->by_prefetch[x] = 0;
        }
        s->spec[x] = 0;
        /* The split: only θ of an expert's pages stay cached (MoEpic). */
        if (s->counts[e] && s->theta[l] < 1.0f)
            drop(s, x, (uint32_t)ceilf(s->theta[l] * (float)ppe(s)));
    }
    if (s->layer_pages[l] != UINT64_MAX)
        make_room(s, l, 0, end, 1); /* what stays within the layer's budget */
    /* DALI-style policies ask for experts proactively. */
    if (ev->want) {
        uint32_t n = ev->want(s->mod[MVM_ROLE_EVICT].self, &s->view, l, s->prefetch, s->E);
        for (uint32_t i = 0; i < n; i++)
            queue_prefetch(s, s->prefetch[i], end, 0);
    }
    admit(s, l, end);
    run_prefetches(s, end);
}

/* A forecast's prefetches for layer l end when it routes at `now` (MoEpic's window, §3.3
 * step 2, and the top-k forecast too): those that have started go on (a copy cannot be
 * taken back), the rest are dropped but, given the step's counts (after it routed), those
 * of the experts it uses, which stay queued to be taken as its demands. The window's
 * copies evict nothing, so they are cut (and advanced to `now`) before the step's hits are
 * judged; the top-k forecast's make room, so they are cut once the step's experts are
 * shielded, as the engine takes them back (engine/forward/prefetch.c). Left
 * queued, a forecast's copies went out after the layer they were for, when its own misses
 * had the bus: on a 6-block OLMoE-1B-7B shape's own routing at 25% (h100 costs) the gate
 * forecast's prefetches cost 12% (2-6% of them used); dropped, 4%, and an exact forecast
 * keeps its 17% gain on Qwen3-30B-A3B's 12 blocks (engine.md, session 81). */
static void cut_prefetches(struct sim *s, uint32_t l, double now, const uint32_t *counts)
{
    run_prefetches(s, now);
    uint32_t kept = 0;
    for (uint32_t i = 0; i < s->n_queue; i++) {
        const uint32_t x = s->queue[i].x;
        if (s->queue[i].forecast && x / s->E == l && !(counts && counts[x % s->E])) {
            s->queued[x] = s->spec[x] = 0;
            s->r.prefetches_cut++;
        }
        else
            s->queue[kept++] = s->queue[i];
    }
    s->n_queue = kept;
}

/* Read-through, before a token's table: the pool's slabs the last token left free are
 * given back, and as many as the last token missed (one layer's top_k at least, a quarter
 * of the budget at most) are reserved again, the evict module picking their victims among
 * everything resident (nothing is in use between tokens). Where fewer can be freed, fewer. */
static void refill_pool(struct sim *s, double now)
{
    s->view.used_pages -= (uint64_t)s->pool * ppe(s);
    s->pool = 0;
    uint64_t want = s->tok_misses > s->K ? s->tok_misses : s->K;
    const uint64_t cap = s->view.capacity_pages / ppe(s) / 4;
    if (want > cap)
        want = cap;
    while (want && make_room(s, 0, (uint32_t)(want * ppe(s)), now, 0) != 0)
        want--;
    s->view.used_pages += want * ppe(s);
    s->pool = (uint32_t)want;
    s->tok_misses = 0;
    if (s->view.used_pages > s->r.peak_pages)
        s->r.peak_pages = s->view.used_pages;
}

/* device_routed, at a token's start: the experts its kernels read resident, those
 * resident and landed by `now` (the table sent up before it), shielded until their layer
 * has run, as nothing moves under a queued token in the engine. */
static void token_table(struct sim *s, double now)
{
    run_prefetches(s, now);
    if (s->cfg->device_routed >= 2)
        refill_pool(s, now);
    for (uint32_t x = 0; x < s->n_total; x++) {
        s->own[x] = s->resident[x] == ppe(s) && s->ready[x] <= now && !s->queued[x];
        s->busy[x] |= s->own[x];
    }
}

/* device_routed: each of the step's experts where the token's table says. */
static void table_places(struct sim *s, uint32_t l, mvm_assignment *a)
{
    for (uint32_t e = 0; e < s->E; e++)
        if (s->counts[e])
            s->where[e] = s->own[l * s->E + e] ? MVM_RUN_GPU : MVM_RUN_ZEROCOPY;
    a->n_prefetch = 0; /* (a plan made for host-routed steps) */
}

static mvm_status sim_layer(struct sim *s, uint32_t tok, uint32_t l, double *clock)
{
    const mvm_trace *t = s->t;
    size_t rec = (size_t)tok * s->L + l;
    double start = fmax(*clock, s->gpu_free);
    /* the host's share of the step (host_step) follows the layer's attention: the device
     * waits for it, the copy engine does not; routed on the device, no host in between,
     * but the token's own before its first layer (host_token: the replay of the token
     * before, its loads, read-through's landings and pool), after which its table is sent */
    const double host = !s->cfg->device_routed ? s->cost->m.host_step
                        : l == 0               ? s->cost->m.host_token
                                               : 0;
    /* of a host-routed step, the last host_queue are its launches, queued after its loads
     * were asked: the step goes (t_go) when they are asked, the copy engine and the device
     * working while the host queues the rest, and ends no sooner than its last launch */
    const double queue = s->cfg->device_routed ? 0 : fmin(s->cost->m.host_queue, host);
    const double t_queued = start + s->cost->m.attn_time + host, t_go = t_queued - queue;
    s->gpu_free = t_go;
    s->r.t_attn += s->cost->m.attn_time + host - queue;
    if (s->cfg->device_routed && l == 0)
        token_table(s, start + host);

    memcpy(s->experts, t->experts + rec * s->K, s->K * sizeof *s->experts);
    memcpy(s->weights, t->weights + rec * s->K, s->K * sizeof *s->weights);
    mvm_pstep step = {.layer = l, .n_tok = 1, .scores = t->scores + rec * s->E,
                      .experts = s->experts, .weights = s->weights,
                      .hidden = t->hidden ? t->hidden + rec * t->hdr.n_embd : NULL,
                      .counts = s->counts};
    if (s->cfg->prefetch_window)
        cut_prefetches(s, l, t_go, NULL);
    route_step(s, &step, t_go);
    if (!s->cfg->prefetch_window)
        cut_prefetches(s, l, t_go, s->counts);
    mvm_assignment a;
    uint32_t n_ahead = assign_step(s, &step, &a);
    if (s->cfg->device_routed)
        table_places(s, l, &a);
    double end = run_experts(s, l, t_go);
    if (end < t_queued) { /* the experts done before their last launch was queued */
        s->r.t_attn += t_queued - end;
        end = s->gpu_free = t_queued;
    }
    end_step(s, &step, &a, n_ahead, t_go, end);
    *clock = end;
    return MVM_OK;
}

/* ---- set-up ----------------------------------------------------------------------------- */

static mvm_status make_modules(struct sim *s, const mvm_pinit *base)
{
    for (int r = 0; r < MVM_ROLE_COUNT; r++) {
        const char *name = s->cfg->policy[r] ? s->cfg->policy[r] : default_policy[r];
        if (!name || (r == MVM_ROLE_PREDICT && strcmp(name, "none") == 0))
            continue;
        if (r == MVM_ROLE_EVICT && strcmp(name, "auto") == 0)
            name = MVM_ENGINE_EVICT_DEFAULT; /* what the engine runs by default */
        const void *ops = mvm_policy_find((enum mvm_role)r, name);
        if (!ops) {
            char names[256];
            mvm_policy_names((enum mvm_role)r, names, sizeof names);
            return mvm_fail(MVM_ERR_INVALID, "no %s policy '%s' (available: %s)",
                            mvm_role_name((enum mvm_role)r), name, names[0] ? names : "none");
        }
        if (r == MVM_ROLE_PREDICT && ((const mvm_predict_ops *)ops)->speculative)
            return mvm_fail(MVM_ERR_INVALID, "predict %s: it forecasts from a pass through the "
                            "next layer's attention, which a trace cannot replay (the engine "
                            "runs it: moevm run --predict %s)", name, name);
        /* Every ops table starts with MVM_POLICY_HEADER: create is at the same place. */
        const mvm_evict_ops *any = ops;
        mvm_pinit init = *base;
        init.params.text = s->cfg->params[r];
        mvm_status st = any->create(&init, &s->mod[r].self);
        if (st != MVM_OK)
            return st;
        s->mod[r].ops = ops;
    }
    return MVM_OK;
}

static void free_sim(struct sim *s)
{
    for (int r = 0; r < MVM_ROLE_COUNT; r++)
        if (s->mod[r].ops)
            ((const mvm_evict_ops *)s->mod[r].ops)->destroy(s->mod[r].self);
    void *p[] = {s->resident, s->resident_bits, s->busy, s->held, s->ready, s->landed, s->by_prefetch, s->spec,
                 s->spec_keep, s->cand, s->queue,
                 s->queued, s->experts, s->weights, s->next_scores, s->counts, s->where,
                 s->load_ready, s->top_share, s->prefetch, s->layer_pages, s->theta, s->own};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        free(p[i]);
}

mvm_status mvm_sim_run(const mvm_trace *t, const mvm_cost *cost, const mvm_sim_config *c,
                       mvm_sim_result *out)
{
    memset(out, 0, sizeof *out);
    struct sim s = {.t = t, .cost = cost, .cfg = c};
    s.L = t->hdr.n_layers;
    s.E = t->hdr.n_experts;
    s.K = t->hdr.top_k;
    s.n_total = s.L * s.E;
    if (c->page_bytes == 0)
        return mvm_fail(MVM_ERR_INVALID, "page size 0");
    s.shape = (mvm_pshape){.n_layers = s.L, .n_experts = s.E, .top_k = s.K,
                           .n_embd = t->hdr.n_embd, .n_ff = t->hdr.n_ff_exp,
                           .expert_bytes = t->hdr.expert_bytes,
                           .pages_per_expert = (uint32_t)((t->hdr.expert_bytes + c->page_bytes - 1) /
                                                          c->page_bytes)};
    s.cap_queue = 4 * s.E;
    s.resident = calloc(s.n_total, sizeof *s.resident);
    s.resident_bits = calloc((s.n_total + 63) / 64, sizeof *s.resident_bits);
    s.busy = calloc(s.n_total, 1);
    s.held = calloc(s.n_total, 1);
    s.ready = calloc(s.n_total, sizeof *s.ready);
    s.landed = calloc(s.n_total, sizeof *s.landed);
    s.by_prefetch = calloc(s.n_total, 1);
    s.spec = calloc(s.n_total, 1);
    s.spec_keep = calloc(s.n_total, sizeof *s.spec_keep);
    s.cand = calloc(s.n_total + 1, sizeof *s.cand);
    s.queue = calloc(s.cap_queue, sizeof *s.queue);
    s.queued = calloc(s.n_total, 1);
    s.experts = calloc(s.K, sizeof *s.experts);
    s.weights = calloc(s.K, sizeof *s.weights);
    s.next_scores = calloc((size_t)MVM_ASSIGN_AHEAD * s.E, sizeof *s.next_scores);
    s.counts = calloc(s.E, sizeof *s.counts);
    s.where = calloc(s.E, 1);
    s.own = calloc(s.n_total, 1);
    s.load_ready = calloc(s.E, sizeof *s.load_ready);
    s.top_share = calloc(s.E, sizeof *s.top_share);
    s.prefetch = calloc(MVM_ASSIGN_AHEAD * (size_t)s.E, sizeof *s.prefetch);
    s.layer_pages = malloc(s.L * sizeof *s.layer_pages);
    s.theta = malloc(s.L * sizeof *s.theta);
    if (!s.resident || !s.resident_bits || !s.busy || !s.held || !s.ready || !s.landed || !s.by_prefetch || !s.spec || !s.own ||
        !s.spec_keep || !s.cand ||
        !s.queue || !s.queued || !s.experts || !s.weights || !s.next_scores || !s.counts ||
        !s.where || !s.load_ready || !s.top_share || !s.prefetch || !s.layer_pages || !s.theta) {
        free_sim(&s);
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the simulation");
    }
    for (uint32_t l = 0; l < s.L; l++) {
        s.layer_pages[l] = UINT64_MAX;
        s.theta[l] = 1.0f;
    }
    s.view = (mvm_pview){.shape = &s.shape, .resident = s.resident, .busy = s.busy,
                         .capacity_pages = c->budget_pages};
    mvm_pfuture future = {.n_tokens = t->n_tokens, .experts = t->experts};
    mvm_pinit init = {.shape = &s.shape, .cost = cost, .router = c->router,
                      .predictor = c->predictor, .predictor_size = c->predictor_size,
                      .future = &future, .profile = c->profile};
    mvm_status st = make_modules(&s, &init);
    s.victims = (mvm_evict_driver){.ops = s.mod[MVM_ROLE_EVICT].ops,
                                   .self = s.mod[MVM_ROLE_EVICT].self, .resident = s.resident,
                                   .resident_bits = s.resident_bits, .busy = s.busy,
                                   .held = s.held, .cand = s.cand};
    const mvm_config_ops *co = s.mod[MVM_ROLE_CONFIG].ops;
    double clock = 0;
    /* A module that holds experts is configured before the first token: a table from an
     * offline profile is there from the start. */
    if (st == MVM_OK && co && co->hold &&
        co->configure(s.mod[MVM_ROLE_CONFIG].self, &s.view, s.layer_pages, s.theta))
        hold_table(&s, 0, 1);
    for (uint32_t tok = 0; tok < t->n_tokens && st == MVM_OK; tok++) {
        for (uint32_t l = 0; l < s.L && st == MVM_OK; l++)
            st = sim_layer(&s, tok, l, &clock);
        s.view.tokens++;
        s.r.tokens++;
        if (co && co->configure(s.mod[MVM_ROLE_CONFIG].self, &s.view, s.layer_pages, s.theta)) {
            for (uint32_t l = 0; l < s.L; l++)
                make_room(&s, l, 0, clock, 1); /* shrinks a layer over its new budget */
            if (co->hold)
                hold_table(&s, clock, 0);
        }
    }
    s.r.time = clock;
    *out = s.r;
    free_sim(&s);
    return st;
}
