/*
 * The sampler (declared in include/moevm/engine.h, which says what it does): an engine
 * API that the commands, the server and embedding applications share. Its steps live in
 * three files: sampler.c (the candidates, top-k, top-p, min-p, the draw and the entry
 * points), sampler_filters.c (top-n-sigma, typical, XTC, the dynamic temperature,
 * Mirostat) and sampler_penalty.c (the repetition, frequency and presence penalties, and
 * DRY). What they share is here.
 */
#ifndef MVM_ENGINE_FORWARD_SAMPLER_H
#define MVM_ENGINE_FORWARD_SAMPLER_H

#include "moevm/engine.h"

/* DRY's sequence breakers as token sequences: a head token (whose text holds the breaker,
 * or ends with its first bytes), and the tokens that must follow it (its tail: the rest's
 * tokens; none for a breaker within one token), sorted by head (sampler_penalty.c). */
typedef struct smp_breaker {
    int32_t head;
    uint32_t off, len; /* its tail: tails[off .. off + len) */
} smp_breaker;

struct mvm_dry_breakers {
    smp_breaker *b;
    uint32_t n;
    int32_t *tails;
};

struct mvm_sampler {
    mvm_sampler_params p; /* the defaults of the parameters left 0 filled in */
    uint32_t cap;
    /* candidates are 64-bit keys, a logit's bits made monotone above the complement of the
     * id, so that "larger key" is exactly "higher logit, then lower id" */
    uint64_t *key, *tmp;  /* candidates, and a radix sort's other half */
    uint64_t *rank;       /* typical sampling's order; reserved when it is on */
    double *weight;
    float *work;          /* the logits as the steps change them (a copy of the caller's);
                             NULL when no step changes them */
    uint32_t *count;      /* the penalties' counts, all 0 between uses */
    int32_t *dry_run;     /* DRY: a repeat's length at each position of its window */
    int32_t *dry_max;     /* DRY: the longest repeat a token would extend, -1: none */
    int32_t *dry_touched; /* DRY: the tokens whose dry_max is set */
    const mvm_dry_breakers *breakers; /* NULL: none */
    mvm_grammar *grammar; /* the constraint, or NULL */
    float *masked;        /* the logits a grammar has masked; reserved with the grammar */
    uint64_t state;       /* the random stream */
    /* the last draw's distribution: candidates key[0..last_m) by their weights (sum
     * last_total), the one drawn at last_at; last_m 0 before any */
    uint32_t last_m, last_at;
    double last_total;
    float mu;             /* Mirostat's surprise bound */
};

/* sampler.c */
double smp_uniform01(mvm_sampler *s);
uint64_t smp_key(float logit, uint32_t id);
static inline uint32_t smp_id(uint64_t key) { return ~(uint32_t)key; }
/* Moves the k largest of a[0..n) (0 < k < n) to a[0..k), in no particular order. */
void smp_select_largest(uint64_t *a, uint32_t n, uint32_t k);
/* Sorts a[0..n) into descending order, tmp[0..n) its scratch. */
void smp_sort_descending(uint64_t *a, uint64_t *tmp, uint32_t n);
/* The highest logit among the m candidates. */
float smp_max(const mvm_sampler *s, const float *l, uint32_t m);
/* Fills s->weight[i] with exp((l - max) / t) of candidate i < m; returns their sum. */
double smp_weights(mvm_sampler *s, const float *l, uint32_t m, float max, double t);
/* Draws a candidate by the weights of the m first (their sum total): its index, kept with
 * them as the last draw's distribution. */
uint32_t smp_pick(mvm_sampler *s, uint32_t m, double total);

/* sampler_filters.c: each keeps a part of the m candidates in s->key[0..) and returns how
 * many; l the logits. */
uint32_t smp_top_n_sigma(mvm_sampler *s, const float *l, uint32_t m);
uint32_t smp_typical(mvm_sampler *s, const float *l, uint32_t m);
uint32_t smp_xtc(mvm_sampler *s, const float *l, uint32_t m);
/* The temperature of the draw: p.temperature, or the dynamic one. */
double smp_temperature(mvm_sampler *s, const float *l, uint32_t m);
/* Mirostat's draw over the m candidates (n the vocabulary): the token. */
int32_t smp_mirostat(mvm_sampler *s, const float *l, uint32_t m, uint32_t n);

/* sampler_penalty.c */
/* Whether the repetition/frequency/presence penalties, and DRY, do anything under p. */
int smp_penalties_on(const mvm_sampler_params *p);
int smp_dry_on(const mvm_sampler_params *p);
/* Each in place on l[0..n), after prev[0..n_prev). */
void smp_penalties(mvm_sampler *s, float *l, uint32_t n, const int32_t *prev, uint32_t n_prev);
void smp_dry(mvm_sampler *s, float *l, uint32_t n, const int32_t *prev, uint32_t n_prev);

#endif
