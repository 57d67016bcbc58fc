/*
 * The config modules (policy/config_*.c) and MoEpic's exposed-time model
 * (policy/moepic_model.c): budgets never exceed the capacity and θ stays in (0, 1];
 * uniform is exact; hot fills the budget in the order of its global ranking, as per-layer
 * budgets while it profiles and as the experts it holds once the profile is over (at once
 * from an offline profile, whose table stays put whatever the run routes); MoEpic's
 * sub-problem (Eq. 11) on a hand-worked layer where the split beats whole experts; the
 * budget search on a two-layer case with a known optimum (it converges there and stays);
 * through the module, budget moves toward the layer with the worse exposed time, toward
 * the unpredictable layer once the speculative prediction (Eq. 3) works, identically on
 * every run, and only every τ tokens.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "policy/modules.h"
#include "policy/moepic_model.h"

#define MAXL 4
#define MAXE 8

typedef struct fx {
    mvm_pshape sh;
    mvm_cost cost;
    uint32_t resident[MAXL * MAXE];
    uint8_t busy[MAXL * MAXE];
    mvm_pview v;
    uint32_t counts[MAXE];
    int32_t experts[64];
    float weights[64];
    float hidden[64 * MAXE];
    mvm_pstep step;
    uint64_t pages[MAXL];
    float theta[MAXL];
} fx;

static void fx_init(fx *f, uint32_t L, uint32_t E, uint32_t K, uint32_t ppe, uint64_t capacity)
{
    memset(f, 0, sizeof *f);
    f->sh = (mvm_pshape){.n_layers = L, .n_experts = E, .top_k = K, .n_embd = E, .n_ff = 1,
                         .pages_per_expert = ppe, .expert_bytes = 6144};
    /* t_load 2, GPU 0.25 + 0.125·n, CPU 1 + 0.5·n, attention 0.125 per token */
    mvm_machine m = {.pcie_bw = 3072, .zerocopy_bw = 3072, .gpu_mem_bw = 24576, .gpu_flops = 48,
                     .cpu_mem_bw = 6144, .cpu_flops = 12, .attn_time = 0.125};
    mvm_cost_init(&f->cost, &m, 6144, 1, 1);
    f->v = (mvm_pview){.shape = &f->sh, .resident = f->resident, .busy = f->busy,
                       .capacity_pages = capacity};
    f->step = (mvm_pstep){.experts = f->experts, .weights = f->weights, .counts = f->counts};
}

static void *fx_create(fx *f, const mvm_config_ops *ops, const char *params,
                       const mvm_router *router)
{
    mvm_pinit init = {.shape = &f->sh, .cost = &f->cost, .params = {params}, .router = router};
    void *self = NULL;
    CHECK_ST(ops->create(&init, &self), MVM_OK);
    return self;
}

/* One token through `layer`, activating the listed experts (one token each). */
static void fx_observe(fx *f, const mvm_config_ops *ops, void *self, uint32_t layer,
                       const uint32_t *on, uint32_t n_on)
{
    memset(f->counts, 0, sizeof f->counts);
    for (uint32_t i = 0; i < n_on; i++) {
        f->counts[on[i]]++;
        f->experts[i] = (int32_t)on[i];
        f->weights[i] = 1.0f / n_on;
    }
    f->step.layer = layer;
    f->step.n_tok = 1;
    ops->observe(self, &f->v, &f->step);
}

/* Budgets within the capacity, θ in (0, 1], and a cache whose prefixes fit the budget. */
static void check_config(const fx *f)
{
    uint64_t sum = 0;
    for (uint32_t l = 0; l < f->sh.n_layers; l++) {
        sum += f->pages[l];
        CHECK(f->theta[l] > 0 && f->theta[l] <= 1);
        double prefix = f->theta[l] * f->sh.pages_per_expert;
        CHECK(prefix == floor(prefix)); /* a split is a page prefix */
        CHECK(f->pages[l] <= (uint64_t)f->sh.n_experts * f->sh.pages_per_expert);
    }
    CHECK(sum <= f->v.capacity_pages);
}

/* ---- uniform ---------------------------------------------------------------------------- */

static void test_uniform(void)
{
    fx f;
    fx_init(&f, 4, 8, 2, 4, 103);
    void *u = fx_create(&f, &mvm_config_uniform, NULL, NULL);
    CHECK(mvm_config_uniform.configure(u, &f.v, f.pages, f.theta) == 1);
    for (uint32_t l = 0; l < 4; l++)
        CHECK(f.pages[l] == 25 && f.theta[l] == 1);
    check_config(&f);
    CHECK(mvm_config_uniform.configure(u, &f.v, f.pages, f.theta) == 0);
    f.v.capacity_pages = 1000; /* more than the 8 × 4 pages a layer has: cut to them */
    CHECK(mvm_config_uniform.configure(u, &f.v, f.pages, f.theta) == 1);
    for (uint32_t l = 0; l < 4; l++)
        CHECK(f.pages[l] == 32);
    f.v.capacity_pages = 3;
    CHECK(mvm_config_uniform.configure(u, &f.v, f.pages, f.theta) == 1);
    for (uint32_t l = 0; l < 4; l++)
        CHECK(f.pages[l] == 0);
    mvm_config_uniform.destroy(u);
    mvm_pinit init = {.shape = &f.sh, .cost = &f.cost, .params = {"theta=0.5"}};
    CHECK_ST(mvm_config_uniform.create(&init, &u), MVM_ERR_INVALID);
}

/* ---- hot -------------------------------------------------------------------------------- */

static void test_hot(void)
{
    fx f;
    fx_init(&f, 3, 4, 1, 2, 11); /* 11 pages: a table of 5 whole experts */
    void *h = fx_create(&f, &mvm_config_hot, "profile=1000,buffer=0", NULL);
    /* With no counts the table is spread over the layers: 2, 2, 1 experts. */
    CHECK(mvm_config_hot.configure(h, &f.v, f.pages, f.theta) == 1);
    CHECK(f.pages[0] == 4 && f.pages[1] == 4 && f.pages[2] == 2);
    uint8_t held[MAXL * MAXE];
    memset(held, 7, sizeof held);
    CHECK(mvm_config_hot.hold(h, held) == 0); /* still profiling: nothing held */
    for (uint32_t x = 0; x < 12; x++)
        CHECK(held[x] == 0);
    /* Token counts: L0 e0 100, e1 50, e2 1; L1 e3 80, e0 70; L2 e1 60. Global ranking:
     * L0e0 100, L1e3 80, L1e0 70, L2e1 60, L0e1 50 | L0e2 1: per layer 2, 2, 1. */
    struct { uint32_t layer, e, n; } obs[] = {{0, 0, 100}, {0, 1, 50}, {0, 2, 1},
                                               {1, 3, 80}, {1, 0, 70}, {2, 1, 60}};
    for (size_t i = 0; i < sizeof obs / sizeof *obs; i++)
        for (uint32_t t = 0; t < obs[i].n; t++)
            fx_observe(&f, &mvm_config_hot, h, obs[i].layer, &obs[i].e, 1);
    mvm_config_hot.configure(h, &f.v, f.pages, f.theta);
    CHECK(f.pages[0] == 4 && f.pages[1] == 4 && f.pages[2] == 2);
    check_config(&f);
    /* A smaller budget takes the ranking's head: 3 experts = L0e0, L1e3, L1e0. */
    f.v.capacity_pages = 7;
    CHECK(mvm_config_hot.configure(h, &f.v, f.pages, f.theta) == 1);
    CHECK(f.pages[0] == 2 && f.pages[1] == 4 && f.pages[2] == 0);
    for (uint32_t l = 0; l < 3; l++)
        CHECK(f.theta[l] == 1);
    /* Layer 2 heats up: 120 more tokens for L2e1 make it first; 3 experts = L2e1, L0e0,
     * L1e3. */
    uint32_t e1 = 1;
    for (int t = 0; t < 120; t++)
        fx_observe(&f, &mvm_config_hot, h, 2, &e1, 1);
    mvm_config_hot.configure(h, &f.v, f.pages, f.theta);
    CHECK(f.pages[0] == 2 && f.pages[1] == 2 && f.pages[2] == 2);
    /* By default one token's top_k = 1 experts stay out of the table as the load buffer:
     * 7 pages = 2 pages of buffer + a table of 2 (L2e1, L0e0). */
    void *hb = fx_create(&f, &mvm_config_hot, "profile=1000", NULL);
    for (int t = 0; t < 3; t++) {
        uint32_t e0 = 0;
        fx_observe(&f, &mvm_config_hot, hb, 2, &e1, 1);
        fx_observe(&f, &mvm_config_hot, hb, 0, &e0, 1);
    }
    fx_observe(&f, &mvm_config_hot, hb, 2, &e1, 1);
    mvm_config_hot.configure(hb, &f.v, f.pages, f.theta);
    CHECK(f.pages[0] == 2 && f.pages[1] == 0 && f.pages[2] == 2);
    mvm_config_hot.destroy(hb);
    /* A budget beyond all experts holds all of them. */
    f.v.capacity_pages = 1000;
    mvm_config_hot.configure(h, &f.v, f.pages, f.theta);
    CHECK(f.pages[0] == 8 && f.pages[1] == 8 && f.pages[2] == 8);
    mvm_config_hot.destroy(h);

    /* The profile: after 4 tokens through layer 0 the table stops changing. */
    fx_init(&f, 2, 4, 1, 1, 1);
    h = fx_create(&f, &mvm_config_hot, "profile=4,buffer=0", NULL);
    uint32_t a = 0, b = 3, c = 1;
    for (int t = 0; t < 4; t++) {
        fx_observe(&f, &mvm_config_hot, h, 0, &a, 1);
        fx_observe(&f, &mvm_config_hot, h, 1, &b, 1);
    }
    for (int t = 0; t < 10; t++) { /* after the profile: ignored */
        fx_observe(&f, &mvm_config_hot, h, 0, &c, 1);
        fx_observe(&f, &mvm_config_hot, h, 1, &b, 1);
    }
    /* Over: the table is held, and no layer has a budget of its own. */
    CHECK(mvm_config_hot.configure(h, &f.v, f.pages, f.theta) == 1);
    CHECK(f.pages[0] == UINT64_MAX && f.pages[1] == UINT64_MAX);
    CHECK(mvm_config_hot.hold(h, held) == 1);
    /* 4 vs 4 tokens: the tie goes to layer 0's e0 (later counts ignored: not L0e1) */
    for (uint32_t x = 0; x < 8; x++)
        CHECK(held[x] == (x == 0));
    CHECK(mvm_config_hot.configure(h, &f.v, f.pages, f.theta) == 0);
    mvm_config_hot.destroy(h);
    mvm_pinit init = {.shape = &f.sh, .cost = &f.cost, .params = {"profile=-1"}};
    CHECK_ST(mvm_config_hot.create(&init, &h), MVM_ERR_INVALID);
    init.params.text = "buffer=1.5";
    CHECK_ST(mvm_config_hot.create(&init, &h), MVM_ERR_INVALID);
}

/* The offline profile: the table from its counts, held before the first token, the same
 * whatever the run then routes; it follows only the capacity. */
static void test_hot_offline(void)
{
    fx f;
    fx_init(&f, 3, 4, 1, 2, 7); /* 7 pages, no buffer: a table of 3 whole experts */
    /* L0 e0 100, e1 50, e2 1; L1 e3 80, e0 70; L2 e1 60 (test_hot's ranking) */
    const uint64_t counts[12] = {100, 50, 1, 0, 70, 0, 0, 80, 0, 60, 0, 0};
    const mvm_pprofile prof = {.n_layers = 3, .n_experts = 4, .n_tokens = 200,
                               .counts = counts};
    mvm_pinit init = {.shape = &f.sh, .cost = &f.cost, .params = {"buffer=0"},
                      .profile = &prof};
    void *h = NULL;
    CHECK_ST(mvm_config_hot.create(&init, &h), MVM_OK);
    uint8_t held[MAXL * MAXE];
    CHECK(mvm_config_hot.configure(h, &f.v, f.pages, f.theta) == 1);
    for (uint32_t l = 0; l < 3; l++)
        CHECK(f.pages[l] == UINT64_MAX && f.theta[l] == 1);
    CHECK(mvm_config_hot.hold(h, held) == 3); /* L0e0, L1e3, L1e0 */
    for (uint32_t x = 0; x < 12; x++)
        CHECK(held[x] == (x == 0 || x == 7 || x == 4));
    /* The run routes elsewhere: the table stays. */
    uint32_t e2 = 2;
    for (int t = 0; t < 500; t++)
        for (uint32_t l = 0; l < 3; l++)
            fx_observe(&f, &mvm_config_hot, h, l, &e2, 1);
    CHECK(mvm_config_hot.configure(h, &f.v, f.pages, f.theta) == 0);
    CHECK(mvm_config_hot.hold(h, held) == 3);
    CHECK(held[0] && held[7] && held[4] && !held[2] && !held[6] && !held[10]);
    /* More room: the ranking's next two, L2e1 and L0e1, join. */
    f.v.capacity_pages = 10;
    CHECK(mvm_config_hot.configure(h, &f.v, f.pages, f.theta) == 1);
    CHECK(mvm_config_hot.hold(h, held) == 5);
    for (uint32_t x = 0; x < 12; x++)
        CHECK(held[x] == (x == 0 || x == 1 || x == 7 || x == 4 || x == 9));
    mvm_config_hot.destroy(h);
    /* A profile of another shape is refused, naming both. */
    const mvm_pprofile other = {.n_layers = 3, .n_experts = 8, .n_tokens = 1, .counts = counts};
    init.profile = &other;
    CHECK_ST(mvm_config_hot.create(&init, &h), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "3 layers of 8 experts, the model 3 of 4") != NULL);
}

/* ---- MoEpic's model --------------------------------------------------------------------- */

/* One layer, E = 4, K = 1, 2 pages per expert, a budget of 2 pages, T_load 1, T_exp 0.25.
 * H: activated experts at LCP ranks 0..3 in 50, 30, 10, 10 of 100 steps, so H(1) = .5,
 * H(2) = .8. Predictions: the best predicted expert is active in 60 steps and always at
 * LCP rank 1; the second active in 20 and always at rank 0; the rest at ranks 2, 3.
 * C = 1, θ = 1: A_cache = .5; y = 1 has PH(1, 1) = 0 so its prefetch costs 1 > the window
 * 0.6: m = .5.
 * C = 2, θ = .5: A_cache = .8 × .5 = .4; y = 1 has PH(1, 2) = 1, costs (1 - .5) = .5 <= .6
 * and earns .5 × .6 = .3; y = 2 would end at 1.0 > .6. m = .7: the split wins.
 * Times: T_hide = .7 × .25 = .175, T_miss = .3 × 1 = .3, exposed .125. With a window of
 * 0.4 no prefetch fits and whole experts win (m = .5). */
static void test_moepic_layer(void)
{
    uint32_t hit_rank[4] = {50, 30, 10, 10}, pred_act[4] = {60, 20, 10, 10};
    uint32_t pred_rank[16] = {0, 100, 0, 0,  /* y = 0: always at rank 1 */
                              100, 0, 0, 0,  /* y = 1: always at rank 0 */
                              0, 0, 100, 0,  /**/
                              0, 0, 0, 100}; /**/
    mvm_moepic_stats s = {.hit_rank = hit_rank, .pred_act = pred_act, .pred_rank = pred_rank,
                          .activated = 100, .predicted = 100, .k = 1, .t_exp = 0.25};
    double scratch[4];
    mvm_moepic_model md = {.n_layers = 1, .n_experts = 4, .pages_per_expert = 2, .t_load = 1,
                           .layer = &s, .scratch = scratch};
    mvm_moepic_split o;
    mvm_moepic_layer(&md, 0, 2, 0.6, &o);
    CHECK(o.cached == 2 && o.prefix == 1);
    CHECK(fabs(o.m - 0.7) < 1e-12);
    CHECK(fabs(o.t_hide - 0.175) < 1e-12 && fabs(o.t_miss - 0.3) < 1e-12);
    CHECK(fabs(o.exposed - 0.125) < 1e-12);
    mvm_moepic_layer(&md, 0, 2, 0.4, &o);
    CHECK(o.cached == 1 && o.prefix == 2 && fabs(o.m - 0.5) < 1e-12);
    /* Without predictions it is cache only: m = max(.5 × 1, .8 × .5) = .5, whole experts. */
    s.predicted = 0;
    mvm_moepic_layer(&md, 0, 2, 10, &o);
    CHECK(o.cached == 1 && fabs(o.m - 0.5) < 1e-12);
    /* No budget: nothing cached, θ reported whole, everything missed. */
    mvm_moepic_layer(&md, 0, 0, 10, &o);
    CHECK(o.cached == 0 && o.prefix == 2 && o.m == 0 && o.exposed == 1);
    /* A tie between whole and split (H(2)·.5 = H(1)·1) keeps whole experts. */
    uint32_t flat[4] = {50, 50, 0, 0};
    s.hit_rank = flat;
    mvm_moepic_layer(&md, 0, 2, 10, &o);
    CHECK(o.cached == 1 && o.prefix == 2 && fabs(o.m - 0.5) < 1e-12);
    /* m is at most K: the cached expert always hits and the prefetch would add the
     * predicted one again (independence overcounts); clamped to K = 1. */
    uint32_t always[4] = {100, 0, 0, 0};
    s.hit_rank = always;
    s.predicted = 100;
    mvm_moepic_layer(&md, 0, 2, 10, &o);
    CHECK(o.m == 1 && o.t_miss == 0 && o.t_hide == 0.25);
}

/* Windows (Eq. 7): layer 0 half hit (K = 1, m = .5, T_exp 1, T_load 1) has T_hide = .5 =
 * T_miss, so nothing of it is exposed and layer 1's window is K·T_exp - min(.5, .5) +
 * T_att1 = .5: too short for layer 1's one sure prediction (an uncached expert costs
 * T_load = 1), which is exposed in full (1). With T_att1 = .5 the window is 1 and the
 * prefetch fits (0). Layer 0's own window is T_head + T_att0 (T_wind^1). */
static void test_moepic_windows(void)
{
    uint32_t half[2] = {50, 0}, none[2] = {0, 0}, sure[2] = {100, 0};
    uint32_t uncached[4] = {0, 100, 0, 0}; /* the predicted expert is never at rank 0 */
    uint32_t zero[4] = {0};
    mvm_moepic_stats s[2] = {
        {.hit_rank = half, .pred_act = none, .pred_rank = zero, .activated = 100, .k = 1,
         .t_exp = 1},
        {.hit_rank = none, .pred_act = sure, .pred_rank = uncached, .activated = 100,
         .predicted = 100, .k = 1, .t_exp = 1}};
    double scratch[2];
    mvm_moepic_model md = {.n_layers = 2, .n_experts = 2, .pages_per_expert = 1, .t_load = 1,
                           .layer = s, .scratch = scratch};
    mvm_moepic_split out[2];
    uint64_t pages[2] = {1, 1};
    CHECK(mvm_moepic_expert_split(&md, pages, out) == 1);
    CHECK(out[0].m == 0.5 && out[0].exposed == 0 && out[1].m == 0);
    s[1].t_att = 0.5;
    CHECK(mvm_moepic_expert_split(&md, pages, out) == 0);
    CHECK(out[1].m == 1);
    /* Layer 0 with the same sure prediction: T_wind^1 = T_head + T_att0. */
    s[0].pred_act = sure;
    s[0].pred_rank = uncached;
    s[0].predicted = 100;
    s[0].hit_rank = none;
    md.t_head = 0.75;
    mvm_moepic_expert_split(&md, pages, out);
    CHECK(out[0].m == 0);
    s[0].t_att = 0.25;
    mvm_moepic_expert_split(&md, pages, out);
    CHECK(out[0].m == 1);
}

/* Two layers, K = 2, E = 8, one page per expert, T_load 1, T_exp 0: exposed = K - m with
 * m = K·H(C). Layer 0's two experts are always at LCP ranks 0 and 1 (H saturates at C = 2);
 * layer 1's are spread evenly over the 8 ranks (H(C) = C/8). From 4 + 4 pages the total
 * is 0 + 1; moving pages to layer 1 gives 3 + 5 (0.75), then 2 + 6 (0.5); 1 + 7 would be
 * 1 + .25: rolled back. So the search ends at 2 + 6 after two moves, and stays there. */
static void test_moepic_allocate(void)
{
    uint32_t h0[8] = {100, 100, 0, 0, 0, 0, 0, 0}, h1[8] = {25, 25, 25, 25, 25, 25, 25, 25};
    uint32_t zero[64] = {0};
    mvm_moepic_stats s[2] = {
        {.hit_rank = h0, .pred_act = zero, .pred_rank = zero, .activated = 200, .k = 2},
        {.hit_rank = h1, .pred_act = zero, .pred_rank = zero, .activated = 200, .k = 2}};
    double scratch[8];
    mvm_moepic_model md = {.n_layers = 2, .n_experts = 8, .pages_per_expert = 1, .t_load = 1,
                           .layer = s, .scratch = scratch};
    mvm_moepic_split out[2], work[6];
    uint64_t pages[2] = {4, 4}, tmp[2];
    CHECK(fabs(mvm_moepic_expert_split(&md, pages, out) - 1) < 1e-12);
    CHECK(mvm_moepic_allocate(&md, 1, pages, out, work, tmp) == 2);
    CHECK(pages[0] == 2 && pages[1] == 6);
    CHECK(out[0].cached == 2 && out[1].cached == 6);
    CHECK(fabs(out[0].exposed + out[1].exposed - 0.5) < 1e-12);
    CHECK(mvm_moepic_allocate(&md, 1, pages, out, work, tmp) == 0); /* a fixed point */
    CHECK(pages[0] == 2 && pages[1] == 6);
    /* Coarser steps reach what they can: from 4 + 4 by 2 pages, 2 + 6 again in one move. */
    pages[0] = pages[1] = 4;
    CHECK(mvm_moepic_allocate(&md, 2, pages, out, work, tmp) == 1);
    CHECK(pages[0] == 2 && pages[1] == 6);
    /* The receiver is never its own giver: here layer 0 (experts at rank 4 only) gains
     * from a fifth page and loses nothing from a third, layer 1 (ranks 0 and 1) neither
     * gains nor loses; the move must come from layer 1. */
    uint32_t deep[8] = {0, 0, 0, 0, 200, 0, 0, 0};
    s[0].hit_rank = deep;
    s[1].hit_rank = h0;
    pages[0] = pages[1] = 4;
    CHECK(mvm_moepic_allocate(&md, 1, pages, out, work, tmp) == 1);
    CHECK(pages[0] == 5 && pages[1] == 3);
}

/* ---- fixedpoint, through the module ---------------------------------------------------- */

/* Two distinct experts of 8, expert e drawn with weight 8 - e (a long tail, as routers
 * have), from a fixed xorshift sequence. */
static void draw_pair(uint64_t *r, uint32_t *pair)
{
    for (uint32_t n = 0; n < 2;) {
        *r ^= *r << 13;
        *r ^= *r >> 7;
        *r ^= *r << 17;
        uint32_t x = (uint32_t)(*r % 36), e = 0;
        while (x >= 8 - e)
            x -= 8 - e++;
        if (n == 0 || pair[0] != e)
            pair[n++] = e;
    }
}

/* Tokens through two layers with K = 2 of E = 8: layer 0 always uses experts 6 and 7 (first
 * in LCP priority, last in index), layer 1 draws its two from the long tail. With the
 * hidden states and an identity router for layer 1, layer 0's MoE input points at layer
 * 1's experts (a perfect speculative predictor). */
static void feed(fx *f, void *self, uint32_t tokens, int with_hidden)
{
    uint64_t r = 88172645463325252ull;
    for (uint32_t t = 0; t < tokens; t++) {
        f->v.tokens = t;
        uint32_t hot[2] = {6, 7}, spread[2];
        draw_pair(&r, spread);
        memset(f->hidden, 0, sizeof f->hidden);
        if (with_hidden) {
            f->hidden[spread[0]] = 8;
            f->hidden[spread[1]] = 8;
        }
        f->step.hidden = with_hidden ? f->hidden : NULL;
        fx_observe(f, &mvm_config_fixedpoint, self, 0, hot, 2);
        fx_observe(f, &mvm_config_fixedpoint, self, 1, spread, 2);
    }
    f->v.tokens = tokens;
}

#define FP_PARAMS "tau=100,zeta=0.125" /* steps of V_e/8 = 2 pages: one whole expert */

static void test_fixedpoint_moves_budget(void)
{
    fx f;
    /* 2 pages per expert; 20 pages = a buffer of K = 2 experts (4 pages) + V_e = 16. */
    fx_init(&f, 2, 8, 2, 2, 20);
    void *fp = fx_create(&f, &mvm_config_fixedpoint, FP_PARAMS, NULL);
    /* Before τ tokens: Algorithm 1's start, V_e / L = 8 pages a layer at θ = 0.5, i.e. the
     * first pages of all 8 experts. */
    CHECK(mvm_config_fixedpoint.configure(fp, &f.v, f.pages, f.theta) == 1);
    CHECK(f.pages[0] == 8 && f.pages[1] == 8 && f.theta[0] == 0.5f && f.theta[1] == 0.5f);
    check_config(&f);
    feed(&f, fp, 99, 0);
    CHECK(mvm_config_fixedpoint.configure(fp, &f.v, f.pages, f.theta) == 0);
    feed(&f, fp, 100, 0);
    CHECK(mvm_config_fixedpoint.configure(fp, &f.v, f.pages, f.theta) == 1);
    check_config(&f);
    /* Layer 0 needs only its two experts whole (4 pages) to miss nothing; half of every
     * expert leaves it exposed, so it takes θ = 1 on 2 experts. Layer 1, which misses
     * more (its exposed time is the worse one), gets the budget layer 0 gave up. */
    CHECK(f.pages[0] == 4 && f.theta[0] == 1);
    CHECK(f.pages[1] > 8);
    uint64_t p1 = f.pages[1];
    float th1 = f.theta[1];
    /* Converged: the next τ with nothing new observed keeps the answer. */
    f.v.tokens = 250;
    CHECK(mvm_config_fixedpoint.configure(fp, &f.v, f.pages, f.theta) == 0);
    CHECK(f.pages[0] == 4 && f.pages[1] == p1 && f.theta[1] == th1);

    /* Deterministic: a second instance fed the same tokens answers the same. */
    fx g;
    fx_init(&g, 2, 8, 2, 2, 20);
    void *fp2 = fx_create(&g, &mvm_config_fixedpoint, FP_PARAMS, NULL);
    feed(&g, fp2, 100, 0);
    mvm_config_fixedpoint.configure(fp2, &g.v, g.pages, g.theta);
    CHECK(g.pages[0] == 4 && g.pages[1] == p1 && g.theta[1] == th1);
    /* A new capacity restarts from uniform budgets and searches again at once. */
    f.v.capacity_pages = 12;
    CHECK(mvm_config_fixedpoint.configure(fp, &f.v, f.pages, f.theta) == 1);
    check_config(&f);
    CHECK(f.pages[0] + f.pages[1] <= 8);
    mvm_config_fixedpoint.destroy(fp);
    mvm_config_fixedpoint.destroy(fp2);
}

/* With the speculative predictor working for layer 1 (layer 0's MoE input names layer 1's
 * experts, and the window — K·T_exp plus layer 1's attention — holds a prefetch), layer 1
 * needs less cache, so it ends with less budget than when nothing can be predicted. A
 * router bias (gpt-oss) on layer 1 that always points at its two rarest experts, 6 and 7,
 * misleads the predictor: its forecasts then miss, and layer 1 keeps more budget. So does
 * a sigmoid router's choose bias (DeepSeek-V3's exp_probs_b) pointing there: the
 * speculation ranks by what the router chooses by. */
static void test_fixedpoint_prediction(void)
{
    float ident[MAXE * MAXE] = {0};
    for (uint32_t e = 0; e < MAXE; e++)
        ident[e * MAXE + e] = 1;
    const float *routers[2] = {ident, ident};
    static const float rare[8] = {0, 0, 0, 0, 0, 0, 100, 100};
    const float *bias[2] = {NULL, rare};
    uint64_t pages[4]; /* blind, seeing, misled by a logit bias, by a choose bias */
    for (int run = 0; run < 4; run++) {
        fx f;
        fx_init(&f, 2, 8, 2, 2, 20);
        f.cost.m.attn_time = 8; /* a wide window: prefetches fit */
        mvm_router rt = {.weights = routers, .logit_bias = run == 2 ? bias : NULL,
                         .choose_bias = run == 3 ? bias : NULL, .sigmoid = run == 3};
        void *fp = fx_create(&f, &mvm_config_fixedpoint, FP_PARAMS, &rt);
        feed(&f, fp, 100, run > 0);
        mvm_config_fixedpoint.configure(fp, &f.v, f.pages, f.theta);
        check_config(&f);
        pages[run] = f.pages[1];
        mvm_config_fixedpoint.destroy(fp);
    }
    CHECK(pages[1] < pages[0]);
    CHECK(pages[2] > pages[1]);
    CHECK(pages[3] > pages[1]);
    if (!(pages[1] < pages[0] && pages[2] > pages[1] && pages[3] > pages[1]))
        fprintf(stderr, "  layer 1's pages: blind %llu, seeing %llu, misled %llu and %llu\n",
                (unsigned long long)pages[0], (unsigned long long)pages[1],
                (unsigned long long)pages[2], (unsigned long long)pages[3]);
}

static void test_fixedpoint_params(void)
{
    fx f;
    fx_init(&f, 2, 8, 2, 2, 36);
    const char *bad[] = {"tau=0", "tau=2.5", "zeta=1", "zeta=0", "omega=0", "rho=0", "rho=2",
                         "buffer=-1", "buffer=0.5", "window=3", "theta=1.5", "theta=-0.1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        mvm_pinit init = {.shape = &f.sh, .cost = &f.cost, .params = {bad[i]}};
        void *self;
        CHECK_ST(mvm_config_fixedpoint.create(&init, &self), MVM_ERR_INVALID);
    }
    /* No budget at all beyond the buffer: every layer 0 pages, θ = 1. */
    void *fp = fx_create(&f, &mvm_config_fixedpoint, "buffer=18", NULL);
    mvm_config_fixedpoint.configure(fp, &f.v, f.pages, f.theta);
    CHECK(f.pages[0] == 0 && f.pages[1] == 0 && f.theta[0] == 1 && f.theta[1] == 1);
    mvm_config_fixedpoint.destroy(fp);
}

/* theta=X fixes every layer's split (the paper's θ sweep): the start's uniform budgets cut
 * in prefixes of round(X·pages) pages, at least one, and no search, however many τ pass.
 * 4 pages an expert, 24 pages = a buffer of 2 experts + 8 pages a layer. */
static void test_fixedpoint_theta(void)
{
    static const struct { const char *params; uint64_t pages; float theta; } cases[] = {
        {"tau=100,theta=1", 8, 1.0f},      /* 2 whole experts */
        {"tau=100,theta=0.6", 8, 0.5f},    /* 2.4 pages -> 2: 4 halves */
        {"tau=100,theta=0.25", 8, 0.25f},  /* 1 page each of all 8 */
        {"tau=100,theta=0.01", 8, 0.25f}}; /* at least a page */
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        fx f;
        fx_init(&f, 2, 8, 2, 4, 24);
        void *fp = fx_create(&f, &mvm_config_fixedpoint, cases[i].params, NULL);
        CHECK(mvm_config_fixedpoint.configure(fp, &f.v, f.pages, f.theta) == 1);
        for (int round = 0; round < 2; round++) {
            CHECK(f.pages[0] == cases[i].pages && f.pages[1] == cases[i].pages);
            CHECK(f.theta[0] == cases[i].theta && f.theta[1] == cases[i].theta);
            check_config(&f);
            feed(&f, fp, 300, 1); /* three τ of routing a search would act on */
            CHECK(mvm_config_fixedpoint.configure(fp, &f.v, f.pages, f.theta) == 0);
        }
        mvm_config_fixedpoint.destroy(fp);
    }
}

int main(void)
{
    RUN(test_uniform);
    RUN(test_hot);
    RUN(test_hot_offline);
    RUN(test_moepic_layer);
    RUN(test_moepic_windows);
    RUN(test_moepic_allocate);
    RUN(test_fixedpoint_moves_budget);
    RUN(test_fixedpoint_prediction);
    RUN(test_fixedpoint_params);
    RUN(test_fixedpoint_theta);
    TEST_END();
}
