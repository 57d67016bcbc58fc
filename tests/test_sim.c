/*
 * The simulator against closed-form cases: with room for every expert, each used expert is
 * loaded exactly once and nothing is evicted; with no budget every access is a miss and no
 * byte moves; the serial copy engine's busy time is bytes ÷ bandwidth (plus the per-copy
 * setup); the time breakdown sums to the total; the capacity is never exceeded; a larger
 * budget never hits less under LRU on the same trace (LRU is a stack algorithm); a split
 * expert (MoEpic) computes its resident prefix while the rest loads, to the closed form;
 * MoEpic's prefetch window starts what fits before the layer routes and drops the rest;
 * PreScope's hot table is there from the first token and never evicted, however the stream
 * around it churns; the offline oracles bound the online modules.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "tools/sim.h"

static uint64_t rng = 0x853c49e6748fea9bull;

static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)((rng >> 11) % n);
}

/* A trace of n_tok tokens, L layers, E experts, top-K, with skewed random routing. */
static mvm_trace *make_trace(uint32_t n_tok, uint32_t L, uint32_t E, uint32_t K,
                             uint64_t expert_bytes)
{
    mvm_trace_header h = {.model = "test", .arch = "test", .n_layers = L, .n_experts = E,
                          .top_k = K, .expert_bytes = expert_bytes, .n_embd = 2048,
                          .n_ff_exp = 768, .weights_renormalised = 1};
    mvm_trace *t;
    if (mvm_trace_new(&h, n_tok, 0, &t) != MVM_OK)
        return NULL;
    for (uint32_t i = 0; i < n_tok; i++)
        for (uint32_t l = 0; l < L; l++) {
            float *s = mvm_trace_scores(t, i, l);
            int32_t *x = mvm_trace_experts(t, i, l);
            float *w = mvm_trace_weights(t, i, l);
            for (uint32_t k = 0; k < K;) {
                /* popular low ids: min of two draws */
                uint32_t a = rnd(E), b = rnd(E), e = a < b ? a : b, dup = 0;
                for (uint32_t j = 0; j < k; j++)
                    dup |= x[j] == (int32_t)e;
                if (!dup)
                    x[k++] = (int32_t)e;
            }
            for (uint32_t e = 0; e < E; e++)
                s[e] = 0.1f / (float)E;
            for (uint32_t k = 0; k < K; k++) {
                s[x[k]] = 0.9f / (float)(k + 1) / 2.0f;
                w[k] = 1.0f / (float)K;
            }
        }
    return t;
}

/* A trace of make_trace's routing with experts of 9 MiB (5 pages), the h100 preset's costs
 * for them and the default configuration: the decode-routing tests' case. NULL when out of
 * memory. */
static mvm_trace *h100_case(uint32_t n_tok, uint32_t L, uint32_t E, uint32_t K, mvm_cost *cost,
                            mvm_sim_config *c)
{
    const uint64_t eb = 9u << 20;
    mvm_cost_init(cost, mvm_machine_preset("h100"), eb, 2048, 768);
    mvm_sim_config_init(c);
    return make_trace(n_tok, L, E, K, eb);
}

/* h100_case's 100 tokens of 4 layers x 16 experts (top 2), 5 pages each, in a budget of
 * half of them: the device-routed modes' case. */
static mvm_trace *half_case(mvm_cost *cost, mvm_sim_config *c)
{
    mvm_trace *t = h100_case(100, 4, 16, 2, cost, c);
    c->budget_pages = 4 * 16 * 5 / 2;
    return t;
}

/* half_case routed by a host that takes 100 us a step (host_step). */
static mvm_trace *host_case(mvm_cost *cost, mvm_sim_config *c)
{
    mvm_trace *t = half_case(cost, c);
    cost->m.host_step = 100e-6;
    return t;
}

static uint64_t distinct_used(const mvm_trace *t)
{
    uint32_t n = t->hdr.n_layers * t->hdr.n_experts;
    uint8_t *seen = calloc(n, 1);
    uint64_t d = 0;
    for (uint32_t i = 0; i < t->n_tokens; i++)
        for (uint32_t l = 0; l < t->hdr.n_layers; l++)
            for (uint32_t k = 0; k < t->hdr.top_k; k++) {
                uint32_t x = l * t->hdr.n_experts + (uint32_t)mvm_trace_experts(t, i, l)[k];
                d += !seen[x];
                seen[x] = 1;
            }
    free(seen);
    return d;
}

static void check_breakdown(const mvm_sim_result *r)
{
    CHECK(fabs(r->t_attn + r->t_gpu + r->t_stall + r->t_cpu_wait - r->time) <= 1e-9 * r->time + 1e-12);
    CHECK(r->hits + r->misses == r->accesses);
}

static void test_closed_forms(void)
{
    const uint64_t eb = 9u << 20; /* 9 MiB: 5 pages of 2 MiB */
    mvm_trace *t = make_trace(50, 4, 16, 2, eb);
    if (!t)
        return;
    mvm_machine m = *mvm_machine_preset("h100");
    m.load_setup = 0;
    mvm_cost cost;
    mvm_cost_init(&cost, &m, eb, 2048, 768);
    mvm_sim_config c;
    mvm_sim_config_init(&c);
    uint64_t ppe = (eb + c.page_bytes - 1) / c.page_bytes, all = 4 * 16 * ppe;

    /* room for everything: one load per distinct expert, all else hits */
    c.budget_pages = all;
    mvm_sim_result r;
    CHECK_ST(mvm_sim_run(t, &cost, &c, &r), MVM_OK);
    uint64_t d = distinct_used(t);
    CHECK(r.loads == d && r.misses == d && r.hits == r.accesses - d);
    CHECK(r.accesses == 50 * 4 * 2); /* top-2 distinct experts per token and layer */
    CHECK(r.bytes_loaded == d * ppe * c.page_bytes);
    /* the serial copy engine: busy time = bytes / bandwidth */
    CHECK(fabs(r.copy_busy - (double)r.bytes_loaded / m.pcie_bw) < 1e-9);
    CHECK(r.peak_pages <= all);
    check_breakdown(&r);
    double full_time = r.time;

    /* no budget: every access misses, nothing moves, everything runs on the CPU */
    c.budget_pages = 0;
    CHECK_ST(mvm_sim_run(t, &cost, &c, &r), MVM_OK);
    CHECK(r.hits == 0 && r.misses == r.accesses && r.bytes_loaded == 0 && r.loads == 0);
    CHECK(r.cpu_runs == r.accesses);
    check_breakdown(&r);
    /* ... or zero-copy where the device reads host memory */
    c.zerocopy = 1;
    CHECK_ST(mvm_sim_run(t, &cost, &c, &r), MVM_OK);
    CHECK(r.zerocopy_runs == r.accesses && r.cpu_runs == 0);
    c.zerocopy = 0;

    /* LRU is a stack algorithm: hits never fall as the budget grows; and room for
     * everything is the fastest */
    uint64_t prev_hits = 0;
    for (uint64_t b = 2 * ppe; b <= all; b += 4 * ppe) {
        c.budget_pages = b;
        CHECK_ST(mvm_sim_run(t, &cost, &c, &r), MVM_OK);
        CHECK(r.hits >= prev_hits);
        CHECK(r.peak_pages <= b);
        CHECK(r.time >= full_time * (1 - 1e-9));
        check_breakdown(&r);
        prev_hits = r.hits;
    }
    mvm_trace_free(t);
}

/* Admission (policy/admit.h): DALI's greedy runs a miss on the CPU when that finishes
 * first and never asks for a load, so without admission the cache stays empty; with it the
 * misses enter the cache in the background, later steps hit, and the modelled time falls
 * (admissions use the copy engine only while it idles, off the steps' critical path). */
static void test_admission(void)
{
    mvm_cost cost;
    mvm_sim_config c;
    mvm_trace *t = h100_case(200, 4, 16, 2, &cost, &c);
    if (!t)
        return;
    CHECK(c.admit == 1); /* the default, as MOEVM_ADMIT's */
    c.policy[MVM_ROLE_ASSIGN] = "greedy";
    c.budget_pages = 4 * 16 * 5 / 2;
    mvm_sim_result with, without;
    CHECK_ST(mvm_sim_run(t, &cost, &c, &with), MVM_OK);
    c.admit = 0;
    CHECK_ST(mvm_sim_run(t, &cost, &c, &without), MVM_OK);
    CHECK(without.hits == 0 && without.admitted == 0 && without.cpu_runs == without.accesses);
    CHECK(with.admitted > 0 && with.hits > with.accesses / 4);
    CHECK(with.time < without.time);
    CHECK(with.peak_pages <= c.budget_pages);
    check_breakdown(&with);
    mvm_trace_free(t);
}

/* Decode routed on the device at a budget (device_routed, the engine's
 * MOEVM_BUDGET_ROUTING=in-place): no host_step in the attention column; each access either
 * a hit, read where its token's table found it landed, or read in place, none loaded on
 * demand (the first token finds nothing resident: all in place); admission fills the cache
 * between, so later tokens hit, and the budget holds. The same trace routed by the host
 * loads every miss on demand and pays host_step a layer. */
static void test_device_routed(void)
{
    mvm_cost cost;
    mvm_sim_config c;
    mvm_trace *t = host_case(&cost, &c);
    if (!t)
        return;
    const double steps = (double)t->n_tokens * t->hdr.n_layers;
    mvm_sim_result host, dev, first;
    CHECK_ST(mvm_sim_run(t, &cost, &c, &host), MVM_OK);
    c.device_routed = 1;
    CHECK_ST(mvm_sim_run(t, &cost, &c, &dev), MVM_OK);
    CHECK(host.zerocopy_runs == 0 && host.loads > 0);
    CHECK(fabs(host.t_attn - steps * (cost.m.attn_time + cost.m.host_step)) < 1e-9);
    CHECK(fabs(dev.t_attn - steps * cost.m.attn_time) < 1e-9);
    CHECK(dev.loads == 0 && dev.hits + dev.zerocopy_runs == dev.accesses);
    CHECK(dev.admitted > 0 && dev.hits > dev.accesses / 4);
    CHECK(dev.peak_pages <= c.budget_pages);
    check_breakdown(&dev);
    /* a layer's reads in place run beside its resident experts, in the same launch: the
     * experts' time is below the two's sum, and at least the longer of them */
    const double g1 = mvm_cost_gpu(&cost, 1), z1 = mvm_cost_zerocopy(&cost, 1);
    const double resident = (double)dev.hits * g1, in_place = (double)dev.zerocopy_runs * z1;
    CHECK(dev.t_gpu < resident + in_place - 1e-9);
    CHECK(dev.t_gpu >= fmax(resident, in_place) - 1e-9);
    t->n_tokens = 1; /* its first token alone: nothing resident yet */
    CHECK_ST(mvm_sim_run(t, &cost, &c, &first), MVM_OK);
    CHECK(first.hits == 0 && first.zerocopy_runs == first.accesses);
    mvm_trace_free(t);
}

/* A host-routed step's launches (host_queue, the last part of host_step) are queued after
 * its loads were asked: the copies and the device begin meanwhile, so every step whose
 * experts take longer than the queueing ends that much earlier; with the whole host step
 * queueing, no step is shorter than its attention and host step. Routed on the device,
 * host_queue means nothing. */
static void test_host_queue(void)
{
    mvm_cost cost;
    mvm_sim_config c;
    mvm_trace *t = host_case(&cost, &c);
    if (!t)
        return;
    const double steps = (double)t->n_tokens * t->hdr.n_layers;
    mvm_sim_result base, some, all;
    CHECK_ST(mvm_sim_run(t, &cost, &c, &base), MVM_OK);
    cost.m.host_queue = 1e-6; /* under every step's experts */
    CHECK(cost.m.host_queue < mvm_cost_gpu(&cost, 1));
    CHECK_ST(mvm_sim_run(t, &cost, &c, &some), MVM_OK);
    CHECK(fabs(base.time - some.time - steps * cost.m.host_queue) < 1e-9 * base.time);
    CHECK(some.hits == base.hits && some.loads == base.loads);
    check_breakdown(&some);
    cost.m.host_queue = cost.m.host_step;
    CHECK_ST(mvm_sim_run(t, &cost, &c, &all), MVM_OK);
    CHECK(all.time < some.time);
    CHECK(all.time >= steps * (cost.m.attn_time + cost.m.host_step) - 1e-9);
    check_breakdown(&all);
    c.device_routed = 1;
    CHECK_ST(mvm_sim_run(t, &cost, &c, &all), MVM_OK);
    cost.m.host_queue = 0;
    CHECK_ST(mvm_sim_run(t, &cost, &c, &some), MVM_OK);
    CHECK(all.time == some.time);
    mvm_trace_free(t);
}

/* Read-through (device_routed 2, MOEVM_BUDGET_ROUTING=read-through): routed on the device,
 * each miss read in place and stored into a free slab of a pool the evict module's victims
 * refill between tokens, as many as the last token missed (top_k for the first, a quarter of
 * the budget at most). No load, no admission; the budget holds with the pool counted. */
static void test_read_through(void)
{
    const uint32_t n_tok = 100, L = 4, E = 16, K = 2; /* half_case's */
    mvm_cost cost;
    mvm_sim_config c;
    mvm_trace *t = half_case(&cost, &c);
    if (!t)
        return;
    mvm_sim_result dev, thr, r;
    c.device_routed = 1;
    CHECK_ST(mvm_sim_run(t, &cost, &c, &dev), MVM_OK);
    c.device_routed = 2;
    CHECK_ST(mvm_sim_run(t, &cost, &c, &thr), MVM_OK);
    CHECK(thr.loads == 0 && thr.admitted == 0 && thr.prefetches == 0);
    CHECK(thr.hits + thr.zerocopy_runs == thr.accesses && thr.hits > thr.accesses / 4);
    CHECK(thr.read_through > 0 && thr.read_through <= thr.misses);
    CHECK(thr.peak_pages <= c.budget_pages && thr.peak_pages > c.budget_pages - 5);
    CHECK(fabs(thr.t_attn - dev.t_attn) < 1e-9);
    check_breakdown(&thr);
    /* the host's time between tokens (host_token), once a token before its first layer */
    mvm_cost between = cost;
    between.m.host_token = 150e-6;
    CHECK_ST(mvm_sim_run(t, &between, &c, &r), MVM_OK);
    CHECK(fabs(r.t_attn - thr.t_attn - n_tok * 150e-6) < 1e-9 && r.time > thr.time);
    check_breakdown(&r);
    /* a budget of three experts has no quarter to give the pool: nothing ever enters */
    c.budget_pages = 3 * 5;
    CHECK_ST(mvm_sim_run(t, &cost, &c, &r), MVM_OK);
    CHECK(r.read_through == 0 && r.hits == 0);
    /* The same 8 experts every token, 16 fit: the first token's pool is top_k (2 of its 8
     * misses enter), the second's the 8 it missed, cut to a quarter of the 16 (4 of 6), the
     * third's 4 (the last 2); then every access hits, nothing evicted: 16 misses. */
    for (uint32_t i = 1; i < n_tok; i++)
        for (uint32_t l = 0; l < L; l++) {
            memcpy(mvm_trace_experts(t, i, l), mvm_trace_experts(t, 0, l), K * sizeof(int32_t));
            memcpy(mvm_trace_scores(t, i, l), mvm_trace_scores(t, 0, l), E * sizeof(float));
        }
    c.budget_pages = 16 * 5;
    CHECK_ST(mvm_sim_run(t, &cost, &c, &r), MVM_OK);
    CHECK(r.accesses == n_tok * L * K && r.misses == 16 && r.read_through == 8);
    t->n_tokens = 1;
    CHECK_ST(mvm_sim_run(t, &cost, &c, &r), MVM_OK);
    CHECK(r.hits == 0 && r.read_through == K);
    mvm_trace_free(t);
}

/* Read-ahead (device_routed 3, a design modelled before the engine has it): without a
 * predict module it is read-through; with the oracle the next layer's experts are copied
 * into pool slabs from each layer's attention end, so more accesses hit, nothing is
 * loaded, the budget holds; where a layer's attention is long enough to hide the copies,
 * a token takes less time than read-through's, whose misses are read while their layer
 * waits. */
static void test_read_ahead(void)
{
    mvm_cost cost;
    mvm_sim_config c;
    mvm_trace *t = half_case(&cost, &c);
    if (!t)
        return;
    mvm_sim_result thr, r;
    c.device_routed = 2;
    CHECK_ST(mvm_sim_run(t, &cost, &c, &thr), MVM_OK);
    c.device_routed = 3;
    CHECK_ST(mvm_sim_run(t, &cost, &c, &r), MVM_OK);
    CHECK(r.hits == thr.hits && r.time == thr.time && r.prefetches == 0);
    c.policy[MVM_ROLE_PREDICT] = "oracle";
    CHECK_ST(mvm_sim_run(t, &cost, &c, &r), MVM_OK);
    CHECK(r.prefetches > 0 && r.prefetch_hits > 0 && r.hits > thr.hits && r.loads == 0);
    CHECK(r.peak_pages <= c.budget_pages);
    check_breakdown(&r);
    mvm_cost slow = cost; /* 2 ms of attention a layer: a copy (270 us) hides under it */
    slow.m.attn_time = 2e-3;
    CHECK_ST(mvm_sim_run(t, &slow, &c, &r), MVM_OK);
    c.device_routed = 2;
    c.policy[MVM_ROLE_PREDICT] = NULL;
    CHECK_ST(mvm_sim_run(t, &slow, &c, &thr), MVM_OK);
    CHECK(r.time < thr.time);
    check_breakdown(&r);
    mvm_trace_free(t);
}

/* --device-cpu (the engine's MOEVM_DEVICE_CPU): with a routing on the device a miss runs on
 * the CPU where the CPU ends it before its read in place would. A CPU slower than the bus
 * takes none: the run is read-through's, nothing admitted; one faster takes some, in less
 * time; what it runs is not read through, so fewer misses enter that way, and admission
 * offers it to the cache instead. */
static void test_device_cpu(void)
{
    mvm_cost cost;
    mvm_sim_config c;
    mvm_trace *t = half_case(&cost, &c);
    if (!t)
        return;
    c.device_routed = 2;
    mvm_sim_result thr, r;
    CHECK_ST(mvm_sim_run(t, &cost, &c, &thr), MVM_OK);
    c.device_cpu = 1;
    mvm_machine m = cost.m;
    mvm_cost other;
    m.cpu_mem_bw = cost.m.zerocopy_bw / 4;
    mvm_cost_init(&other, &m, cost.expert_bytes, 2048, 768);
    CHECK_ST(mvm_sim_run(t, &other, &c, &r), MVM_OK);
    CHECK(r.cpu_runs == 0 && r.hits == thr.hits && r.time == thr.time && r.admitted == 0);
    m.cpu_mem_bw = cost.m.zerocopy_bw * 4;
    mvm_cost_init(&other, &m, cost.expert_bytes, 2048, 768);
    CHECK_ST(mvm_sim_run(t, &other, &c, &r), MVM_OK);
    CHECK(r.cpu_runs > 0 && r.time < thr.time && r.read_through < thr.read_through);
    CHECK(r.admitted > 0 && thr.admitted == 0);
    CHECK(r.hits + r.zerocopy_runs + r.cpu_runs == r.accesses);
    check_breakdown(&r);
    mvm_trace_free(t);
}

static void test_policies_run(void)
{
    mvm_trace *t = make_trace(40, 3, 32, 4, 3u << 20);
    if (!t)
        return;
    mvm_cost cost;
    mvm_cost_init(&cost, mvm_machine_preset("rtx3090"), 3u << 20, 2048, 768);
    static const char *const evicts[] = {"lru", "lfu", "score", "workload", "lcp", "adaptive"};
    static const char *const assigns[] = {"gpu", "twoptr", "greedy", "presched"};
    for (size_t i = 0; i < sizeof evicts / sizeof *evicts; i++)
        for (size_t j = 0; j < sizeof assigns / sizeof *assigns; j++) {
            mvm_sim_config c;
            mvm_sim_config_init(&c);
            c.policy[MVM_ROLE_EVICT] = evicts[i];
            c.policy[MVM_ROLE_ASSIGN] = assigns[j];
            c.budget_pages = 3 * 32 * 2 / 4;
            mvm_sim_result r;
            CHECK_ST(mvm_sim_run(t, &cost, &c, &r), MVM_OK);
            CHECK(r.peak_pages <= c.budget_pages && r.accesses == 40 * 3 * 4);
            check_breakdown(&r);
        }
    /* "auto" is what the engine runs by default: adaptive, to the last hit */
    mvm_sim_result ra, rb;
    mvm_sim_config c;
    mvm_sim_config_init(&c);
    c.budget_pages = 3 * 32 * 2 / 4;
    c.policy[MVM_ROLE_EVICT] = "auto";
    CHECK_ST(mvm_sim_run(t, &cost, &c, &ra), MVM_OK);
    c.policy[MVM_ROLE_EVICT] = "adaptive";
    CHECK_ST(mvm_sim_run(t, &cost, &c, &rb), MVM_OK);
    CHECK(ra.hits == rb.hits && ra.time == rb.time && ra.hits > 0);
    c.policy[MVM_ROLE_EVICT] = "clairvoyant";
    mvm_sim_result r;
    CHECK_ST(mvm_sim_run(t, &cost, &c, &r), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "no evict policy 'clairvoyant'") && strstr(mvm_last_error(), "lru"));
    mvm_trace_free(t);
}

/* The oracles read the trace's future: belady hits at least as often as every online evict
 * module (demand loads of whole experts, nothing else changing the accesses), and more than
 * LRU; the oracle predictor's prefetches are all used (beside belady, which keeps what the
 * next step needs; LRU evicts a prefetched expert it has not seen used), and they shorten the
 * stalls, beyond belady's bound on eviction alone. */
static void test_oracles(void)
{
    mvm_trace *t = make_trace(60, 4, 16, 2, 2u << 20);
    if (!t)
        return;
    mvm_cost cost;
    mvm_cost_init(&cost, mvm_machine_preset("rtx3090"), 2u << 20, 2048, 768);
    mvm_sim_config c;
    mvm_sim_config_init(&c);
    c.budget_pages = 4 * 16 / 4;
    mvm_sim_result bound, r;
    c.policy[MVM_ROLE_EVICT] = "belady";
    CHECK_ST(mvm_sim_run(t, &cost, &c, &bound), MVM_OK);
    static const char *const online[] = {"lru", "lfu", "score", "workload", "lcp", "reuse",
                                         "adaptive"};
    for (size_t i = 0; i < sizeof online / sizeof *online; i++) {
        c.policy[MVM_ROLE_EVICT] = online[i];
        CHECK_ST(mvm_sim_run(t, &cost, &c, &r), MVM_OK);
        CHECK(r.accesses == bound.accesses && r.hits <= bound.hits);
        if (i == 0)
            CHECK(r.hits < bound.hits);
    }
    /* with the bound's eviction, which keeps what the next step needs: every prefetch is
     * used (admissions, which also count as prefetches, off); with LRU, stalls shorten */
    c.policy[MVM_ROLE_PREDICT] = "oracle";
    c.admit = 0;
    CHECK_ST(mvm_sim_run(t, &cost, &c, &r), MVM_OK);
    CHECK(r.prefetches > 0 && r.prefetch_used == r.prefetches && r.time < bound.time);
    check_breakdown(&r);
    mvm_sim_result alone;
    c.policy[MVM_ROLE_EVICT] = "lru";
    c.policy[MVM_ROLE_PREDICT] = NULL;
    CHECK_ST(mvm_sim_run(t, &cost, &c, &alone), MVM_OK);
    c.policy[MVM_ROLE_PREDICT] = "oracle";
    CHECK_ST(mvm_sim_run(t, &cost, &c, &r), MVM_OK);
    CHECK(r.time < alone.time);
    check_breakdown(&r);
    mvm_trace_free(t);
}

/* One layer, expert 0 every token, 4 pages an expert. config fixedpoint with a τ beyond
 * the trace keeps its start: θ = 0.5, a layer budget of 4 pages (8 of capacity less one
 * expert of load buffer). Token 0 loads all 4 pages (the configuration comes after a
 * token); token 1 hits, then the expert is trimmed to its 2-page top; from token 2 on each
 * token loads the 2-page bottom while the GPU computes the top half, then the bottom half. */
static void test_split_overlap(void)
{
    const uint32_t n_tok = 12;
    const uint64_t eb = 8u << 20;
    mvm_trace_header h = {.model = "test", .arch = "test", .n_layers = 1, .n_experts = 2,
                          .top_k = 1, .expert_bytes = eb, .n_embd = 2048, .n_ff_exp = 768,
                          .weights_renormalised = 1};
    mvm_trace *t;
    CHECK_ST(mvm_trace_new(&h, n_tok, 0, &t), MVM_OK);
    for (uint32_t i = 0; i < n_tok; i++) {
        mvm_trace_scores(t, i, 0)[0] = 0.75f;
        mvm_trace_scores(t, i, 0)[1] = 0.25f;
        mvm_trace_experts(t, i, 0)[0] = 0;
        mvm_trace_weights(t, i, 0)[0] = 1.0f;
    }
    /* two regimes: the top's compute hides the bottom's copy, or the copy dominates */
    for (int slow_gpu = 0; slow_gpu < 2; slow_gpu++) {
        mvm_machine m = *mvm_machine_preset("h100");
        if (slow_gpu)
            m.gpu_mem_bw = m.pcie_bw / 2; /* g ≈ 2 × a whole expert's load */
        mvm_cost cost;
        mvm_cost_init(&cost, &m, eb, 2048, 768);
        mvm_sim_config c;
        mvm_sim_config_init(&c);
        c.policy[MVM_ROLE_CONFIG] = "fixedpoint";
        c.params[MVM_ROLE_CONFIG] = "tau=1000000";
        c.policy[MVM_ROLE_EVICT] = "lcp";
        c.budget_pages = 8;
        mvm_sim_result r;
        CHECK_ST(mvm_sim_run(t, &cost, &c, &r), MVM_OK);
        double g = mvm_cost_gpu(&cost, 1), half = mvm_cost_load_bytes(&cost, eb / 2);
        double first = m.attn_time + mvm_cost_load_bytes(&cost, eb) + g;
        double second = m.attn_time + g;
        double steady = m.attn_time + fmax(0.5 * g, half) + 0.5 * g;
        CHECK(fabs(r.time - (first + second + (n_tok - 2) * steady)) < 1e-9 * r.time);
        CHECK(r.hits == 1 && r.partial_hits == n_tok - 2 && r.misses == n_tok - 1);
        CHECK(r.bytes_loaded == eb + (uint64_t)(n_tok - 2) * (eb / 2));
        check_breakdown(&r);
        /* the GPU stalls exactly when the copy outlasts the top's compute */
        CHECK(fabs(r.t_stall - (n_tok - 2) * fmax(0, half - 0.5 * g) -
                   mvm_cost_load_bytes(&cost, eb)) < 1e-9 * r.time);
    }
    mvm_trace_free(t);
}

/* MoEpic's window: n_tok tokens over two layers of 8 experts of 4 MiB, top-1, whose gate
 * predictor ranks layer 1's experts 0, 1, ... 7 (its router on every token's hidden state:
 * logits 8 - e); layer 0 routes to expert 0, layer 1 token i to expert i. Budget: 32 pages,
 * every expert; no admissions. */
#define WIN_E 8
#define WIN_D 4
struct window_case {
    mvm_trace *t;
    float w0[WIN_E * WIN_D], w1[WIN_E * WIN_D];
    const float *routers[2];
    mvm_router rt;
    mvm_cost cost;
    mvm_sim_config c;
};

static int window_case_init(struct window_case *w, uint32_t n_tok)
{
    const uint64_t eb = 4u << 20;
    mvm_trace_header h = {.model = "test", .arch = "test", .n_layers = 2, .n_experts = WIN_E,
                          .top_k = 1, .expert_bytes = eb, .n_embd = WIN_D, .n_ff_exp = 768,
                          .weights_renormalised = 1};
    memset(w, 0, sizeof *w);
    CHECK_ST(mvm_trace_new(&h, n_tok, 1, &w->t), MVM_OK);
    if (!w->t)
        return 0;
    for (uint32_t i = 0; i < n_tok; i++)
        for (uint32_t l = 0; l < 2; l++) {
            for (uint32_t e = 0; e < WIN_E; e++)
                mvm_trace_scores(w->t, i, l)[e] = 1.0f / WIN_E;
            mvm_trace_experts(w->t, i, l)[0] = l == 1 ? (int32_t)i : 0;
            mvm_trace_weights(w->t, i, l)[0] = 1.0f;
            mvm_trace_hidden(w->t, i, l)[0] = 1.0f;
        }
    for (uint32_t e = 0; e < WIN_E; e++)
        w->w1[e * WIN_D] = (float)(WIN_E - e);
    w->routers[0] = w->w0;
    w->routers[1] = w->w1;
    w->rt = (mvm_router){.weights = w->routers};
    mvm_cost_init(&w->cost, mvm_machine_preset("h100"), eb, 2048, 768);
    mvm_sim_config_init(&w->c);
    w->c.budget_pages = 2 * WIN_E * 2;
    w->c.router = &w->rt;
    w->c.policy[MVM_ROLE_PREDICT] = "gate";
    w->c.admit = 0;
    return 1;
}

/* One token. Layer 0 loads its expert on demand; the window queues layer 1's experts, most
 * likely first, while a buffer of 6 experts (prefetch_depth) holds them, behind that load;
 * each starts when the copy engine is free, back to back, until layer 1 routes at
 * A + d + g + A (attention A, a load d, expert compute g): ceil((A + g) / d) of them start,
 * the rest are dropped. The routed expert, the most likely, hits. top-k mode prefetches the
 * top_k most likely: the one routed; given a depth of 6, its copies are cut as the
 * window's. With the default buffer, top_k experts, the window takes one. */
static void test_prefetch_window(void)
{
    struct window_case w;
    if (!window_case_init(&w, 1))
        return;
    const uint64_t eb = w.t->hdr.expert_bytes;
    double d = mvm_cost_load_bytes(&w.cost, eb), g = mvm_cost_gpu(&w.cost, 1);
    w.cost.m.attn_time = 3.5 * d - g; /* A + g = 3.5 loads: 4 start */
    CHECK(w.cost.m.attn_time > 0);
    mvm_sim_result r;
    for (int window = 0; window < 2; window++) {
        w.c.prefetch_window = window;
        w.c.prefetch_depth = window ? 6 : 0;
        CHECK_ST(mvm_sim_run(w.t, &w.cost, &w.c, &r), MVM_OK);
        uint64_t want = window ? 4 : 1;
        CHECK(r.prefetches == want && r.bytes_prefetched == want * eb);
        CHECK(r.prefetches_cut == (window ? 2 : 0));
        CHECK(r.loads == 1 && r.hits == 1 && r.prefetch_used == 1 && r.prefetch_hits == 1);
        check_breakdown(&r);
    }
    /* top-k with a depth of 6 (six most likely, evicting for them): the same 4 start, and
     * the 2 not started when layer 1 routes, which it does not use, are dropped rather than
     * copied after it (cut_prefetches) */
    w.c.prefetch_window = 0;
    CHECK_ST(mvm_sim_run(w.t, &w.cost, &w.c, &r), MVM_OK);
    CHECK(r.prefetches == 4 && r.prefetches_cut == 2 && r.prefetch_used == 1 && r.hits == 1);
    w.c.prefetch_window = 1;
    /* the host's share of a step (host_step: routing, policies, launches) follows the
     * attention and keeps the device waiting, not the copy engine: attention of 1.5 loads
     * and a host step of 2 start the same 4, and the attention column holds both */
    const double A = w.cost.m.attn_time;
    w.cost.m.attn_time = 1.5 * d - g;
    w.cost.m.host_step = 2 * d;
    CHECK_ST(mvm_sim_run(w.t, &w.cost, &w.c, &r), MVM_OK);
    CHECK(r.prefetches == 4 && r.prefetches_cut == 2 && r.hits == 1);
    CHECK(fabs(r.t_attn - 2 * (w.cost.m.attn_time + w.cost.m.host_step)) < 1e-12);
    check_breakdown(&r);
    w.cost.m.attn_time = A;
    w.cost.m.host_step = 0;
    /* a window shorter than one load: only the first starts */
    w.cost.m.attn_time = 0.5 * d - g;
    CHECK(w.cost.m.attn_time > 0);
    CHECK_ST(mvm_sim_run(w.t, &w.cost, &w.c, &r), MVM_OK);
    CHECK(r.prefetches == 1 && r.prefetch_used == 1);
    /* a long window, the default buffer: one expert's pages */
    w.cost.m.attn_time = 10 * d;
    w.c.prefetch_depth = 0;
    CHECK_ST(mvm_sim_run(w.t, &w.cost, &w.c, &r), MVM_OK);
    CHECK(r.prefetches == 1);
    w.c.prefetch_depth = 6; /* and a buffer of 6: 6 start */
    CHECK_ST(mvm_sim_run(w.t, &w.cost, &w.c, &r), MVM_OK);
    CHECK(r.prefetches == 6 && r.hits == 1);
    mvm_trace_free(w.t);
}

/* The window's buffer is not cache. Two tokens (layer 1 routes to its most likely expert,
 * then to its second), a long window, a buffer of 6 experts: token 0 copies layer 1's
 * experts 0-5 and uses 0; the five unused leave when the layer ends, so token 1 copies 1-6
 * again (0 stays: used). Kept as cache, token 1 would copy 6 and 7 only. With no free pages
 * (a budget of the one expert layer 0 needs) the window copies nothing, where top-k evicts
 * for its copy. */
static void test_prefetch_window_buffer(void)
{
    struct window_case w;
    if (!window_case_init(&w, 2))
        return;
    w.cost.m.attn_time = 20 * mvm_cost_load_bytes(&w.cost, w.t->hdr.expert_bytes);
    w.c.prefetch_window = 1;
    w.c.prefetch_depth = 6;
    mvm_sim_result r;
    CHECK_ST(mvm_sim_run(w.t, &w.cost, &w.c, &r), MVM_OK);
    CHECK(r.prefetches == 12 && r.hits == 3 && r.loads == 1);
    w.c.budget_pages = 2;
    CHECK_ST(mvm_sim_run(w.t, &w.cost, &w.c, &r), MVM_OK);
    CHECK(r.prefetches == 0);
    w.c.prefetch_window = 0;
    w.c.prefetch_depth = 0;
    CHECK_ST(mvm_sim_run(w.t, &w.cost, &w.c, &r), MVM_OK);
    CHECK(r.prefetches > 0);
    mvm_trace_free(w.t);
}

/* PreScope's hot table: two layers of 8 one-page experts, top-1; every even token routes
 * expert 0 in both layers, every odd one the next of experts 1..7 in turn. 3 pages: with
 * the default buffer (top_k = 1 expert) a table of 2, L0e0 and L1e0 by the profile. LRU
 * evicts expert 0 between its uses (four accesses between them, three pages) and never
 * hits. The table, filled at init, hits every even access and only those: the odd ones
 * cycle through the one page left. From the run's own first 4 tokens (no offline profile)
 * it is held from token 5 on. */
static void test_hot_table(void)
{
    const uint32_t n = 60;
    mvm_trace *t = make_trace(n, 2, 8, 1, 2u << 20);
    if (!t)
        return;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t l = 0; l < 2; l++)
            mvm_trace_experts(t, i, l)[0] = i % 2 ? (int32_t)(1 + (i / 2) % 7) : 0;
    mvm_cost cost;
    mvm_cost_init(&cost, mvm_machine_preset("rtx3090"), 2u << 20, 2048, 768);
    mvm_sim_config c;
    mvm_sim_config_init(&c);
    c.budget_pages = 3;
    mvm_sim_result lru, hot, online;
    CHECK_ST(mvm_sim_run(t, &cost, &c, &lru), MVM_OK);
    CHECK(lru.hits == 0);
    uint64_t counts[16] = {0};
    counts[0] = counts[8] = 30;
    counts[3] = 5; /* less than the expert 0s: not in the table */
    const mvm_pprofile prof = {.n_layers = 2, .n_experts = 8, .n_tokens = 60, .counts = counts};
    c.policy[MVM_ROLE_CONFIG] = "hot";
    c.profile = &prof;
    CHECK_ST(mvm_sim_run(t, &cost, &c, &hot), MVM_OK);
    CHECK(hot.hits == n && hot.misses == n); /* the 30 even tokens x 2 layers */
    CHECK(hot.loads == n && hot.prefetches == 0); /* the table's copies were at init */
    CHECK(hot.peak_pages <= 3);
    check_breakdown(&hot);
    CHECK(hot.time < lru.time);
    c.profile = NULL;
    c.params[MVM_ROLE_CONFIG] = "profile=4";
    CHECK_ST(mvm_sim_run(t, &cost, &c, &online), MVM_OK);
    CHECK(online.hits >= 2 * 27 && online.hits <= 2 * 30); /* tokens 6, 8, ..., 58 at least */
    CHECK(online.peak_pages <= 3);
    /* A profile of another shape: the module says so. */
    const mvm_pprofile other = {.n_layers = 3, .n_experts = 8, .n_tokens = 1, .counts = counts};
    c.profile = &other;
    CHECK_ST(mvm_sim_run(t, &cost, &c, &online), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "config hot: the profile has 3 layers") != NULL);
    mvm_trace_free(t);
}

int main(void)
{
    RUN(test_hot_table);
    RUN(test_prefetch_window);
    RUN(test_prefetch_window_buffer);
    RUN(test_closed_forms);
    RUN(test_policies_run);
    RUN(test_split_overlap);
    RUN(test_admission);
    RUN(test_device_routed);
    RUN(test_host_queue);
    RUN(test_read_through);
    RUN(test_read_ahead);
    RUN(test_device_cpu);
    RUN(test_oracles);
    TEST_END();
}
