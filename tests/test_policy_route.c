/*
 * The route modules (policy/route_none.c, policy/route_importance.c) and the α-for-budget fit
 * (policy/route_alpha.c). Worked cases of SMoE's Algorithm 1 with the score bands of §IV-A,
 * each with its arithmetic; then random batches whose result is checked against the bands
 * recomputed here from the original routing (exactly k distinct experts per token, substitutes
 * only resident or batch top-score experts within [(1-α)S_{k+1}, S_{k+1}], only missing
 * low-score experts replaced, as many as possible, the best ones, α = 0 changes nothing); then
 * Eq. 5's fit: a known polynomial recovered, the smallest α found even where the fit is not
 * monotone, and the errors.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "policy/modules.h"
#include "policy/route_alpha.h"

#define MAXE 64
#define MAXK 8
#define MAXT 4

static mvm_cost no_cost;

static void *make(const mvm_route_ops *ops, const mvm_pshape *sh, const char *params)
{
    mvm_pinit in = {.shape = sh, .cost = &no_cost, .params = {params}};
    void *self = NULL;
    CHECK_ST(ops->create(&in, &self), MVM_OK);
    return self;
}

/* ---- worked cases ----------------------------------------------------------------------
 * One token, 8 experts, k = 4, α = 0.3. Scores e0 .30, e1 .20, e2 .12, e3 .11, e4 .10,
 * e5 .09, e6 .08, e7 0. The router selected e0..e3; S_{k+1} = .10 (e4), T = .13, R = .07.
 * Top-score: e0, e1 (kept whatever their residency). Low-score: e2, e3. Substitutes: the
 * unselected e4 .10, e5 .09, e6 .08 when resident (e7 is below R). */
static const mvm_pshape one_shape = {.n_layers = 1, .n_experts = 8, .top_k = 4,
                                     .pages_per_expert = 2};
static const float one_scores[8] = {.30f, .20f, .12f, .11f, .10f, .09f, .08f, 0};

/* Routes the token with the experts named in `full` fully resident and those in `part`
 * with one page of two; returns the substitutions, the row in out, its weights in w_out. */
static uint32_t route_one(const char *params, const char *full, const char *part,
                          int32_t *out, float *w_out, int normalised)
{
    uint32_t resident[8] = {0};
    uint8_t busy[8] = {0};
    for (const char *p = full; *p; p++)
        resident[*p - '0'] = 2;
    for (const char *p = part; *p; p++)
        resident[*p - '0'] = 1;
    mvm_pview v = {.shape = &one_shape, .resident = resident, .busy = busy};
    float w[4], sum = normalised ? .30f + .20f + .12f + .11f : 1;
    int32_t ex[4] = {0, 1, 2, 3};
    for (int j = 0; j < 4; j++)
        w[j] = one_scores[j] / sum;
    mvm_pstep st = {.layer = 0, .n_tok = 1, .scores = one_scores, .experts = ex, .weights = w};
    void *self = make(&mvm_route_importance, &one_shape, params);
    if (!self)
        return UINT32_MAX;
    uint32_t n = mvm_route_importance.route(self, &v, &st);
    mvm_route_importance.destroy(self);
    memcpy(out, ex, sizeof ex);
    if (w_out)
        memcpy(w_out, w, sizeof w);
    return n;
}

static int row_is(const int32_t *row, int32_t a, int32_t b, int32_t c, int32_t d)
{
    return row[0] == a && row[1] == b && row[2] == c && row[3] == d;
}

static void test_worked_cases(void)
{
    int32_t r[4];
    float w[4];
    /* Resident e0 e3 e5 e6: e3 is low-score but resident, kept (the prose, not the
     * pseudo-code's "replace all of B_t"); e2 is the one miss; the best substitute is e5. */
    CHECK(route_one("alpha=0.3", "0356", "", r, w, 0) == 1 && row_is(r, 0, 1, 3, 5));
    CHECK(w[3] == one_scores[5] && w[2] == one_scores[3]); /* own probability, best first */
    CHECK(route_one("", "0356", "", r, NULL, 0) == 1 && row_is(r, 0, 1, 3, 5)); /* α = 0.3 */
    /* Resident e0 e6: misses e2 e3, one substitute: the worse miss e3 gives way, e2 stays
     * to be loaded (Algorithm 1's "top |B_t|-|A_t| experts from B_t"). */
    CHECK(route_one("alpha=0.3", "06", "", r, NULL, 0) == 1 && row_is(r, 0, 1, 2, 6));
    /* Resident e4, the (k+1)-th itself: a substitute (the text's <= S_{k+1}). */
    CHECK(route_one("alpha=0.3", "4", "", r, NULL, 0) == 1 && row_is(r, 0, 1, 2, 4));
    /* Resident e4 e5 e6: both misses replaced, by the two best: e4 and e5. */
    CHECK(route_one("alpha=0.3", "456", "", r, NULL, 0) == 2 && row_is(r, 0, 1, 4, 5));
    /* Nothing low-score is missing: nothing to do. */
    CHECK(route_one("alpha=0.3", "2356", "", r, NULL, 0) == 0 && row_is(r, 0, 1, 2, 3));
    /* Only e7 resident: 0 < R. e4 and e5 half resident (a load in flight): not yet. */
    CHECK(route_one("alpha=0.3", "7", "45", r, NULL, 0) == 0 && row_is(r, 0, 1, 2, 3));
    /* A half-resident low-score expert is a miss like any other. */
    CHECK(route_one("alpha=0.3", "6", "23", r, NULL, 0) == 1 && row_is(r, 0, 1, 2, 6));
    /* α = .1: T = .11, so e2 and e3 are top-score too: nothing is low-score. */
    CHECK(route_one("alpha=0.1", "456", "", r, NULL, 0) == 0 && row_is(r, 0, 1, 2, 3));
    /* α = .15: T = .115, only e3 is low-score; R = .085 lets e5 in, not e6. */
    CHECK(route_one("alpha=0.15", "6", "", r, NULL, 0) == 0 && row_is(r, 0, 1, 2, 3));
    CHECK(route_one("alpha=0.15", "56", "", r, NULL, 0) == 1 && row_is(r, 0, 1, 2, 5));
    /* α = 0: the original model, whatever is resident. */
    CHECK(route_one("alpha=0", "456", "", r, NULL, 0) == 0 && row_is(r, 0, 1, 2, 3));
    /* A router that normalises its top-k (w = s/.73): the substitute keeps that scale,
     * .09/.73, and the row is not renormalised. */
    CHECK(route_one("alpha=0.3", "0356", "", r, w, 1) == 1 && row_is(r, 0, 1, 3, 5));
    CHECK(fabsf(w[3] - .09f / .73f) < 1e-6f && fabsf(w[0] - .30f / .73f) < 1e-6f);
}

/* Band edges with exact binary fractions: S_{k+1} = .25, α = .5, T = .375, R = .125.
 * A selected expert scoring exactly T is top-score; an unselected one scoring exactly R
 * is a substitute. */
static void test_band_edges(void)
{
    static const mvm_pshape sh = {.n_layers = 1, .n_experts = 4, .top_k = 2,
                                  .pages_per_expert = 1};
    static const float s[4] = {.375f, .3f, .25f, .125f};
    static const uint8_t busy[4] = {0};
    void *self = make(&mvm_route_importance, &sh, "alpha=0.5");
    if (!self)
        return;
    for (int sub = 2; sub <= 3; sub++) {
        uint32_t resident[4] = {0};
        resident[sub] = 1;
        int32_t ex[2] = {0, 1};
        float w[2] = {.375f, .3f};
        mvm_pview v = {.shape = &sh, .resident = resident, .busy = busy};
        mvm_pstep st = {.n_tok = 1, .scores = s, .experts = ex, .weights = w};
        CHECK(mvm_route_importance.route(self, &v, &st) == 1);
        CHECK(ex[0] == 0 && ex[1] == sub && w[1] == s[sub]);
    }
    /* Both substitutes resident: still only e1 gives way, e0 at T stays. */
    uint32_t resident[4] = {0, 0, 1, 1};
    int32_t ex[2] = {0, 1};
    float w[2] = {.375f, .3f};
    mvm_pview v = {.shape = &sh, .resident = resident, .busy = busy};
    mvm_pstep st = {.n_tok = 1, .scores = s, .experts = ex, .weights = w};
    CHECK(mvm_route_importance.route(self, &v, &st) == 1 && ex[0] == 0 && ex[1] == 2);
    mvm_route_importance.destroy(self);
}

/* A router whose selection is not the top-k by score (a load-balancing bias picked e1 at
 * .05 over e2 at .2): S_{k+1} = .2, so e1 is low-score and the resident e2 may replace it
 * at α = .3; at α = 0 the model is the original one, whatever the selection. */
static void test_biased_selection(void)
{
    static const mvm_pshape sh = {.n_layers = 1, .n_experts = 4, .top_k = 2,
                                  .pages_per_expert = 1};
    static const float s[4] = {.3f, .05f, .2f, .1f};
    static const uint32_t resident[4] = {0, 0, 1, 0};
    static const uint8_t busy[4] = {0};
    static const char *const params[2] = {"alpha=0", "alpha=0.3"};
    for (int a = 0; a < 2; a++) {
        int32_t ex[2] = {0, 1};
        float w[2] = {.3f, .05f};
        mvm_pview v = {.shape = &sh, .resident = resident, .busy = busy};
        mvm_pstep st = {.n_tok = 1, .scores = s, .experts = ex, .weights = w};
        void *self = make(&mvm_route_importance, &sh, params[a]);
        if (!self)
            continue;
        CHECK(mvm_route_importance.route(self, &v, &st) == (uint32_t)a);
        CHECK(ex[0] == 0 && ex[1] == (a ? 2 : 1));
        mvm_route_importance.destroy(self);
    }
}

/* The batch's top-score set C, built over the whole batch first. Token 0 is the worked
 * token with only e0 resident. Token 1 scores e6 .5, e2 .3, e1 .1, e0 .05, the rest .0125:
 * S_{k+1} = .0125, T = .01625, so all of its experts (e6 e2 e1 e0) are top-score: C. For
 * token 0, e2 (low-score, in C) is kept, e3 is the miss, and e6 (.08, in C although not
 * resident) replaces it. Token 1 comes after token 0: a single pass would miss C. */
static void test_batch_top_set(void)
{
    static const float s[2][8] = {{.30f, .20f, .12f, .11f, .10f, .09f, .08f, 0},
                                  {.05f, .1f, .3f, .0125f, .0125f, .0125f, .5f, .0125f}};
    uint32_t resident[8] = {2, 0, 0, 0, 0, 0, 0, 0};
    uint8_t busy[8] = {0};
    int32_t ex[2][4] = {{0, 1, 2, 3}, {6, 2, 1, 0}};
    float w[2][4] = {{.30f, .20f, .12f, .11f}, {.5f, .3f, .1f, .05f}};
    mvm_pview v = {.shape = &one_shape, .resident = resident, .busy = busy};
    mvm_pstep st = {.n_tok = 2, .scores = &s[0][0], .experts = &ex[0][0], .weights = &w[0][0]};
    void *self = make(&mvm_route_importance, &one_shape, "alpha=0.3");
    if (!self)
        return;
    CHECK(mvm_route_importance.route(self, &v, &st) == 1);
    CHECK(row_is(ex[0], 0, 1, 2, 6) && row_is(ex[1], 6, 2, 1, 0));
    /* Without router scores nothing can be banded. */
    st.scores = NULL;
    ex[0][3] = 3;
    CHECK(mvm_route_importance.route(self, &v, &st) == 0 && row_is(ex[0], 0, 1, 2, 3));
    mvm_route_importance.destroy(self);
}

static void test_params(void)
{
    static const char *const bad[] = {"alpha=-0.1", "alpha=1.5", "beta=1", "alpha=x"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        mvm_pinit in = {.shape = &one_shape, .cost = &no_cost, .params = {bad[i]}};
        void *self = NULL;
        CHECK_ST(mvm_route_importance.create(&in, &self), MVM_ERR_INVALID);
    }
    mvm_pinit in = {.shape = &one_shape, .cost = &no_cost, .params = {"alpha=0.3"}};
    void *self = NULL;
    CHECK_ST(mvm_route_none.create(&in, &self), MVM_ERR_INVALID);
}

/* ---- random batches ------------------------------------------------------------------ */

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static double rnd(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static int in_row(const int32_t *row, uint32_t k, int32_t e)
{
    for (uint32_t j = 0; j < k; j++)
        if (row[j] == e)
            return 1;
    return 0;
}

/* One random batch: skewed softmax scores (a few high, many near ties, as SMoE observes),
 * top-k selection, random residency; route, then check against the bands. */
static uint32_t random_batch(const mvm_route_ops *ops, void *self, uint32_t E, uint32_t K,
                             double alpha)
{
    mvm_pshape sh = {.n_layers = 2, .n_experts = E, .top_k = K, .pages_per_expert = 3};
    uint32_t n = 1 + (uint32_t)(rnd() * MAXT), layer = rnd() < 0.5 ? 0 : 1;
    float s[MAXT * MAXE], w[MAXT * MAXK], w0[MAXT * MAXK];
    int32_t ex[MAXT * MAXK], ex0[MAXT * MAXK];
    uint32_t resident[2 * MAXE];
    uint8_t busy[2 * MAXE] = {0}, in_c[MAXE] = {0};
    double s1[MAXT];
    for (uint32_t x = 0; x < 2 * E; x++)
        resident[x] = rnd() < 0.35 ? 3 : rnd() < 0.2 ? 1 : 0;
    for (uint32_t t = 0; t < n; t++) {
        float *st = s + t * E;
        double sum = 0;
        for (uint32_t e = 0; e < E; e++) {
            double z = rnd() < 0.1 ? 3 + 2 * rnd() : rnd();
            st[e] = (float)exp(z);
            sum += st[e];
        }
        for (uint32_t e = 0; e < E; e++)
            st[e] = (float)(st[e] / sum);
        for (uint32_t j = 0; j <= K; j++) { /* top-k, then S_{k+1} */
            int32_t best = -1;
            for (uint32_t e = 0; e < E; e++)
                if (!in_row(ex + t * K, j, (int32_t)e) && (best < 0 || st[e] > st[best]))
                    best = (int32_t)e;
            if (j < K)
                ex[t * K + j] = best, w[t * K + j] = st[best];
            else
                s1[t] = st[best];
        }
        for (uint32_t j = 0; j < K; j++)
            if (st[ex[t * K + j]] >= (float)((1 + alpha) * s1[t]))
                in_c[ex[t * K + j]] = 1;
    }
    memcpy(ex0, ex, sizeof(int32_t) * n * K);
    memcpy(w0, w, sizeof(float) * n * K);
    mvm_pview v = {.shape = &sh, .resident = resident, .busy = busy};
    mvm_pstep st = {.layer = layer, .n_tok = n, .scores = s, .experts = ex, .weights = w};
    uint32_t subs = ops->route(self, &v, &st), total = 0;
    const uint32_t *res = resident + layer * E;
    for (uint32_t t = 0; t < n; t++) {
        const float *sc = s + t * E;
        const int32_t *row = ex + t * K, *orig = ex0 + t * K;
        float top = (float)((1 + alpha) * s1[t]), low = (float)((1 - alpha) * s1[t]);
        uint32_t n_new = 0, n_gone = 0, n_miss = 0, n_cand = 0;
        float worst_new = INFINITY, best_unused = -1, worst_kept_miss = INFINITY,
              best_gone = -1;
        for (uint32_t j = 0; j < K; j++) {
            int32_t e = row[j];
            CHECK(e >= 0 && (uint32_t)e < E && !in_row(row, j, e)); /* k distinct */
            if (e < 0 || (uint32_t)e >= E)
                continue;
            if (in_row(orig, K, e)) { /* a kept expert keeps its weight */
                uint32_t jo = 0;
                while (orig[jo] != e)
                    jo++;
                CHECK(w[t * K + j] == w0[t * K + jo]);
                continue;
            }
            n_new++;
            CHECK(res[e] == 3 || in_c[e]);                 /* resident or in C */
            CHECK(sc[e] >= low && sc[e] <= s1[t]);         /* within the band */
            CHECK(w[t * K + j] == sc[e]);                  /* its own probability */
            worst_new = fminf(worst_new, sc[e]);
        }
        for (uint32_t j = 0; j < K; j++) {
            int32_t e = orig[j];
            int miss = sc[e] < top && res[e] != 3 && !in_c[e];
            n_miss += miss;
            if (in_row(row, K, e)) {
                if (miss)
                    worst_kept_miss = fminf(worst_kept_miss, sc[e]);
                continue;
            }
            n_gone++;
            CHECK(miss); /* only missing low-score experts give way */
            best_gone = fmaxf(best_gone, sc[e]);
        }
        for (uint32_t e = 0; e < E; e++)
            if (!in_row(orig, K, (int32_t)e) && sc[e] >= low && sc[e] <= s1[t] &&
                (res[e] == 3 || in_c[e])) {
                n_cand++;
                if (!in_row(row, K, (int32_t)e))
                    best_unused = fmaxf(best_unused, sc[e]);
            }
        CHECK(n_new == n_gone);
        if (alpha == 0 || ops == &mvm_route_none) {
            CHECK(n_new == 0);
        } else {
            CHECK(n_new == (n_miss < n_cand ? n_miss : n_cand)); /* as many as possible */
            CHECK(best_unused <= worst_new);     /* the best substitutes */
            CHECK(best_gone <= worst_kept_miss); /* the worst misses give way */
        }
        if (n_new == 0) /* an untouched row is left exactly as it came */
            CHECK(!memcmp(row, orig, sizeof(int32_t) * K) &&
                  !memcmp(w + t * K, w0 + t * K, sizeof(float) * K));
        for (uint32_t j = 1; j < K && n_new; j++) /* a rewritten one is best first */
            CHECK(sc[row[j]] <= sc[row[j - 1]]);
        total += n_new;
    }
    CHECK(subs == total);
    return subs;
}

static void test_random_batches(void)
{
    static const struct { uint32_t E, K; } shapes[] = {{8, 2}, {16, 4}, {64, 6}, {60, 8}};
    static const double alphas[] = {0, 0.1, 0.25, 0.3, 0.6, 1};
    static const char *const params[] = {"alpha=0", "alpha=0.1", "alpha=0.25", "alpha=0.3",
                                         "alpha=0.6", "alpha=1"};
    uint32_t subs = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        mvm_pshape sh = {.n_layers = 2, .n_experts = shapes[i].E, .top_k = shapes[i].K,
                         .pages_per_expert = 3};
        void *none = make(&mvm_route_none, &sh, "");
        for (int r = 0; r < 200; r++)
            random_batch(&mvm_route_none, none, shapes[i].E, shapes[i].K, 0.3);
        mvm_route_none.destroy(none);
        for (size_t a = 0; a < sizeof alphas / sizeof *alphas; a++) {
            void *self = make(&mvm_route_importance, &sh, params[a]);
            if (!self)
                continue;
            int before = check_failed;
            for (int r = 0; r < 500 && check_failed == before; r++)
                subs += random_batch(&mvm_route_importance, self, shapes[i].E, shapes[i].K,
                                     alphas[a]);
            mvm_route_importance.destroy(self);
        }
    }
    CHECK(subs > 1000); /* the cases above were not vacuous */
}

/* ---- α for a TPOT budget (Eq. 5) ------------------------------------------------------ */

static void test_alpha_fit(void)
{
    /* TPOT = 100 - 80α + 40α² on Table IV's α grid 0, .05, ..., .6: a budget of 70 is met
     * first at α = .5 (40α² - 80α + 30 = 0); 100 at α = 0; T(.6) = 66.4 is the best. */
    double a[13], t[13], out = -1;
    for (int i = 0; i < 13; i++) {
        a[i] = 0.05 * i;
        t[i] = 100 - 80 * a[i] + 40 * a[i] * a[i];
    }
    CHECK_ST(mvm_importance_alpha_for_budget(a, t, 13, 2, 70, &out), MVM_OK);
    CHECK(fabs(out - 0.5) < 1e-9);
    CHECK_ST(mvm_importance_alpha_for_budget(a, t, 13, 2, 100, &out), MVM_OK);
    CHECK(out == 0);
    CHECK_ST(mvm_importance_alpha_for_budget(a, t, 13, 2, 66.5, &out), MVM_OK);
    CHECK(out > 0.59 && out <= 0.6);
    CHECK_ST(mvm_importance_alpha_for_budget(a, t, 13, 2, 60, &out), MVM_ERR_RANGE);
    CHECK(strstr(mvm_last_error(), "unreachable") != NULL);
    /* A degree-1 fit to noisy linear data (±0.5 around 200 - 100α): 170 near α = .3. */
    for (int i = 0; i < 13; i++)
        t[i] = 200 - 100 * a[i] + (i % 2 ? 0.5 : -0.5);
    CHECK_ST(mvm_importance_alpha_for_budget(a, t, 13, 1, 170, &out), MVM_OK);
    CHECK(fabs(out - 0.3) < 0.01);
    /* Not monotone: T = 10 - 1000(α-.2)(α-.5)(α-.8) on 0, .1, ..., 1. It dips below 10 on
     * (.2, .5), rises above it on (.5, .8), falls to -70 at 1; its local minimum on
     * (.2, .5) is about -.39. Budget 10: α = .2. Budget 0: the first dip, before .33.
     * Budget -10: only after .8, where (α-.2)(α-.5)(α-.8) = .02. */
    double c[11], ct[11];
    for (int i = 0; i < 11; i++) {
        c[i] = 0.1 * i;
        ct[i] = 10 - 1000 * (c[i] - .2) * (c[i] - .5) * (c[i] - .8);
    }
    CHECK_ST(mvm_importance_alpha_for_budget(c, ct, 11, 3, 10, &out), MVM_OK);
    CHECK(fabs(out - 0.2) < 1e-9);
    CHECK_ST(mvm_importance_alpha_for_budget(c, ct, 11, 3, 0, &out), MVM_OK);
    CHECK(out > 0.2 && out < 0.33 &&
          fabs(10 - 1000 * (out - .2) * (out - .5) * (out - .8)) < 1e-6);
    CHECK_ST(mvm_importance_alpha_for_budget(c, ct, 11, 3, -10, &out), MVM_OK);
    CHECK(out > 0.8 && fabs((out - .2) * (out - .5) * (out - .8) - .02) < 1e-9);
    /* Errors: too few points (distinct α values, not pairs), a degree too high, NaN. */
    double two[4] = {0.1, 0.2, 0.1, 0.2}, tt[4] = {5, 4, 5, 4};
    CHECK_ST(mvm_importance_alpha_for_budget(a, t, 2, 2, 170, &out), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "too few points") != NULL);
    CHECK_ST(mvm_importance_alpha_for_budget(two, tt, 4, 2, 4.5, &out), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "too few points") != NULL);
    CHECK_ST(mvm_importance_alpha_for_budget(two, tt, 4, 1, 4.5, &out), MVM_OK);
    CHECK(fabs(out - 0.15) < 1e-9);
    CHECK_ST(mvm_importance_alpha_for_budget(a, t, 13, MVM_ALPHA_FIT_MAX_DEGREE + 1, 170, &out),
             MVM_ERR_INVALID);
    t[3] = NAN;
    CHECK_ST(mvm_importance_alpha_for_budget(a, t, 13, 1, 170, &out), MVM_ERR_INVALID);
    /* One α measured: a degree-0 fit answers that α or nothing. */
    double one = 0.3, ot = 50;
    CHECK_ST(mvm_importance_alpha_for_budget(&one, &ot, 1, 0, 60, &out), MVM_OK);
    CHECK(out == 0.3);
    CHECK_ST(mvm_importance_alpha_for_budget(&one, &ot, 1, 0, 40, &out), MVM_ERR_RANGE);
}

int main(void)
{
    RUN(test_worked_cases);
    RUN(test_band_edges);
    RUN(test_batch_top_set);
    RUN(test_biased_selection);
    RUN(test_params);
    RUN(test_random_batches);
    RUN(test_alpha_fit);
    TEST_END();
}
