/* The loop that makes room with an evict module (evict_driver.h). */
#include "policy/evict_driver.h"

#include <string.h>

#include "policy/admit.h"

/* Whether resident item x is a candidate. */
static inline bool candidate(const mvm_evict_driver *d, uint32_t x, uint32_t except,
                             bool (*usable)(void *ctx, uint32_t x), void *ctx)
{
    return !d->busy[x] && !(d->held && d->held[x]) && x != except && (!usable || usable(ctx, x));
}

uint32_t mvm_evict_collect(mvm_evict_driver *d, uint32_t lo, uint32_t hi, uint32_t except,
                           bool (*usable)(void *ctx, uint32_t x), void *ctx)
{
    uint32_t n = 0;
    if (!d->resident_bits) {
        for (uint32_t x = lo; x < hi; x++)
            if (d->resident[x] && candidate(d, x, except, usable, ctx))
                d->cand[n++] = x;
        return d->n_cand = n;
    }
    /* a quarter's budget leaves three items of four out: visit the set bits only */
    for (uint32_t w = lo / 64; lo < hi && w <= (hi - 1) / 64; w++) {
        uint64_t bits = d->resident_bits[w];
        if (w == lo / 64)
            bits &= ~0ull << (lo % 64);
        if (w == (hi - 1) / 64 && hi % 64)
            bits &= ~(~0ull << (hi % 64));
        for (; bits; bits &= bits - 1) {
            const uint32_t x = w * 64 + (uint32_t)__builtin_ctzll(bits);
            if (candidate(d, x, except, usable, ctx))
                d->cand[n++] = x;
        }
    }
    return d->n_cand = n;
}

bool mvm_evict_pick(mvm_evict_driver *d, const mvm_pview *v, uint32_t layer, uint32_t *x)
{
    uint32_t n = d->n_cand;
    if (n == 0)
        return false;
    uint32_t i = d->ops->victim(d->self, v, layer, d->cand, n);
    i = i < n ? i : 0; /* a module's out-of-range answer: the first */
    *x = d->cand[i];
    memmove(d->cand + i, d->cand + i + 1, (size_t)(n - i - 1) * sizeof *d->cand);
    d->n_cand = n - 1;
    return true;
}

bool mvm_evict_admit(mvm_evict_driver *d, const mvm_pview *v, uint32_t x, uint32_t need)
{
    return mvm_admit(d->ops, d->self, v, x, need, d->cand, d->n_cand);
}
