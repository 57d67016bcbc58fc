/*
 * Synthetic routing traces and their statistics (trace_gen.h).
 *
 * The model of routing, per token and MoE layer l (its parameters fitted to the published
 * routing statistics cited under "Defaults" below):
 *
 *  popularity   expert of rank r (0-based) has p ∝ 1/(r+1)^skew, the ranks spread over the
 *               experts by a random permutation per layer;
 *  task shifts  every shift_every tokens the permutations are drawn again: a new task with
 *               other hot experts (a regime switch every ~64-512 tokens);
 *  context      each expert has a logit offset c_e that drifts from token to token, an
 *               AR(1) process with stationary spread `drift` (nats) and time constant
 *               drift_tokens: c <- rho c + drift sqrt(1 - rho^2) N(0, 1), rho =
 *               exp(-1/drift_tokens), drawn from its stationary law at a request's start.
 *               It stands for the hidden state that moves slowly with the text, which is
 *               what makes a real router pick an expert again over the next few tokens
 *               (SMoE's Fig. 6: high-score experts, even unselected ones, are reused within a
 *               few iterations), and what the one-step carry-over below cannot give: 80% of
 *               selections repeated within 8 tokens;
 *  router       logits z_e = ln p_e + c_e + Gumbel noise; the top_k of z are the selection,
 *               which is exactly sampling top_k experts without replacement in proportion
 *               to p e^c (the Gumbel-top-k trick);
 *  reuse        each expert the previous token of the request selected at this layer is
 *               kept with probability `reuse` — per selection, as the published statistic
 *               counts ("45% of selections repeat at the very next token"); the measured
 *               rate is therefore reuse plus the chance repeats among the fresh draws;
 *  layer corr.  with probability `layer_corr` the top expert is the image of the previous
 *               layer's top expert under a fixed mapping: the expert of the same popularity
 *               rank in this layer. The mapping between expert ids is random (it goes
 *               through both layers' permutations, and changes with a task shift), and
 *               being rank-preserving it leaves each layer's popularity law as skew set it;
 *  scores       softmax(z) over all experts, after raising the logits of kept experts just
 *               above the best unselected one (plus an Exp(1) draw) and the followed expert
 *               above all, so the selection is always the top_k of the scores and the
 *               followed expert is the best; weights are the selected scores, renormalised
 *               to sum 1 where the model does (Mixtral, Qwen3) and raw where it does not
 *               (Qwen1.5-MoE, OLMoE, DeepSeek-V2-Lite: norm_topk_prob false in their configs).
 *
 * Scores are rounded to 6 significant digits, as the engine records them. With
 * latent_scores they are the softmax of ln p + c instead, without the draw that selects:
 * no router's scores, but the most an online policy could know (docs/perf/policies.md).
 *
 * Defaults, fitted with `moevm trace stats` on 512 tokens of the qwen3-30b-a3b shape
 * (tests/test_trace.c keeps them inside the published ranges):
 *   skew 1.3, drift 1.8, drift-tokens 64, reuse 0.05, fitted together (the context both
 *                 repeats selections and flattens the popularity a whole trace shows):
 *                 the top-16/128 experts take ~49-58% of a layer's selections and the
 *                 normalised entropy is ~0.83-0.87, inside the published 41-68% and
 *                 0.74-0.875 (Qwen3-30B-A3B, gajsanders/moe-trace finding 005); ~45% of
 *                 selections repeat at the next token, the published 38.9% (gajsanders
 *                 finding 004) to 45% (kekzl/imp PR #1359), and ~78% within 8 tokens,
 *                 against imp's 80% (median reuse distance 2, here too). As a check that
 *                 was not fitted: LRU over such a trace hits ~80% at a 25% budget and ~91%
 *                 at 50% (`moevm sim`), against 78% at 26% and 93% at 53% on a recorded
 *                 Qwen3-30B-A3B (gajsanders/moe-trace's LRU capacity curve, 4 and 8 GiB of
 *                 ~15 GiB of 4-bit experts) and imp's 90-95% at 40%. Without the context
 *                 (drift 0, the defaults until 2026-11-23: skew 1, reuse 0.3) the next-token
 *                 rate matched but only 68% repeated within 8 tokens, and LRU hit 68% and
 *                 83%: routing with less reuse than real models show;
 *   layer-corr 0.3  mixtral-8x7b: the previous layer's top expert predicts this layer's
 *                 (in-sample table) for ~44% of tokens, against 44.9% published for Mixtral
 *                 "from one previous expert" (Mario928/speculative-moe). The top-20% pairs
 *                 share is mostly set by the skew here (qwen3 shape ~0.9, mixtral ~0.54);
 *                 published 45-80% ("Patterns behind Chaos");
 *   shift-every 256  inside the 64-512 tokens above; tokens 512 (kekzl/imp's decode runs).
 * The model is the same at every layer: the published first/last-layer dips in reuse and
 * skew are not modelled.
 */
#include "tools/trace_gen.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/model.h"
#include "engine/synth/mkmodel.h"
#include "vmm/error.h"

/* ---- shapes ---------------------------------------------------------------------------- */

/* The real-shape presets of engine/synth/presets.c (published configurations). Expert bytes:
 * gate, up and down at BF16, 3·2·n_embd·n_ff. */
const char *mvm_trace_gen_shape_names(void)
{
    return "mixtral-8x7b, qwen3-30b-a3b, qwen1.5-moe-a2.7b, olmoe-1b-7b, deepseek-v2-lite, "
           "deepseek-v3, kimi-k2, glm-4.5-air, glm-4.5, minimax-m2, gpt-oss-20b, gpt-oss-120b";
}

static void set_shape(mvm_trace_gen *g, const char *name, const char *arch, const uint32_t v[5],
                      int renormalised)
{
    snprintf(g->shape, sizeof g->shape, "%s", name);
    g->hdr = (mvm_trace_header){NULL, (char *)arch, v[0], v[1], v[2],
                                6ull * v[3] * v[4], v[3], v[4], renormalised};
}

mvm_status mvm_trace_gen_set_shape(mvm_trace_gen *g, const char *shape)
{
    /* The real shapes are mkmodel's presets: one table of model shapes for both. */
    const mvm_preset *p = strcmp(shape, "tiny") != 0 ? mvm_preset_find(shape, NULL) : NULL;
    if (p) {
        /* deepseek2's and glm4moe's leading dense blocks route nothing: the MoE layers are
         * the others, renormalised as the spec's routing says */
        const mvm_model_spec *s = &p->spec;
        const mvm_arch *a = mvm_arch_find(s->arch);
        const uint32_t v[5] = {s->n_layer - (a->lead ? s->ds.n_dense : 0), s->n_expert,
                               s->n_expert_used, s->n_embd, mvm_spec_expert_ff(s)};
        set_shape(g, p->name, s->arch, v, a->routing ? s->ds.norm : a->norm_topk);
        return MVM_OK;
    }
    /* "L,E,K[,EMBD,FF]": decimal numbers in 1..2^24 (a bound that keeps every array size and
     * 6·EMBD·FF well inside 64 bits). */
    uint32_t v[5] = {0, 0, 0, 2048, 1024};
    int n = 0, ok = strlen(shape) < sizeof g->shape;
    for (const char *p = shape; ok;) {
        char *end;
        unsigned long x = *p >= '0' && *p <= '9' ? strtoul(p, &end, 10) : 0;
        ok = x >= 1 && x <= (1ul << 24) && n < 5;
        if (!ok)
            break;
        v[n++] = (uint32_t)x;
        if (!*end)
            break;
        ok = *end == ',';
        p = end + 1;
    }
    if (!ok || (n != 3 && n != 5))
        return mvm_fail(MVM_ERR_INVALID, "shape '%s': expected a name (%s) or L,E,K[,EMBD,FF] "
                        "with numbers in 1..16777216", shape, mvm_trace_gen_shape_names());
    if (v[2] > v[1])
        return mvm_fail(MVM_ERR_INVALID, "shape '%s': top-k %u is more than the %u experts",
                        shape, v[2], v[1]);
    set_shape(g, shape, "synthetic", v, 1);
    return MVM_OK;
}

mvm_status mvm_trace_gen_cut_layers(mvm_trace_gen *g, uint32_t blocks)
{
    const mvm_preset *p = mvm_preset_find(g->shape, NULL);
    if (!p)
        return mvm_fail(MVM_ERR_INVALID, "shape '%s' names its layers itself: only a named "
                        "shape is cut to fewer blocks", g->shape);
    const mvm_arch *a = mvm_arch_find(p->spec.arch);
    const uint32_t dense = a->lead ? p->spec.ds.n_dense : 0;
    if (blocks <= dense || blocks > (1u << 24))
        return mvm_fail(MVM_ERR_INVALID, "%u blocks: %s leads with %u dense, so it takes "
                        "%u..16777216 blocks", blocks, g->shape, dense, dense + 1);
    g->hdr.n_layers = blocks - dense;
    return MVM_OK;
}

void mvm_trace_gen_init(mvm_trace_gen *g)
{
    memset(g, 0, sizeof *g);
    mvm_trace_gen_set_shape(g, "qwen3-30b-a3b");
    g->tokens = 512;
    g->requests = 1;
    g->skew = 1.3;
    g->reuse = 0.05;
    g->layer_corr = 0.3;
    g->shift_every = 256;
    g->drift = 1.8;
    g->drift_tokens = 64;
    g->seed = 1;
}

/* ---- randomness: xoshiro256** seeded by splitmix64 (deterministic for a seed) ----------- */

typedef struct rng {
    uint64_t s[4];
} rng;

static uint64_t rotl(uint64_t x, int k) { return x << k | x >> (64 - k); }

static void rng_seed(rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) {
        uint64_t z = (seed += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        r->s[i] = z ^ (z >> 31);
    }
}

static uint64_t rng_next(rng *r)
{
    uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

/* Uniform in (0, 1), never 0 or 1, so the logarithms below are finite. */
static double rng_open01(rng *r) { return ((double)(rng_next(r) >> 11) + 0.5) * 0x1p-53; }

static uint32_t rng_below(rng *r, uint32_t n) { return (uint32_t)(rng_open01(r) * n); }

/* Standard normal (Box-Muller, one of the pair). */
static double rng_normal(rng *r)
{
    return sqrt(-2 * log(rng_open01(r))) * cos(6.283185307179586 * rng_open01(r));
}

/* ---- generation ------------------------------------------------------------------------ */

typedef struct gen {
    const mvm_trace_gen *g;
    rng r;
    uint32_t L, E, K;
    double *log_p;      /* [E] by rank */
    uint32_t *expert;   /* [L][E] expert of each rank */
    uint32_t *rank;     /* [L][E] rank of each expert */
    int32_t *prev;      /* [L][K] the previous token's selection, or -1s */
    double *context;    /* [L][E] each expert's drifting logit offset */
    double rho;         /* the drift's per-token correlation, exp(-1/drift_tokens) */
    double *z;          /* [E] logits of the current row */
    uint8_t *chosen;    /* [E] */
} gen;

static void draw_task(gen *s)
{
    for (uint32_t l = 0; l < s->L; l++) {
        uint32_t *ex = s->expert + (size_t)l * s->E, *rk = s->rank + (size_t)l * s->E;
        for (uint32_t e = 0; e < s->E; e++)
            ex[e] = e;
        for (uint32_t e = s->E - 1; e > 0; e--) { /* Fisher-Yates */
            uint32_t j = rng_below(&s->r, e + 1), x = ex[e];
            ex[e] = ex[j];
            ex[j] = x;
        }
        for (uint32_t r = 0; r < s->E; r++)
            rk[ex[r]] = r;
    }
}

/* p to 6 significant digits, as the engine records scores: the trace file stays as compact
 * as a recorded one and reads back exactly. Rounding is monotone, so the selection stays the
 * top_k of the scores. */
static float round6(double p)
{
    if (p < 1e-30) /* far below anything a policy looks at; also keeps the scale finite */
        return (float)p;
    double scale = pow(10.0, 5 - floor(log10(p)));
    return (float)(nearbyint(p * scale) / scale);
}

/* Selects `e` with logit at least `floor` (+ an Exp(1) draw when it was below). */
static void force(gen *s, uint32_t e, double floor, int32_t *sel, uint32_t *n)
{
    if (s->z[e] <= floor)
        s->z[e] = floor - log(rng_open01(&s->r));
    s->chosen[e] = 1;
    sel[(*n)++] = (int32_t)e;
}

/* One (token, layer) row: selection, scores and weights. follow: the expert the top must be
 * (layer correlation), or -1. */
static void gen_row(gen *s, uint32_t l, int32_t follow, float *scores, int32_t *experts,
                    float *weights)
{
    const uint32_t E = s->E, K = s->K;
    const uint32_t *rank = s->rank + (size_t)l * E;
    int32_t *prev = s->prev + (size_t)l * K;
    double *context = s->context + (size_t)l * E;
    const double step = s->g->drift * sqrt(1 - s->rho * s->rho);
    for (uint32_t e = 0; e < E; e++) {
        if (s->g->drift > 0)
            context[e] = s->rho * context[e] + step * rng_normal(&s->r);
        s->z[e] = s->log_p[rank[e]] + context[e] - log(-log(rng_open01(&s->r)));
        s->chosen[e] = 0;
    }
    /* The previous token's experts that carry over, then the best fresh ones. */
    int32_t kept[256];
    uint32_t n_kept = 0, n = 0;
    for (uint32_t k = 0; k < K && prev[0] >= 0; k++)
        if (prev[k] != follow && rng_open01(&s->r) < s->g->reuse && n_kept + (follow >= 0) < K)
            kept[n_kept++] = prev[k];
    for (uint32_t k = 0; k < n_kept; k++)
        s->chosen[kept[k]] = 1;
    if (follow >= 0)
        s->chosen[follow] = 1;
    uint32_t n_fresh = K - n_kept - (follow >= 0);
    for (uint32_t k = 0; k < n_fresh; k++) {
        int32_t best = -1;
        for (uint32_t e = 0; e < E; e++)
            if (!s->chosen[e] && (best < 0 || s->z[e] > s->z[best]))
                best = (int32_t)e;
        s->chosen[best] = 1;
        experts[n++] = best;
    }
    double floor = -INFINITY, top = -INFINITY;
    for (uint32_t e = 0; e < E; e++) {
        if (!s->chosen[e] && s->z[e] > floor)
            floor = s->z[e];
    }
    if (!isfinite(floor)) /* top_k == n_experts: nothing unselected to rise above */
        floor = -1e300;
    for (uint32_t k = 0; k < n_kept; k++)
        force(s, (uint32_t)kept[k], floor, experts, &n);
    for (uint32_t e = 0; e < E; e++)
        top = fmax(top, s->z[e]);
    if (follow >= 0)
        force(s, (uint32_t)follow, top, experts, &n);
    /* Best first (insertion sort: k is small). */
    for (uint32_t i = 1; i < K; i++)
        for (uint32_t j = i; j > 0 && s->z[experts[j]] > s->z[experts[j - 1]]; j--) {
            int32_t x = experts[j];
            experts[j] = experts[j - 1];
            experts[j - 1] = x;
        }
    if (s->g->latent_scores)
        for (uint32_t e = 0; e < E; e++)
            s->z[e] = s->log_p[rank[e]] + context[e];
    double sum = 0, wsum = 0, zmax = -INFINITY;
    for (uint32_t e = 0; e < E; e++)
        zmax = fmax(zmax, s->z[e]);
    for (uint32_t e = 0; e < E; e++)
        sum += exp(s->z[e] - zmax);
    for (uint32_t e = 0; e < E; e++)
        scores[e] = round6(exp(s->z[e] - zmax) / sum);
    for (uint32_t k = 0; k < K; k++)
        wsum += scores[experts[k]];
    for (uint32_t k = 0; k < K; k++) {
        weights[k] = s->g->hdr.weights_renormalised ? (float)(scores[experts[k]] / wsum)
                                                    : scores[experts[k]];
        prev[k] = experts[k];
    }
}

/* With probability layer_corr, the expert token i's top at layer l must be: the one of the
 * same popularity rank as its top expert at l - 1. Else -1. */
static int32_t follower(gen *s, const mvm_trace *t, uint32_t i, uint32_t l)
{
    if (l == 0 || !(rng_open01(&s->r) < s->g->layer_corr))
        return -1;
    uint32_t above = (uint32_t)mvm_trace_experts(t, i, l - 1)[0];
    return (int32_t)s->expert[(size_t)l * s->E + s->rank[(size_t)(l - 1) * s->E + above]];
}

static mvm_status check_params(const mvm_trace_gen *g)
{
    const char *bad = NULL;
    if (g->tokens < 1)
        bad = "tokens must be at least 1";
    else if (g->requests < 1 || g->requests > g->tokens)
        bad = "requests must be in 1..tokens";
    else if (!(g->skew >= 0 && g->skew <= 8))
        bad = "skew must be in 0..8";
    else if (!(g->reuse >= 0 && g->reuse <= 1))
        bad = "reuse must be in 0..1";
    else if (!(g->layer_corr >= 0 && g->layer_corr <= 1))
        bad = "layer-corr must be in 0..1";
    else if (!(g->drift >= 0 && g->drift <= 8))
        bad = "drift must be in 0..8";
    else if (g->drift_tokens < 1)
        bad = "drift-tokens must be at least 1";
    else if (g->hdr.top_k > 256)
        bad = "top-k must be at most 256";
    return bad ? mvm_fail(MVM_ERR_INVALID, "trace gen: %s", bad) : MVM_OK;
}

static void gen_free(gen *s)
{
    free(s->log_p);
    free(s->expert);
    free(s->rank);
    free(s->prev);
    free(s->context);
    free(s->z);
    free(s->chosen);
}

mvm_status mvm_trace_generate(const mvm_trace_gen *g, mvm_trace **out)
{
    *out = NULL;
    mvm_status st = check_params(g);
    if (st != MVM_OK)
        return st;
    char model[256];
    snprintf(model, sizeof model, "synthetic %s (moevm trace gen: skew %g, reuse %g, layer-corr "
             "%g, shift-every %u, drift %g over %u tokens,%s seed %llu)", g->shape, g->skew,
             g->reuse, g->layer_corr, g->shift_every, g->drift, g->drift_tokens,
             g->latent_scores ? " latent scores," : "", (unsigned long long)g->seed);
    mvm_trace_header h = g->hdr;
    h.model = model;
    mvm_trace *t;
    if ((st = mvm_trace_new(&h, g->tokens, 0, &t)) != MVM_OK)
        return st;
    gen s = {.g = g, .L = h.n_layers, .E = h.n_experts, .K = h.top_k};
    size_t LE = (size_t)s.L * s.E;
    s.log_p = malloc(s.E * sizeof *s.log_p);
    s.expert = malloc(LE * sizeof *s.expert);
    s.rank = malloc(LE * sizeof *s.rank);
    s.prev = malloc((size_t)s.L * s.K * sizeof *s.prev);
    s.context = malloc(LE * sizeof *s.context);
    s.z = malloc(s.E * sizeof *s.z);
    s.chosen = malloc(s.E);
    if (!s.log_p || !s.expert || !s.rank || !s.prev || !s.context || !s.z || !s.chosen) {
        gen_free(&s);
        mvm_trace_free(t);
        return mvm_fail(MVM_ERR_NOMEM, "trace gen: out of memory");
    }
    double norm = 0;
    for (uint32_t r = 0; r < s.E; r++)
        norm += pow(r + 1.0, -g->skew);
    for (uint32_t r = 0; r < s.E; r++)
        s.log_p[r] = -g->skew * log(r + 1.0) - log(norm);
    rng_seed(&s.r, g->seed);
    s.rho = exp(-1.0 / g->drift_tokens);
    draw_task(&s);
    for (uint32_t q = 0; q < g->requests; q++) {
        /* Request q holds tokens [q·N/R, (q+1)·N/R) and starts with no previous token. */
        uint32_t first = (uint32_t)((uint64_t)q * g->tokens / g->requests);
        uint32_t end = (uint32_t)((uint64_t)(q + 1) * g->tokens / g->requests);
        for (size_t k = 0; k < (size_t)s.L * s.K; k++)
            s.prev[k] = -1;
        for (size_t x = 0; x < LE; x++) /* a request starts in the drift's stationary law */
            s.context[x] = g->drift > 0 ? g->drift * rng_normal(&s.r) : 0;
        for (uint32_t i = first; i < end; i++) {
            t->req[i] = q;
            t->tok[i] = i - first;
            if (i > 0 && g->shift_every && i % g->shift_every == 0)
                draw_task(&s);
            for (uint32_t l = 0; l < s.L; l++)
                gen_row(&s, l, follower(&s, t, i, l), mvm_trace_scores(t, i, l),
                        mvm_trace_experts(t, i, l), mvm_trace_weights(t, i, l));
        }
    }
    gen_free(&s);
    *out = t;
    return MVM_OK;
}

/* ---- statistics ------------------------------------------------------------------------ */

static int cmp_desc(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x < y) - (x > y);
}

/* Sum of the largest `top` of counts[0..n) (sorted in place). */
static uint64_t top_sum(uint32_t *counts, size_t n, size_t top)
{
    qsort(counts, n, sizeof *counts, cmp_desc);
    uint64_t sum = 0;
    for (size_t i = 0; i < top && i < n; i++)
        sum += counts[i];
    return sum;
}

/* Tokens by (req, tok), to find each token's predecessor tok - 1. */
typedef struct token_key {
    uint32_t req, tok, index;
} token_key;

static int cmp_token(const void *a, const void *b)
{
    const token_key *x = a, *y = b;
    if (x->req != y->req)
        return x->req < y->req ? -1 : 1;
    return (x->tok > y->tok) - (x->tok < y->tok);
}

static void layer_stats(const mvm_trace *t, uint32_t l, const uint32_t *pred, uint32_t *counts,
                        uint32_t *pairs, mvm_trace_layer_stats *out)
{
    const uint32_t E = t->hdr.n_experts, K = t->hdr.top_k, n = t->n_tokens;
    memset(counts, 0, E * sizeof *counts);
    uint64_t repeats = 0, with_pred = 0, repeats8 = 0, with_pred8 = 0;
    for (uint32_t i = 0; i < n; i++) {
        const int32_t *x = mvm_trace_experts(t, i, l);
        for (uint32_t k = 0; k < K; k++)
            counts[x[k]]++;
        if (pred[i] == UINT32_MAX)
            continue;
        const int32_t *y = mvm_trace_experts(t, pred[i], l);
        with_pred++;
        for (uint32_t k = 0; k < K; k++)
            for (uint32_t j = 0; j < K; j++)
                repeats += x[k] == y[j];
        uint32_t back[8], n_back = 0;
        for (uint32_t p = pred[i]; p != UINT32_MAX && n_back < 8; p = pred[p])
            back[n_back++] = p;
        if (n_back < 8)
            continue;
        with_pred8++;
        for (uint32_t k = 0; k < K; k++) {
            int seen = 0;
            for (uint32_t b = 0; b < 8 && !seen; b++)
                for (uint32_t j = 0; j < K && !seen; j++)
                    seen = x[k] == mvm_trace_experts(t, back[b], l)[j];
            repeats8 += (uint64_t)seen;
        }
    }
    double total = (double)n * K, entropy = 0;
    for (uint32_t e = 0; e < E; e++)
        if (counts[e])
            entropy -= counts[e] / total * log(counts[e] / total);
    out->entropy = E > 1 ? entropy / log(E) : 1;
    out->top_share = top_sum(counts, E, (E + 7) / 8) / total;
    out->reuse = with_pred ? repeats / ((double)with_pred * K) : 0;
    out->reuse8 = with_pred8 ? repeats8 / ((double)with_pred8 * K) : 0;
    out->pair_share = out->follow = 0;
    if (l == 0)
        return;
    /* pairs[a][b]: tokens that selected a at l - 1 and b at l; then the same over the top
     * experts only, for `follow`. */
    size_t EE = (size_t)E * E;
    memset(pairs, 0, EE * sizeof *pairs);
    for (uint32_t i = 0; i < n; i++) {
        const int32_t *a = mvm_trace_experts(t, i, l - 1), *b = mvm_trace_experts(t, i, l);
        for (uint32_t k = 0; k < K; k++)
            for (uint32_t j = 0; j < K; j++)
                pairs[(size_t)a[k] * E + b[j]]++;
    }
    out->pair_share = top_sum(pairs, EE, (EE + 4) / 5) / ((double)n * K * K);
    memset(pairs, 0, EE * sizeof *pairs);
    for (uint32_t i = 0; i < n; i++)
        pairs[(size_t)mvm_trace_experts(t, i, l - 1)[0] * E + mvm_trace_experts(t, i, l)[0]]++;
    uint64_t followed = 0;
    for (uint32_t a = 0; a < E; a++) {
        uint32_t best = 0;
        for (uint32_t b = 0; b < E; b++)
            best = pairs[(size_t)a * E + b] > best ? pairs[(size_t)a * E + b] : best;
        followed += best;
    }
    out->follow = (double)followed / n;
}

mvm_status mvm_trace_stats(const mvm_trace *t, mvm_trace_layer_stats *per_layer,
                           mvm_trace_layer_stats *mean)
{
    const uint32_t L = t->hdr.n_layers, E = t->hdr.n_experts, n = t->n_tokens;
    if (n == 0)
        return mvm_fail(MVM_ERR_INVALID, "trace stats: the trace has no tokens");
    token_key *order = malloc((size_t)n * sizeof *order);
    uint32_t *pred = malloc((size_t)n * sizeof *pred);
    uint32_t *counts = malloc((size_t)E * sizeof *counts);
    uint32_t *pairs = malloc((size_t)E * E * sizeof *pairs);
    if (!order || !pred || !counts || !pairs) {
        free(order);
        free(pred);
        free(counts);
        free(pairs);
        return mvm_fail(MVM_ERR_NOMEM, "trace stats: out of memory");
    }
    for (uint32_t i = 0; i < n; i++)
        order[i] = (token_key){t->req[i], t->tok[i], i};
    qsort(order, n, sizeof *order, cmp_token);
    for (uint32_t i = 0; i < n; i++) {
        const token_key *a = &order[i], *b = i > 0 ? &order[i - 1] : NULL;
        pred[a->index] = b && b->req == a->req && b->tok + 1 == a->tok ? b->index : UINT32_MAX;
    }
    *mean = (mvm_trace_layer_stats){0};
    for (uint32_t l = 0; l < L; l++) {
        mvm_trace_layer_stats *s = &per_layer[l];
        layer_stats(t, l, pred, counts, pairs, s);
        mean->top_share += s->top_share / L;
        mean->entropy += s->entropy / L;
        mean->reuse += s->reuse / L;
        mean->reuse8 += s->reuse8 / L;
        if (L > 1) {
            mean->pair_share += s->pair_share / (L - 1);
            mean->follow += s->follow / (L - 1);
        }
    }
    free(order);
    free(pred);
    free(counts);
    free(pairs);
    return MVM_OK;
}
