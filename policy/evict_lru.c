/*
 * evict "lru": least recently used, the baseline of Mixtral-offloading and AdapMoE (listed as
 * baselines by SMoE and MoEpic). "Used" means selected by at least one token of a layer step
 * after routing (counts > 0). Recency is a logical clock advanced once per observed layer
 * step, so the layers of one token are ordered too (v->tokens alone would tie them). Never
 * used experts are the oldest; ties go to the first candidate. No parameters.
 */
#include <stdlib.h>

#include "policy/modules.h"
#include "policy/rank.h"
#include "vmm/error.h"

typedef struct lru {
    uint32_t n_experts;
    uint64_t clock;
    uint64_t *last; /* [L*E] clock of the last step that used the expert; 0: never */
} lru;

static void lru_destroy(void *self)
{
    lru *s = self;
    if (s)
        free(s->last);
    free(s);
}

static mvm_status lru_create(const mvm_pinit *init, void **self)
{
    static const char *const known[] = {NULL};
    mvm_status st = mvm_pparams_check(&init->params, known, "evict lru");
    if (st != MVM_OK)
        return st;
    lru *s = calloc(1, sizeof *s);
    size_t n = (size_t)init->shape->n_layers * init->shape->n_experts;
    if (!s || !(s->last = calloc(n ? n : 1, sizeof *s->last))) {
        free(s);
        return mvm_fail(MVM_ERR_NOMEM, "evict lru: out of memory");
    }
    s->n_experts = init->shape->n_experts;
    *self = s;
    return MVM_OK;
}

static void lru_observe(void *self, const mvm_pview *v, const mvm_pstep *step)
{
    lru *s = self;
    (void)v;
    s->clock++;
    uint64_t *last = s->last + (size_t)step->layer * s->n_experts;
    for (uint32_t e = 0; e < s->n_experts; e++)
        if (step->counts[e])
            last[e] = s->clock;
}

static uint32_t lru_victim(void *self, const mvm_pview *v, uint32_t for_layer,
                           const uint32_t *cand, uint32_t n)
{
    const lru *s = self;
    (void)v;
    (void)for_layer;
    return mvm_argmin_u64(s->last, cand, n);
}

const mvm_evict_ops mvm_evict_lru = {
    .name = "lru",
    .about = "least recently used (baseline of Mixtral-offloading, AdapMoE)",
    .create = lru_create,
    .destroy = lru_destroy,
    .observe = lru_observe,
    .victim = lru_victim,
    .want = NULL,
    .steady = mvm_steady_until_observed,
};
