/*
 * Ranking for policy code: an in-place heap sort of (key, id) pairs, best (largest key)
 * first, ties by smaller id. The order is total, so the result is the same on every libc
 * and every run; and it allocates nothing (libc's qsort may call malloc), as policy code
 * must not after create. Modules that want "smallest first" sort by the negated key.
 * And the evict modules' victim scan: the candidate of least key; and the `steady` of
 * those whose keys only their layer's steps change.
 */
#ifndef MVM_POLICY_RANK_H
#define MVM_POLICY_RANK_H

#include <stdint.h>

typedef struct mvm_rank {
    double key;
    uint32_t id;
} mvm_rank;

/* 1 when a must come after b in the final order (a is "worse"). */
static inline int mvm_rank_after(const mvm_rank *a, const mvm_rank *b)
{
    return a->key < b->key || (a->key == b->key && a->id > b->id);
}

static inline void mvm_rank_sift(mvm_rank *r, uint32_t at, uint32_t n)
{
    for (;;) {
        uint32_t worst = at, l = 2 * at + 1, rt = l + 1;
        if (l < n && mvm_rank_after(&r[l], &r[worst]))
            worst = l;
        if (rt < n && mvm_rank_after(&r[rt], &r[worst]))
            worst = rt;
        if (worst == at)
            return;
        mvm_rank t = r[at];
        r[at] = r[worst];
        r[worst] = t;
        at = worst;
    }
}

/* Sorts r[0..n) best first. A heap whose root is the worst element, popped to the end. */
static inline void mvm_rank_sort(mvm_rank *r, uint32_t n)
{
    for (uint32_t i = n / 2; i-- > 0;)
        mvm_rank_sift(r, i, n);
    for (uint32_t end = n; end > 1; end--) {
        mvm_rank t = r[0];
        r[0] = r[end - 1];
        r[end - 1] = t;
        mvm_rank_sift(r, 0, end - 1);
    }
}

/* The index in cand[0..n) (n >= 1) of the candidate whose key[] is least, the first of
 * equals. The least key so far is kept, not looked up again through cand[best]: that made
 * each candidate two loads that waited for the last comparison, ~10 cycles, and an evict
 * module's scan of a quarter of Qwen3-30B-A3B's 128 x 48 experts, which adaptive's ghosts
 * run several times a step, took microseconds (bench_resid_step). A NaN key never wins,
 * nor loses its place as the first. */
#define MVM_ARGMIN_FN(name, T)                                                                 \
    static inline uint32_t name(const T *key, const uint32_t *cand, uint32_t n)                \
    {                                                                                          \
        uint32_t best = 0;                                                                     \
        T least = key[cand[0]];                                                                \
        for (uint32_t i = 1; i < n; i++) {                                                     \
            const T k = key[cand[i]];                                                          \
            if (k < least)                                                                     \
                least = k, best = i;                                                           \
        }                                                                                      \
        return best;                                                                           \
    }
MVM_ARGMIN_FN(mvm_argmin_f32, float)
MVM_ARGMIN_FN(mvm_argmin_u64, uint64_t)
#undef MVM_ARGMIN_FN

/* mvm_evict_ops.steady of a module whose keys change only when their layer is observed
 * (lru's last use, affinity's smoothed scores): its victim among one layer's candidates
 * stays until a step of that layer. */
static inline uint64_t mvm_steady_until_observed(const void *self, const uint32_t *cand,
                                                 uint32_t n)
{
    (void)self;
    (void)cand;
    (void)n;
    return UINT64_MAX;
}

#endif
