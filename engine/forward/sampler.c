/*
 * Token sampling (include/moevm/engine.h says what it does; sampler.h how it is split).
 * Candidates are 64-bit keys, the logit's bits made monotone above the complement of the
 * id, so that "larger key" is exactly "higher logit, then lower id" and every ordering step
 * compares integers: top-k keeps the k largest with a bounded heap, top-p sorts with a
 * radix sort (linear, whatever the distribution), and everything works in buffers reserved
 * by mvm_sampler_create.
 */
#include "engine/forward/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/error.h"

/* A parameter's range, checked: NaN is never in one. */
static mvm_status check(const char *name, float v, float lo, float hi, const char *what)
{
    if (v >= lo && v <= hi)
        return MVM_OK;
    return mvm_fail(MVM_ERR_INVALID, "sampler: %s %g is %s", name, (double)v, what);
}

static mvm_status check_params(const mvm_sampler_params *p)
{
    const float big = 3.4e38f;
    mvm_status st = MVM_OK;
    if (p->top_k < 0)
        return mvm_fail(MVM_ERR_INVALID, "sampler: top_k %d is negative (0 = off)", p->top_k);
    for (int i = 0; i < MVM_SAMPLER_MAX_STEPS && p->order[i]; i++)
        if (p->order[i] >= MVM_SAMPLER_STEP_END)
            return mvm_fail(MVM_ERR_INVALID, "sampler: order[%d] is %u, not a step (1 to %d)", i,
                            p->order[i], MVM_SAMPLER_STEP_END - 1);
    if (p->mirostat < 0 || p->mirostat > 2)
        return mvm_fail(MVM_ERR_INVALID, "sampler: mirostat %d is not 0 (off), 1 or 2",
                        p->mirostat);
    if ((st = check("temperature", p->temperature, 0, big, "not a number >= 0 (0 = greedy)")) ||
        (st = check("top_p", p->top_p, 0, 1, "outside [0, 1] (0 or 1 = off)")) ||
        (st = check("min_p", p->min_p, 0, 1, "outside [0, 1] (0 = off)")) ||
        (st = check("repeat_penalty", p->repeat_penalty, 0, big, "not a number > 0 (1 = off)")) ||
        (st = check("frequency_penalty", p->frequency_penalty, -big, big, "not a number")) ||
        (st = check("presence_penalty", p->presence_penalty, -big, big, "not a number")) ||
        (st = check("dry_multiplier", p->dry_multiplier, 0, big, "not a number >= 0 (0 = off)")) ||
        (st = p->dry_base == 0 ? MVM_OK
                               : check("dry_base", p->dry_base, 1, big, "not a number >= 1")) ||
        (st = check("top_n_sigma", p->top_n_sigma, -big, big, "not a number (<= 0 = off)")) ||
        (st = check("typical_p", p->typical_p, 0, 1, "outside [0, 1] (0 or 1 = off)")) ||
        (st = check("xtc_probability", p->xtc_probability, 0, 1, "outside [0, 1] (0 = off)")) ||
        (st = check("xtc_threshold", p->xtc_threshold, 0, 1, "outside [0, 1]")) ||
        (st = check("dynatemp_range", p->dynatemp_range, 0, big, "not a number >= 0 (0 = off)")) ||
        (st = check("dynatemp_exponent", p->dynatemp_exponent, 0, big, "not a number > 0")) ||
        (st = check("mirostat_tau", p->mirostat_tau, 0, big, "not a number >= 0")) ||
        (st = check("mirostat_eta", p->mirostat_eta, 0, big, "not a number >= 0")))
        return st;
    return MVM_OK;
}

static void or_default(float *v, float d)
{
    *v = *v == 0 ? d : *v;
}

/* The parameters with what is left 0 read as its default, and what does nothing off. */
static mvm_sampler_params normalized(const mvm_sampler_params *in)
{
    mvm_sampler_params p = *in;
    or_default(&p.top_p, 1), or_default(&p.typical_p, 1), or_default(&p.dry_base, 1.75f);
    or_default(&p.dynatemp_exponent, 1), or_default(&p.mirostat_tau, 5);
    or_default(&p.mirostat_eta, 0.1f);
    p.min_keep = p.min_keep ? p.min_keep : 1;
    if (p.xtc_threshold > 0.5f || p.xtc_probability == 0)
        p.xtc_probability = 0; /* llama.cpp's: a threshold over 0.5 turns XTC off */
    if (p.dry_multiplier == 0 || p.dry_last_n == 0)
        p.dry_multiplier = 0, p.dry_last_n = 0;
    if (!p.order[0]) { /* llama.cpp's default order */
        static const uint8_t chain[] = {
            MVM_SAMPLER_PENALTIES, MVM_SAMPLER_DRY,   MVM_SAMPLER_TOP_N_SIGMA,
            MVM_SAMPLER_TOP_K,     MVM_SAMPLER_TYPICAL, MVM_SAMPLER_TOP_P,
            MVM_SAMPLER_MIN_P,     MVM_SAMPLER_XTC,   MVM_SAMPLER_TEMPERATURE};
        memcpy(p.order, chain, sizeof chain);
    }
    return p;
}

/* How many steps the order has. */
static int steps(const mvm_sampler_params *p)
{
    int n = 0;
    while (n < MVM_SAMPLER_MAX_STEPS && p->order[n])
        n++;
    return n;
}

/* What the parameters need beyond the candidates: the working row (for the penalties, or a
 * temperature before the last step), the counts, typical's order, DRY's. */
static int reserve(mvm_sampler *s, uint32_t n_vocab)
{
    const mvm_sampler_params *p = &s->p;
    const int dry = smp_dry_on(p), pen = smp_penalties_on(p);
    const int n = steps(p);
    int early_temp = 0;
    for (int i = 0; i < n; i++)
        early_temp |= p->order[i] == MVM_SAMPLER_TEMPERATURE && i != n - 1;
    if ((dry || pen || early_temp) && !(s->work = malloc((size_t)n_vocab * sizeof *s->work)))
        return -1;
    if (pen && !(s->count = calloc(n_vocab, sizeof *s->count)))
        return -1;
    if (p->typical_p < 1 && !(s->rank = malloc((size_t)n_vocab * sizeof *s->rank)))
        return -1;
    if (dry) {
        s->dry_run = malloc((size_t)p->dry_last_n * sizeof *s->dry_run);
        s->dry_touched = malloc((size_t)p->dry_last_n * sizeof *s->dry_touched);
        s->dry_max = malloc((size_t)n_vocab * sizeof *s->dry_max);
        if (!s->dry_run || !s->dry_touched || !s->dry_max)
            return -1;
        memset(s->dry_max, 0xff, (size_t)n_vocab * sizeof *s->dry_max); /* -1: none */
    }
    return 0;
}

mvm_status mvm_sampler_create(const mvm_sampler_params *p, uint32_t n_vocab,
                              mvm_sampler **out)
{
    *out = NULL;
    mvm_status st = check_params(p);
    if (st != MVM_OK)
        return st;
    if (n_vocab == 0)
        return mvm_fail(MVM_ERR_INVALID, "sampler: a vocabulary of 0 tokens");
    mvm_sampler *s = calloc(1, sizeof *s);
    if (s) {
        s->p = normalized(p);
        s->key = malloc((size_t)n_vocab * sizeof *s->key);
        s->tmp = malloc((size_t)n_vocab * sizeof *s->tmp);
        s->weight = malloc((size_t)n_vocab * sizeof *s->weight);
    }
    if (!s || !s->key || !s->tmp || !s->weight || reserve(s, n_vocab) != 0) {
        mvm_sampler_free(s);
        return mvm_fail(MVM_ERR_NOMEM, "sampler: no memory for %u candidates", n_vocab);
    }
    s->cap = n_vocab;
    s->state = p->seed;
    s->mu = 2 * s->p.mirostat_tau; /* llama.cpp's start */
    *out = s;
    return MVM_OK;
}

void mvm_sampler_free(mvm_sampler *s)
{
    if (!s)
        return;
    free(s->key);
    free(s->tmp);
    free(s->rank);
    free(s->weight);
    free(s->work);
    free(s->count);
    free(s->dry_run);
    free(s->dry_max);
    free(s->dry_touched);
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
double smp_uniform01(mvm_sampler *s)
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

uint64_t smp_key(float logit, uint32_t id)
{
    logit += 0.0f; /* -0 becomes +0: they tie, as they compare equal */
    uint32_t u;
    memcpy(&u, &logit, sizeof u);
    u = u >> 31 ? ~u : u | 0x80000000u; /* IEEE order as unsigned order */
    return (uint64_t)u << 32 | (uint32_t)~id;
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

/* A heap of the best k so far with the worst at its root, so most keys cost one
 * comparison. */
void smp_select_largest(uint64_t *a, uint32_t n, uint32_t k)
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

/* An LSD radix sort by bytes, skipping the bytes all keys share (the high bytes of the ids,
 * mostly). */
void smp_sort_descending(uint64_t *a, uint64_t *tmp, uint32_t n)
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

float smp_max(const mvm_sampler *s, const float *l, uint32_t m)
{
    float max = -INFINITY;
    for (uint32_t i = 0; i < m; i++)
        if (l[smp_id(s->key[i])] > max)
            max = l[smp_id(s->key[i])];
    return max;
}

double smp_weights(mvm_sampler *s, const float *l, uint32_t m, float max, double t)
{
    double total = 0;
    for (uint32_t i = 0; i < m; i++)
        total += s->weight[i] = exp(((double)l[smp_id(s->key[i])] - max) / t);
    return total;
}

uint32_t smp_pick(mvm_sampler *s, uint32_t m, double total)
{
    double u = smp_uniform01(s) * total, cum = 0;
    uint32_t at = m - 1; /* u rounded up to the total */
    for (uint32_t i = 0; i < m; i++)
        if ((cum += s->weight[i]) > u) {
            at = i;
            break;
        }
    s->last_m = m, s->last_at = at, s->last_total = total;
    return at;
}

/* A draw that had one choice: token id, certain. */
static int32_t certain(mvm_sampler *s, int32_t id, const float *l)
{
    if (id >= 0) {
        s->key[0] = smp_key(l[id], (uint32_t)id), s->weight[0] = 1;
        s->last_m = 1, s->last_at = 0, s->last_total = 1;
    }
    return id;
}

uint32_t mvm_sampler_last_probs(const mvm_sampler *s, uint32_t k, int32_t *ids, float *probs,
                                float *chosen)
{
    *chosen = s->last_m ? (float)(s->weight[s->last_at] / s->last_total) : 0;
    uint32_t have = 0; /* the best k by key (logit, then id: the probability's order) */
    uint32_t at[MVM_SAMPLER_MAX_PROBS];
    k = k < MVM_SAMPLER_MAX_PROBS ? k : MVM_SAMPLER_MAX_PROBS;
    for (uint32_t i = 0; i < s->last_m && k; i++) {
        if (!(s->weight[i] > 0) || (have == k && s->key[i] <= s->key[at[k - 1]]))
            continue;
        uint32_t j = have < k ? have++ : k - 1;
        for (; j > 0 && s->key[i] > s->key[at[j - 1]]; j--)
            at[j] = at[j - 1];
        at[j] = i;
    }
    for (uint32_t j = 0; j < have; j++)
        ids[j] = (int32_t)smp_id(s->key[at[j]]),
        probs[j] = (float)(s->weight[at[j]] / s->last_total);
    return have;
}

/* Top-p: how many of the m sorted candidates it keeps: the fewest first ones whose
 * probabilities sum to at least top_p, and min_keep. */
static uint32_t nucleus(mvm_sampler *s, const float *l, uint32_t m)
{
    const double z = smp_weights(s, l, m, l[smp_id(s->key[0])], 1);
    double cum = 0;
    for (uint32_t i = 0; i < m; i++)
        if ((cum += s->weight[i]) >= s->p.top_p * z && i + 1 >= s->p.min_keep)
            return i + 1;
    return m; /* rounding kept the sum under the target */
}

/* Min-p: those with probability at least min_p times the highest, or the min_keep most
 * probable where fewer are. */
static uint32_t min_p(mvm_sampler *s, const float *l, uint32_t m)
{
    uint64_t *key = s->key;
    const float floor = smp_max(s, l, m) + logf(s->p.min_p);
    uint32_t kept = 0;
    for (uint32_t i = 0; i < m; i++)
        if (l[smp_id(key[i])] >= floor)
            kept++;
    if (kept < s->p.min_keep && kept < m) { /* the most probable, whatever they are */
        smp_sort_descending(key, s->tmp, m);
        return s->p.min_keep < m ? s->p.min_keep : m;
    }
    kept = 0;
    for (uint32_t i = 0; i < m; i++)
        if (l[smp_id(key[i])] >= floor)
            key[kept++] = key[i];
    return kept; /* the best has probability ratio 1 and stays */
}

int32_t mvm_sampler_sample(mvm_sampler *s, float *logits, uint32_t n)
{
    return mvm_sampler_sample_after(s, logits, n, NULL, 0);
}

/* One row's way through the chain: the logits the steps read (the caller's until a step
 * changes them, then s->work), the candidates (s->key[0..m), once formed), and the
 * temperature left for the draw. */
typedef struct row {
    const float *l;
    uint32_t n, m;
    int formed;
    double t;
} row;

/* The logits made the sampler's own, to be changed. */
static float *writable(mvm_sampler *s, row *r)
{
    if (r->l != s->work) {
        memcpy(s->work, r->l, (size_t)r->n * sizeof *s->work);
        r->l = s->work;
    }
    return s->work;
}

/* The candidates, the first time a step asks: every token with a probability. */
static void form(mvm_sampler *s, row *r)
{
    if (r->formed)
        return;
    r->m = 0;
    for (uint32_t i = 0; i < r->n; i++)
        if (r->l[i] > -INFINITY) /* NaN and -inf have no probability */
            s->key[r->m++] = smp_key(r->l[i], i);
    r->formed = 1;
}

/* A penalty (PENALTIES or DRY) on the logits; the candidates' keys follow them. */
static void penalize(mvm_sampler *s, row *r, int step, const int32_t *prev, uint32_t n_prev)
{
    if (!n_prev || !(step == MVM_SAMPLER_PENALTIES ? smp_penalties_on(&s->p)
                                                   : smp_dry_on(&s->p)))
        return;
    float *l = writable(s, r);
    (step == MVM_SAMPLER_PENALTIES ? smp_penalties : smp_dry)(s, l, r->n, prev, n_prev);
    for (uint32_t i = 0; r->formed && i < r->m; i++)
        s->key[i] = smp_key(l[smp_id(s->key[i])], smp_id(s->key[i]));
}

/* The candidate with the highest key: the highest logit, ties to the lower id (m > 0). */
static uint32_t best_candidate(const mvm_sampler *s, uint32_t m)
{
    uint32_t at = 0;
    for (uint32_t i = 1; i < m; i++)
        at = s->key[i] > s->key[at] ? i : at;
    return at;
}

/* The temperature step: the draw's, where it is the order's last; else the candidates'
 * logits divided by it (a temperature of 0: the best alone), and the draw's stays 1. */
static void temperature(mvm_sampler *s, row *r, int last)
{
    form(s, r);
    const double t = smp_temperature(s, r->l, r->m);
    if (last) {
        r->t = t;
        return;
    }
    if (!(t > 0)) {
        s->key[0] = s->key[best_candidate(s, r->m)], r->m = r->m ? 1 : 0;
        return;
    }
    float *l = writable(s, r);
    for (uint32_t i = 0; i < r->m; i++)
        l[smp_id(s->key[i])] = (float)(l[smp_id(s->key[i])] / t);
}

/* A filter step over the candidates. */
static void filter(mvm_sampler *s, row *r, int step)
{
    form(s, r);
    const float *l = r->l;
    switch (step) {
    case MVM_SAMPLER_TOP_N_SIGMA:
        if (s->p.top_n_sigma > 0)
            r->m = smp_top_n_sigma(s, l, r->m);
        break;
    case MVM_SAMPLER_TOP_K:
        if (s->p.top_k > 0 && (uint32_t)s->p.top_k < r->m) {
            smp_select_largest(s->key, r->m, (uint32_t)s->p.top_k);
            r->m = (uint32_t)s->p.top_k;
        }
        break;
    case MVM_SAMPLER_TYPICAL:
        if (s->p.typical_p < 1)
            r->m = smp_typical(s, l, r->m);
        break;
    case MVM_SAMPLER_TOP_P:
        if (s->p.top_p < 1 && r->m) {
            smp_sort_descending(s->key, s->tmp, r->m);
            r->m = nucleus(s, l, r->m);
        }
        break;
    case MVM_SAMPLER_MIN_P:
        if (s->p.min_p > 0 && r->m)
            r->m = min_p(s, l, r->m);
        break;
    case MVM_SAMPLER_XTC:
        if (s->p.xtc_probability > 0)
            r->m = smp_xtc(s, l, r->m);
        break;
    }
}

/* The chain over logits[0..n) after prev[0..n_prev) (or Mirostat, or greedy). */
static int32_t chain(mvm_sampler *s, const float *logits, uint32_t n, const int32_t *prev,
                     uint32_t n_prev)
{
    row r = {.l = logits, .n = n, .t = 1};
    const int n_steps = steps(&s->p);
    if (s->p.temperature == 0) { /* greedy: the penalties count, the filters do not */
        for (int i = 0; i < n_steps; i++)
            if (s->p.order[i] == MVM_SAMPLER_PENALTIES || s->p.order[i] == MVM_SAMPLER_DRY)
                penalize(s, &r, s->p.order[i], prev, n_prev);
        return certain(s, argmax(r.l, n), r.l);
    }
    int32_t best = argmax(logits, n);
    if (best < 0 || !isfinite(logits[best]))
        return certain(s, best, logits); /* no number; +inf wins; only -inf: the lowest id */
    if (s->p.mirostat) {
        form(s, &r);
        return smp_mirostat(s, logits, r.m, n);
    }
    for (int i = 0; i < n_steps; i++) {
        const int step = s->p.order[i];
        if (step == MVM_SAMPLER_PENALTIES || step == MVM_SAMPLER_DRY)
            penalize(s, &r, step, prev, n_prev);
        else if (step == MVM_SAMPLER_TEMPERATURE)
            temperature(s, &r, i == n_steps - 1);
        else
            filter(s, &r, step);
    }
    form(s, &r);
    if (!r.m) /* a penalty took every logit to -inf: the best before it */
        return certain(s, best, logits);
    if (!(r.t > 0)) /* a dynamic temperature of 0: the best left */
        return certain(s, (int32_t)smp_id(s->key[best_candidate(s, r.m)]), r.l);
    const float max = smp_max(s, r.l, r.m);
    return (int32_t)smp_id(s->key[smp_pick(s, r.m, smp_weights(s, r.l, r.m, max, r.t))]);
}

/* As llama.cpp samples under a grammar: the draw stands when the grammar allows it; if
 * not, the tokens it does not allow are masked and the draw is made again. */
static int32_t draw_in_grammar(mvm_sampler *s, const float *logits, uint32_t n,
                               const int32_t *prev, uint32_t n_prev)
{
    int32_t t = chain(s, logits, n, prev, n_prev);
    if (t < 0 || !mvm_grammar_allows(s->grammar, t)) {
        memcpy(s->masked, logits, (size_t)n * sizeof *logits);
        if (mvm_grammar_apply(s->grammar, s->masked, n) != MVM_OK)
            return -1;
        t = argmax(s->masked, n);
        if (t < 0 || s->masked[t] == -INFINITY)
            return -1; /* no token fits */
        t = chain(s, s->masked, n, prev, n_prev);
    }
    return mvm_grammar_accept(s->grammar, t) == MVM_OK ? t : -1;
}

int32_t mvm_sampler_sample_after(mvm_sampler *s, float *logits, uint32_t n,
                                 const int32_t *prev, uint32_t n_prev)
{
    if (n == 0 || n > s->cap)
        return -1; /* the caller's logits stay as they are: steps change s->work */
    return s->grammar ? draw_in_grammar(s, logits, n, prev, n_prev)
                      : chain(s, logits, n, prev, n_prev);
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
