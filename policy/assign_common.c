/* The assign modules' shared view of a step (assign_common.h). */
#include "policy/assign_common.h"

#include <stdlib.h>

#include "vmm/error.h"

mvm_status mvm_assign_base_init(mvm_assign_base *b, const mvm_pinit *init, const char *module)
{
    const mvm_pshape *sh = init->shape;
    if (!sh->n_experts || !sh->top_k || !sh->pages_per_expert)
        return mvm_fail(MVM_ERR_INVALID, "%s: a shape needs experts, top_k and pages", module);
    b->shape = *sh;
    b->cost = *init->cost;
    b->ex = calloc(sh->n_experts, sizeof *b->ex);
    b->rank = calloc(sh->n_experts, sizeof *b->rank);
    b->slot = calloc(sh->n_experts, sizeof *b->slot);
    if (!b->ex || !b->rank || !b->slot) {
        mvm_assign_base_free(b);
        return mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", module);
    }
    return MVM_OK;
}

void mvm_assign_base_free(mvm_assign_base *b)
{
    free(b->ex);
    free(b->rank);
    free(b->slot);
    b->ex = NULL;
    b->rank = NULL;
    b->slot = NULL;
}

mvm_status mvm_assign_base_create(const mvm_pinit *init, const char *module, void **self)
{
    static const char *const known[] = {NULL};
    *self = NULL;
    mvm_status st = mvm_pparams_check(&init->params, known, module);
    if (st != MVM_OK)
        return st;
    mvm_assign_base *b = calloc(1, sizeof *b);
    if (!b)
        return mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", module);
    st = mvm_assign_base_init(b, init, module);
    if (st != MVM_OK) {
        free(b);
        return st;
    }
    *self = b;
    return MVM_OK;
}

void mvm_assign_base_destroy(void *self)
{
    if (!self)
        return;
    mvm_assign_base_free(self);
    free(self);
}

mvm_status mvm_assign_zc_create(const mvm_pinit *init, const char *module, void **self)
{
    static const char *const known[] = {"zerocopy", NULL};
    double zc;
    *self = NULL;
    mvm_status st = mvm_pparams_check(&init->params, known, module);
    if (st == MVM_OK)
        st = mvm_pparam_double(&init->params, "zerocopy", 0, &zc);
    if (st != MVM_OK)
        return st;
    if (zc != 0 && zc != 1)
        return mvm_fail(MVM_ERR_INVALID, "%s: zerocopy=%g is not 0 or 1", module, zc);
    if (zc == 1 && init->homes_unreadable)
        return mvm_fail(MVM_ERR_INVALID, "%s zerocopy=1 reads experts in place at their host "
                        "homes, which this device cannot read: the driver gave them no device "
                        "address (MOEVM_LOG=info says why)", module);
    mvm_assign_zc *g = calloc(1, sizeof *g);
    if (!g)
        return mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", module);
    g->zerocopy = zc == 1;
    if ((st = mvm_assign_base_init(&g->b, init, module)) != MVM_OK) {
        mvm_assign_zc_destroy(g);
        return st;
    }
    *self = g;
    return MVM_OK;
}

void mvm_assign_zc_destroy(void *self)
{
    mvm_assign_zc *g = self;
    if (!g)
        return;
    mvm_assign_base_free(&g->b);
    free(g);
}

double mvm_assign_load_time(const mvm_assign_base *b, uint32_t pages)
{
    if (!pages)
        return 0;
    uint32_t ppe = b->shape.pages_per_expert;
    /* Pages are the unit of residency; bytes are shared out evenly, the last page rounded
     * up, so the whole expert is exactly expert_bytes. */
    uint64_t bytes = (b->shape.expert_bytes * pages + ppe - 1) / ppe;
    return mvm_cost_load_bytes(&b->cost, bytes);
}

double mvm_assign_dali_gpu(const mvm_aexp *x)
{
    return x->t_load > x->t_gpu ? x->t_load : x->t_gpu;
}

uint32_t mvm_assign_scan(mvm_assign_base *b, const mvm_pview *v, const mvm_pstep *step,
                         mvm_assignment *out)
{
    const uint32_t E = b->shape.n_experts, K = b->shape.top_k, ppe = b->shape.pages_per_expert;
    const uint32_t *res = v->resident + (size_t)step->layer * E;
    const double cpu_scale = v->cpu_scale > 0 ? v->cpu_scale : 1;
    uint32_t n = 0;

    for (uint32_t e = 0; e < E; e++)
        out->where[e] = MVM_RUN_NONE;
    out->n_prefetch = 0;
    out->est_time = 0;
    for (uint32_t e = 0; e < E; e++) {
        if (!step->counts[e])
            continue;
        b->slot[e] = n;
        mvm_aexp *x = &b->ex[n++];
        x->e = e;
        x->n = step->counts[e];
        x->pages = res[e] >= ppe ? 0 : ppe - res[e];
        x->score = 0;
        x->t_load = mvm_assign_load_time(b, x->pages);
        x->t_gpu = mvm_cost_gpu(&b->cost, x->n);
        x->t_cpu = cpu_scale * mvm_cost_cpu(&b->cost, x->n);
    }
    /* Importance: the gate weights of the tokens that selected each expert. */
    for (uint32_t t = 0; t < step->n_tok; t++)
        for (uint32_t k = 0; k < K; k++) {
            int32_t e = step->experts[(size_t)t * K + k];
            if (e >= 0 && (uint32_t)e < E && step->counts[e])
                b->ex[b->slot[e]].score +=
                    step->weights ? step->weights[(size_t)t * K + k] : 1.0f / (float)K;
        }
    return n;
}

uint64_t mvm_assign_room(const mvm_pview *v, const mvm_pstep *step)
{
    const mvm_pshape *sh = v->shape;
    const uint64_t nx = (uint64_t)sh->n_layers * sh->n_experts;
    uint64_t room = v->capacity_pages > v->used_pages ? v->capacity_pages - v->used_pages : 0;
    for (uint64_t x = 0; x < nx; x++) {
        if (v->busy[x] || !v->resident[x])
            continue;
        if (x / sh->n_experts == step->layer && step->counts[x % sh->n_experts])
            continue; /* this layer computes it: not evictable for its own loads */
        room += v->resident[x];
    }
    return room;
}
