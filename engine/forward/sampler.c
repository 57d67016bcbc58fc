/*
 * Token sampling (see sampler.h). Candidates are 64-bit keys, the logit's bits made
 * monotone above the complement of the id, so that "larger key" is exactly "higher logit,
 * then lower id" and every ordering step compares integers: top-k keeps the k largest with
 * a bounded heap, top-p sorts with a radix sort (linear, whatever the distribution), and
 * everything works in buffers reserved by mvm_sampler_create.
 */
#include "engine/forward/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/error.h"

struct mvm_sampler {
    mvm_sampler_params p;
    uint32_t cap;
    uint64_t *key, *tmp; /* candidates, and the radix sort's other half */
    double *weight;
    float *penalized;    /* the logits after the repetition penalty; NULL when it is off */
    mvm_grammar *grammar; /* the constraint, or NULL */
    float *masked;       /* the logits a grammar has masked; reserved with the grammar */
    uint64_t state;
};

mvm_status mvm_sampler_create(const mvm_sampler_params *p, uint32_t n_vocab,
                              mvm_sampler **out)
{
    *out = NULL;
    if (!(p->temperature >= 0) || isinf(p->temperature))
        return mvm_fail(MVM_ERR_INVALID, "sampler: temperature %g is not a number >= 0 "
                        "(0 = greedy)", (double)p->temperature);
    if (p->top_k < 0)
        return mvm_fail(MVM_ERR_INVALID, "sampler: top_k %d is negative (0 = off)", p->top_k);
    if (!(p->top_p >= 0 && p->top_p <= 1))
        return mvm_fail(MVM_ERR_INVALID, "sampler: top_p %g is outside [0, 1] (0 or 1 = off)",
                        (double)p->top_p);
    if (!(p->min_p >= 0 && p->min_p <= 1))
        return mvm_fail(MVM_ERR_INVALID, "sampler: min_p %g is outside [0, 1] (0 = off)",
                        (double)p->min_p);
    if (!(p->repeat_penalty >= 0) || isinf(p->repeat_penalty))
        return mvm_fail(MVM_ERR_INVALID, "sampler: repeat_penalty %g is not a number > 0 "
                        "(1 = off)", (double)p->repeat_penalty);
    if (n_vocab == 0)
        return mvm_fail(MVM_ERR_INVALID, "sampler: a vocabulary of 0 tokens");
    /* 0 is off too: a caller that never heard of the penalty leaves it 0 */
    const int penalty = p->repeat_penalty != 0 && p->repeat_penalty != 1 && p->repeat_last_n;
    mvm_sampler *s = calloc(1, sizeof *s);
    if (s) {
        s->key = malloc((size_t)n_vocab * sizeof *s->key);
        s->tmp = malloc((size_t)n_vocab * sizeof *s->tmp);
        s->weight = malloc((size_t)n_vocab * sizeof *s->weight);
        s->penalized = penalty ? malloc((size_t)n_vocab * sizeof *s->penalized) : NULL;
    }
    if (!s || !s->key || !s->tmp || !s->weight || (penalty && !s->penalized)) {
        mvm_sampler_free(s);
        return mvm_fail(MVM_ERR_NOMEM, "sampler: no memory for %u candidates", n_vocab);
    }
    s->p = *p;
    if (s->p.top_p == 0) /* unset in a zeroed struct, as repeat_penalty: off */
        s->p.top_p = 1;
    s->cap = n_vocab;
    s->state = p->seed;
    *out = s;
    return MVM_OK;
}

void mvm_sampler_free(mvm_sampler *s)
{
    if (!s)
        return;
    free(s->key);
    free(s->tmp);
    free(s->weight);
    free(s->penalized);
    free(s->masked);
    free(s);
}

mvm_status mvm_sampler_set_grammar(mvm_sampler *s, mvm_grammar *g)
{
    s->grammar = NULL;
    if (g && !s->masked && !(s->masked = malloc((size_t)s->cap * sizeof *s->masked)))
        return mvm_fail(MVM_ERR_NOMEM, "sampler: no memory for a grammar's row of %u",
                        s->cap);
    s->grammar = g;
    return MVM_OK;
}

/* splitmix64 (Steele, Lea, Flood 2014): 64 bits of state, statistically strong enough for
 * sampling, and a fixed seed gives a fixed stream on every platform. */
static double uniform01(mvm_sampler *s)
{
    uint64_t z = s->state += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

/* The highest logit, ties to the lowest id; -1 when all are NaN. */
static int32_t argmax(const float *l, uint32_t n)
{
    int32_t best = -1;
    for (uint32_t i = 0; i < n; i++)
        if (l[i] == l[i] && (best < 0 || l[i] > l[best]))
            best = (int32_t)i;
    return best;
}

static uint64_t key_of(float logit, uint32_t id)
{
    logit += 0.0f; /* -0 becomes +0: they tie, as they compare equal */
    uint32_t u;
    memcpy(&u, &logit, sizeof u);
    u = u >> 31 ? ~u : u | 0x80000000u; /* IEEE order as unsigned order */
    return (uint64_t)u << 32 | (uint32_t)~id;
}

static uint32_t id_of(uint64_t key)
{
    return ~(uint32_t)key;
}

/* Restores the min-heap a[0..end) below i. */
static void sift_down(uint64_t *a, uint32_t i, uint32_t end)
{
    for (uint32_t c; (c = 2 * i + 1) < end; i = c) {
        if (c + 1 < end && a[c + 1] < a[c])
            c++;
        if (a[i] <= a[c])
            return;
        uint64_t t = a[i];
        a[i] = a[c];
        a[c] = t;
    }
}

/* Moves the k largest of a[0..n) (0 < k < n) to a[0..k), in no particular order: a heap of
 * the best k so far with the worst at its root, so most keys cost one comparison. */
static void select_largest(uint64_t *a, uint32_t n, uint32_t k)
{
    for (uint32_t i = k / 2; i-- > 0;)
        sift_down(a, i, k);
    for (uint32_t i = k; i < n; i++) {
        if (a[i] > a[0]) {
            a[0] = a[i];
            sift_down(a, 0, k);
        }
    }
}

/* Sorts a[0..n) into descending order: LSD radix sort by bytes, skipping the bytes all
 * keys share (the high bytes of the ids, mostly). */
static void sort_descending(uint64_t *a, uint64_t *tmp, uint32_t n)
{
    uint64_t *src = a, *dst = tmp;
    for (int shift = 0; shift < 64; shift += 8) {
        uint32_t count[257] = {0};
        for (uint32_t i = 0; i < n; i++)
            count[(uint8_t)~(src[i] >> shift) + 1]++;
        if (count[(uint8_t)~(src[0] >> shift) + 1] == n)
            continue;
        for (int d = 0; d < 256; d++)
            count[d + 1] += count[d];
        for (uint32_t i = 0; i < n; i++)
            dst[count[(uint8_t)~(src[i] >> shift)]++] = src[i];
        uint64_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != a)
        memcpy(a, src, (size_t)n * sizeof *a);
}

/* How many of the m sorted candidates top-p keeps: the fewest first ones whose
 * probabilities sum to at least top_p. */
static uint32_t nucleus(const mvm_sampler *s, const float *l, uint32_t m, float max)
{
    double z = 0, cum = 0;
    for (uint32_t i = 0; i < m; i++)
        z += s->weight[i] = exp((double)l[id_of(s->key[i])] - max);
    for (uint32_t i = 0; i < m; i++)
        if ((cum += s->weight[i]) >= s->p.top_p * z)
            return i + 1;
    return m; /* rounding kept the sum under the target */
}

void mvm_sampler_penalize(const mvm_sampler_params *p, const float *logits, uint32_t n,
                          const int32_t *prev, uint32_t n_prev, float *out)
{
    memcpy(out, logits, (size_t)n * sizeof *out);
    if (p->repeat_penalty == 0 || p->repeat_penalty == 1)
        return;
    uint32_t first = n_prev > p->repeat_last_n ? n_prev - p->repeat_last_n : 0;
    /* from logits, not out: a token seen twice is penalised once, with no table of them */
    for (uint32_t i = first; i < n_prev; i++) {
        if (prev[i] < 0 || (uint32_t)prev[i] >= n)
            continue;
        float l = logits[prev[i]];
        out[prev[i]] = l > 0 ? l / p->repeat_penalty : l * p->repeat_penalty;
    }
}

int32_t mvm_sampler_sample(mvm_sampler *s, float *logits, uint32_t n)
{
    return mvm_sampler_sample_after(s, logits, n, NULL, 0);
}

/* Steps 1 to 4 over logits[0..n) (already penalised). */
static int32_t draw(mvm_sampler *s, const float *logits, uint32_t n)
{
    int32_t best = argmax(logits, n);
    if (s->p.temperature == 0 || best < 0 || !isfinite(logits[best]))
        return best; /* greedy; no number; +inf wins; only -inf: the lowest id */
    const float max = logits[best];
    uint64_t *key = s->key;
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++)
        if (logits[i] > -INFINITY) /* NaN and -inf have no probability */
            key[m++] = key_of(logits[i], i);
    if (s->p.top_k > 0 && (uint32_t)s->p.top_k < m) {
        select_largest(key, m, (uint32_t)s->p.top_k);
        m = (uint32_t)s->p.top_k;
    }
    if (s->p.top_p < 1) {
        sort_descending(key, s->tmp, m);
        m = nucleus(s, logits, m, max);
    }
    if (s->p.min_p > 0) {
        float floor = max + logf(s->p.min_p);
        uint32_t kept = 0;
        for (uint32_t i = 0; i < m; i++)
            if (logits[id_of(key[i])] >= floor)
                key[kept++] = key[i];
        m = kept; /* the best has probability ratio 1 and stays */
    }
    double total = 0;
    for (uint32_t i = 0; i < m; i++)
        total += s->weight[i] = exp(((double)logits[id_of(key[i])] - max) / s->p.temperature);
    double u = uniform01(s) * total, cum = 0;
    for (uint32_t i = 0; i < m; i++)
        if ((cum += s->weight[i]) > u)
            return (int32_t)id_of(key[i]);
    return (int32_t)id_of(key[m - 1]); /* u rounded up to the total */
}

/* As llama.cpp samples under a grammar: the draw stands when the grammar allows it; if
 * not, the tokens it does not allow are masked and the draw is made again. */
static int32_t draw_in_grammar(mvm_sampler *s, const float *logits, uint32_t n)
{
    int32_t t = draw(s, logits, n);
    if (t < 0 || !mvm_grammar_allows(s->grammar, t)) {
        memcpy(s->masked, logits, (size_t)n * sizeof *logits);
        if (mvm_grammar_apply(s->grammar, s->masked, n) != MVM_OK)
            return -1;
        t = argmax(s->masked, n);
        if (t < 0 || s->masked[t] == -INFINITY)
            return -1; /* no token fits */
        t = draw(s, s->masked, n);
    }
    return mvm_grammar_accept(s->grammar, t) == MVM_OK ? t : -1;
}

int32_t mvm_sampler_sample_after(mvm_sampler *s, float *logits, uint32_t n,
                                 const int32_t *prev, uint32_t n_prev)
{
    if (n == 0 || n > s->cap)
        return -1;
    if (s->penalized && n_prev) { /* the caller's logits stay as they are */
        mvm_sampler_penalize(&s->p, logits, n, prev, n_prev, s->penalized);
        logits = s->penalized;
    }
    return s->grammar ? draw_in_grammar(s, logits, n) : draw(s, logits, n);
}

float mvm_sampler_logprobs(const float *logits, uint32_t n, uint32_t k, int32_t *top_id,
                           float *top_lp)
{
    for (uint32_t j = 0; j < k; j++)
        top_id[j] = -1, top_lp[j] = -INFINITY;
    const int32_t best = argmax(logits, n);
    if (best < 0)
        return -INFINITY;
    /* k is small (a reply's alternatives, 20 at most in the server): a sorted list that a
     * logit enters by insertion beats sorting the vocabulary */
    uint32_t have = 0;
    const double max = logits[best];
    double sum = 0;
    for (uint32_t i = 0; i < n; i++) {
        const float l = logits[i];
        if (l != l)
            continue;
        sum += isinf(max) ? l == max : exp((double)l - max);
        if (k == 0 || (have == k && !(l > top_lp[k - 1])))
            continue;
        uint32_t at = have < k ? have++ : k - 1;
        for (; at > 0 && l > top_lp[at - 1]; at--)
            top_id[at] = top_id[at - 1], top_lp[at] = top_lp[at - 1];
        top_id[at] = (int32_t)i, top_lp[at] = l;
    }
    const float lse = (float)(max + log(sum));
    for (uint32_t j = 0; j < have; j++)
        top_lp[j] = isinf(max) ? (top_lp[j] == (float)max ? -(float)log(sum) : -INFINITY)
                               : top_lp[j] - lse;
    return lse;
}
