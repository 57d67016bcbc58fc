/* The routed experts of an MoE step on the CPU threads (experts_cpu.h).
 *
 * The work: each expert's channel groups cut into units (ranges of groups), given to the
 * threads by cost and shared with stealing (mvm_pool_take, share_units): a thread that is
 * done takes units from the back of another's slice. With each unit fixed to its thread,
 * one thread finished 8-20% of the experts' time before the other in decode steps on a
 * 2-core VM (OLMoE-1B-7B Q8_0), 5% after (docs/perf/cpu.md).
 *
 * The partial outputs: unit k of an expert writes its groups' share of the expert's rows
 * into copy k of the step's rows (a slot: a row of n_embd floats, rows slot_stride apart:
 * mvm_k_row_floats), zeroed first; a row's output is then the sum of its expert's copies
 * in unit order. So the sums do not depend on which thread ran which unit, and a run stays
 * bitwise reproducible. The copies come from one
 * buffer of SLOT_COPIES x n_batch x top-k rows, and an expert is cut into at most as many
 * units as the buffer has copies of the step's rows: per-thread copies of every row
 * (threads x n_batch x top-k x n_embd floats: 268 MiB for OLMoE's shape on 16 threads at a
 * batch of 256, 940 for DeepSeek-V3's) would grow with the threads for nothing. */
#include "engine/forward/experts_cpu.h"

#include <stdlib.h>
#include <string.h>

#include "engine/forward/forward_impl.h"
#include "engine/model/model.h"
#include "vmm/error.h"

struct unit_cost {
    uint64_t cost;
    uint32_t unit;
};

/* The copies of the step's rows the slots' buffer holds at most (fewer on fewer threads). */
#define SLOT_COPIES 4

struct mvm_cpu_experts {
    const mvm_model *m;
    mvm_pool *pool;
    int nth;
    uint32_t n_groups, n_batch; /* n_groups: the run's layer's */
    mvm_k_expert_fmt fmt;       /* the run's layer's */
    uint8_t *act;               /* [n_batch][act_stride]: the tokens' inputs, quantized */
    uint8_t *gact;              /* [n_batch*K][act_stride]: the rows' inputs */
    size_t act_stride;
    /* the experts split in work units: each expert's channel groups in ranges */
    uint32_t units_per_expert, groups_per_unit;
    struct unit_cost *by_cost;  /* [E * max groups] scratch: units by decreasing cost */
    int *owner;                 /* [E * max groups] scratch: the thread of by_cost[i] */
    uint32_t *order;            /* [E * max groups] the units as shared out: thread 0's, ... */
    uint64_t *thread_load;      /* [nth] scratch: the cost given to each thread so far */
    size_t *starts, *fill;      /* [nth] the first of each thread's slice; scratch */
    float *slots;               /* [slot_rows][slot_stride] the units' partial outputs */
    size_t slot_stride;         /* floats a row: n_embd, padded (mvm_k_row_floats) */
    size_t slot_rows;           /* copies x n_batch x K */
    size_t copy_rows;           /* the step's rows, n x K: a copy's */
    uint32_t *copies_of;        /* [E] the copies of an expert's rows in this run; 0: not run */
    /* the run under way */
    const mvm_moe *s;
    const int32_t *experts;
    uint32_t n_experts, layer;
    int from_home;
    const uint8_t *take;        /* [E] of a run in two parts (run_first): the first's */
    uint8_t part;               /* the part under way: 1 those taken, 0 the rest */
    uint8_t *row_take;          /* [n_batch*K] scratch: the rows mvm_cpu_experts_add_some adds */
};

mvm_status mvm_cpu_experts_create(const mvm_model *m, mvm_pool *pool, uint32_t n_batch,
                                  mvm_cpu_experts **out)
{
    const mvm_hparams *hp = &m->hp;
    *out = NULL;
    mvm_cpu_experts *x = calloc(1, sizeof *x);
    if (!x)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the CPU experts' scratch");
    x->m = m;
    x->pool = pool;
    x->nth = mvm_pool_size(pool);
    x->n_batch = n_batch;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        size_t ab = mvm_k_act_bytes(m->layers[il].expert_fmt.gate_up, hp->n_embd);
        x->act_stride = ab > x->act_stride ? ab : x->act_stride;
    }
    x->act_stride = MVM_ALIGN64(x->act_stride);
    size_t rows = (size_t)n_batch * hp->n_expert_used;
    int ok = 1;
    x->act = mvm_buf64(n_batch * x->act_stride, &ok);
    x->gact = mvm_buf64(rows * x->act_stride, &ok);
    x->slot_rows = (size_t)(x->nth < SLOT_COPIES ? x->nth : SLOT_COPIES) * rows;
    x->slot_stride = mvm_k_row_floats(hp->n_embd);
    x->slots = mvm_buf64(x->slot_rows * x->slot_stride * sizeof(float), &ok);
    x->copies_of = calloc(hp->n_expert, sizeof *x->copies_of);
    x->row_take = malloc(rows);
    x->starts = malloc((size_t)x->nth * sizeof *x->starts);
    x->fill = malloc((size_t)x->nth * sizeof *x->fill);
    x->thread_load = malloc((size_t)x->nth * sizeof *x->thread_load);
    uint32_t groups = 1;
    for (uint32_t il = 0; il < hp->n_layer; il++)
        groups = m->layers[il].expert_groups > groups ? m->layers[il].expert_groups : groups;
    const size_t units = (size_t)hp->n_expert * groups;
    x->by_cost = malloc(units * sizeof *x->by_cost);
    x->owner = malloc(units * sizeof *x->owner);
    x->order = malloc(units * sizeof *x->order);
    if (!ok || !x->copies_of || !x->row_take || !x->starts || !x->fill || !x->thread_load ||
        !x->by_cost || !x->owner || !x->order) {
        const double mib = (double)x->slot_rows * x->slot_stride * 4 / 1048576.0;
        mvm_cpu_experts_free(x);
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the CPU experts' scratch (%.1f MiB)",
                        mib);
    }
    *out = x;
    return MVM_OK;
}

void mvm_cpu_experts_free(mvm_cpu_experts *x)
{
    if (!x)
        return;
    free(x->act);
    free(x->gact);
    free(x->slots);
    free(x->copies_of);
    free(x->row_take);
    free(x->starts);
    free(x->fill);
    free(x->thread_load);
    free(x->by_cost);
    free(x->owner);
    free(x->order);
    free(x);
}

/* The channel groups [*g0, *g1) of unit u; its expert is x->experts[u / units_per_expert]. */
static void unit_groups(const mvm_cpu_experts *x, uint32_t u, uint32_t *g0, uint32_t *g1)
{
    *g0 = (u % x->units_per_expert) * x->groups_per_unit;
    *g1 = *g0 + x->groups_per_unit < x->n_groups ? *g0 + x->groups_per_unit : x->n_groups;
}

/* Units in decreasing cost, ties by index. */
static int costlier(const void *a, const void *b)
{
    const struct unit_cost *u = a, *v = b;
    if (u->cost != v->cost)
        return u->cost > v->cost ? -1 : 1;
    return u->unit < v->unit ? -1 : 1;
}

/* Each unit to a thread: the costliest first, each onto the thread with the least so far
 * (ties: the lower thread); in a prefill batch the experts' token counts differ several
 * times over, and handing units out round-robin left threads waiting for the one with the
 * popular experts. A unit costs its groups times (its tokens + 2): a group's bytes are read
 * and unpacked even for one token. Each thread's units, costliest first, are its slice of
 * the shared run, so a thread that is done takes the cheapest left of another's. */
static void share_units(mvm_cpu_experts *x, uint32_t n_units)
{
    for (uint32_t u = 0; u < n_units; u++) {
        uint32_t g0, g1;
        unit_groups(x, u, &g0, &g1);
        x->by_cost[u] = (struct unit_cost){
            (uint64_t)(g1 - g0) * (x->s->cnt[x->experts[u / x->units_per_expert]] + 2), u};
    }
    qsort(x->by_cost, n_units, sizeof *x->by_cost, costlier);
    memset(x->thread_load, 0, (size_t)x->nth * sizeof *x->thread_load);
    memset(x->fill, 0, (size_t)x->nth * sizeof *x->fill);
    for (uint32_t i = 0; i < n_units; i++) {
        int best = 0;
        for (int t = 1; t < x->nth; t++)
            best = x->thread_load[t] < x->thread_load[best] ? t : best;
        x->owner[i] = best;
        x->thread_load[best] += x->by_cost[i].cost;
        x->fill[best]++;
    }
    size_t at = 0;
    for (int t = 0; t < x->nth; t++) { /* fill: each thread's count, then where its next goes */
        x->starts[t] = at;
        at += x->fill[t];
        x->fill[t] = x->starts[t];
    }
    for (uint32_t i = 0; i < n_units; i++)
        x->order[x->fill[x->owner[i]]++] = x->by_cost[i].unit;
    mvm_pool_share(x->pool, n_units, x->starts);
}

/* The rows' inputs in the experts' format, and the work units: each expert's groups in
 * equal ranges, about 8 units per thread in all (share_units). */
static void dispatch(mvm_cpu_experts *x, const float *xn, uint32_t n)
{
    const mvm_moe *s = x->s;
    const mvm_hparams *hp = &x->m->hp;
    for (uint32_t i = 0; i < n; i++)
        mvm_k_prepare_act(x->fmt.gate_up, xn + (size_t)i * hp->n_embd,
                          x->act + i * x->act_stride, hp->n_embd);
    size_t ab = mvm_k_act_bytes(x->fmt.gate_up, hp->n_embd);
    for (uint32_t i = 0; i < x->n_experts; i++) {
        uint32_t e = (uint32_t)x->experts[i];
        for (uint32_t r = s->off[e]; r < s->off[e] + s->cnt[e]; r++)
            memcpy(x->gact + r * x->act_stride, x->act + s->row_tok[r] * x->act_stride, ab);
    }
    /* an expert's units take a copy of its rows each */
    x->copy_rows = (size_t)n * hp->n_expert_used;
    const size_t copies = x->slot_rows / x->copy_rows;
    uint32_t want = (uint32_t)x->nth * 8 / x->n_experts + 1;
    want = want < copies ? want : (uint32_t)(copies ? copies : 1);
    x->units_per_expert = want < x->n_groups ? want : x->n_groups;
    x->groups_per_unit = (x->n_groups + x->units_per_expert - 1) / x->units_per_expert;
    x->units_per_expert = (x->n_groups + x->groups_per_unit - 1) / x->groups_per_unit;
    for (uint32_t i = 0; i < x->n_experts; i++)
        x->copies_of[x->experts[i]] = x->units_per_expert;
    share_units(x, x->n_experts * x->units_per_expert);
}

static void experts_run(void *p, int t, int nth)
{
    mvm_cpu_experts *x = p;
    const mvm_hparams *hp = &x->m->hp;
    const mvm_moe *s = x->s;
    (void)nth;
    size_t i, i1;
    while (mvm_pool_take(x->pool, t, 1, &i, &i1)) {
        const uint32_t u = x->order[i];
        uint32_t e = (uint32_t)x->experts[u / x->units_per_expert];
        if (x->take && (x->take[e] != 0) != x->part)
            continue; /* the other part's */
        uint32_t g0, g1;
        unit_groups(x, u, &g0, &g1);
        uint32_t r0 = s->off[e], nr = s->cnt[e];
        /* the unit's copy of the step's rows */
        const size_t ts = x->slot_stride;
        float *tout = x->slots + (size_t)(u % x->units_per_expert) * x->copy_rows * ts;
        memset(tout + (size_t)r0 * ts, 0, (size_t)nr * ts * sizeof(float));
        const void *w = x->from_home ? mvm_expert_home(x->m->space, x->layer, e)
                                     : mvm_expert_addr(x->m->space, x->layer, e);
        if (nr == 1)
            mvm_k_expert_ffn(x->fmt, w, hp->n_embd, x->gact + r0 * x->act_stride,
                             s->row_w[r0], tout + (size_t)r0 * ts, g0, g1);
        else
            mvm_k_expert_ffn_batch(x->fmt, w, hp->n_embd,
                                   x->gact + r0 * x->act_stride, x->act_stride, s->row_w + r0,
                                   nr, tout + (size_t)r0 * ts, ts, g0, g1);
        /* gpt-oss's down bias, weighted, once per row: with the expert's first groups */
        const float *bd = x->m->layers[x->layer].down_bias;
        for (uint32_t r = r0; bd && g0 == 0 && r < r0 + nr; r++)
            for (uint32_t d = 0; d < hp->n_embd; d++)
                tout[(size_t)r * ts + d] += s->row_w[r] * bd[(size_t)e * hp->n_embd + d];
    }
}

void mvm_cpu_experts_run_first(mvm_cpu_experts *x, const mvm_moe *s, const float *xn,
                               uint32_t n, const int32_t *experts, uint32_t n_experts,
                               int from_home, const uint8_t *take)
{
    x->s = s;
    x->experts = experts;
    x->n_experts = n_experts;
    x->layer = s->step.layer;
    x->fmt = x->m->layers[x->layer].expert_fmt;
    x->n_groups = x->m->layers[x->layer].expert_groups;
    x->from_home = from_home;
    x->take = take;
    x->part = 1;
    memset(x->copies_of, 0, (size_t)x->m->hp.n_expert * sizeof *x->copies_of);
    if (!n_experts)
        return;
    dispatch(x, xn, n);
    mvm_pool_run(x->pool, experts_run, x);
}

void mvm_cpu_experts_run(mvm_cpu_experts *x, const mvm_moe *s, const float *xn, uint32_t n,
                         const int32_t *experts, uint32_t n_experts, int from_home)
{
    mvm_cpu_experts_run_first(x, s, xn, n, experts, n_experts, from_home, NULL);
}

void mvm_cpu_experts_run_rest(mvm_cpu_experts *x)
{
    x->part = 0;
    if (x->n_experts) { /* the first part's shares again: its run took them */
        mvm_pool_share(x->pool, x->n_experts * x->units_per_expert, x->starts);
        mvm_pool_run(x->pool, experts_run, x);
    }
    x->take = NULL;
}

/* The partials of row r of expert e, added into out[0..n_embd) over columns [d0, d1), in
 * unit order. */
static void add_row(const mvm_cpu_experts *x, uint32_t e, uint32_t r, float *out, size_t d0,
                    size_t d1)
{
    for (uint32_t k = 0; k < x->copies_of[e]; k++) {
        const float *o = x->slots + (k * x->copy_rows + r) * x->slot_stride;
        for (size_t d = d0; d < d1; d++)
            out[d] += o[d];
    }
}

struct add_job {
    mvm_cpu_experts *x;
    float *xs;
    uint32_t n;
    const uint8_t *rows;        /* [n*K] the rows to add; NULL: all */
};

/* xs[token] += the rows' partial outputs of every thread; split by columns. */
static void add_run(void *p, int t, int nth)
{
    const struct add_job *j = p;
    const mvm_hparams *hp = &j->x->m->hp;
    const mvm_moe *s = j->x->s;
    size_t d0, d1;
    mvm_pool_split(hp->n_embd, t, nth, &d0, &d1);
    for (uint32_t e = 0; e < hp->n_expert; e++) /* rows in order: off[] ascends with e */
        for (uint32_t r = s->off[e]; r < s->off[e] + s->cnt[e]; r++)
            if (!j->rows || j->rows[r])
                add_row(j->x, e, r, j->xs + (size_t)s->row_tok[r] * hp->n_embd, d0, d1);
}

void mvm_cpu_experts_add(mvm_cpu_experts *x, const mvm_moe *s, float *xs, uint32_t n)
{
    x->s = s;
    struct add_job j = {x, xs, n, NULL};
    mvm_pool_run(x->pool, add_run, &j);
}

void mvm_cpu_experts_add_some(mvm_cpu_experts *x, const mvm_moe *s, float *xs, uint32_t n,
                              const uint8_t *take)
{
    const uint32_t E = x->m->hp.n_expert;
    memset(x->row_take, 0, (size_t)n * x->m->hp.n_expert_used);
    for (uint32_t e = 0; e < E; e++)
        if (take[e])
            memset(x->row_take + s->off[e], 1, s->cnt[e]);
    x->s = s;
    struct add_job j = {x, xs, n, x->row_take};
    mvm_pool_run(x->pool, add_run, &j);
}

void mvm_cpu_experts_rows(mvm_cpu_experts *x, const mvm_moe *s, uint32_t e, float *rows)
{
    size_t D = x->m->hp.n_embd;
    x->s = s;
    for (uint32_t r = s->off[e]; r < s->off[e] + s->cnt[e]; r++) {
        memset(rows + r * D, 0, D * sizeof *rows);
        add_row(x, e, r, rows + r * D, 0, D);
    }
}
