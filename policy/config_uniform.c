/*
 * config "uniform": the baseline configuration (docs/policies.md): every layer gets the same
 * budget, floor(capacity_pages / n_layers) pages, and caches whole experts (θ = 1). This is
 * the fixed per-layer cache of Mixtral-offloading and of DALI (its §4.3: "each MoE layer
 * maintains n experts"), the allocation MoEpic's ablation "w/o CCA" replaces (Table 3, which
 * pairs it with θ = 0.5; here θ = 1 keeps the baseline unsplit). The remainder of the
 * division (fewer than n_layers pages) stays unassigned, so the budgets are exactly equal; a
 * budget beyond all of a layer's experts is cut to them (more could hold nothing). It
 * follows capacity_pages at every call. No parameters.
 */
#include <stdlib.h>

#include "policy/config_common.h"
#include "policy/modules.h"
#include "vmm/error.h"

static void uniform_destroy(void *self)
{
    if (!self)
        return;
    mvm_config_last_free(self);
    free(self);
}

static mvm_status uniform_create(const mvm_pinit *init, void **self)
{
    static const char *const known[] = {NULL};
    *self = NULL;
    mvm_status st = mvm_pparams_check(&init->params, known, "config uniform");
    if (st != MVM_OK)
        return st;
    mvm_config_last *u = calloc(1, sizeof *u);
    if (!u)
        return mvm_fail(MVM_ERR_NOMEM, "config uniform: out of memory");
    st = mvm_config_last_init(u, init->shape->n_layers, "config uniform");
    if (st != MVM_OK) {
        free(u);
        return st;
    }
    *self = u;
    return MVM_OK;
}

static void uniform_observe(void *self, const mvm_pview *v, const mvm_pstep *step)
{
    (void)self;
    (void)v;
    (void)step;
}

static int uniform_configure(void *self, const mvm_pview *v, uint64_t *layer_pages, float *theta)
{
    mvm_config_last *u = self;
    const mvm_pshape *sh = v->shape;
    uint64_t each = v->capacity_pages / u->n_layers;
    uint64_t all = (uint64_t)sh->n_experts * sh->pages_per_expert;
    for (uint32_t l = 0; l < u->n_layers; l++) {
        layer_pages[l] = each < all ? each : all;
        theta[l] = 1;
    }
    return mvm_config_last_update(u, layer_pages, theta);
}

const mvm_config_ops mvm_config_uniform = {
    .name = "uniform",
    .about = "equal per-layer budgets, whole experts (theta = 1)",
    .create = uniform_create,
    .destroy = uniform_destroy,
    .observe = uniform_observe,
    .configure = uniform_configure,
};
