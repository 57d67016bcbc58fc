/*
 * What every config module shares (policy.h, role "config"): configure must say whether its
 * answer changed, so each module remembers the per-layer budgets and splits it last wrote.
 */
#ifndef MVM_POLICY_CONFIG_COMMON_H
#define MVM_POLICY_CONFIG_COMMON_H

#include "policy/policy.h"

typedef struct mvm_config_last {
    uint32_t n_layers;
    uint64_t *pages; /* [L] */
    float *theta;    /* [L] */
    int valid;       /* 0 until the first configure */
} mvm_config_last;

mvm_status mvm_config_last_init(mvm_config_last *c, uint32_t n_layers, const char *module);
void mvm_config_last_free(mvm_config_last *c);
/* 1 when pages/theta differ from what was remembered (or nothing was), then remembers them. */
int mvm_config_last_update(mvm_config_last *c, const uint64_t *pages, const float *theta);
/* Writes the remembered configuration to the caller's arrays (valid must be set). */
void mvm_config_last_copy(const mvm_config_last *c, uint64_t *pages, float *theta);

#endif
