/* The config modules' memory of their last answer (config_common.h). */
#include "policy/config_common.h"

#include <stdlib.h>
#include <string.h>

#include "vmm/error.h"

mvm_status mvm_config_last_init(mvm_config_last *c, uint32_t n_layers, const char *module)
{
    if (!n_layers)
        return mvm_fail(MVM_ERR_INVALID, "%s: a shape needs layers", module);
    c->n_layers = n_layers;
    c->valid = 0;
    c->pages = calloc(n_layers, sizeof *c->pages);
    c->theta = calloc(n_layers, sizeof *c->theta);
    if (!c->pages || !c->theta) {
        mvm_config_last_free(c);
        return mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", module);
    }
    return MVM_OK;
}

void mvm_config_last_free(mvm_config_last *c)
{
    free(c->pages);
    free(c->theta);
    c->pages = NULL;
    c->theta = NULL;
}

int mvm_config_last_update(mvm_config_last *c, const uint64_t *pages, const float *theta)
{
    int changed = !c->valid || memcmp(c->pages, pages, c->n_layers * sizeof *pages) ||
                  memcmp(c->theta, theta, c->n_layers * sizeof *theta);
    memcpy(c->pages, pages, c->n_layers * sizeof *pages);
    memcpy(c->theta, theta, c->n_layers * sizeof *theta);
    c->valid = 1;
    return changed;
}

void mvm_config_last_copy(const mvm_config_last *c, uint64_t *pages, float *theta)
{
    memcpy(pages, c->pages, c->n_layers * sizeof *pages);
    memcpy(theta, c->theta, c->n_layers * sizeof *theta);
}
