/*
 * The assign modules (policy/assign_*.c): hand-worked cases of the papers' algorithms
 * (SMoE Alg. 2 and Eq. 4, DALI Alg. 1, PreScope's PreSched), invariants every module keeps
 * on random instances (every active expert gets a place, inactive ones none, resident
 * experts are never loaded, missing ones never run "as they are", and the modules that
 * choose places fit their loads and prefetches in the free + evictable pages), DALI's
 * greedy against the exact optimum by brute force over all 2^n assignments, and
 * PreSched's prefetches against the copy engine's idle window.
 *
 * Costs are built from machines whose rates make the model's times exact binary fractions
 * (expert_bytes 6144, flops per token 6), so the hand-worked sums compare exactly.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "policy/modules.h"

#define MAXL 3
#define MAXE 12
#define MAXT 16
#define MAXK 6
#define BYTES 6144u

typedef struct fx {
    mvm_pshape sh;
    mvm_cost cost;
    uint32_t resident[MAXL * MAXE];
    uint8_t busy[MAXL * MAXE];
    mvm_pview v;
    int32_t experts[MAXT * MAXK];
    float weights[MAXT * MAXK];
    uint32_t counts[MAXE];
    mvm_pstep step;
    uint8_t where[MAXE];
    uint32_t prefetch[2 * MAXE];
    mvm_assignment out;
} fx;

/* Times: t_load for a whole expert, GPU g0 + g1·n, CPU c0 + c1·n, attention per token. */
static void fx_cost(fx *f, double t_load, double g0, double g1, double c0, double c1, double attn)
{
    mvm_machine m = {.pcie_bw = BYTES / t_load,
                     .zerocopy_bw = BYTES / t_load,
                     .gpu_mem_bw = BYTES / g0,
                     .gpu_flops = 6 / g1,
                     .cpu_mem_bw = BYTES / c0,
                     .cpu_flops = 6 / c1,
                     .attn_time = attn};
    mvm_cost_init(&f->cost, &m, BYTES, 1, 1);
}

static void fx_init(fx *f, uint32_t L, uint32_t E, uint32_t K, uint32_t ppe)
{
    memset(f, 0, sizeof *f);
    f->sh = (mvm_pshape){.n_layers = L, .n_experts = E, .top_k = K, .n_embd = 1, .n_ff = 1,
                         .pages_per_expert = ppe, .expert_bytes = BYTES};
    fx_cost(f, 2, 0.25, 0.125, 1, 0.5, 0);
    f->v = (mvm_pview){.shape = &f->sh, .resident = f->resident, .busy = f->busy,
                       .capacity_pages = 1u << 20};
    f->step = (mvm_pstep){.experts = f->experts, .weights = f->weights, .counts = f->counts};
    f->out = (mvm_assignment){.where = f->where, .prefetch = f->prefetch, .cap_prefetch = 2 * MAXE};
}

/* A step of `layer` with n_tok tokens: counts[e] tokens choose e with gate weight w[e]
 * (w NULL: 1). Tokens are filled round robin, so an expert is at most once per token as
 * long as counts[e] <= n_tok; the counts must fit in the n_tok·K slots. */
static void fx_step(fx *f, uint32_t layer, uint32_t n_tok, const uint32_t *counts, const float *w)
{
    uint32_t K = f->sh.top_k, fill[MAXT] = {0}, t = 0;
    f->step.layer = layer;
    f->step.n_tok = n_tok;
    for (uint32_t i = 0; i < MAXT * MAXK; i++)
        f->experts[i] = -1;
    for (uint32_t e = 0; e < f->sh.n_experts; e++) {
        f->counts[e] = counts[e];
        CHECK(counts[e] <= n_tok);
        for (uint32_t c = 0; c < counts[e]; c++, t = (t + 1) % n_tok) {
            CHECK(fill[t] < K);
            if (fill[t] == K)
                return;
            f->experts[t * K + fill[t]] = (int32_t)e;
            f->weights[t * K + fill[t]++] = w ? w[e] : 1.0f;
        }
    }
}

/* One assign call by a fresh module, with predictions for n_ahead layers ([n_ahead][E]). */
static void fx_run_ahead(fx *f, const mvm_assign_ops *ops, const char *params,
                         const float *ahead, uint32_t n_ahead)
{
    mvm_pinit init = {.shape = &f->sh, .cost = &f->cost, .params = {params}};
    void *self;
    CHECK_ST(ops->create(&init, &self), MVM_OK);
    ops->assign(self, &f->v, &f->step, ahead, n_ahead, &f->out);
    ops->destroy(self);
}

/* ... with a prediction for layer+1 only (next NULL: none). */
static void fx_run(fx *f, const mvm_assign_ops *ops, const char *params, const float *next)
{
    fx_run_ahead(f, ops, params, next, next != NULL);
}

static double close_to(double a, double b) { return fabs(a - b) <= 1e-9 * (1 + fabs(b)); }

/* ---- the test's own model of an expert's costs (cost.h's formulas, by hand) ------------ */

static uint32_t missing(const fx *f, uint32_t layer, uint32_t e)
{
    uint32_t r = f->resident[layer * f->sh.n_experts + e], ppe = f->sh.pages_per_expert;
    return r >= ppe ? 0 : ppe - r;
}

static double load_of(const fx *f, uint32_t pages)
{
    uint32_t ppe = f->sh.pages_per_expert;
    return mvm_cost_load_bytes(&f->cost, ((uint64_t)BYTES * pages + ppe - 1) / ppe);
}

/* Free pages plus resident pages of idle experts not active in the step's layer. */
static uint64_t room_of(const fx *f)
{
    const mvm_pview *v = &f->v;
    uint64_t room = v->capacity_pages > v->used_pages ? v->capacity_pages - v->used_pages : 0;
    for (uint32_t x = 0; x < f->sh.n_layers * f->sh.n_experts; x++) {
        uint32_t l = x / f->sh.n_experts, e = x % f->sh.n_experts;
        if (!f->busy[x] && !(l == f->step.layer && f->counts[e]))
            room += f->resident[x];
    }
    return room;
}

/* ---- gpu ------------------------------------------------------------------------------- */

static void test_gpu(void)
{
    fx f;
    fx_init(&f, 2, 8, 4, 2);
    /* e0 resident, e1 half resident, e2 none, e3 half and busy (pinned by the caller, as
     * the simulator does before assign: still planned like any missing expert), e4
     * inactive */
    f.resident[0] = 2;
    f.resident[1] = 1;
    f.resident[3] = 1;
    f.busy[3] = 1;
    uint32_t counts[8] = {1, 2, 4, 1, 0, 0, 0, 0};
    fx_step(&f, 0, 4, counts, NULL);
    fx_run(&f, &mvm_assign_gpu, NULL, NULL);
    CHECK(f.where[0] == MVM_RUN_GPU);
    CHECK(f.where[1] == MVM_RUN_GPU_LOAD);
    CHECK(f.where[2] == MVM_RUN_GPU_LOAD);
    CHECK(f.where[3] == MVM_RUN_GPU_LOAD);
    for (uint32_t e = 4; e < 8; e++)
        CHECK(f.where[e] == MVM_RUN_NONE);
    CHECK(f.out.n_prefetch == 0);
    /* DALI Eq. 5: Σ max(transfer, compute): e0 0.375, e1 max(1, .5) = 1, e2 max(2, .75) = 2,
     * e3 max(1, .375) = 1 */
    CHECK(close_to(f.out.est_time, 4.375));

    /* No room at all changes nothing: GPU only; degrading is the caller's. */
    f.v.capacity_pages = 0;
    fx_run(&f, &mvm_assign_gpu, NULL, NULL);
    CHECK(f.where[1] == MVM_RUN_GPU_LOAD && f.where[2] == MVM_RUN_GPU_LOAD);
    CHECK(close_to(f.out.est_time, 4.375));

    /* zerocopy=1: what is not wholly resident is read in place, whatever the room. */
    fx_run(&f, &mvm_assign_gpu, "zerocopy=1", NULL);
    CHECK(f.where[0] == MVM_RUN_GPU);
    for (uint32_t e = 1; e < 4; e++)
        CHECK(f.where[e] == MVM_RUN_ZEROCOPY);
    CHECK(f.where[4] == MVM_RUN_NONE);
    double zc = mvm_cost_gpu(&f.cost, 1) + mvm_cost_zerocopy(&f.cost, 2) +
                mvm_cost_zerocopy(&f.cost, 4) + mvm_cost_zerocopy(&f.cost, 1);
    CHECK(close_to(f.out.est_time, zc) && zc > 0.375);
    mvm_pinit init = {.shape = &f.sh, .cost = &f.cost, .params = {"zerocopy=2"}};
    void *self = NULL;
    CHECK_ST(mvm_assign_gpu.create(&init, &self), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "zerocopy=2 is not 0 or 1") != NULL && self == NULL);
}

/* ---- twoptr: SMoE Algorithm 2 ----------------------------------------------------------- */

static void test_twoptr_paper(void)
{
    fx f;
    fx_init(&f, 2, 8, 6, 1);
    fx_cost(&f, 3, 0.25, 0.125, 1.5, 0.5, 0); /* C_load = 3, C_CPU = 2 at one token */
    f.resident[5] = 1;
    uint32_t counts[8] = {1, 1, 1, 1, 1, 1, 0, 0};
    float w[8] = {0.3f, 0.25f, 0.2f, 0.15f, 0.1f, 0.05f, 0, 0};
    fx_step(&f, 0, 1, counts, w);
    fx_run(&f, &mvm_assign_twoptr, NULL, NULL);
    /* S = e0..e4 by score. T_load 0 <= T_CPU 0: load e0 (3); 3 > 0: e4 to CPU (2);
     * 3 > 2: e3 to CPU (4); 3 <= 4: load e1 (6); 6 > 4: e2 to CPU (6). Eq. 4's optimum for
     * five experts: min over n_load of max(3·n_load, 2·(5 - n_load)) = 6 at n_load = 2. */
    CHECK(f.where[0] == MVM_RUN_GPU_LOAD);
    CHECK(f.where[1] == MVM_RUN_GPU_LOAD);
    CHECK(f.where[2] == MVM_RUN_CPU);
    CHECK(f.where[3] == MVM_RUN_CPU);
    CHECK(f.where[4] == MVM_RUN_CPU);
    CHECK(f.where[5] == MVM_RUN_GPU);
    CHECK(f.out.est_time == 6);
    double best = INFINITY;
    for (int nl = 0; nl <= 5; nl++)
        best = fmin(best, fmax(3.0 * nl, 2.0 * (5 - nl)));
    CHECK(f.out.est_time == best);

    /* One missing expert: T_load = T_CPU = 0 is a tie, and ties load. */
    uint32_t one[8] = {0, 0, 1, 0, 0, 0, 0, 0};
    fx_step(&f, 0, 1, one, NULL);
    fx_run(&f, &mvm_assign_twoptr, NULL, NULL);
    CHECK(f.where[2] == MVM_RUN_GPU_LOAD && f.out.est_time == 3);

    /* Equal costs: the tie at 0 loads the best, then the CPU takes the other. */
    fx_cost(&f, 2, 0.25, 0.125, 1.5, 0.5, 0);
    uint32_t two[8] = {1, 1, 0, 0, 0, 0, 0, 0};
    float w2[8] = {0.1f, 0.4f, 0, 0, 0, 0, 0, 0};
    fx_step(&f, 0, 1, two, w2);
    fx_run(&f, &mvm_assign_twoptr, NULL, NULL);
    CHECK(f.where[1] == MVM_RUN_GPU_LOAD);
    CHECK(f.where[0] == MVM_RUN_CPU);
    CHECK(f.out.est_time == 2);

    /* A batch: importance is the sum over tokens (e0: 3 tokens × 0.2 beats e1: 0.5). */
    uint32_t batch[8] = {3, 1, 0, 0, 0, 0, 0, 0};
    float w3[8] = {0.2f, 0.5f, 0, 0, 0, 0, 0, 0};
    fx_step(&f, 0, 3, batch, w3);
    fx_run(&f, &mvm_assign_twoptr, NULL, NULL);
    CHECK(f.where[0] == MVM_RUN_GPU_LOAD);
    CHECK(f.where[1] == MVM_RUN_CPU);

    /* No room (nothing free, nothing evictable): the best expert computes on the CPU. */
    memset(f.resident, 0, sizeof f.resident);
    f.v.capacity_pages = 0;
    fx_run(&f, &mvm_assign_twoptr, NULL, NULL);
    CHECK(f.where[0] == MVM_RUN_CPU && f.where[1] == MVM_RUN_CPU);
    CHECK(close_to(f.out.est_time, (1.5 + 0.5 * 3) + 2));
}

/* ---- greedy: DALI Algorithm 1 ----------------------------------------------------------- */

/* DALI's model of an assignment: max(Σ max(load, gpu) on the GPU, Σ cpu on the CPU);
 * INFINITY when its loads need more pages than room. mask bit e: GPU. */
static double dali_makespan(const fx *f, uint32_t n, uint32_t mask, uint64_t room)
{
    double tg = 0, tc = 0;
    uint64_t pages = 0;
    for (uint32_t e = 0; e < n; e++) {
        uint32_t k = f->counts[e], miss = missing(f, 0, e);
        if (mask >> e & 1) {
            pages += miss;
            tg += fmax(load_of(f, miss), mvm_cost_gpu(&f->cost, k));
        } else {
            tc += mvm_cost_cpu(&f->cost, k);
        }
    }
    return pages > room ? INFINITY : fmax(tg, tc);
}

static void test_greedy_hand(void)
{
    fx f;
    fx_init(&f, 2, 8, 6, 1);
    fx_cost(&f, 4, 0.5, 0.125, 1, 0.5, 0);
    f.resident[0] = 1; /* A */
    uint32_t counts[8] = {8, 1, 6, 12, 0, 0, 0, 0};
    fx_step(&f, 0, 12, counts, NULL);
    /* t_gpu / t_cpu / |Δ|: A (resident) 1.5/5/3.5; B max(4,.625)=4/1.5/2.5; C 4/4/0;
     * D 4/7/3. Order A, D, B, C. A: 1.5 <= 5, GPU. D: 5.5 <= 7, GPU (load). B: 9.5 > 1.5,
     * CPU. C: 9.5 > 5.5, CPU. T_gpu = T_cpu = 5.5, which is also the optimum. */
    fx_run(&f, &mvm_assign_greedy, NULL, NULL);
    CHECK(f.where[0] == MVM_RUN_GPU);
    CHECK(f.where[3] == MVM_RUN_GPU_LOAD);
    CHECK(f.where[1] == MVM_RUN_CPU);
    CHECK(f.where[2] == MVM_RUN_CPU);
    CHECK(f.out.est_time == 5.5);
    double opt = INFINITY;
    for (uint32_t mask = 0; mask < 16; mask++)
        opt = fmin(opt, dali_makespan(&f, 4, mask, UINT64_MAX));
    CHECK(opt == 5.5);

    /* A tie (line 12's <=) goes to the GPU: with t_load 2, B with 2 tokens costs
     * max(2, .25 + .125·2) = 2 on the GPU and 1 + .5·2 = 2 on the CPU. */
    fx_cost(&f, 2, 0.25, 0.125, 1, 0.5, 0);
    uint32_t tie[8] = {0, 2, 0, 0, 0, 0, 0, 0};
    fx_step(&f, 0, 12, tie, NULL);
    fx_run(&f, &mvm_assign_greedy, NULL, NULL);
    CHECK(f.where[1] == MVM_RUN_GPU_LOAD && f.out.est_time == 2);
    fx_cost(&f, 4, 0.5, 0.125, 1, 0.5, 0);
    fx_step(&f, 0, 12, counts, NULL);

    /* The engine's measured CPU (mvm_pview.cpu_scale, mvm_resid_note_cpu) twice as slow as
     * the model: t_cpu A 10, B 3, C 8, D 14; |delta| orders D, A, C, B. D: 4 <= 14, GPU
     * (load); A: 5.5 <= 10, GPU; C: 9.5 > 8, CPU; B: 9.5 <= 11, GPU (load): B leaves the
     * CPU. */
    f.v.cpu_scale = 2;
    fx_run(&f, &mvm_assign_greedy, NULL, NULL);
    CHECK(f.where[0] == MVM_RUN_GPU && f.where[3] == MVM_RUN_GPU_LOAD);
    CHECK(f.where[2] == MVM_RUN_CPU && f.where[1] == MVM_RUN_GPU_LOAD);
    CHECK(f.out.est_time == 9.5);
    f.v.cpu_scale = 0; /* unset: the model as given */

    /* No pages to load into (Eq. 9): D and B would go to the GPU but must take the CPU. */
    f.v.capacity_pages = 1;
    f.v.used_pages = 1;
    fx_run(&f, &mvm_assign_greedy, NULL, NULL);
    CHECK(f.where[0] == MVM_RUN_GPU);
    CHECK(f.where[1] == MVM_RUN_CPU && f.where[2] == MVM_RUN_CPU && f.where[3] == MVM_RUN_CPU);
    CHECK(f.out.est_time == 7 + 1.5 + 4);
}

/* Each miss runs where the cost model says it finishes first (issue: offloaded decode never
 * waits for what it need not): three machines, each making one alternative the winner for
 * a lone missing expert, greedy with zerocopy=1 picks it; a resident expert stays on the
 * GPU; without zero-copy, and without room, the CPU. */
static void test_greedy_each_alternative_wins(void)
{
    fx f;
    fx_init(&f, 1, 4, 2, 1);
    uint32_t counts[4] = {1, 1, 0, 0};
    f.resident[1] = 1; /* expert 1 resident, expert 0 missing */
    struct {
        double pcie, zc, cpu;
        uint8_t want;
    } machines[] = {
        {BYTES / 0.001, BYTES / 100.0, BYTES / 10.0, MVM_RUN_GPU_LOAD}, /* fast link */
        {BYTES / 100.0, BYTES / 0.001, BYTES / 10.0, MVM_RUN_ZEROCOPY}, /* fast in-place read */
        {BYTES / 100.0, BYTES / 100.0, BYTES / 0.01, MVM_RUN_CPU},      /* fast CPU */
    };
    for (int m = 0; m < 3; m++) {
        mvm_machine mc = {.pcie_bw = machines[m].pcie, .zerocopy_bw = machines[m].zc,
                          .gpu_mem_bw = BYTES / 0.01, .gpu_flops = 1e9,
                          .cpu_mem_bw = machines[m].cpu, .cpu_flops = 1e9};
        mvm_cost_init(&f.cost, &mc, BYTES, 1, 1);
        fx_step(&f, 0, 2, counts, NULL);
        fx_run(&f, &mvm_assign_greedy, "zerocopy=1", NULL);
        CHECK(f.where[0] == machines[m].want);
        CHECK(f.where[1] == MVM_RUN_GPU);
        fx_run(&f, &mvm_assign_greedy, NULL, NULL);
        CHECK(f.where[0] == (machines[m].want == MVM_RUN_ZEROCOPY ? MVM_RUN_CPU
                                                                  : machines[m].want));
        f.v.capacity_pages = f.v.used_pages = 1; /* no room: never a load */
        fx_run(&f, &mvm_assign_greedy, "zerocopy=1", NULL);
        CHECK(f.where[0] != MVM_RUN_GPU_LOAD);
        f.v.capacity_pages = 1u << 20, f.v.used_pages = 0;
    }
    mvm_pinit init = {.shape = &f.sh, .cost = &f.cost, .params = {"zerocopy=2"}};
    void *self = &f;
    CHECK_ST(mvm_assign_greedy.create(&init, &self), MVM_ERR_INVALID);
}

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}
static double rndf(double lo, double hi) { return lo + (hi - lo) * rnd(1u << 20) / (1u << 20); }

static void random_greedy_instance(fx *f, uint32_t n, uint32_t ppe)
{
    fx_init(f, 2, n, MAXK, ppe);
    fx_cost(f, rndf(0.5, 5), rndf(0.05, 0.5), rndf(0.001, 0.05), rndf(0.1, 1), rndf(0.05, 0.5), 0);
    uint32_t counts[MAXE];
    for (uint32_t e = 0; e < n; e++) {
        counts[e] = 1 + rnd(9); /* 10 experts × 9 tokens fit the 16 × 6 slots */
        f->resident[e] = rnd(3) == 0 ? ppe : rnd(ppe + 1);
    }
    fx_step(f, 0, MAXT, counts, NULL);
}

/* No memory pressure: OPT <= greedy <= Σ min(t_gpu, t_cpu) <= 2·OPT (the list-scheduling
 * argument in assign_greedy.c's header: each placement raises the maximum by at most the
 * job's smaller time, and OPT carries at least half of those smaller times). */
static void test_greedy_vs_optimum(void)
{
    for (int it = 0; it < 300; it++) {
        fx f;
        uint32_t n = 1 + rnd(10);
        random_greedy_instance(&f, n, 1 + rnd(4));
        fx_run(&f, &mvm_assign_greedy, NULL, NULL);
        uint32_t mine = 0;
        double sum_min = 0, opt = INFINITY;
        for (uint32_t e = 0; e < n; e++) {
            CHECK(f.where[e] != MVM_RUN_NONE);
            mine |= (uint32_t)(f.where[e] != MVM_RUN_CPU) << e;
            double g = fmax(load_of(&f, missing(&f, 0, e)), mvm_cost_gpu(&f.cost, f.counts[e]));
            sum_min += fmin(g, mvm_cost_cpu(&f.cost, f.counts[e]));
        }
        for (uint32_t mask = 0; mask < 1u << n; mask++)
            opt = fmin(opt, dali_makespan(&f, n, mask, UINT64_MAX));
        double got = dali_makespan(&f, n, mine, UINT64_MAX);
        CHECK(close_to(f.out.est_time, got));
        CHECK(got >= opt * (1 - 1e-12));
        CHECK(got <= sum_min * (1 + 1e-12));
        CHECK(got <= 2 * opt * (1 + 1e-12));
    }
}

/* Memory pressure: greedy stays feasible and never beats the constrained optimum. */
static void test_greedy_memory(void)
{
    for (int it = 0; it < 300; it++) {
        fx f;
        uint32_t n = 1 + rnd(10);
        random_greedy_instance(&f, n, 1 + rnd(4));
        f.v.capacity_pages = rnd(8);
        uint64_t room = room_of(&f);
        fx_run(&f, &mvm_assign_greedy, NULL, NULL);
        uint32_t mine = 0;
        uint64_t pages = 0;
        double opt = INFINITY;
        for (uint32_t e = 0; e < n; e++) {
            mine |= (uint32_t)(f.where[e] != MVM_RUN_CPU) << e;
            if (f.where[e] == MVM_RUN_GPU_LOAD)
                pages += missing(&f, 0, e);
        }
        for (uint32_t mask = 0; mask < 1u << n; mask++)
            opt = fmin(opt, dali_makespan(&f, n, mask, room));
        CHECK(pages <= room);
        double got = dali_makespan(&f, n, mine, room);
        CHECK(close_to(f.out.est_time, got));
        CHECK(got >= opt * (1 - 1e-12));
    }
}

/* Why no constant ratio holds once memory binds: one missing expert A (4 pages, t_gpu 2,
 * t_cpu 11, |Δ| = 9) comes first and takes the 4 pages of room; four experts with 3 of 4
 * pages resident (t_gpu 0.5 to finish loading, t_cpu 9, |Δ| = 8.5) then find no page and
 * all run on the CPU: 36, against 11 with A on the CPU and the four on the GPU. With k
 * such experts the ratio grows like 9k/11. */
static void test_greedy_memory_counterexample(void)
{
    fx f;
    fx_init(&f, 2, 5, MAXK, 4);
    fx_cost(&f, 2, 0.25, 1.0 / 1024, 1, 1, 0);
    uint32_t counts[5] = {10, 8, 8, 8, 8};
    for (uint32_t e = 1; e < 5; e++)
        f.resident[e] = 3;
    fx_step(&f, 0, MAXT, counts, NULL);
    f.v.capacity_pages = 12 + 4;
    f.v.used_pages = 12;
    CHECK(room_of(&f) == 4);
    fx_run(&f, &mvm_assign_greedy, NULL, NULL);
    CHECK(f.where[0] == MVM_RUN_GPU_LOAD);
    for (uint32_t e = 1; e < 5; e++)
        CHECK(f.where[e] == MVM_RUN_CPU);
    CHECK(close_to(f.out.est_time, 4 * 9));
    double opt = INFINITY;
    for (uint32_t mask = 0; mask < 32; mask++)
        opt = fmin(opt, dali_makespan(&f, 5, mask, 4));
    CHECK(close_to(opt, 11));
}

/* ---- presched: PreScope PreSched -------------------------------------------------------- */

/* Current layer (8 tokens): four missing experts with 1, 2, 4, 8 tokens and one resident;
 * T_io = 2, T_cpu(n) = 0.5 + 0.25·n (0.75, 1, 1.5, 2.5). Thresholds (CPU | loads): all CPU
 * 5.75; {1,2,4 | 8} max(3.25, 2) = 3.25; {1,2 | 4,8} max(1.75, 4) = 4; then 6 and 8. So
 * 8 is loaded, the rest run on the CPU, est 3.25 (the literal Eq. 5 crossing gives the
 * same here). The copy engine idles 3.25 - 2 = 1.25, plus layer 1's attention 0.125 × 8
 * tokens = 1: window 2.25. Layer 1's prediction ranks e0 .4,
 * e1 .3 (resident: skipped), e2 .2, e3 .1: e0 fits (2 <= 2.25); e2 would end at 4, 1.75
 * past the window: Eq. 7 G = P_hit·2 - (1 - P_hit)·1.75, positive for P_hit > 0.467. */
static void presched_case(fx *f)
{
    fx_init(f, 3, 8, 4, 1);
    fx_cost(f, 2, 0.25, 1.0 / 1024, 0.5, 0.25, 0.125);
    f->resident[4] = 1;
    f->resident[8 + 1] = 1;
    uint32_t counts[8] = {1, 2, 4, 8, 1, 0, 0, 0};
    fx_step(f, 0, 8, counts, NULL);
}

static const float next_case[8] = {0.4f, 0.3f, 0.2f, 0.1f, 0, 0, 0, 0};

static void test_presched_hand(void)
{
    fx f;
    presched_case(&f);
    fx_run(&f, &mvm_assign_presched, NULL, next_case);
    CHECK(f.where[0] == MVM_RUN_CPU && f.where[1] == MVM_RUN_CPU && f.where[2] == MVM_RUN_CPU);
    CHECK(f.where[3] == MVM_RUN_GPU_LOAD);
    CHECK(f.where[4] == MVM_RUN_GPU);
    CHECK(f.out.est_time == 3.25);
    CHECK(f.out.n_prefetch == 1 && f.prefetch[0] == 8 + 0);

    fx_run(&f, &mvm_assign_presched, "p_hit=0.5", next_case);
    CHECK(f.out.n_prefetch == 2 && f.prefetch[0] == 8 && f.prefetch[1] == 8 + 2);
    fx_run(&f, &mvm_assign_presched, "p_hit=0.4", next_case);
    CHECK(f.out.n_prefetch == 1);
    /* Without layer 1's attention the window is 1.25: even e0 overhangs (by 0.75). */
    fx_run(&f, &mvm_assign_presched, "attn=0", next_case);
    CHECK(f.out.n_prefetch == 0);
    fx_run(&f, &mvm_assign_presched, "attn=0,p_hit=1", next_case);
    CHECK(f.out.n_prefetch == 1 && f.prefetch[0] == 8);
    /* No prediction, or no next layer: no prefetch, the same split. */
    fx_run(&f, &mvm_assign_presched, NULL, NULL);
    CHECK(f.out.n_prefetch == 0 && f.out.est_time == 3.25);
    f.step.layer = 2;
    memset(f.resident, 0, sizeof f.resident);
    fx_run(&f, &mvm_assign_presched, "p_hit=1", next_case);
    CHECK(f.out.n_prefetch == 0);

    /* Cheaper loads (T_io = 1) make two loads best: {1,2 | 4,8} max(1.75, 2) = 2 beats
     * {1,2,4 | 8} 3.25. With room for one page only, the best that fits is 3.25; with
     * none, everything runs on the CPU: 5.75. */
    presched_case(&f);
    fx_cost(&f, 1, 0.25, 1.0 / 1024, 0.5, 0.25, 0.125);
    fx_run(&f, &mvm_assign_presched, NULL, NULL);
    CHECK(f.where[2] == MVM_RUN_GPU_LOAD && f.where[3] == MVM_RUN_GPU_LOAD);
    CHECK(f.out.est_time == 2);
    f.v.capacity_pages = 2 + 1; /* e4 and layer 1's e1 are resident; one page free */
    f.v.used_pages = 2;
    f.busy[8 + 1] = 1;
    CHECK(room_of(&f) == 1);
    fx_run(&f, &mvm_assign_presched, NULL, NULL);
    CHECK(f.where[2] == MVM_RUN_CPU && f.where[3] == MVM_RUN_GPU_LOAD);
    CHECK(f.out.est_time == 3.25);
    f.v.capacity_pages = 2;
    fx_run(&f, &mvm_assign_presched, NULL, NULL);
    CHECK(f.where[3] == MVM_RUN_CPU && f.out.est_time == 5.75);

    /* One token choosing one expert: the predicted set of layer 1 is its single best
     * expert, however wide the window. */
    fx_init(&f, 2, 8, 1, 1);
    fx_cost(&f, 2, 0.25, 1.0 / 1024, 0.5, 0.25, 100);
    uint32_t single[8] = {0, 0, 0, 0, 0, 1, 0, 0};
    f.resident[5] = 1;
    fx_step(&f, 0, 1, single, NULL);
    fx_run(&f, &mvm_assign_presched, NULL, next_case);
    CHECK(f.out.n_prefetch == 1 && f.prefetch[0] == 8 + 0);

    mvm_pinit init = {.shape = &f.sh, .cost = &f.cost, .params = {"p_hit=2"}};
    void *self;
    CHECK_ST(mvm_assign_presched.create(&init, &self), MVM_ERR_INVALID);
    init.params.text = "attn=0.5";
    CHECK_ST(mvm_assign_presched.create(&init, &self), MVM_ERR_INVALID);
    init.params.text = "lookahead=2";
    CHECK_ST(mvm_assign_presched.create(&init, &self), MVM_ERR_INVALID);
    init.params.text = "depth=3";
    CHECK_ST(mvm_assign_presched.create(&init, &self), MVM_ERR_INVALID);
}

/* P_hit by default is the running hit rate of the module's own prefetches: the critical
 * prefetch waits until a planned expert has been seen used by its layer. */
static void test_presched_running_hit_rate(void)
{
    fx f;
    presched_case(&f);
    mvm_pinit init = {.shape = &f.sh, .cost = &f.cost};
    void *self;
    CHECK_ST(mvm_assign_presched.create(&init, &self), MVM_OK);
    mvm_assign_presched.assign(self, &f.v, &f.step, next_case, 1, &f.out);
    CHECK(f.out.n_prefetch == 1);
    uint32_t used[8] = {2, 0, 0, 0, 0, 0, 0, 0}; /* layer 1 uses e0: a hit */
    fx_step(&f, 1, 4, used, NULL);
    mvm_assign_presched.assign(self, &f.v, &f.step, NULL, 0, &f.out);
    presched_case(&f);
    mvm_assign_presched.assign(self, &f.v, &f.step, next_case, 1, &f.out);
    CHECK(f.out.n_prefetch == 2);
    mvm_assign_presched.destroy(self);
}

/* Q4, the two-layer lookahead. Layer 0 of 3 (8 tokens, top-4, T_io = 2 a page, attention
 * 0.5 a token: 4 a layer) uses only resident experts, so it loads nothing and its window is
 * layer 1's attention, 4: layer 1's predicted e0, e1 fill it exactly. Then layer 2's
 * e2, e3 fit in the 4 more of layer 2's attention. Not with depth=1, nor with one layer of
 * predictions, nor when layer 0 loads something (its heavy expert, 8 tokens, is loaded),
 * nor when layer 1's plan ends on a critical prefetch (a third predicted expert). Planned
 * layer-2 prefetches count towards P_hit when layer 2 runs, not before. */
static void test_presched_lookahead(void)
{
    fx f;
    fx_init(&f, 3, 8, 4, 1);
    fx_cost(&f, 2, 0.25, 1.0 / 1024, 0.5, 0.25, 0.5);
    uint32_t counts[8] = {0, 0, 0, 0, 8, 8, 0, 0};
    f.resident[4] = f.resident[5] = 1;
    fx_step(&f, 0, 8, counts, NULL);
    float ahead[2][8] = {{0.5f, 0.5f, 0, 0, 0, 0, 0, 0}, {0, 0, 0.5f, 0.5f, 0, 0, 0, 0}};
    fx_run_ahead(&f, &mvm_assign_presched, "p_hit=0", &ahead[0][0], 2);
    CHECK(f.out.n_prefetch == 4 && f.prefetch[0] == 8 + 0 && f.prefetch[1] == 8 + 1);
    CHECK(f.prefetch[2] == 16 + 2 && f.prefetch[3] == 16 + 3);
    fx_run_ahead(&f, &mvm_assign_presched, "p_hit=0,depth=1", &ahead[0][0], 2);
    CHECK(f.out.n_prefetch == 2);
    fx_run_ahead(&f, &mvm_assign_presched, "p_hit=0", &ahead[0][0], 1);
    CHECK(f.out.n_prefetch == 2);
    ahead[0][6] = 0.25f; /* a third layer-1 expert: critical, not worth it at P_hit 0 */
    fx_run_ahead(&f, &mvm_assign_presched, "p_hit=0", &ahead[0][0], 2);
    CHECK(f.out.n_prefetch == 2);
    ahead[0][6] = 0;
    f.resident[5] = 0; /* e5 (8 tokens) is loaded now: no lookahead */
    fx_run_ahead(&f, &mvm_assign_presched, "p_hit=0", &ahead[0][0], 2);
    CHECK(f.where[5] == MVM_RUN_GPU_LOAD);
    for (uint32_t i = 0; i < f.out.n_prefetch; i++)
        CHECK(f.prefetch[i] / 8 == 1);
    f.resident[5] = 1;

    /* P_hit: layer 1's plan is scored at layer 1, layer 2's at layer 2 (kept meanwhile):
     * 1 of 2, then 2 of 2, so 0.75, and the critical e6 (overhang 2, load 2) pays:
     * G = 0.75·2 - 0.25·2 > 0. Dropping layer 2's plan at layer 1 would leave 0.5 (G = 0),
     * scoring it there 0.25. */
    mvm_pinit init = {.shape = &f.sh, .cost = &f.cost};
    void *self;
    CHECK_ST(mvm_assign_presched.create(&init, &self), MVM_OK);
    mvm_assign_presched.assign(self, &f.v, &f.step, &ahead[0][0], 2, &f.out);
    CHECK(f.out.n_prefetch == 4);
    uint32_t used1[8] = {8, 0, 0, 0, 0, 0, 0, 0}, used2[8] = {0, 0, 8, 8, 0, 0, 0, 0};
    fx_step(&f, 1, 8, used1, NULL);
    mvm_assign_presched.assign(self, &f.v, &f.step, NULL, 0, &f.out);
    fx_step(&f, 2, 8, used2, NULL);
    mvm_assign_presched.assign(self, &f.v, &f.step, NULL, 0, &f.out);
    fx_step(&f, 0, 8, counts, NULL);
    ahead[0][6] = 0.25f;
    mvm_assign_presched.assign(self, &f.v, &f.step, &ahead[0][0], 2, &f.out);
    CHECK(f.out.n_prefetch == 3 && f.prefetch[2] == 8 + 6);
    mvm_assign_presched.destroy(self);
}

/* Random instances: the threshold is the best split of the ascending list that fits the
 * room, and the prefetches' load time stays inside the window (with P_hit = 0), or
 * overhangs it by less than the last prefetch's own load (P_hit = 1, Eq. 7's critical one). */
static void test_presched_window(void)
{
    for (int it = 0; it < 300; it++) {
        fx f;
        uint32_t E = 2 + rnd(MAXE - 1), ppe = 1 + rnd(3);
        fx_init(&f, 2, E, MAXK, ppe);
        fx_cost(&f, rndf(0.5, 3), rndf(0.05, 0.5), rndf(0.001, 0.05), rndf(0.1, 1),
                rndf(0.05, 0.5), rndf(0, 0.2));
        uint32_t counts[MAXE] = {0};
        float next[MAXE];
        for (uint32_t e = 0; e < E; e++) {
            counts[e] = rnd(3) ? 1 + rnd(8) : 0;
            next[e] = rnd(2) ? (float)rndf(0, 1) : 0;
            f.resident[e] = rnd(3) == 0 ? ppe : rnd(ppe + 1);
            f.resident[E + e] = rnd(4) == 0 ? ppe : rnd(ppe + 1);
            f.busy[E + e] = rnd(6) == 0;
        }
        fx_step(&f, 0, MAXT, counts, NULL);
        f.v.capacity_pages = rnd(3) ? UINT32_MAX : rnd(3 * ppe);
        uint64_t room = room_of(&f);
        for (int p_hit = 0; p_hit <= 1; p_hit++) {
            fx_run(&f, &mvm_assign_presched, p_hit ? "p_hit=1" : "p_hit=0", next);
            double t_gpu = 0, t_cpu = 0, pf = 0, last = 0;
            uint64_t pages = 0;
            for (uint32_t e = 0; e < E; e++) {
                if (f.where[e] == MVM_RUN_GPU_LOAD) {
                    t_gpu += load_of(&f, missing(&f, 0, e));
                    pages += missing(&f, 0, e);
                } else if (f.where[e] == MVM_RUN_CPU) {
                    t_cpu += mvm_cost_cpu(&f.cost, counts[e]);
                }
            }
            /* Best threshold by brute force over the ascending list (ties by index). */
            uint32_t list[MAXE], m = 0;
            for (uint32_t e = 0; e < E; e++)
                if (counts[e] && missing(&f, 0, e))
                    list[m++] = e;
            for (uint32_t i = 1; i < m; i++)
                for (uint32_t j = i; j > 0 && counts[list[j]] < counts[list[j - 1]]; j--) {
                    uint32_t t = list[j];
                    list[j] = list[j - 1];
                    list[j - 1] = t;
                }
            double best = INFINITY;
            for (uint32_t s = 0; s <= m; s++) {
                double io = 0, cpu = 0;
                uint64_t need = 0;
                for (uint32_t j = 0; j < m; j++) {
                    if (j < s)
                        cpu += mvm_cost_cpu(&f.cost, counts[list[j]]);
                    else {
                        io += load_of(&f, missing(&f, 0, list[j]));
                        need += missing(&f, 0, list[j]);
                    }
                }
                if (need <= room)
                    best = fmin(best, fmax(io, cpu));
            }
            CHECK(close_to(f.out.est_time, fmax(t_gpu, t_cpu)));
            CHECK(close_to(f.out.est_time, best));
            double window = fmax(0, t_cpu - t_gpu) + f.cost.m.attn_time * MAXT;
            for (uint32_t i = 0; i < f.out.n_prefetch; i++) {
                uint32_t x = f.prefetch[i], e = x - E;
                CHECK(x >= E && x < 2 * E && missing(&f, 1, e) && !f.busy[x] && next[e] > 0);
                last = load_of(&f, missing(&f, 1, e));
                pf += last;
                pages += missing(&f, 1, e);
            }
            CHECK(pages <= room);
            if (p_hit)
                CHECK(pf - last <= window + 1e-12);
            else
                CHECK(pf <= window + 1e-12);
        }
    }
}

/* ---- invariants of every module --------------------------------------------------------- */

static void test_invariants(void)
{
    const mvm_assign_ops *mods[] = {&mvm_assign_gpu, &mvm_assign_twoptr, &mvm_assign_greedy,
                                    &mvm_assign_presched};
    for (int it = 0; it < 200; it++) {
        fx f;
        uint32_t E = 1 + rnd(MAXE), ppe = 1 + rnd(4), layer = rnd(MAXL);
        fx_init(&f, MAXL, E, MAXK, ppe);
        fx_cost(&f, rndf(0.1, 5), rndf(0.01, 1), rndf(0.001, 0.1), rndf(0.1, 2), rndf(0.01, 1),
                rndf(0, 0.1));
        uint32_t counts[MAXE] = {0};
        float w[MAXE], next[MAXE];
        uint64_t used = 0;
        for (uint32_t x = 0; x < MAXL * E; x++) {
            f.resident[x] = rnd(3) == 0 ? ppe : rnd(ppe + 1);
            f.busy[x] = rnd(5) == 0;
            used += f.resident[x];
        }
        for (uint32_t e = 0; e < E; e++) {
            counts[e] = rnd(2) ? 1 + rnd(8) : 0;
            w[e] = (float)rndf(0, 1);
            next[e] = (float)rndf(0, 1);
        }
        fx_step(&f, layer, MAXT, counts, w);
        f.v.used_pages = used;
        uint64_t more = rnd(2 * ppe + 1), less = rnd(2) ? rnd(ppe + 1) : 0;
        f.v.capacity_pages = used + more > less ? used + more - less : 0;
        uint64_t room = room_of(&f);
        for (int m = 0; m < 4; m++) {
            memset(f.where, 0xee, sizeof f.where);
            fx_run(&f, mods[m], NULL, next);
            uint64_t pages = 0;
            for (uint32_t e = 0; e < E; e++) {
                uint8_t w8 = f.where[e];
                uint32_t miss = missing(&f, layer, e);
                if (!counts[e]) {
                    CHECK(w8 == MVM_RUN_NONE);
                    continue;
                }
                CHECK(w8 == MVM_RUN_GPU || w8 == MVM_RUN_GPU_LOAD || w8 == MVM_RUN_CPU);
                if (!miss)
                    CHECK(w8 != MVM_RUN_GPU_LOAD); /* resident: never loaded */
                else
                    CHECK(w8 != MVM_RUN_GPU);      /* not there: never "as it is" */
                if (w8 == MVM_RUN_GPU_LOAD)
                    pages += miss;
            }
            for (uint32_t i = 0; i < f.out.n_prefetch; i++)
                pages += missing(&f, f.prefetch[i] / E, f.prefetch[i] % E);
            if (mods[m] != &mvm_assign_gpu) /* gpu leaves a load with no room to the caller */
                CHECK(pages <= room);
            else
                for (uint32_t e = 0; e < E; e++)
                    CHECK(f.where[e] != MVM_RUN_CPU);
            CHECK(f.out.est_time >= 0 && isfinite(f.out.est_time));
            if (m < 3)
                CHECK(f.out.n_prefetch == 0);
        }
    }
}

static void test_params(void)
{
    fx f;
    fx_init(&f, 1, 4, 2, 1);
    const mvm_assign_ops *plain[] = {&mvm_assign_gpu, &mvm_assign_twoptr, &mvm_assign_greedy};
    for (int m = 0; m < 3; m++) {
        mvm_pinit init = {.shape = &f.sh, .cost = &f.cost, .params = {"alpha=1"}};
        void *self = &f;
        CHECK_ST(plain[m]->create(&init, &self), MVM_ERR_INVALID);
        CHECK(self == NULL);
    }
}

int main(void)
{
    RUN(test_gpu);
    RUN(test_twoptr_paper);
    RUN(test_greedy_hand);
    RUN(test_greedy_each_alternative_wins);
    RUN(test_greedy_vs_optimum);
    RUN(test_greedy_memory);
    RUN(test_greedy_memory_counterexample);
    RUN(test_presched_hand);
    RUN(test_presched_running_hit_rate);
    RUN(test_presched_lookahead);
    RUN(test_presched_window);
    RUN(test_invariants);
    RUN(test_params);
    TEST_END();
}
