/*
 * The sampler's steps that llama.cpp's chain has beyond top-k, top-p, min-p and the
 * repetition penalty (those are test_tokenizer's): the parameters' checks; the frequency and
 * presence penalties against a direct count over random histories; greedy sampling, which
 * no filter may change; DRY's sequence breakers found in a tiny model's real vocabulary
 * (a breaker within a token, one spread over two tokens, and the lengths that are and are
 * not penalised), judged by the greedy choice between two tokens. The draws' distributions
 * under every step are tests/ref/check_sampler.py's, against NumPy.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "moevm/engine.h"
#include "tiny_engine.h"
#include "vmm/error.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_rand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

static void test_params(void)
{
    const struct {
        mvm_sampler_params p;
        const char *name;
    } bad[] = {
        {{.temperature = 1, .frequency_penalty = NAN}, "frequency_penalty"},
        {{.temperature = 1, .presence_penalty = INFINITY}, "presence_penalty"},
        {{.temperature = 1, .dry_multiplier = -1}, "dry_multiplier"},
        {{.temperature = 1, .dry_base = 0.5f}, "dry_base"},
        {{.temperature = 1, .typical_p = 1.5f}, "typical_p"},
        {{.temperature = 1, .xtc_probability = -0.1f}, "xtc_probability"},
        {{.temperature = 1, .xtc_threshold = 2}, "xtc_threshold"},
        {{.temperature = 1, .dynatemp_range = -1}, "dynatemp_range"},
        {{.temperature = 1, .mirostat = 3}, "mirostat"},
        {{.temperature = 1, .mirostat = 2, .mirostat_tau = -5}, "mirostat_tau"},
        {{.temperature = 1, .top_n_sigma = NAN}, "top_n_sigma"},
        {{.temperature = 1, .order = {MVM_SAMPLER_TOP_K, MVM_SAMPLER_STEP_END}}, "order[1]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        mvm_sampler *s = (mvm_sampler *)1;
        CHECK_ST(mvm_sampler_create(&bad[i].p, 10, &s), MVM_ERR_INVALID);
        CHECK(s == NULL && strstr(mvm_last_error(), bad[i].name));
    }
}

/* The frequency and presence penalties (with and without the repetition penalty) against
 * a count of each token in the window, into a poisoned buffer; the sampler's greedy choice
 * is the argmax of what mvm_sampler_penalize gives. */
static void test_penalties(void)
{
    enum { N = 300, PREV = 200 };
    static float l[N], keep[N], out[N], want[N];
    static int32_t prev[PREV];
    int exact = 1, untouched = 1, greedy = 1;
    for (int r = 0; r < 40; r++) {
        for (uint32_t i = 0; i < N; i++)
            l[i] = (float)((int)(next_rand() % 2001) - 1000) * 0.004f;
        memcpy(keep, l, sizeof l);
        for (uint32_t i = 0; i < PREV; i++) /* repeats, and ids outside the vocabulary */
            prev[i] = i % 31 == 3 ? -2 : i % 43 == 9 ? N : (int32_t)(next_rand() % 60);
        const uint32_t last_n[] = {64, 1, PREV, PREV + 9};
        const mvm_sampler_params p = {
            .repeat_penalty = r % 2 ? 1.25f : 0, .repeat_last_n = last_n[r % 4],
            .frequency_penalty = (float)(r % 5) * 0.3f - 0.3f,
            .presence_penalty = (float)(r % 3) * 0.5f - 0.25f};
        uint32_t count[N] = {0};
        for (uint32_t i = PREV - (PREV < p.repeat_last_n ? PREV : p.repeat_last_n); i < PREV; i++)
            if (prev[i] >= 0 && prev[i] < N)
                count[prev[i]]++;
        for (uint32_t i = 0; i < N; i++) {
            float x = l[i];
            if (count[i] && p.repeat_penalty)
                x = x <= 0 ? x * p.repeat_penalty : x / p.repeat_penalty;
            if (count[i])
                x -= (float)count[i] * p.frequency_penalty + p.presence_penalty;
            want[i] = x;
            out[i] = NAN;
        }
        CHECK_ST(mvm_sampler_penalize(&p, l, N, prev, PREV, out), MVM_OK);
        exact &= memcmp(out, want, sizeof out) == 0;
        untouched &= memcmp(l, keep, sizeof l) == 0;
        mvm_sampler *s;
        CHECK_ST(mvm_sampler_create(&p, N, &s), MVM_OK);
        int32_t best = 0;
        for (int32_t i = 1; i < N; i++)
            best = want[i] > want[best] ? i : best;
        greedy &= s && mvm_sampler_sample_after(s, l, N, prev, PREV) == best;
        mvm_sampler_free(s);
    }
    CHECK(exact && untouched && greedy);
}

/* Temperature 0 is greedy whatever the filters (XTC and a dynamic temperature among them):
 * the highest logit, ties to the lowest id. */
static void test_greedy(void)
{
    const float l[6] = {0.5f, 2.0f, 2.0f, 1.9f, -1.0f, 1.0f};
    const mvm_sampler_params p = {.top_k = 2, .top_p = 0.3f, .min_p = 0.5f, .typical_p = 0.2f,
                                  .top_n_sigma = 0.1f, .xtc_probability = 1,
                                  .xtc_threshold = 0.05f, .dynatemp_range = 2};
    mvm_sampler *s;
    CHECK_ST(mvm_sampler_create(&p, 6, &s), MVM_OK);
    int ok = 1;
    for (int i = 0; i < 20; i++)
        ok &= mvm_sampler_sample(s, (float *)l, 6) == 1;
    CHECK(ok);
    mvm_sampler_free(s);
}

/* ---- DRY, over a tiny model's vocabulary ------------------------------------------------ */

static mvm_engine *engine;

/* The first id past `from` whose piece is `want`, or (want NULL) a run of 3 to 8 lowercase
 * letters without any of `avoid`'s bytes that tokenizes back to itself. */
static int32_t find_token(const char *want, const char *avoid, int32_t from)
{
    char piece[64];
    for (int32_t id = from + 1; id < (int32_t)mvm_engine_n_vocab(engine); id++) {
        size_t n = mvm_engine_token_piece(engine, id, piece, sizeof piece - 1);
        if (n >= sizeof piece - 1)
            continue;
        piece[n] = '\0';
        if (want) {
            if (!strcmp(piece, want))
                return id;
            continue;
        }
        int ok = n >= 3 && n <= 8 && !strpbrk(piece, avoid);
        for (size_t i = 0; ok && i < n; i++)
            ok = piece[i] >= 'a' && piece[i] <= 'z';
        int32_t back[4];
        size_t nb = 0;
        if (ok && mvm_engine_tokenize(engine, piece, n, 0, 0, back, 4, &nb) == MVM_OK &&
            nb == 1 && back[0] == id)
            return id;
    }
    return -1;
}

/* The greedy token after hist[0..n) where token d (logit 1) extends a repetition and e
 * (logit le) does not, under DRY (multiplier 1, base 1.75, allowed 2) with breakers b. */
static int32_t dry_pick_at(const mvm_dry_breakers *b, const int32_t *hist, uint32_t n,
                           int32_t d, int32_t e, float le)
{
    const uint32_t V = mvm_engine_n_vocab(engine);
    float *l = malloc(V * sizeof *l);
    for (uint32_t i = 0; i < V; i++)
        l[i] = -10;
    l[d] = 1, l[e] = le;
    const mvm_sampler_params p = {.dry_multiplier = 1, .dry_base = 1.75f,
                                  .dry_allowed_length = 2, .dry_last_n = 64};
    mvm_sampler *s = NULL;
    int32_t t = -1;
    if (mvm_sampler_create(&p, V, &s) == MVM_OK) {
        mvm_sampler_set_dry_breakers(s, b);
        t = mvm_sampler_sample_after(s, l, V, hist, n);
    }
    mvm_sampler_free(s);
    free(l);
    return t;
}

static int32_t dry_pick(const mvm_dry_breakers *b, const int32_t *hist, uint32_t n, int32_t d,
                        int32_t e)
{
    return dry_pick_at(b, hist, n, d, e, 0.5f);
}

static void test_dry(void)
{
    const int32_t colon = find_token(":", NULL, -1);
    const int32_t x = find_token(NULL, ":", -1), y = find_token(NULL, ":", x);
    const int32_t a = find_token(NULL, ":", y), c = find_token(NULL, ":", a);
    const int32_t d = find_token(NULL, ":", c), e = find_token(NULL, ":", d);
    CHECK(colon >= 0 && x >= 0 && y >= 0 && a >= 0 && c >= 0 && d >= 0 && e >= 0);
    if (colon < 0 || e < 0)
        return;
    char px[16], py[16], two[40];
    px[mvm_engine_token_piece(engine, x, px, sizeof px)] = '\0';
    py[mvm_engine_token_piece(engine, y, py, sizeof py)] = '\0';
    snprintf(two, sizeof two, "%s%s", px, py); /* a breaker over the tokens x y */
    const char *list[] = {":", two};
    mvm_dry_breakers *b = NULL, *none = NULL;
    CHECK_ST(mvm_dry_breakers_create(engine, list, 2, &b), MVM_OK);
    CHECK_ST(mvm_dry_breakers_create(engine, list, 0, &none), MVM_OK);
    /* a c x d a c x: "a c x" (3 tokens, 1 past the allowed 2) would go on with d: it loses
     * 1.75, and e is drawn; the same with no breaker in it */
    const int32_t rep[] = {a, c, x, d, a, c, x};
    CHECK(dry_pick(b, rep, 7, d, e) == e && dry_pick(NULL, rep, 7, d, e) == e);
    /* two tokens repeated (the allowed length) still lose the multiplier, 1.75^0: d at 0
     * is under e; one token repeated is not penalised */
    CHECK(dry_pick(b, rep + 1, 6, d, e) == e && dry_pick(b, rep + 2, 5, d, e) == d);
    /* a : x d a : x: the repeat would reach back over ":" (a breaker token): no penalty */
    const int32_t over_colon[] = {a, colon, x, d, a, colon, x};
    CHECK(dry_pick(b, over_colon, 7, d, e) == d && dry_pick(none, over_colon, 7, d, e) == e);
    /* a : c x d a : c x: "a : c x" repeats, but only as far back as the breaker counts:
     * 2 tokens, the multiplier alone (d at 0 beats e at -0.5; 1.75^2 would not) */
    const int32_t capped[] = {a, colon, c, x, d, a, colon, c, x};
    CHECK(dry_pick_at(b, capped, 9, d, e, -0.5f) == d);
    CHECK(dry_pick_at(none, capped, 9, d, e, -0.5f) == e);
    /* a x y d a x y: over the breaker spelt by x then y: no penalty; with only ":" as
     * breaker it is a repeat of 3 */
    const int32_t over_two[] = {a, x, y, d, a, x, y};
    mvm_dry_breakers *colon_only = NULL;
    CHECK_ST(mvm_dry_breakers_create(engine, list, 1, &colon_only), MVM_OK);
    CHECK(dry_pick(b, over_two, 7, d, e) == d && dry_pick(colon_only, over_two, 7, d, e) == e);
    /* refused: an empty breaker, too many */
    const char *empty[] = {""};
    mvm_dry_breakers *r = (mvm_dry_breakers *)1;
    CHECK_ST(mvm_dry_breakers_create(engine, empty, 1, &r), MVM_ERR_INVALID);
    CHECK(r == NULL && strstr(mvm_last_error(), "empty"));
    const char *many[17];
    for (int i = 0; i < 17; i++)
        many[i] = ":";
    CHECK_ST(mvm_dry_breakers_create(engine, many, 17, &r), MVM_ERR_INVALID);
    mvm_dry_breakers_free(b);
    mvm_dry_breakers_free(none);
    mvm_dry_breakers_free(colon_only);
}

int main(void)
{
    RUN(test_params);
    RUN(test_penalties);
    RUN(test_greedy);
    if ((engine = tiny_engine()))
        RUN(test_dry);
    mvm_engine_free(engine);
    TEST_END();
}
