/*
 * The sampler's steps that llama.cpp's chain has beyond top-k, top-p and min-p (sampler.h):
 * top-n-sigma, locally typical sampling, XTC, the dynamic temperature and Mirostat, each
 * as llama.cpp's src/llama-sampler.cpp computes it, over the candidate keys. Where it
 * leaves a choice open (the order of equal scores, a distribution Mirostat cannot fit) it
 * is said at the step.
 */
#include <math.h>
#include <string.h>

#include "engine/forward/sampler.h"

/* The candidates' probabilities (untempered) into s->weight, their entropy returned, and
 * the log of their normaliser (*log_z, logits less *max): a probability's log is
 * l - max - log_z, so no logarithm is taken a candidate. */
static double entropy(mvm_sampler *s, const float *l, uint32_t m, float *max, double *log_z)
{
    *max = smp_max(s, l, m);
    const double z = smp_weights(s, l, m, *max, 1);
    double mean = 0; /* of l - max, weighted by the probabilities */
    for (uint32_t i = 0; i < m; i++) {
        s->weight[i] /= z;
        mean += s->weight[i] * ((double)l[smp_id(s->key[i])] - *max);
    }
    *log_z = log(z);
    return *log_z - mean;
}

/* Top-n-sigma (Tang et al. 2024): the logits within n standard deviations of the highest,
 * the deviation over every candidate. */
uint32_t smp_top_n_sigma(mvm_sampler *s, const float *l, uint32_t m)
{
    if (m <= 1)
        return m;
    double sum = 0, acc = 0;
    for (uint32_t i = 0; i < m; i++)
        sum += l[smp_id(s->key[i])];
    const double mean = sum / m;
    for (uint32_t i = 0; i < m; i++) {
        const double d = l[smp_id(s->key[i])] - mean;
        acc += d * d;
    }
    const double floor = smp_max(s, l, m) - s->p.top_n_sigma * sqrt(acc / m);
    uint32_t kept = 0;
    for (uint32_t i = 0; i < m; i++)
        if (l[smp_id(s->key[i])] >= floor)
            s->key[kept++] = s->key[i];
    return kept;
}

/* Locally typical sampling (Meister et al. 2023): the candidates in order of how far their
 * surprise is from the entropy, kept until their probability sums past typical_p. Equal
 * distances keep the candidates' order (the ids' where no step before reordered them). */
uint32_t smp_typical(mvm_sampler *s, const float *l, uint32_t m)
{
    uint64_t *key = s->key, *order = s->rank;
    float max;
    double log_z;
    const double h = entropy(s, l, m, &max, &log_z);
    for (uint32_t r = 0; r < m; r++) {
        const double surprise = log_z - ((double)l[smp_id(key[r])] - max);
        const float d = (float)fabs(surprise - h); /* >= 0: its bits order as it does */
        uint32_t bits;
        memcpy(&bits, &d, sizeof bits);
        order[r] = (uint64_t)~bits << 32 | ~r; /* descending: the nearest, then the first */
    }
    smp_sort_descending(order, s->tmp, m);
    double cum = 0;
    uint32_t kept = m;
    for (uint32_t j = 0; j < m; j++) {
        const uint32_t r = ~(uint32_t)order[j];
        cum += s->weight[r];
        order[j] = key[r];
        if (cum > s->p.typical_p && j + 1 >= s->p.min_keep) {
            kept = j + 1;
            break;
        }
    }
    memcpy(key, order, (size_t)kept * sizeof *key);
    return kept;
}

/* XTC, "exclude top choices" (Weidmann, text-generation-webui #6335): with probability
 * xtc_probability, every candidate of probability at least xtc_threshold is dropped but
 * the least probable of them; nothing when fewer than two reach it. */
uint32_t smp_xtc(mvm_sampler *s, const float *l, uint32_t m)
{
    if (m < 2 || smp_uniform01(s) > s->p.xtc_probability)
        return m;
    uint64_t *key = s->key;
    smp_sort_descending(key, s->tmp, m);
    const double z = smp_weights(s, l, m, l[smp_id(key[0])], 1);
    uint32_t last = 0;
    while (last + 1 < m && s->weight[last + 1] / z >= s->p.xtc_threshold)
        last++;
    if (last == 0 || m - last < s->p.min_keep)
        return m;
    memmove(key, key + last, (size_t)(m - last) * sizeof *key);
    return m - last;
}

/* The temperature: with dynatemp_range (Dynamic Temperature, kalomaze), between
 * max(0, temperature - range) and temperature + range by the candidates' entropy over
 * its maximum (log m) raised to dynatemp_exponent. */
double smp_temperature(mvm_sampler *s, const float *l, uint32_t m)
{
    const double t = s->p.temperature, range = s->p.dynatemp_range;
    if (range <= 0 || m <= 1)
        return t;
    const double lo = t > range ? t - range : 0, hi = t + range;
    float max;
    double log_z;
    const double h = entropy(s, l, m, &max, &log_z);
    return lo + (hi - lo) * pow(h / log((double)m), s->p.dynatemp_exponent);
}

/* How many of the sorted candidates Mirostat 1 keeps: the k of a Zipf law fitted to the
 * 100 most probable (their weights' ratios), for a surprise of mu over a vocabulary of n.
 * A fit that gives no number keeps the most probable. */
static uint32_t mirostat1_k(const mvm_sampler *s, uint32_t m, uint32_t n)
{
    double tb = 0, tt = 0;
    for (uint32_t i = 0; i + 1 < 100 && i + 1 < m; i++) {
        const double t = log((i + 2.0) / (i + 1.0));
        tb += t * log(s->weight[i] / s->weight[i + 1]);
        tt += t * t;
    }
    const double s_hat = tb / tt, eps = s_hat - 1;
    const double k = pow(eps * pow(2, s->mu) / (1 - pow((double)n, -eps)), 1 / s_hat);
    return k >= m ? m : k >= 1 ? (uint32_t)k : 1;
}

/* Mirostat (Basu et al. 2021), llama.cpp's: the logits divided by the temperature, the
 * candidates cut to Mirostat 1's k, or (Mirostat 2) to those whose surprise is at most mu,
 * one drawn from what is left, and mu moved by eta towards the target surprise tau. Only
 * what is kept is sorted (the draw's order): Mirostat 1 reads the 100 most probable, and
 * Mirostat 2's cut is a floor on the probability. */
int32_t smp_mirostat(mvm_sampler *s, const float *l, uint32_t m, uint32_t n)
{
    uint64_t *key = s->key;
    const double t = s->p.temperature;
    uint32_t kept;
    if (s->p.mirostat == 1) {
        const uint32_t top = m < 100 ? m : 100;
        if (top < m)
            smp_select_largest(key, m, top);
        smp_sort_descending(key, s->tmp, top);
        smp_weights(s, l, top, l[smp_id(key[0])], t);
        kept = mirostat1_k(s, top, n);
        if (kept > top && kept < m)
            smp_select_largest(key, m, kept);
    } else {
        const double z = smp_weights(s, l, m, smp_max(s, l, m), t);
        const double floor = z * exp2(-(double)s->mu);
        uint32_t best = 0;
        kept = 0;
        for (uint32_t i = 0; i < m; i++) {
            best = key[i] > key[best] ? i : best;
            if (s->weight[i] >= floor)
                key[kept++] = key[i];
        }
        if (!kept) /* key[best] may be overwritten only by a kept one: there is none */
            key[0] = key[best], kept = 1;
    }
    smp_sort_descending(key, s->tmp, kept);
    const double total = smp_weights(s, l, kept, l[smp_id(key[0])], t);
    const uint32_t at = smp_pick(s, kept, total);
    s->mu -= s->p.mirostat_eta * (float)(-log2(s->weight[at] / total) - s->p.mirostat_tau);
    return (int32_t)smp_id(key[at]);
}
