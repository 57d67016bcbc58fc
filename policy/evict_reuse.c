/*
 * evict "reuse": evict the expert whose next use is predicted furthest away (Belady's rule,
 * with the future guessed from the past). Not from the five papers: it is the interposer's
 * default (MOEVM_EVICT=auto there; the engine's auto is adaptive, of which this is one
 * candidate) because of what the interposer sees. A
 * program whose weights exceed the budget walks them in the same order at every token (layer
 * after layer), and LRU then evicts exactly the page needed next: every access misses.
 * Predicting each page's next use from its reuse interval keeps a fixed part of the loop
 * resident instead (the most recently used page is the one needed last), while a hot expert,
 * reused every few steps, stays.
 *
 * For each expert: `last`, the clock of its last use, and `interval`, the mean of its reuse
 * intervals (the mean of the old mean and the newest interval, so a changed pattern shows
 * within a few uses). At time `now`, with age = now - last, the predicted wait until the
 * next use is
 *
 *   interval - age   while age < interval (due in that many steps),
 *   age              once overdue: the prediction failed, and something idle for `age` steps
 *                    is taken to stay idle about as long again, so dead pages drift out.
 *
 * The victim has the longest wait. An expert never reused (used once, or never) has no
 * interval and goes before any that has one (a one-off page must not displace a loop); among
 * those, the most recently used goes first, so that a loop's first pass already leaves its
 * start resident for the second. Ties go to the first candidate. The clock is advanced once
 * per observed layer step, as LRU's. No parameters.
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "policy/modules.h"
#include "vmm/error.h"

typedef struct reuse {
    uint32_t n_experts;
    uint64_t clock;
    uint64_t *last;   /* [L*E] clock of the last step that used the expert; 0: never */
    double *interval; /* [L*E] mean reuse interval in steps; 0: never reused */
} reuse;

static void reuse_destroy(void *self)
{
    reuse *s = self;
    if (s) {
        free(s->last);
        free(s->interval);
    }
    free(s);
}

static mvm_status reuse_create(const mvm_pinit *init, void **self)
{
    static const char *const known[] = {NULL};
    mvm_status st = mvm_pparams_check(&init->params, known, "evict reuse");
    if (st != MVM_OK)
        return st;
    reuse *s = calloc(1, sizeof *s);
    size_t n = (size_t)init->shape->n_layers * init->shape->n_experts;
    if (!s || !(s->last = calloc(n ? n : 1, sizeof *s->last)) ||
        !(s->interval = calloc(n ? n : 1, sizeof *s->interval))) {
        reuse_destroy(s);
        return mvm_fail(MVM_ERR_NOMEM, "evict reuse: out of memory");
    }
    s->n_experts = init->shape->n_experts;
    *self = s;
    return MVM_OK;
}

static void reuse_observe(void *self, const mvm_pview *v, const mvm_pstep *step)
{
    reuse *s = self;
    (void)v;
    s->clock++;
    size_t base = (size_t)step->layer * s->n_experts;
    for (uint32_t e = 0; e < s->n_experts; e++) {
        if (!step->counts[e])
            continue;
        uint64_t *last = &s->last[base + e];
        double *iv = &s->interval[base + e];
        if (*last) {
            double seen = (double)(s->clock - *last);
            *iv = *iv > 0 ? (*iv + seen) / 2 : seen;
        }
        *last = s->clock;
    }
}

/* The predicted wait until x's next use; < 0 for an expert never reused. */
static double wait_of(const reuse *s, uint32_t x)
{
    if (s->interval[x] <= 0)
        return -1;
    double age = (double)(s->clock - s->last[x]);
    return age < s->interval[x] ? s->interval[x] - age : age;
}

static uint32_t reuse_victim(void *self, const mvm_pview *v, uint32_t for_layer,
                             const uint32_t *cand, uint32_t n)
{
    const reuse *s = self;
    (void)v;
    (void)for_layer;
    uint32_t best = 0;
    double best_wait = wait_of(s, cand[0]);
    uint64_t best_last = s->last[cand[0]]; /* kept, not looked up again (policy/rank.h) */
    for (uint32_t i = 1; i < n; i++) {
        double w = wait_of(s, cand[i]);
        const uint64_t last = s->last[cand[i]];
        bool better = best_wait < 0 ? w < 0 && last > best_last : w < 0 || w > best_wait;
        if (better) {
            best = i;
            best_wait = w;
            best_last = last;
        }
    }
    return best;
}

/* The victim among one layer's candidates stays until one of these, whichever is first:
 *  - none, while a candidate has never been reused (the victim is one of those, by its last
 *    use, which only its layer's steps change);
 *  - a due candidate turns overdue, at clock last + ceil(interval): its wait jumps from
 *    below 1 to its interval;
 *  - while the victim is due, the best overdue wait, one more a step, reaches the victim's,
 *    one less a step (at equal waits the first in the list goes, so it must stay below).
 * Otherwise the order stands: due waits all fall by one a step, overdue ones all rise by
 * one, and both are exact (interval - age of a double interval and an integer age below it
 * is a multiple of interval's last bit, smaller than interval: it needs no rounding). */
static uint64_t reuse_steady(const void *self, const uint32_t *cand, uint32_t n)
{
    const reuse *s = self;
    uint64_t steps = UINT64_MAX;
    double due = -1, overdue = -1; /* the best wait of each */
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t x = cand[i];
        const double w = wait_of(s, x);
        if (w < 0)
            return UINT64_MAX;
        if ((double)(s->clock - s->last[x]) < s->interval[x]) {
            const uint64_t turn = s->last[x] + (uint64_t)ceil(s->interval[x]) - s->clock;
            steps = turn < steps ? turn : steps;
            due = w > due ? w : due;
        } else {
            overdue = w > overdue ? w : overdue;
        }
    }
    if (overdue >= 0 && due >= overdue) {
        const uint64_t meet = (uint64_t)ceil((due - overdue) / 2);
        steps = meet < steps ? meet : steps;
    }
    return steps;
}

const mvm_evict_ops mvm_evict_reuse = {
    .name = "reuse",
    .about = "furthest predicted next use, from each expert's mean reuse interval "
             "(keeps part of a loop resident where LRU thrashes)",
    .create = reuse_create,
    .destroy = reuse_destroy,
    .observe = reuse_observe,
    .victim = reuse_victim,
    .want = NULL,
    .steady = reuse_steady,
};
