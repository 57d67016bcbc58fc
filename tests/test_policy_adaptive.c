/*
 * evict "adaptive" (policy/evict_adaptive.c): ghost caches of candidate modules, the one
 * with the most recent hits deciding. First three regimes, one after the other, on one
 * layer: a stale expert whose router score stays high although it is never used again,
 * where LRU is right and every affinity candidate wrong; then short-lived hot experts among
 * a stream, where affinity is right and LRU and `reuse` (almost) never hit; then a loop
 * larger than the cache, where only `reuse` hits. The module must hit about as often as
 * the right module in each, lead with it, and pick its victims. Then long random
 * multi-layer sequences under a budget that shrinks and grows: every ghost stays within the
 * budget, the LRU ghost holds exactly what an LRU cache of that size would, each ghost what
 * a ghost run on its module alone holds (its victims by the module's victim() over all its
 * candidates, not by the layers' victims kept between steps), the leader has the most
 * decayed hits, the real victims are the leader's module's, and two instances agree on
 * everything. Last, the parameters.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "policy/evict_adaptive.h"
#include "policy/modules.h"

#define E1 16 /* experts of the one-layer regimes */

static mvm_cost no_cost; /* the evict modules take no costs */

static void *make(const mvm_evict_ops *ops, const mvm_pshape *sh, const char *params)
{
    mvm_pinit in = {.shape = sh, .cost = &no_cost, .params = {params}};
    void *self = NULL;
    CHECK_ST(ops->create(&in, &self), MVM_OK);
    return self;
}

/* ---- three regimes on one layer -----------------------------------------------------------
 * Top-1, one token a step, room for 2 experts. Every expert not named scores 0.01.
 *   stale (steps [0, STALE)): D (2) is used once, at step 0, and keeps scoring 0.5; A (0) and
 *     B (1) alternate, the one used scoring 0.26. Every affinity keeps D (its key ln 0.5
 *     beats anything A or B show), so A and B share one slot and always miss; LRU drops D
 *     at step 2 and then always hits.
 *   hot (the next HOT steps, in periods of 9): the period's hot expert, one of 3..6 in
 *     turn, at its steps 0, 3 and 6, scoring 0.4 all period; between, a stream that walks
 *     experts 7..15, the one used scoring 0.3. LRU drops the hot expert between its uses
 *     (two stream experts came later) and never hits. Affinity at α = 1 keeps it from its
 *     first use (0.4 beats 0.3 and 0.01): two hits a period (at 0.2, the last period's hot
 *     expert outranks it for a few steps: one). `reuse` judges by past intervals: a hot
 *     expert back after 27 steps away looks due later than the stream, and goes after its
 *     first use. The last step is a stream expert.
 *   loop (the next LOOP steps): A, B, D in turn, the one used scoring 0.3. LRU and every
 *     affinity (recency, here) evict the expert needed next and never hit; Belady hits
 *     every other step, and `reuse`, which takes the most recent to be needed last, about
 *     as often. */
enum { A = 0, B = 1, D = 2, STALE = 120, HOT = 360, LOOP = 300 };

static int32_t regime_step(uint32_t t, float *scores)
{
    for (uint32_t x = 0; x < E1; x++)
        scores[x] = 0.01f;
    if (t < STALE) {
        int32_t e = t == 0 ? D : t % 2 ? A : B;
        scores[D] = 0.5f;
        scores[e] = e == D ? 0.5f : 0.26f;
        return e;
    }
    if (t >= STALE + HOT) {
        int32_t e = (int32_t)((t - STALE - HOT) % 3);
        scores[e] = 0.3f;
        return e;
    }
    uint32_t u = t - STALE, hot = 3 + (u / 9) % 4;
    int32_t e = u % 3 == 0 ? (int32_t)hot : (int32_t)(7 + (u - u / 3 - 1) % 9);
    scores[hot] = 0.4f;
    scores[e] = e == (int32_t)hot ? 0.4f : 0.3f;
    return e;
}

typedef struct one_layer {
    mvm_pshape sh;
    uint32_t resident[E1];
    uint8_t busy[E1];
    mvm_pview v;
} one_layer;

static void one_layer_init(one_layer *c, uint32_t cap)
{
    memset(c, 0, sizeof *c);
    c->sh = (mvm_pshape){.n_layers = 1, .n_experts = E1, .top_k = 1, .pages_per_expert = 1};
    c->v = (mvm_pview){.shape = &c->sh, .resident = c->resident, .busy = c->busy,
                       .capacity_pages = cap};
}

/* Steps [from, to) through c's cache under the module: a miss is loaded, the module's
 * victim leaving first when full; then the module observes the step (the simulator's
 * order). The hits. */
static uint32_t run_regimes(const mvm_evict_ops *ops, void *self, one_layer *c, uint32_t from,
                            uint32_t to)
{
    uint32_t hits = 0;
    for (uint32_t t = from; t < to; t++) {
        float sc[E1], w;
        int32_t e = regime_step(t, sc);
        uint32_t counts[E1] = {0};
        counts[e] = 1;
        w = sc[e];
        c->v.tokens = t;
        if (c->resident[e]) {
            hits++;
        } else {
            c->busy[e] = 1;
            if (c->v.used_pages == c->v.capacity_pages) {
                uint32_t cand[E1], n = 0;
                for (uint32_t x = 0; x < E1; x++)
                    if (c->resident[x] && !c->busy[x])
                        cand[n++] = x;
                uint32_t i = ops->victim(self, &c->v, 0, cand, n);
                CHECK(i < n);
                c->resident[cand[i < n ? i : 0]] = 0;
                c->v.used_pages--;
            }
            c->resident[e] = 1;
            c->v.used_pages++;
        }
        mvm_pstep st = {.layer = 0, .n_tok = 1, .scores = sc, .experts = &e, .weights = &w,
                        .counts = counts};
        ops->observe(self, &c->v, &st);
        c->busy[e] = 0;
    }
    return hits;
}

/* The name of the module leading self. */
static const char *leader_module(const void *self)
{
    mvm_adaptive_ghost g[8];
    CHECK(mvm_evict_adaptive_ghosts(self, NULL) <= 8);
    mvm_evict_adaptive_ghosts(self, g);
    return g[mvm_evict_adaptive_leader(self)].module;
}

/* lru, affinity (α = 1), reuse and adaptive through the phases, each on its own cache. */
enum { LRU, AFF, REUSE, ADAPT, N_MOD };

static void test_follows_the_regime(void)
{
    static const mvm_evict_ops *const ops[N_MOD] = {&mvm_evict_lru, &mvm_evict_affinity,
                                                    &mvm_evict_reuse, &mvm_evict_adaptive};
    one_layer c[N_MOD];
    void *self[N_MOD];
    uint32_t h[3][N_MOD];
    for (int m = 0; m < N_MOD; m++) {
        one_layer_init(&c[m], 2);
        if (!(self[m] = make(ops[m], &c[m].sh, m == AFF ? "alpha=1" : "")))
            return;
        h[0][m] = run_regimes(ops[m], self[m], &c[m], 0, STALE);
    }
    CHECK(h[0][LRU] == STALE - 3); /* D, A, B: the cold misses */
    CHECK(h[0][AFF] == 0);
    CHECK(h[0][ADAPT] + 4 >= h[0][LRU]); /* a few steps before the LRU ghost leads */
    CHECK(strcmp(leader_module(self[ADAPT]), "lru") == 0);
    /* A (used last at step STALE - 1) and D: LRU's victim D, affinity's A */
    const uint32_t ad[2] = {A, D};
    CHECK(ops[LRU]->victim(self[LRU], &c[LRU].v, 0, ad, 2) == 1);
    CHECK(ops[AFF]->victim(self[AFF], &c[AFF].v, 0, ad, 2) == 0);
    CHECK(ops[ADAPT]->victim(self[ADAPT], &c[ADAPT].v, 0, ad, 2) == 1);

    for (int m = 0; m < N_MOD; m++)
        h[1][m] = run_regimes(ops[m], self[m], &c[m], STALE, STALE + HOT);
    CHECK(h[1][LRU] == 0);
    CHECK(h[1][AFF] == 2 * HOT / 9);
    CHECK(h[1][REUSE] * 3 <= h[1][AFF] * 2);
    /* The LRU ghost leaves the stale regime with ~32 (1 - e^(-117/32)) = 31.2 decayed hits;
     * the affinity ghost at α = 1 gains 2/9 a step, (64/9)(1 - e^(-t/32)), and overtakes
     * it after t = 54 steps: 12 hits missed meanwhile. */
    CHECK(h[1][ADAPT] + 16 >= h[1][AFF]);
    CHECK(strcmp(leader_module(self[ADAPT]), "affinity") == 0);
    /* the period's hot expert (used two steps before the last) and the last stream expert:
     * LRU's victim the hot one, affinity's the stream expert */
    float sc[E1];
    const uint32_t hx[2] = {3 + ((HOT - 1) / 9) % 4, (uint32_t)regime_step(STALE + HOT - 1, sc)};
    CHECK(ops[LRU]->victim(self[LRU], &c[LRU].v, 0, hx, 2) == 0);
    CHECK(ops[AFF]->victim(self[AFF], &c[AFF].v, 0, hx, 2) == 1);
    CHECK(ops[ADAPT]->victim(self[ADAPT], &c[ADAPT].v, 0, hx, 2) == 1);

    for (int m = 0; m < N_MOD; m++)
        h[2][m] = run_regimes(ops[m], self[m], &c[m], STALE + HOT, STALE + HOT + LOOP);
    CHECK(h[2][LRU] == 0 && h[2][AFF] == 0);
    CHECK(h[2][REUSE] + 15 >= LOOP / 2); /* within 10% of Belady's */
    CHECK(h[2][ADAPT] + 20 >= h[2][REUSE]);
    CHECK(strcmp(leader_module(self[ADAPT]), "reuse") == 0);
    /* after D: B (used the step before) and D; reuse keeps the one needed sooner */
    const uint32_t bd[2] = {B, D};
    uint32_t want = ops[REUSE]->victim(self[REUSE], &c[REUSE].v, 0, bd, 2);
    CHECK(ops[LRU]->victim(self[LRU], &c[LRU].v, 0, bd, 2) != want);
    CHECK(ops[ADAPT]->victim(self[ADAPT], &c[ADAPT].v, 0, bd, 2) == want);
    for (int m = 0; m < N_MOD; m++)
        ops[m]->destroy(self[m]);
}

/* ---- random sequences: the ghosts' bookkeeping --------------------------------------------
 * 3 layers of 8 experts, top-2, 2 pages an expert, 1-3 tokens a step from a drifting,
 * skewed router. The budget: 7 experts (and a page) for 200 tokens, 4 for the next 200,
 * 10 after. A reference LRU cache of the same size runs beside the module. */
enum { SL = 3, SE = 8, SK = 2, SP = 2, TOKENS = 600, WINDOW = 32 };

static uint64_t budget_experts(uint64_t tok)
{
    return tok < 200 ? 7 : tok < 400 ? 4 : 10;
}

/* One token's scores and top-2 at layer l. */
static void route_token(uint64_t *rng, uint32_t l, uint64_t tok, float *sc, int32_t *ex)
{
    double u[SE];
    for (uint32_t e = 0; e < SE; e++)
        u[e] = (double)(check_rng_next(rng) >> 11) / 9007199254740992.0;
    check_drift_route(u, SE, l, tok, sc, ex);
}

/* An LRU cache of whole experts as a ghost should be: the step's missing experts go in,
 * the least recently used expert the step does not use leaving first (ties: the lowest id,
 * as the candidates come in id order); hits decayed per layer step. */
typedef struct ref_lru {
    uint8_t in[SL * SE];
    uint64_t last[SL * SE], clock;
    uint32_t size;
    double hits;
} ref_lru;

static int ref_evict(ref_lru *r, uint32_t l, const uint32_t *counts)
{
    int best = -1;
    for (uint32_t x = 0; x < SL * SE; x++)
        if (r->in[x] && !(x / SE == l && counts[x % SE]) &&
            (best < 0 || r->last[x] < r->last[best]))
            best = (int)x;
    if (best >= 0) {
        r->in[best] = 0;
        r->size--;
    }
    return best >= 0;
}

static void ref_step(ref_lru *r, uint32_t l, const uint32_t *counts, uint64_t cap)
{
    uint32_t hits = 0;
    while (r->size > cap && ref_evict(r, l, counts))
        ;
    for (uint32_t e = 0; e < SE; e++) {
        uint32_t x = l * SE + e;
        if (!counts[e])
            continue;
        if (r->in[x]) {
            hits++;
            continue;
        }
        while (r->size + 1 > cap && ref_evict(r, l, counts))
            ;
        if (r->size < cap)
            r->in[x] = 1, r->size++;
    }
    r->clock++;
    for (uint32_t e = 0; e < SE; e++)
        if (counts[e])
            r->last[l * SE + e] = r->clock;
    r->hits = r->hits * exp(-1.0 / (WINDOW * SL)) + hits;
}

/* The candidate modules run alone, fed the same steps: the leader's must pick the same. */
typedef struct alone {
    const mvm_evict_ops *ops[8];
    void *self[8];
    uint32_t n;
} alone;

/* Each ghost as the module's header says it runs, on its candidate module run alone (so
 * without the module's own shortcuts, such as each layer's victim kept between steps): the
 * step's missing experts go in, the victim that the module's victim() picks among the
 * ghost's experts the step does not use, in id order, leaving first. */
typedef struct ref_ghost {
    uint8_t in[SL * SE];
    uint32_t size;
    double hits;
} ref_ghost;

static int ref_ghost_evict(ref_ghost *r, const alone *al, uint32_t i, const mvm_pview *v,
                           uint32_t l, const uint32_t *counts)
{
    uint32_t cand[SL * SE], n = 0;
    for (uint32_t x = 0; x < SL * SE; x++)
        if (r->in[x] && !(x / SE == l && counts[x % SE]))
            cand[n++] = x;
    if (n == 0)
        return 0;
    const uint32_t k = al->ops[i]->victim(al->self[i], v, l, cand, n);
    r->in[cand[k < n ? k : 0]] = 0;
    r->size--;
    return 1;
}

/* Ghost i's step, before its module observes it. */
static void ref_ghost_step(ref_ghost *r, const alone *al, uint32_t i, const mvm_pview *v,
                           uint32_t l, const uint32_t *counts, uint64_t cap)
{
    uint32_t hits = 0;
    while (r->size > cap && ref_ghost_evict(r, al, i, v, l, counts))
        ;
    for (uint32_t e = 0; e < SE; e++) {
        const uint32_t x = l * SE + e;
        if (!counts[e])
            continue;
        if (r->in[x]) {
            hits++;
            continue;
        }
        while (r->size + 1 > cap && ref_ghost_evict(r, al, i, v, l, counts))
            ;
        if (r->size < cap)
            r->in[x] = 1, r->size++;
    }
    r->hits = r->hits * exp(-1.0 / (WINDOW * SL)) + hits;
}

/* Ghost bookkeeping after a step at `cap` experts, against the reference LRU and each
 * ghost's reference. */
static void check_ghosts(const void *self, const ref_lru *r, const ref_ghost *ref, uint64_t cap)
{
    mvm_adaptive_ghost g[8];
    uint32_t n = mvm_evict_adaptive_ghosts(self, NULL), lead = mvm_evict_adaptive_leader(self);
    CHECK(n <= 8 && lead < n);
    if (n > 8 || lead >= n)
        return;
    mvm_evict_adaptive_ghosts(self, g);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t size = 0;
        for (uint32_t x = 0; x < SL * SE; x++)
            size += g[i].in[x];
        CHECK(size == g[i].size && size <= cap);
        CHECK(g[i].hits <= g[lead].hits);
        if (strcmp(g[i].module, "lru") == 0) {
            CHECK(memcmp(g[i].in, r->in, sizeof r->in) == 0);
            CHECK(fabs(g[i].hits - r->hits) <= 1e-9 * (1 + r->hits));
        }
        CHECK(memcmp(g[i].in, ref[i].in, sizeof ref[i].in) == 0 && g[i].size == ref[i].size);
        CHECK(fabs(g[i].hits - ref[i].hits) <= 1e-9 * (1 + ref[i].hits));
    }
}

static void alone_make(alone *a, const void *adaptive, const mvm_pshape *sh)
{
    mvm_adaptive_ghost g[8];
    a->n = mvm_evict_adaptive_ghosts(adaptive, NULL);
    CHECK(a->n >= 2 && a->n <= 8);
    a->n = a->n <= 8 ? a->n : 0;
    mvm_evict_adaptive_ghosts(adaptive, g);
    for (uint32_t i = 0; i < a->n; i++) {
        a->ops[i] = mvm_policy_find(MVM_ROLE_EVICT, g[i].module);
        CHECK(a->ops[i] != NULL);
        a->self[i] = a->ops[i] ? make(a->ops[i], sh, g[i].params) : NULL;
    }
}

static void test_ghost_bookkeeping(void)
{
    static const mvm_pshape sh = {.n_layers = SL, .n_experts = SE, .top_k = SK,
                                  .pages_per_expert = SP};
    static const uint32_t resident[SL * SE];
    static const uint8_t busy[SL * SE];
    mvm_pview v = {.shape = &sh, .resident = resident, .busy = busy};
    void *twin[2] = {make(&mvm_evict_adaptive, &sh, ""), make(&mvm_evict_adaptive, &sh, "")};
    if (!twin[0] || !twin[1])
        return;
    alone al;
    alone_make(&al, twin[0], &sh);
    static ref_lru r;
    static ref_ghost ref[8];
    memset(&r, 0, sizeof r);
    memset(ref, 0, sizeof ref);
    uint64_t rng = 7;
    uint32_t leaders = 0, prev = mvm_evict_adaptive_leader(twin[0]);
    for (uint64_t tok = 0; tok < TOKENS; tok++) {
        v.tokens = tok;
        v.capacity_pages = budget_experts(tok) * SP + 1; /* an odd page: whole experts */
        for (uint32_t l = 0; l < SL; l++) {
            uint32_t n = 1 + (uint32_t)(check_rng_next(&rng) % 3), counts[SE] = {0};
            float sc[3 * SE], w[3 * SK];
            int32_t ex[3 * SK];
            for (uint32_t t = 0; t < n; t++)
                route_token(&rng, l, tok * 3 + t, sc + t * SE, ex + t * SK);
            for (uint32_t j = 0; j < n * SK; j++)
                counts[ex[j]]++, w[j] = sc[(j / SK) * SE + (uint32_t)ex[j]];
            mvm_pstep st = {.layer = l, .n_tok = n, .scores = sc, .experts = ex, .weights = w,
                            .counts = counts};
            for (int k = 0; k < 2; k++)
                mvm_evict_adaptive.observe(twin[k], &v, &st);
            for (uint32_t i = 0; i < al.n; i++) {
                ref_ghost_step(&ref[i], &al, i, &v, l, counts, budget_experts(tok));
                al.ops[i]->observe(al.self[i], &v, &st);
            }
            ref_step(&r, l, counts, budget_experts(tok));
            check_ghosts(twin[0], &r, ref, budget_experts(tok));

            /* a random candidate set: the leader's module's victim, the twin's too */
            uint32_t cand[SL * SE], nc = 0, lead = mvm_evict_adaptive_leader(twin[0]);
            for (uint32_t x = 0; x < SL * SE; x++)
                if (check_rng_next(&rng) % 2)
                    cand[nc++] = x;
            if (nc == 0)
                cand[nc++] = 0;
            uint32_t got = mvm_evict_adaptive.victim(twin[0], &v, l, cand, nc);
            CHECK(lead < al.n && got == al.ops[lead]->victim(al.self[lead], &v, l, cand, nc));
            CHECK(got == mvm_evict_adaptive.victim(twin[1], &v, l, cand, nc));
            CHECK(lead == mvm_evict_adaptive_leader(twin[1]));
            leaders += lead != prev;
            prev = lead;
        }
    }
    CHECK(leaders > 0); /* the drifting router made some candidate take over */
    mvm_adaptive_ghost g0[8], g1[8];
    uint32_t n = mvm_evict_adaptive_ghosts(twin[0], g0);
    mvm_evict_adaptive_ghosts(twin[1], g1);
    for (uint32_t i = 0; i < n && i < 8; i++)
        CHECK(g0[i].hits == g1[i].hits && memcmp(g0[i].in, g1[i].in, SL * SE) == 0);
    for (uint32_t i = 0; i < al.n; i++)
        if (al.self[i])
            al.ops[i]->destroy(al.self[i]);
    for (int k = 0; k < 2; k++)
        mvm_evict_adaptive.destroy(twin[k]);
}

/* No budget at all: the ghosts stay empty, nothing hits, nothing breaks. */
static void test_no_room(void)
{
    one_layer c;
    one_layer_init(&c, 0);
    void *self = make(&mvm_evict_adaptive, &c.sh, "window=4");
    if (!self)
        return;
    float sc[E1], w;
    for (uint32_t t = 0; t < 50; t++) {
        int32_t e = regime_step(t, sc);
        uint32_t counts[E1] = {0};
        counts[e] = 1;
        w = sc[e];
        mvm_pstep st = {.layer = 0, .n_tok = 1, .scores = sc, .experts = &e, .weights = &w,
                        .counts = counts};
        mvm_evict_adaptive.observe(self, &c.v, &st);
    }
    mvm_adaptive_ghost g[8];
    uint32_t n = mvm_evict_adaptive_ghosts(self, g);
    for (uint32_t i = 0; i < n && i < 8; i++)
        CHECK(g[i].size == 0 && g[i].hits == 0);
    mvm_evict_adaptive.destroy(self);
}

static void test_params(void)
{
    static const char *const bad[] = {"window=0", "window=-3", "window=x", "alpha=0.2",
                                      "window=1e10"};
    static const mvm_pshape sh = {.n_layers = 2, .n_experts = 4, .top_k = 1,
                                  .pages_per_expert = 1};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        mvm_pinit in = {.shape = &sh, .cost = &no_cost, .params = {bad[i]}};
        void *self = NULL;
        CHECK_ST(mvm_evict_adaptive.create(&in, &self), MVM_ERR_INVALID);
        CHECK(strstr(mvm_last_error(), "evict adaptive") != NULL);
    }
    void *self = make(&mvm_evict_adaptive, &sh, "window=8");
    if (self)
        mvm_evict_adaptive.destroy(self);
    CHECK(mvm_policy_find(MVM_ROLE_EVICT, "adaptive") == &mvm_evict_adaptive);
}

int main(void)
{
    RUN(test_follows_the_regime);
    RUN(test_ghost_bookkeeping);
    RUN(test_no_room);
    RUN(test_params);
    TEST_END();
}
