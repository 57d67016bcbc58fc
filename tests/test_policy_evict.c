/*
 * The evict modules (policy/evict_*.c). Hand-worked cases from the papers' formulas, each
 * with its arithmetic in the comment: one access sequence on which LRU, LFU, SMoE's score
 * (Eq. 3, with its shield) and MoEpic's LCP (Eq. 4) must each pick a different victim;
 * LFU's ageing and LCP's halving every 64 idle tokens; DALI's window swap (Algorithm 2) on
 * the Fig. 11 setting; "reuse" on a loop larger than the cache (where LRU misses every
 * time), on a hot expert among a cold stream, and on a dead expert that must drift out. Then every module runs long random sequences through a tiny cache
 * simulator that checks the contract (capacity never exceeded, only candidates chosen,
 * victim pure, wanted experts belong to the layer and are missing) and, for the modules
 * with a closed-form key, that the victim minimises the key recomputed here from the
 * whole history. The offline bound, belady, against the fewest misses found by trying every
 * choice. Every online module fed steps that know only the ids (no scores, no weights, as the
 * demo and the interposer give) chooses as when each selected expert weighs 1/K. Last, the
 * driver the front ends make room with (policy/evict_driver.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "policy/evict_driver.h"
#include "policy/modules.h"

#define MAXE 128
#define MAXK 4
#define MAXT 16

static mvm_cost no_cost; /* the evict modules take no costs */

/* future: the routing to come, for belady (NULL for the online modules). */
static void *make_seeing(const mvm_evict_ops *ops, const mvm_pshape *sh, const char *params,
                         const mvm_pfuture *future)
{
    mvm_pinit in = {.shape = sh, .cost = &no_cost, .params = {params}, .future = future};
    void *self = NULL;
    CHECK_ST(ops->create(&in, &self), MVM_OK);
    return self;
}

static void *make(const mvm_evict_ops *ops, const mvm_pshape *sh, const char *params)
{
    return make_seeing(ops, sh, params, NULL);
}

/* A layer step of n tokens with top_k experts each; scores may be NULL. The weights are
 * the selected experts' scores, counts are filled as the caller must. */
typedef struct step_buf {
    float scores[MAXT * MAXE], weights[MAXT * MAXK];
    int32_t experts[MAXT * MAXK];
    uint32_t counts[MAXE];
    mvm_pstep st;
} step_buf;

static const mvm_pstep *fill(step_buf *b, const mvm_pshape *sh, uint32_t layer, uint32_t n,
                             const float *scores, const int32_t *experts)
{
    const uint32_t E = sh->n_experts, K = sh->top_k;
    memset(b->counts, 0, sizeof b->counts);
    if (scores)
        memcpy(b->scores, scores, sizeof(float) * n * E);
    memcpy(b->experts, experts, sizeof(int32_t) * n * K);
    for (uint32_t t = 0; t < n; t++)
        for (uint32_t j = 0; j < K; j++) {
            int32_t e = experts[t * K + j];
            b->counts[e]++;
            b->weights[t * K + j] = scores ? scores[t * E + e] : 1.0f / K;
        }
    b->st = (mvm_pstep){.layer = layer, .n_tok = n, .scores = scores ? b->scores : NULL,
                        .experts = b->experts, .weights = b->weights, .counts = b->counts};
    return &b->st;
}

/* ---- one sequence, four different victims ----------------------------------------------
 * Layer 0 has experts A B C D (ids 0..3), top-1 routing. Per-token router probabilities:
 *   step 0 (token 0): 12 tokens, all pick B             (A .1, B .7, C .05, D .15)
 *   step 1 (token 1): A A C     A-token (A .6, B .2, C .05, D .15), C-token (.3 .2 .4 .1)
 *   step 2 (token 2): C C D     C-token (A .2, B .1, C .4, D .3),   D-token (.3 .1 .1 .5)
 * then a step of layer 1 (token 2), which must not disturb layer 0's ranking.
 *   LRU: last used A@1, B@0, C@2, D@2                         -> B
 *   LFU: token counts A 2, B 12, C 3, D 1                     -> D
 *   LCP (ω=1, ρ=.25, now 2): A 2·.25¹=.5, B 12·.25²=.75, C 3, D 1 -> A
 *        (defaults ω=128: the recency factor is ~1, so LFU's  -> D)
 *   score: batch means  step 0 (.1 .7 .05 .15), step 1 (.5 .2 .1667 .1333),
 *          step 2 (.2333 .1 .3 .3667)
 *        n=3: A .2778, B .3333, C .1722, D .2167              -> C
 *        n=2: A .3667, B .15,   C .2333, D .25                -> B
 *        n=3 with C and D busy (being computed, the shield) although candidates -> A
 *        without router scores (weights stand in, others 0): A .1333, B .2333, C .1333,
 *        D .0556                                              -> D
 *   reuse (clock 4 after the layer-1 step): only C was reused (interval 1, age 1: overdue,
 *        wait 1); A, B, D never were, so one of them goes, the most recent: D@3 -> D
 */
static const mvm_pshape hand_shape = {.n_layers = 2, .n_experts = 4, .top_k = 1,
                                      .pages_per_expert = 1};

static void hand_steps(const mvm_evict_ops *ops, void *self, mvm_pview *v, int no_scores)
{
    static const float s0[4] = {.1f, .7f, .05f, .15f};
    static const float a1[4] = {.6f, .2f, .05f, .15f}, c1[4] = {.3f, .2f, .4f, .1f};
    static const float c2[4] = {.2f, .1f, .4f, .3f}, d2[4] = {.3f, .1f, .1f, .5f};
    float sc[12 * 4];
    int32_t ex[12];
    step_buf b;
    for (int t = 0; t < 12; t++) {
        memcpy(sc + 4 * t, s0, sizeof s0);
        ex[t] = 1;
    }
    v->tokens = 0;
    ops->observe(self, v, fill(&b, &hand_shape, 0, 12, no_scores ? NULL : sc, ex));
    memcpy(sc, a1, sizeof a1);
    memcpy(sc + 4, a1, sizeof a1);
    memcpy(sc + 8, c1, sizeof c1);
    ex[0] = 0, ex[1] = 0, ex[2] = 2;
    v->tokens = 1;
    ops->observe(self, v, fill(&b, &hand_shape, 0, 3, no_scores ? NULL : sc, ex));
    memcpy(sc, c2, sizeof c2);
    memcpy(sc + 4, c2, sizeof c2);
    memcpy(sc + 8, d2, sizeof d2);
    ex[0] = 2, ex[1] = 2, ex[2] = 3;
    v->tokens = 2;
    ops->observe(self, v, fill(&b, &hand_shape, 0, 3, no_scores ? NULL : sc, ex));
    ex[0] = 0;
    ops->observe(self, v, fill(&b, &hand_shape, 1, 1, no_scores ? NULL : sc, ex));
}

static uint32_t hand_victim(const mvm_evict_ops *ops, const char *params, int no_scores,
                            int shield)
{
    static const uint32_t resident[8] = {1, 1, 1, 1, 1, 0, 0, 0};
    static const uint32_t cand[4] = {0, 1, 2, 3};
    const uint8_t busy[8] = {0, 0, (uint8_t)shield, (uint8_t)shield};
    mvm_pview v = {.shape = &hand_shape, .resident = resident, .busy = busy,
                   .capacity_pages = 5, .used_pages = 5};
    void *self = make(ops, &hand_shape, params);
    if (!self)
        return UINT32_MAX;
    hand_steps(ops, self, &v, no_scores);
    uint32_t i = ops->victim(self, &v, 0, cand, 4);
    CHECK(ops->victim(self, &v, 0, cand, 4) == i); /* asking again changes nothing */
    CHECK(ops->victim(self, &v, 0, cand + 2, 1) == 0);
    ops->destroy(self);
    return i < 4 ? cand[i] : UINT32_MAX;
}

static void test_four_victims(void)
{
    enum { A, B, C, D };
    CHECK(hand_victim(&mvm_evict_lru, "", 0, 0) == B);
    CHECK(hand_victim(&mvm_evict_lfu, "", 0, 0) == D);
    CHECK(hand_victim(&mvm_evict_lcp, "omega=1,rho=0.25", 0, 0) == A);
    CHECK(hand_victim(&mvm_evict_lcp, "", 0, 0) == D);
    CHECK(hand_victim(&mvm_evict_score, "n=3", 0, 0) == C);
    CHECK(hand_victim(&mvm_evict_score, "", 0, 0) == C); /* n=3 is the default */
    CHECK(hand_victim(&mvm_evict_score, "n=2", 0, 0) == B);
    CHECK(hand_victim(&mvm_evict_score, "n=3", 0, 1) == A); /* the shield */
    CHECK(hand_victim(&mvm_evict_score, "n=3", 1, 0) == D); /* no router scores */
    CHECK(hand_victim(&mvm_evict_reuse, "", 0, 0) == D);
}

/* Ties go to the first candidate: layer 1's experts 1 and 2 were never used. */
static void test_ties(void)
{
    static const mvm_evict_ops *const ops[] = {&mvm_evict_lru, &mvm_evict_lfu, &mvm_evict_lcp,
                                               &mvm_evict_reuse};
    static const uint32_t resident[8] = {1, 1, 1, 1, 1, 1, 1, 0}, cand[2][2] = {{5, 6}, {6, 5}};
    static const uint8_t busy[8] = {0};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        mvm_pview v = {.shape = &hand_shape, .resident = resident, .busy = busy};
        void *self = make(ops[i], &hand_shape, "");
        if (!self)
            continue;
        hand_steps(ops[i], self, &v, 0);
        CHECK(ops[i]->victim(self, &v, 1, cand[0], 2) == 0);
        CHECK(ops[i]->victim(self, &v, 1, cand[1], 2) == 0);
        ops[i]->destroy(self);
    }
}

/* ---- LFU ages; LCP halves every 64 idle tokens -------------------------------------------
 * LFU, two experts: a burst of 10 tokens on e0, then e1 with 1, 3, 3 tokens. With period 2
 * the counts are halved after steps 2 and 4: (10,1)->(5,0), then (5,6)->(2,3): the burst
 * has faded and e0 goes. Without ageing (period 1000) the counts are (10,7): e1 goes. */
static uint32_t lfu_after_burst(const char *params)
{
    static const mvm_pshape sh = {.n_layers = 1, .n_experts = 2, .top_k = 1,
                                  .pages_per_expert = 1};
    static const uint32_t resident[2] = {1, 1}, cand[2] = {0, 1};
    static const uint8_t busy[2] = {0};
    mvm_pview v = {.shape = &sh, .resident = resident, .busy = busy};
    static const uint32_t who[4] = {0, 1, 1, 1}, tokens[4] = {10, 1, 3, 3};
    void *self = make(&mvm_evict_lfu, &sh, params);
    if (!self)
        return UINT32_MAX;
    step_buf b;
    for (int s = 0; s < 4; s++) {
        int32_t ex[MAXT];
        for (uint32_t t = 0; t < tokens[s]; t++)
            ex[t] = (int32_t)who[s];
        v.tokens = (uint64_t)s;
        mvm_evict_lfu.observe(self, &v, fill(&b, &sh, 0, tokens[s], NULL, ex));
    }
    uint32_t i = mvm_evict_lfu.victim(self, &v, 0, cand, 2);
    mvm_evict_lfu.destroy(self);
    return i;
}

/* LCP with the defaults (ω=128, ρ=.25): e0 used by 3 tokens at token 0, e1 by 1 token at
 * token d; asked at token d. P0 = 3·.25^(d/128), P1 = 1: e0 drops below e1 once
 * d > 128·ln 3/ln 4 = 101.4. So d = 101 evicts e1 (P0 = 1.005), d = 102 evicts e0 (.994). */
static uint32_t lcp_after_idle(uint64_t d)
{
    static const mvm_pshape sh = {.n_layers = 1, .n_experts = 2, .top_k = 1,
                                  .pages_per_expert = 1};
    static const uint32_t resident[2] = {1, 1}, cand[2] = {0, 1};
    static const uint8_t busy[2] = {0};
    mvm_pview v = {.shape = &sh, .resident = resident, .busy = busy};
    void *self = make(&mvm_evict_lcp, &sh, "");
    if (!self)
        return UINT32_MAX;
    step_buf b;
    int32_t e0[3] = {0, 0, 0}, e1[1] = {1};
    mvm_evict_lcp.observe(self, &v, fill(&b, &sh, 0, 3, NULL, e0));
    v.tokens = d;
    mvm_evict_lcp.observe(self, &v, fill(&b, &sh, 0, 1, NULL, e1));
    uint32_t i = mvm_evict_lcp.victim(self, &v, 0, cand, 2);
    mvm_evict_lcp.destroy(self);
    return i;
}

static void test_forgetting(void)
{
    CHECK(lfu_after_burst("period=2") == 0);
    CHECK(lfu_after_burst("period=1000") == 1);
    CHECK(lcp_after_idle(101) == 1);
    CHECK(lcp_after_idle(102) == 0);
}

/* ---- DALI's window swap -----------------------------------------------------------------
 * Fig. 11's setting: 8 experts, 4 cached (0..3), w_size 4, u_size 2, batch 2, top-2.
 *   step 1 {0,4}{0,5}  step 2 {4,1}{4,0}  step 3 {4,6}{5,1}  step 4 {4,5}{3,6}
 * Workloads (Eq. 12): 0:3 1:2 2:0 3:1 | 4:5 5:3 6:2 7:0. The window closes after step 4
 * (not after step 1, a reading of Algorithm 2): wanted are the 2 busiest non-resident, 4 then
 * 5; the 2 idlest resident, 2 and 3, go first. */
static void test_workload_window(void)
{
    static const mvm_pshape sh = {.n_layers = 1, .n_experts = 8, .top_k = 2,
                                  .pages_per_expert = 1};
    static const int32_t steps[4][4] = {{0, 4, 0, 5}, {4, 1, 4, 0}, {4, 6, 5, 1},
                                        {4, 5, 3, 6}};
    uint32_t resident[8] = {1, 1, 1, 1, 0, 0, 0, 0}, out[8];
    uint8_t busy[8] = {0};
    mvm_pview v = {.shape = &sh, .resident = resident, .busy = busy, .capacity_pages = 4};
    const mvm_evict_ops *w = &mvm_evict_workload;
    void *self = make(w, &sh, "w_size=4,u_size=2");
    if (!self)
        return;
    step_buf b;
    for (int s = 0; s < 4; s++) {
        CHECK(w->want(self, &v, 0, out, 8) == 0);
        v.tokens = (uint64_t)s;
        w->observe(self, &v, fill(&b, &sh, 0, 2, NULL, steps[s]));
    }
    CHECK(w->want(self, &v, 0, out, 8) == 2 && out[0] == 4 && out[1] == 5);
    CHECK(w->want(self, &v, 0, out, 1) == 1 && out[0] == 4); /* cap respected */
    uint32_t cand[4] = {0, 1, 2, 3};
    CHECK(w->victim(self, &v, 0, cand, 4) == 2);
    resident[2] = 0, resident[4] = 1; /* the caller swaps 2 for 4 */
    CHECK(w->want(self, &v, 0, out, 8) == 1 && out[0] == 5);
    uint32_t cand2[4] = {0, 1, 3, 4};
    CHECK(w->victim(self, &v, 0, cand2, 4) == 2); /* expert 3 */
    resident[3] = 0, resident[5] = 1;
    CHECK(w->want(self, &v, 0, out, 8) == 0);
    /* Outside the plan the least workload of the closed window goes: 0:3 1:2 4:5 5:3. */
    uint32_t cand3[4] = {0, 1, 4, 5};
    CHECK(w->victim(self, &v, 0, cand3, 4) == 1);
    /* A second window, {0,7}{4,5} {0,7}{4,1} {0,7}{4,5} {0,4}{5,1}: 0:4 1:2 4:4 5:3 7:3,
     * the rest 0. The scores restarted from zero (a tumbling window), so 2 follows 7 (ties
     * at 0: the lower id); had they carried over, 6 (2 tokens in the first window) would. */
    static const int32_t again[4][4] = {{0, 7, 4, 5}, {0, 7, 4, 1}, {0, 7, 4, 5},
                                        {0, 4, 5, 1}};
    for (int s = 0; s < 4; s++)
        w->observe(self, &v, fill(&b, &sh, 0, 2, NULL, again[s]));
    CHECK(w->want(self, &v, 0, out, 8) == 2 && out[0] == 7 && out[1] == 2);
    CHECK(w->victim(self, &v, 0, cand3, 4) == 1); /* doomed: 1 (2 tokens), then 5 (3) */
    uint32_t cand4[3] = {0, 4, 5};
    CHECK(w->victim(self, &v, 0, cand4, 3) == 2);
    w->destroy(self);
}

/* A window in which only residents work: the paper swaps anyway (incoming scores 0, no
 * s_in > s_out guard); with guard=1 nothing moves. */
static uint32_t idle_window_wants(const char *params)
{
    static const mvm_pshape sh = {.n_layers = 1, .n_experts = 8, .top_k = 2,
                                  .pages_per_expert = 1};
    static const uint32_t resident[8] = {1, 1, 1, 1, 0, 0, 0, 0};
    static const uint8_t busy[8] = {0};
    static const int32_t ex[2] = {0, 1};
    mvm_pview v = {.shape = &sh, .resident = resident, .busy = busy};
    uint32_t out[8], n;
    void *self = make(&mvm_evict_workload, &sh, params);
    if (!self)
        return UINT32_MAX;
    step_buf b;
    mvm_evict_workload.observe(self, &v, fill(&b, &sh, 0, 1, NULL, ex));
    n = mvm_evict_workload.want(self, &v, 0, out, 8);
    CHECK(n == 0 || (out[0] == 4 && (n < 2 || out[1] == 5))); /* ties: lower ids */
    mvm_evict_workload.destroy(self);
    return n;
}

/* The default u_size: 1 for 8 experts (Mixtral), 8 for 64 and 128 (DeepSeek, Qwen3), E/8
 * in between. One window of one step in which every non-resident expert has work. */
static uint32_t default_swaps(uint32_t E)
{
    mvm_pshape sh = {.n_layers = 1, .n_experts = E, .top_k = 1, .pages_per_expert = 1};
    uint32_t resident[MAXE] = {0}, out[MAXE];
    uint8_t busy[MAXE] = {0};
    int32_t ex[MAXE];
    for (uint32_t e = 0; e < E / 2; e++)
        resident[e] = 1;
    for (uint32_t t = 0; t < E / 2 && t < MAXT; t++)
        ex[t] = (int32_t)(E / 2 + t);
    mvm_pview v = {.shape = &sh, .resident = resident, .busy = busy};
    void *self = make(&mvm_evict_workload, &sh, "w_size=1");
    if (!self)
        return UINT32_MAX;
    step_buf b;
    mvm_evict_workload.observe(self, &v, fill(&b, &sh, 0, E / 2 < MAXT ? E / 2 : MAXT, NULL, ex));
    uint32_t n = mvm_evict_workload.want(self, &v, 0, out, MAXE);
    mvm_evict_workload.destroy(self);
    return n;
}

static void test_workload_defaults(void)
{
    CHECK(idle_window_wants("w_size=1,u_size=2") == 2);
    CHECK(idle_window_wants("w_size=1,u_size=2,guard=1") == 0);
    CHECK(default_swaps(8) == 1);
    CHECK(default_swaps(60) == 7);
    CHECK(default_swaps(64) == 8);
    CHECK(default_swaps(128) == 8);
}

/* ---- parameters ---------------------------------------------------------------------- */

/* ---- reuse: loops, hot experts, dead experts ----------------------------------------------
 * One layer, top-1, one token per step; a cache of `cap` experts that loads each used expert
 * on a miss, evicting the module's victims, or with ops NULL Belady's (the resident expert
 * used furthest in the future: the best any policy can do). Returns the hits over the last
 * `tail` steps, and counts the misses of expert `watch` there. */
static uint32_t run_sequence(const mvm_evict_ops *ops, uint32_t cap, const int32_t *seq,
                             uint32_t steps, uint32_t tail, int32_t watch, uint32_t *watch_misses)
{
    static const mvm_pshape sh = {.n_layers = 1, .n_experts = 16, .top_k = 1,
                                  .pages_per_expert = 1};
    uint32_t resident[16] = {0}, hits = 0;
    uint8_t busy[16] = {0};
    mvm_pview v = {.shape = &sh, .resident = resident, .busy = busy, .capacity_pages = cap};
    const mvm_pfuture future = {.n_tokens = steps, .experts = seq};
    void *self = ops ? make_seeing(ops, &sh, "", &future) : NULL;
    if (ops && !self)
        return UINT32_MAX;
    step_buf b;
    *watch_misses = 0;
    for (uint32_t t = 0; t < steps; t++) {
        int32_t e = seq[t];
        v.tokens = t;
        if (ops)
            ops->observe(self, &v, fill(&b, &sh, 0, 1, NULL, &e));
        if (resident[e]) {
            hits += t >= steps - tail;
            continue;
        }
        *watch_misses += e == watch && t >= steps - tail;
        if (v.used_pages == cap) {
            uint32_t cand[16], n = 0, i = 0, furthest = 0;
            for (uint32_t x = 0; x < 16; x++)
                if (resident[x])
                    cand[n++] = x;
            if (ops) {
                i = ops->victim(self, &v, 0, cand, n);
                CHECK(i < n);
            } else {
                for (uint32_t j = 0; j < n; j++) {
                    uint32_t u = t + 1;
                    while (u < steps && seq[u] != (int32_t)cand[j])
                        u++;
                    if (u > furthest)
                        furthest = u, i = j;
                }
            }
            resident[cand[i < n ? i : 0]] = 0;
            v.used_pages--;
        }
        resident[e] = 1;
        v.used_pages++;
    }
    if (ops)
        ops->destroy(self);
    return hits;
}

/* A loop over 8 experts with room for 4 (the interposer's case: layers walked in order at
 * every token, weights larger than the budget). LRU evicts the expert needed next and never
 * hits; Belady hits 34 times in the last 10 passes (3 of every 7 accesses); "reuse", which
 * takes the most recently used to be needed last, must come within one hit of it. */
static void test_reuse_loop(void)
{
    int32_t seq[8 * 30];
    uint32_t w;
    for (uint32_t t = 0; t < 8 * 30; t++)
        seq[t] = (int32_t)(t % 8);
    uint32_t best = run_sequence(NULL, 4, seq, 8 * 30, 8 * 10, -1, &w);
    CHECK(best == 34);
    CHECK(run_sequence(&mvm_evict_lru, 4, seq, 8 * 30, 8 * 10, -1, &w) == 0);
    CHECK(run_sequence(&mvm_evict_reuse, 4, seq, 8 * 30, 8 * 10, -1, &w) + 1 >= best);
}

/* Expert 0 every other step, between a cold stream that walks experts 1..9 in a loop, with
 * room for 3: the hot expert (interval 2) must never miss once learned, and the stream must
 * keep about what Belady keeps of it (within 5%). */
static void test_reuse_hot(void)
{
    int32_t seq[2 * 9 * 20];
    uint32_t hot_misses = 1;
    for (uint32_t t = 0; t < 2 * 9 * 20; t++)
        seq[t] = t % 2 ? (int32_t)(1 + (t / 2) % 9) : 0;
    uint32_t best = run_sequence(NULL, 3, seq, 2 * 9 * 20, 2 * 9 * 10, 0, &hot_misses);
    uint32_t got = run_sequence(&mvm_evict_reuse, 3, seq, 2 * 9 * 20, 2 * 9 * 10, 0, &hot_misses);
    CHECK(hot_misses == 0);
    CHECK(got * 20 >= best * 19);
    run_sequence(&mvm_evict_lru, 3, seq, 2 * 9 * 20, 2 * 9 * 10, 0, &hot_misses);
    CHECK(hot_misses == 0); /* LRU keeps a hot expert too; it is the loop it loses */
}

/* A dead expert: used at clocks 1 and 2 (interval 1), then never again, while experts 0, 1
 * and 2 loop from clock 3. From clock 8 on (t = 5) all three loop experts have an interval
 * (3) and wait at most 3 - age <= 3, while the dead one, overdue, waits its age (6 and
 * growing): it goes. Until then a loop expert never reused goes before it. */
static void test_reuse_dead(void)
{
    static const mvm_pshape sh = {.n_layers = 1, .n_experts = 4, .top_k = 1,
                                  .pages_per_expert = 1};
    static const uint32_t resident[4] = {1, 1, 1, 1}, cand[4] = {0, 1, 2, 3};
    static const uint8_t busy[4] = {0};
    mvm_pview v = {.shape = &sh, .resident = resident, .busy = busy};
    void *self = make(&mvm_evict_reuse, &sh, "");
    if (!self)
        return;
    step_buf b;
    int32_t dead = 3;
    mvm_evict_reuse.observe(self, &v, fill(&b, &sh, 0, 1, NULL, &dead));
    mvm_evict_reuse.observe(self, &v, fill(&b, &sh, 0, 1, NULL, &dead));
    for (uint32_t t = 0; t < 12; t++) {
        int32_t e = (int32_t)(t % 3);
        mvm_evict_reuse.observe(self, &v, fill(&b, &sh, 0, 1, NULL, &e));
        uint32_t victim = mvm_evict_reuse.victim(self, &v, 0, cand, 4);
        CHECK(t >= 5 ? victim == 3 : victim != 3);
    }
    mvm_evict_reuse.destroy(self);
}

/* The fewest misses any eviction can have on seq[0..n) (one layer, top-1, room for cap,
 * loading every miss, starting empty): every choice of victim tried, by dynamic programming
 * over (step, set of resident experts) from the end. Independent of Belady's rule. */
static uint32_t fewest_misses(const int32_t *seq, uint32_t n, uint32_t cap)
{
    enum { E = 6, N = 16 };
    static uint32_t best[N + 1][1u << E];
    for (uint32_t set = 0; set < 1u << E; set++)
        best[n][set] = 0;
    for (uint32_t t = n; t-- > 0;)
        for (uint32_t set = 0; set < 1u << E; set++) {
            uint32_t e = 1u << seq[t];
            if (set & e) {
                best[t][set] = best[t + 1][set];
                continue;
            }
            uint32_t m = UINT32_MAX;
            if ((uint32_t)__builtin_popcount(set) < cap)
                m = best[t + 1][set | e];
            else
                for (uint32_t v = 0; v < E; v++)
                    if (set & (1u << v) && best[t + 1][(set & ~(1u << v)) | e] < m)
                        m = best[t + 1][(set & ~(1u << v)) | e];
            best[t][set] = 1 + m;
        }
    return best[0][0];
}

/* belady, fed the sequence as its future, misses exactly as rarely as the best choice found
 * by trying them all, on random sequences and cache sizes; LRU never does better. */
static void test_belady_optimal(void)
{
    uint64_t r = 11;
    for (uint32_t trial = 0; trial < 300; trial++) {
        int32_t seq[16];
        uint32_t n = 6 + check_rng_next(&r) % 11, cap = 1 + check_rng_next(&r) % 4, w;
        for (uint32_t t = 0; t < n; t++)
            seq[t] = (int32_t)(check_rng_next(&r) % 6);
        uint32_t opt = n - fewest_misses(seq, n, cap);
        CHECK(run_sequence(&mvm_evict_belady, cap, seq, n, n, -1, &w) == opt);
        CHECK(run_sequence(&mvm_evict_lru, cap, seq, n, n, -1, &w) <= opt);
    }
    /* without a future it cannot run, and says where it can */
    static const mvm_pshape sh = {.n_layers = 1, .n_experts = 4, .top_k = 1,
                                  .pages_per_expert = 1};
    mvm_pinit in = {.shape = &sh, .cost = &no_cost};
    void *self = NULL;
    CHECK_ST(mvm_evict_belady.create(&in, &self), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "evict belady") && strstr(mvm_last_error(), "moevm sim"));
}

/* belady{ahead=T}, by hand: 2 layers of 2 experts, top-1; x = layer*2 + e. The future,
 * two steps a token: x0 x2 | x1 x3 | x0 x2. Steps 0 and 1 are observed with scores that
 * give affinity's keys x0 ln .3, x1 ln .7, x2 ln .9, x3 ln .1; then, at step 2 (token 1),
 * before it is observed, as the simulator asks:
 *   {x3, x0}: x3 is used at step 3 (this token), x0 at step 4 (the next). affinity alone
 *             evicts x3 (the lower key); ahead=0 sees x3's use and not x0's, so x0 goes,
 *             as under MIN.
 *   {x0, x2}: uses at steps 4 and 5, both in the next token. ahead=0 sees neither and
 *             follows affinity (x0); ahead=1 sees both and evicts the furthest, x2, as MIN.
 * A value that is not a whole number of tokens >= 0 is refused, naming it. */
static void test_belady_ahead(void)
{
    static const mvm_pshape sh = {.n_layers = 2, .n_experts = 2, .top_k = 1,
                                  .pages_per_expert = 1};
    static const int32_t future_e[6] = {0, 0, 1, 1, 0, 0};
    const mvm_pfuture future = {.n_tokens = 3, .experts = future_e};
    static const float s0[2] = {0.3f, 0.7f}, s1[2] = {0.9f, 0.1f};
    const uint32_t c30[2] = {3, 0}, c02[2] = {0, 2};
    const char *params[4] = {"", "ahead=0", "ahead=1", NULL};
    const uint32_t want30[4] = {1, 1, 1, 0}, want02[4] = {1, 0, 1, 0}; /* [3]: affinity */
    uint32_t resident[4] = {1, 1, 1, 1};
    uint8_t busy[4] = {0};
    mvm_pview v = {.shape = &sh, .resident = resident, .busy = busy, .capacity_pages = 2};
    for (int i = 0; i < 4; i++) {
        const mvm_evict_ops *ops = params[i] ? &mvm_evict_belady : &mvm_evict_affinity;
        void *self = make_seeing(ops, &sh, params[i] ? params[i] : "", &future);
        if (!self)
            continue;
        step_buf b;
        ops->observe(self, &v, fill(&b, &sh, 0, 1, s0, &future_e[0]));
        ops->observe(self, &v, fill(&b, &sh, 1, 1, s1, &future_e[1]));
        CHECK(ops->victim(self, &v, 0, c30, 2) == want30[i]);
        CHECK(ops->victim(self, &v, 0, c02, 2) == want02[i]);
        ops->destroy(self);
    }
    static const char *const bad[] = {"ahead=-1", "ahead=0.5", "ahead=nan", "ahead=-inf"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        mvm_pinit in = {.shape = &sh, .cost = &no_cost, .params = {bad[i]}, .future = &future};
        void *self = NULL;
        CHECK_ST(mvm_evict_belady.create(&in, &self), MVM_ERR_INVALID);
        CHECK(strstr(mvm_last_error(), "evict belady") && strstr(mvm_last_error(), "ahead"));
    }
}

/* affinity, by hand. With scores, alpha 0.5: expert 0 spikes once (0.9, then 0.01 twice),
 * expert 1 scores 0.2 steadily. SMoE's plain mean over the 3 steps ranks the spike higher
 * (0.307 > 0.2) and evicts 1; the logs give 0: ln 0.9 = -0.105, then -2.355, then -3.480,
 * and 1: ln 0.2 = -1.609 throughout, so 0 goes. Without scores, alpha 0.2, experts 0, 1
 * and 2 selected in turn (weight 1; unselected look at ln 1e-4 = -9.21): after the three
 * steps the keys are 0: -3.316, 1: -7.737, 2: -7.368, so 1 goes, not LRU's 0. */
static void test_affinity(void)
{
    static const mvm_pshape sh = {.n_layers = 1, .n_experts = 2, .top_k = 1,
                                  .pages_per_expert = 1};
    static const uint32_t cand[2] = {0, 1}, resident[4] = {1, 1, 1, 1};
    static const uint8_t busy[4] = {0};
    mvm_pview v = {.shape = &sh, .resident = resident, .busy = busy};
    step_buf b;
    void *self = make(&mvm_evict_affinity, &sh, "alpha=0.5");
    if (!self)
        return;
    const float sc[3][2] = {{0.9f, 0.2f}, {0.01f, 0.2f}, {0.01f, 0.2f}};
    const int32_t top[3] = {0, 1, 1};
    for (int t = 0; t < 3; t++)
        mvm_evict_affinity.observe(self, &v, fill(&b, &sh, 0, 1, sc[t], &top[t]));
    CHECK(mvm_evict_affinity.victim(self, &v, 0, cand, 2) == 0);
    mvm_evict_affinity.destroy(self);
    void *score = make(&mvm_evict_score, &sh, "n=3");
    if (!score)
        return;
    for (int t = 0; t < 3; t++)
        mvm_evict_score.observe(score, &v, fill(&b, &sh, 0, 1, sc[t], &top[t]));
    CHECK(mvm_evict_score.victim(score, &v, 0, cand, 2) == 1);
    mvm_evict_score.destroy(score);

    static const mvm_pshape sh4 = {.n_layers = 1, .n_experts = 4, .top_k = 1,
                                   .pages_per_expert = 1};
    static const uint32_t cand3[3] = {0, 1, 2};
    v.shape = &sh4;
    if (!(self = make(&mvm_evict_affinity, &sh4, "")))
        return;
    for (int32_t e = 0; e < 3; e++)
        mvm_evict_affinity.observe(self, &v, fill(&b, &sh4, 0, 1, NULL, &e));
    CHECK(mvm_evict_affinity.victim(self, &v, 0, cand3, 3) == 1);
    mvm_evict_affinity.destroy(self);

    /* A step's looks (mvm_affinity_looks, which evict_adaptive.c computes once for its
     * three affinity candidates): a two-token step with scores, the mean of the logs (0.9
     * and 0.01: -2.355; 0.2 twice: -1.609), one without (expert 0 selected at weight 0.5
     * by the first token only: (ln 0.5 + ln 1e-4) / 2 = -4.952; expert 3 never: -9.21).
     * A module given looks in the step takes them instead of its own: looks that rank
     * expert 1 lowest make it the victim. */
    float look[4], poison[4] = {NAN, NAN, NAN, NAN};
    const float sc2[2][2] = {{0.9f, 0.2f}, {0.01f, 0.2f}};
    const int32_t top2[2] = {0, 1};
    memcpy(look, poison, sizeof look);
    mvm_affinity_looks(fill(&b, &sh, 0, 2, &sc2[0][0], top2), 2, 1, look);
    CHECK(fabsf(look[0] - (logf(0.9f) + logf(0.01f)) / 2) < 1e-6f);
    CHECK(fabsf(look[1] - logf(0.2f)) < 1e-6f);
    const int32_t sel2[2] = {0, 2};
    const mvm_pstep *st = fill(&b, &sh4, 0, 2, NULL, sel2);
    b.weights[0] = 0.5f;
    memcpy(look, poison, sizeof look);
    mvm_affinity_looks(st, 4, 1, look);
    CHECK(fabsf(look[0] - (logf(0.5f) + -9.21f) / 2) < 1e-5f);
    CHECK(fabsf(look[3] - -9.21f) < 1e-5f);
    if (!(self = make(&mvm_evict_affinity, &sh, "")))
        return;
    v.shape = &sh;
    mvm_pstep given = *fill(&b, &sh, 0, 2, &sc2[0][0], top2);
    const float inverted[2] = {0.0f, -5.0f};
    given.looks = inverted;
    mvm_evict_affinity.observe(self, &v, &given);
    CHECK(mvm_evict_affinity.victim(self, &v, 0, cand, 2) == 1);
    mvm_evict_affinity.destroy(self);
}

static void test_params(void)
{
    static const struct { const mvm_evict_ops *ops; const char *params; } bad[] = {
        {&mvm_evict_lru, "n=3"},           {&mvm_evict_lfu, "period=0"},
        {&mvm_evict_lfu, "period=1.5"},    {&mvm_evict_score, "n=0"},
        {&mvm_evict_score, "window=3"},    {&mvm_evict_lcp, "omega=0"},
        {&mvm_evict_lcp, "rho=0"},         {&mvm_evict_lcp, "rho=1.5"},
        {&mvm_evict_workload, "w_size=0"}, {&mvm_evict_workload, "u_size=2.5"},
        {&mvm_evict_workload, "guard=2"},  {&mvm_evict_reuse, "alpha=1"},
        {&mvm_evict_affinity, "alpha=0"},  {&mvm_evict_affinity, "alpha=1.5"},
        {&mvm_evict_affinity, "n=3"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        mvm_pinit in = {.shape = &hand_shape, .cost = &no_cost, .params = {bad[i].params}};
        void *self = NULL;
        CHECK_ST(bad[i].ops->create(&in, &self), MVM_ERR_INVALID);
    }
}

/* ---- random sequences through a cache simulator -------------------------------------------
 * 3 layers of 8 experts, top-2, 2 pages per expert, room for 7 experts. Each layer step
 * draws 1-3 tokens from a skewed, drifting router; its experts are busy while it runs; the
 * missing ones are loaded, evicting victims until they fit; then the module's wanted
 * experts are loaded the same way. The history kept here gives the modules' keys. */
enum { SL = 3, SE = 8, SK = 2, SP = 2, SCAP = 7 * SP, STEPS = 600 };

typedef struct sim {
    const mvm_evict_ops *ops;
    void *self;
    uint32_t resident[SL * SE];
    uint8_t busy[SL * SE];
    mvm_pview v;
    uint64_t rng;
    /* history for the reference keys */
    uint64_t clock, last_use[SL * SE], mu[SL * SE], last_tok[SL * SE], freq[SL * SE];
    double interval[SL * SE]; /* reuse: the mean of the old mean and the newest interval */
    uint32_t layer_steps[SL], n_hist[SL];
    float hist[SL][STEPS][SE];
    float affinity[SL * SE]; /* affinity: the smoothed log-score; -inf before the first look */
    uint32_t lfu_period, score_n;
    double omega, rho;
    float alpha;
    uint32_t evictions, wanted;
} sim;

static double rnd(sim *s)
{
    s->rng ^= s->rng << 13, s->rng ^= s->rng >> 7, s->rng ^= s->rng << 17;
    return (double)(s->rng >> 11) / 9007199254740992.0;
}

static double ref_key(const sim *s, uint32_t x)
{
    const mvm_evict_ops *o = s->ops;
    if (o == &mvm_evict_lru)
        return (double)s->last_use[x];
    if (o == &mvm_evict_lfu)
        return (double)s->freq[x];
    if (o == &mvm_evict_lcp) {
        double nu = (double)(s->v.tokens - s->last_tok[x]);
        return (double)s->mu[x] * pow(s->rho, nu / s->omega);
    }
    if (o == &mvm_evict_reuse) { /* never reused first, most recent first; else longest wait */
        if (s->interval[x] <= 0)
            return -1e12 - (double)s->last_use[x];
        double age = (double)(s->clock - s->last_use[x]);
        return -(age < s->interval[x] ? s->interval[x] - age : age);
    }
    if (o == &mvm_evict_affinity)
        return s->affinity[x];
    if (o == &mvm_evict_score) {
        uint32_t l = x / SE, h = s->n_hist[l], n = h < s->score_n ? h : s->score_n;
        double sum = 0;
        for (uint32_t i = h - n; i < h; i++)
            sum += s->hist[l][i][x % SE];
        return n ? sum / n : 0;
    }
    return NAN; /* workload: checked by hand above; adaptive: in test_policy_adaptive.c */
}

/* Evict until `pages` more fit; 0 when nothing evictable is left. */
static int make_room(sim *s, uint32_t layer, uint32_t pages)
{
    while (s->v.used_pages + pages > s->v.capacity_pages) {
        uint32_t cand[SL * SE], n = 0;
        for (uint32_t x = 0; x < SL * SE; x++)
            if (s->resident[x] && !s->busy[x])
                cand[n++] = x;
        if (!n)
            return 0;
        uint32_t i = s->ops->victim(s->self, &s->v, layer, cand, n);
        CHECK(i < n);
        if (i >= n)
            return 0;
        CHECK(s->ops->victim(s->self, &s->v, layer, cand, n) == i);
        double k = ref_key(s, cand[i]);
        for (uint32_t j = 0; j < n && !isnan(k); j++)
            if (ref_key(s, cand[j]) < k - 1e-6 * fabs(k)) { /* float means */
                CHECK(!"the victim does not minimise the module's key");
                break;
            }
        s->evictions++;
        s->v.used_pages -= s->resident[cand[i]];
        s->resident[cand[i]] = 0;
    }
    return 1;
}

static void load(sim *s, uint32_t layer, uint32_t x)
{
    uint32_t need = SP - s->resident[x];
    if (need && make_room(s, layer, need)) {
        s->resident[x] = SP;
        s->v.used_pages += need;
    }
    CHECK(s->v.used_pages <= s->v.capacity_pages);
}

static void record(sim *s, const mvm_pstep *st)
{
    uint32_t l = st->layer;
    s->clock++;
    int age = s->lfu_period && ++s->layer_steps[l] % s->lfu_period == 0;
    for (uint32_t e = 0; e < SE; e++) {
        uint32_t x = l * SE + e;
        float mean = 0;
        for (uint32_t t = 0; t < st->n_tok; t++)
            mean += st->scores[t * SE + e];
        s->hist[l][s->n_hist[l]][e] = mean / (float)st->n_tok;
        float logs = 0;
        for (uint32_t t = 0; t < st->n_tok; t++)
            logs += logf(fmaxf(st->scores[t * SE + e], 1e-30f));
        logs /= (float)st->n_tok;
        s->affinity[x] = isinf(s->affinity[x]) ? logs
                                               : (1 - s->alpha) * s->affinity[x] + s->alpha * logs;
        s->freq[x] = (s->freq[x] + st->counts[e]) >> age;
        if (st->counts[e]) {
            if (s->last_use[x]) {
                double seen = (double)(s->clock - s->last_use[x]);
                s->interval[x] = s->interval[x] > 0 ? (s->interval[x] + seen) / 2 : seen;
            }
            s->last_use[x] = s->clock;
            s->mu[x] += st->counts[e];
            s->last_tok[x] = s->v.tokens;
        }
    }
    s->n_hist[l]++;
}

/* Top-k of a router whose logits drift: popular experts, a slowly moving token stream. */
static void route_token(sim *s, uint32_t l, uint64_t tok, float *sc, int32_t *ex)
{
    double u[SE];
    for (uint32_t e = 0; e < SE; e++)
        u[e] = rnd(s);
    check_drift_route(u, SE, l, tok, sc, ex);
}

static void simulate(const mvm_evict_ops *ops, const char *params, uint32_t lfu_period,
                     uint32_t score_n, double omega, double rho, float alpha)
{
    static const mvm_pshape sh = {.n_layers = SL, .n_experts = SE, .top_k = SK,
                                  .pages_per_expert = SP};
    static sim s;
    memset(&s, 0, sizeof s);
    s.ops = ops;
    s.rng = 0x9E3779B97F4A7C15ull;
    s.lfu_period = lfu_period, s.score_n = score_n, s.omega = omega, s.rho = rho;
    s.alpha = alpha;
    for (uint32_t x = 0; x < SL * SE; x++)
        s.affinity[x] = -INFINITY;
    s.v = (mvm_pview){.shape = &sh, .resident = s.resident, .busy = s.busy,
                      .capacity_pages = SCAP};
    s.self = make(ops, &sh, params);
    if (!s.self)
        return;
    step_buf b;
    for (uint64_t tok = 0; tok < STEPS; tok++) {
        s.v.tokens = tok;
        for (uint32_t l = 0; l < SL; l++) {
            uint32_t n = 1 + (uint32_t)(rnd(&s) * 3);
            float sc[3 * SE];
            int32_t ex[3 * SK];
            for (uint32_t t = 0; t < n; t++)
                route_token(&s, l, tok * 3 + t, sc + t * SE, ex + t * SK);
            const mvm_pstep *st = fill(&b, &sh, l, n, sc, ex);
            ops->observe(s.self, &s.v, st);
            record(&s, st);
            for (uint32_t e = 0; e < SE; e++)
                s.busy[l * SE + e] = st->counts[e] > 0;
            for (uint32_t e = 0; e < SE; e++)
                if (st->counts[e])
                    load(&s, l, l * SE + e);
            for (uint32_t e = 0; e < SE; e++)
                CHECK(!st->counts[e] || s.resident[l * SE + e] == SP);
            uint32_t want[SE], nw = ops->want ? ops->want(s.self, &s.v, l, want, SE) : 0;
            CHECK(nw <= SE);
            s.wanted += nw;
            for (uint32_t i = 0; i < nw && i < SE; i++) {
                CHECK(want[i] / SE == l && s.resident[want[i]] < SP);
                load(&s, l, want[i]);
            }
            memset(s.busy, 0, sizeof s.busy);
        }
    }
    CHECK(s.evictions > STEPS); /* the cache was under pressure throughout */
    CHECK(!ops->want || s.wanted > 0);   /* and the swaps happened */
    ops->destroy(s.self);
}

static void test_random_sequences(void)
{
    simulate(&mvm_evict_lru, "", 0, 0, 0, 0, 0);
    simulate(&mvm_evict_lfu, "", 128, 0, 0, 0, 0);
    simulate(&mvm_evict_lfu, "period=3", 3, 0, 0, 0, 0);
    simulate(&mvm_evict_lcp, "", 0, 0, 128, 0.25, 0);
    simulate(&mvm_evict_lcp, "omega=4,rho=0.5", 0, 0, 4, 0.5, 0);
    simulate(&mvm_evict_score, "", 0, 3, 0, 0, 0);
    simulate(&mvm_evict_score, "n=7", 0, 7, 0, 0, 0);
    simulate(&mvm_evict_workload, "", 0, 0, 0, 0, 0);
    simulate(&mvm_evict_workload, "w_size=2,u_size=3,guard=1", 0, 0, 0, 0, 0);
    simulate(&mvm_evict_reuse, "", 0, 0, 0, 0, 0);
    simulate(&mvm_evict_affinity, "", 0, 0, 0, 0, 0.2f);
    simulate(&mvm_evict_affinity, "alpha=0.6", 0, 0, 0, 0, 0.6f);
    simulate(&mvm_evict_adaptive, "", 0, 0, 0, 0, 0);
}

/* Ids only (scores and weights NULL): the contract's reading is that each selected expert
 * weighs 1/K, so every online module in the registry chooses the same victims as a twin fed
 * those weights, over a random multi-token sequence with evictions at every step. */
static void test_ids_only(void)
{
    static const mvm_pshape sh = {.n_layers = 2, .n_experts = 8, .top_k = 2,
                                  .pages_per_expert = 1};
    char names[512];
    mvm_policy_names(MVM_ROLE_EVICT, names, sizeof names);
    uint32_t tried = 0;
    for (char *name = strtok(names, ", "); name; name = strtok(NULL, ", ")) {
        const mvm_evict_ops *ops = mvm_policy_find(MVM_ROLE_EVICT, name);
        void *a = NULL, *b = NULL;
        mvm_pinit in = {.shape = &sh, .cost = &no_cost};
        if (!ops || ops->create(&in, &a) != MVM_OK)
            continue; /* belady: it needs the future */
        CHECK_ST(ops->create(&in, &b), MVM_OK);
        tried++;
        uint32_t resident[16] = {0};
        uint8_t busy[16] = {0};
        mvm_pview v = {.shape = &sh, .resident = resident, .busy = busy, .capacity_pages = 16};
        uint64_t rng = 7;
        for (uint32_t tok = 0; tok < 200; tok++) {
            v.tokens = tok;
            for (uint32_t l = 0; l < 2; l++) {
                int32_t ex[3 * 2];
                uint32_t n = 1 + (uint32_t)((rng = rng * 6364136223846793005ull + 1) >> 62) % 3;
                for (uint32_t t = 0; t < n; t++) {
                    ex[t * 2] = (int32_t)((rng = rng * 6364136223846793005ull + 1) >> 61);
                    ex[t * 2 + 1] = (ex[t * 2] + 1 + (int32_t)((rng >> 40) % 7)) % 8;
                }
                step_buf sb;
                const mvm_pstep *with = fill(&sb, &sh, l, n, NULL, ex);
                mvm_pstep ids = *with;
                ids.weights = NULL;
                ops->observe(a, &v, with);
                ops->observe(b, &v, &ids);
                for (uint32_t x = 0; x < 16; x++)
                    resident[x] = (x + tok) % 3 != 0; /* a changing set of candidates */
                uint32_t cand[16], nc = 0;
                for (uint32_t x = 0; x < 16; x++)
                    if (resident[x])
                        cand[nc++] = x;
                uint32_t va = ops->victim(a, &v, l, cand, nc), vb = ops->victim(b, &v, l, cand, nc);
                CHECK(va == vb && va < nc);
            }
        }
        ops->destroy(a);
        ops->destroy(b);
    }
    CHECK(tried >= 8); /* every module but belady */
}

/* The driver every front end makes room with (policy/evict_driver.h): the candidates are the
 * resident, idle items of the range but the excluded one and those the filter rejects, in
 * item order; each pick is the module's choice (a scripted module here), taken out with the
 * rest's order kept; an out-of-range answer is the first; admission appends the newcomer. */
static uint32_t scripted[8], n_scripted, asked_n[8];
static uint32_t scripted_victim(void *self, const mvm_pview *v, uint32_t layer,
                                const uint32_t *cand, uint32_t n)
{
    (void)self, (void)v, (void)layer, (void)cand;
    asked_n[n_scripted] = n;
    return scripted[n_scripted++];
}
static bool odd_only(void *ctx, uint32_t x)
{
    (void)ctx;
    return x % 2 == 1;
}

static void test_driver(void)
{
    mvm_evict_ops ops = {.victim = scripted_victim};
    uint32_t resident[10] = {1, 1, 0, 1, 1, 1, 2, 1, 0, 1}, cand[11];
    uint8_t busy[10] = {0, 0, 0, 0, 1, 0, 0, 0, 0, 0};
    mvm_evict_driver d = {.ops = &ops, .resident = resident, .busy = busy, .cand = cand};
    mvm_pview v = {0};
    /* [1, 9): 1 3 5 6 7 (2 and 8 not resident, 4 busy), 6 excluded */
    CHECK(mvm_evict_collect(&d, 1, 9, 6, NULL, NULL) == 4);
    CHECK(cand[0] == 1 && cand[1] == 3 && cand[2] == 5 && cand[3] == 7);
    n_scripted = 0;
    scripted[0] = 1, scripted[1] = 99, scripted[2] = 1;
    uint32_t x = 0;
    CHECK(mvm_evict_pick(&d, &v, 0, &x) && x == 3);
    CHECK(mvm_evict_pick(&d, &v, 0, &x) && x == 1); /* 99: out of range, the first */
    CHECK(mvm_evict_pick(&d, &v, 0, &x) && x == 7); /* 5 7 left: index 1 */
    CHECK(asked_n[0] == 4);
    CHECK(asked_n[2] == 2);
    scripted[3] = 0;
    CHECK(mvm_evict_pick(&d, &v, 0, &x) && x == 5);
    CHECK(!mvm_evict_pick(&d, &v, 0, &x));
    CHECK(n_scripted == 4); /* none left: the module is not asked */
    CHECK(mvm_evict_collect(&d, 0, 10, UINT32_MAX, odd_only, NULL) == 5); /* 1 3 5 7 9 */
    CHECK(cand[3] == 7 && cand[4] == 9);
    /* admission with the device full: the newcomer 8 is appended; refused when it is the
     * module's own first victim, admitted otherwise */
    mvm_pshape sh = {.n_layers = 1, .n_experts = 10, .top_k = 1, .pages_per_expert = 1};
    v = (mvm_pview){.shape = &sh, .resident = resident, .busy = busy, .capacity_pages = 9,
                    .used_pages = 9};
    CHECK(mvm_evict_collect(&d, 0, 10, 8, NULL, NULL) == 7); /* 0 1 3 5 6 7 9 */
    n_scripted = 0;
    scripted[0] = 7; /* the appended newcomer */
    CHECK(!mvm_evict_admit(&d, &v, 8, 1));
    CHECK(cand[7] == 8 && d.n_cand == 7);
    scripted[1] = 0;
    CHECK(mvm_evict_admit(&d, &v, 8, 1));
    CHECK(asked_n[0] == 8 && asked_n[1] == 8);
}

static bool not_div3(void *ctx, uint32_t x)
{
    (void)ctx;
    return x % 3 != 0;
}

/* The driver's collection over the front end's bits of resident items (resident_bits) is
 * the one over every item's count: random residents, busy and held items, ranges that begin
 * and end inside a word, on a word's edge or hold none, an excluded item and a filter. */
static void test_driver_bits(void)
{
    enum { N = 300 };
    uint32_t resident[N], cand_a[N + 1], cand_b[N + 1];
    uint8_t busy[N], held[N];
    uint64_t bits[(N + 63) / 64];
    uint64_t seed = 7;
    int same = 1;
    for (int trial = 0; trial < 200; trial++) {
        memset(bits, 0, sizeof bits);
        for (uint32_t x = 0; x < N; x++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            resident[x] = (seed >> 33) % 4 == 0 ? 0 : (uint32_t)(seed >> 40) % 3 + 1;
            busy[x] = (seed >> 50) % 7 == 0;
            held[x] = (seed >> 55) % 11 == 0;
            bits[x / 64] |= (uint64_t)(resident[x] != 0) << (x % 64);
        }
        const uint32_t lo = (uint32_t)(seed >> 20) % (N + 1), span = (uint32_t)(seed >> 30) % 200;
        const uint32_t hi = trial % 5 == 0 ? lo : lo + span < N ? lo + span : N;
        const uint32_t except = trial % 2 ? lo + (hi - lo) / 2 : UINT32_MAX;
        mvm_evict_driver a = {.resident = resident, .busy = busy, .held = trial % 3 ? held : NULL,
                              .cand = cand_a};
        mvm_evict_driver b = a;
        b.resident_bits = bits, b.cand = cand_b;
        bool (*usable)(void *, uint32_t) = trial % 4 == 1 ? not_div3 : NULL;
        const uint32_t na = mvm_evict_collect(&a, lo, hi, except, usable, NULL);
        const uint32_t nb = mvm_evict_collect(&b, lo, hi, except, usable, NULL);
        same &= na == nb && memcmp(cand_a, cand_b, na * sizeof *cand_a) == 0;
    }
    for (uint32_t lo = 0; lo <= 128; lo += 64) /* whole words */
        for (uint32_t hi = lo; hi <= 192; hi += 64) {
            mvm_evict_driver a = {.resident = resident, .busy = busy, .cand = cand_a};
            mvm_evict_driver b = a;
            b.resident_bits = bits, b.cand = cand_b;
            const uint32_t na = mvm_evict_collect(&a, lo, hi, UINT32_MAX, NULL, NULL);
            same &= na == mvm_evict_collect(&b, lo, hi, UINT32_MAX, NULL, NULL) &&
                    memcmp(cand_a, cand_b, na * sizeof *cand_a) == 0;
        }
    CHECK(same);
}

/* mvm_evict_ops.steady: for each module that has it (evict adaptive's candidates), a
 * layer's victim stands as long as it says. Two layers of 12 experts, top-3: a random history (each step of either layer,
 * picks skewed towards a few experts, so that reuse intervals, due and overdue experts
 * all occur), then a random set of layer 0's experts; steps of layer 1 follow, and for as
 * many as `steady` said, the victim among that set must not change. Mixed in: how often
 * the bound was met exactly (the victim changed at the step it named), so that a bound too
 * loose by one fails too. */
static void test_steady(void)
{
    enum { L = 2, E = 12, K = 3 };
    static const mvm_pshape sh = {.n_layers = L, .n_experts = E, .top_k = K,
                                  .pages_per_expert = 1};
    static const uint32_t resident[L * E];
    static const uint8_t busy[L * E];
    const mvm_pview v = {.shape = &sh, .resident = resident, .busy = busy};
    static const mvm_evict_ops *const ops[] = {&mvm_evict_lru, &mvm_evict_affinity,
                                               &mvm_evict_reuse};
    const uint32_t n_ops = sizeof ops / sizeof *ops;
    uint32_t met = 0;
    for (uint32_t m = 0; m < n_ops; m++)
        CHECK(ops[m]->steady != NULL);
    uint64_t rng = 11;
    step_buf b;
    for (uint32_t m = 0; m < n_ops; m++)
        for (uint32_t trial = 0; trial < 300; trial++) {
            void *self = make(ops[m], &sh, "");
            if (!self)
                return;
            float sc[E];
            int32_t ex[K];
            const uint32_t history = 1 + (uint32_t)(check_rng_next(&rng) % 60);
            for (uint32_t t = 0; t < history; t++) {
                const uint32_t l = (uint32_t)(check_rng_next(&rng) % L);
                for (uint32_t e = 0; e < E; e++)
                    sc[e] = (float)(check_rng_next(&rng) % 1000) / 1000.0f / (float)(1 + e);
                for (uint32_t k = 0; k < K; k++) /* distinct, skewed to the low ids */
                    for (;;) {
                        const uint64_t r = check_rng_next(&rng);
                        ex[k] = (int32_t)((r % E) * ((r >> 20) % E) / E);
                        uint32_t dup = 0;
                        for (uint32_t j = 0; j < k; j++)
                            dup |= ex[j] == ex[k];
                        if (!dup)
                            break;
                    }
                ops[m]->observe(self, &v, fill(&b, &sh, l, 1, sc, ex));
            }
            uint32_t cand[E], n = 0;
            for (uint32_t e = 0; e < E; e++)
                if (check_rng_next(&rng) % 3)
                    cand[n++] = e;
            if (!n)
                cand[n++] = (uint32_t)(check_rng_next(&rng) % E);
            const uint32_t first = cand[ops[m]->victim(self, &v, 0, cand, n)];
            const uint64_t steady = ops[m]->steady(self, cand, n);
            for (uint64_t t = 0; t < 80; t++) { /* steps of layer 1 */
                const uint32_t now = cand[ops[m]->victim(self, &v, 0, cand, n)];
                if (t < steady)
                    CHECK(now == first);
                else
                    met += t == steady && now != first;
                if (t >= steady)
                    break;
                for (uint32_t e = 0; e < E; e++)
                    sc[e] = (float)(check_rng_next(&rng) % 1000) / 1000.0f;
                for (uint32_t k = 0; k < K; k++)
                    ex[k] = (int32_t)k;
                ops[m]->observe(self, &v, fill(&b, &sh, 1, 1, sc, ex));
            }
            ops[m]->destroy(self);
        }
    CHECK(met > 0); /* some bound was tight */
}

int main(void)
{
    RUN(test_four_victims);
    RUN(test_ties);
    RUN(test_forgetting);
    RUN(test_workload_window);
    RUN(test_workload_defaults);
    RUN(test_reuse_loop);
    RUN(test_reuse_hot);
    RUN(test_reuse_dead);
    RUN(test_belady_optimal);
    RUN(test_belady_ahead);
    RUN(test_affinity);
    RUN(test_params);
    RUN(test_random_sequences);
    RUN(test_ids_only);
    RUN(test_driver);
    RUN(test_driver_bits);
    RUN(test_steady);
    TEST_END();
}
