/*
 * evict "lfu": least frequently used, the baseline of MoE-Infinity (listed as a baseline in
 * MoEpic's Table 1). Frequency is token-weighted (an expert used by 3 tokens of a batch counts
 * 3), which is what MoE-Infinity's activation counts are at batch 1 and what drives its cost
 * otherwise. Plain LFU never forgets: an expert hot in the prompt would stay forever. So
 * counts age: every `period` observed steps of a layer, that layer's counts are halved (the
 * classic LFU-with-ageing halving, as in the cache literature), so a burst fades geometrically
 * while a steady long tail keeps its rank. Ties go to the first candidate.
 *
 * Parameter: period (layer steps between halvings), default 128: the same scale as
 * MoEpic's observation window ω = 128 tokens, MoEpic's estimate of how long an expert's
 * popularity lasts.
 */
#include <math.h>
#include <stdlib.h>

#include "policy/modules.h"
#include "policy/rank.h"
#include "vmm/error.h"

typedef struct lfu {
    uint32_t n_experts, period;
    uint64_t *count; /* [L*E] aged token counts */
    uint32_t *steps; /* [L] steps observed since the layer's last halving */
} lfu;

static void lfu_destroy(void *self)
{
    lfu *s = self;
    if (!s)
        return;
    free(s->count);
    free(s->steps);
    free(s);
}

static mvm_status lfu_create(const mvm_pinit *init, void **self)
{
    static const char *const known[] = {"period", NULL};
    double period;
    mvm_status st = mvm_pparams_check(&init->params, known, "evict lfu");
    if (st == MVM_OK)
        st = mvm_pparam_double(&init->params, "period", 128, &period);
    if (st != MVM_OK)
        return st;
    if (!(period >= 1 && period <= 1e9 && period == floor(period)))
        return mvm_fail(MVM_ERR_INVALID, "evict lfu: period=%g is not a whole number >= 1",
                        period);
    const mvm_pshape *sh = init->shape;
    size_t n = (size_t)sh->n_layers * sh->n_experts;
    lfu *s = calloc(1, sizeof *s);
    if (!s)
        return mvm_fail(MVM_ERR_NOMEM, "evict lfu: out of memory");
    s->n_experts = sh->n_experts;
    s->period = (uint32_t)period;
    s->count = calloc(n ? n : 1, sizeof *s->count);
    s->steps = calloc(sh->n_layers ? sh->n_layers : 1, sizeof *s->steps);
    if (!s->count || !s->steps) {
        lfu_destroy(s);
        return mvm_fail(MVM_ERR_NOMEM, "evict lfu: out of memory");
    }
    *self = s;
    return MVM_OK;
}

static void lfu_observe(void *self, const mvm_pview *v, const mvm_pstep *step)
{
    lfu *s = self;
    (void)v;
    uint64_t *count = s->count + (size_t)step->layer * s->n_experts;
    int age = ++s->steps[step->layer] == s->period;
    if (age)
        s->steps[step->layer] = 0;
    for (uint32_t e = 0; e < s->n_experts; e++) {
        count[e] += step->counts[e];
        if (age)
            count[e] >>= 1;
    }
}

static uint32_t lfu_victim(void *self, const mvm_pview *v, uint32_t for_layer,
                           const uint32_t *cand, uint32_t n)
{
    const lfu *s = self;
    (void)v;
    (void)for_layer;
    return mvm_argmin_u64(s->count, cand, n);
}

const mvm_evict_ops mvm_evict_lfu = {
    .name = "lfu",
    .about = "least frequently used, token-weighted, counts halved every `period` steps "
             "(baseline of MoE-Infinity)",
    .create = lfu_create,
    .destroy = lfu_destroy,
    .observe = lfu_observe,
    .victim = lfu_victim,
    .want = NULL,
};
