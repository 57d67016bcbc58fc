/*
 * The module registry (policy.h): every module of policy/modules.h by role, the baseline
 * first, found by name.
 *
 * Every ops table starts with MVM_POLICY_HEADER, but the tables are different struct types,
 * and C11 lets one read a common initial sequence through another struct type only inside a
 * union (6.5.2.3p6); reading a mvm_evict_ops through a "header" struct pointer would break
 * the effective-type rule (6.5p7) however alike the layouts are. So each entry keeps, next to
 * the ops table, a pointer to that table's own `name` member (&ops.name, an address constant
 * in a static initializer): the name is read as the `const char *` it is, and the registry
 * stays strictly conforming.
 */
#include <stdio.h>
#include <string.h>

#include "policy/modules.h"

typedef struct entry {
    const void *ops;
    const char *const *name;
} entry;

#define MODULE(ops) {&(ops), &(ops).name}

static const entry route[] = {MODULE(mvm_route_none), MODULE(mvm_route_importance)};
static const entry evict[] = {MODULE(mvm_evict_lru), MODULE(mvm_evict_lfu),
                              MODULE(mvm_evict_score), MODULE(mvm_evict_workload),
                              MODULE(mvm_evict_lcp), MODULE(mvm_evict_reuse),
                              MODULE(mvm_evict_affinity), MODULE(mvm_evict_adaptive),
                              MODULE(mvm_evict_belady)};
static const entry assign[] = {MODULE(mvm_assign_gpu), MODULE(mvm_assign_twoptr),
                               MODULE(mvm_assign_greedy), MODULE(mvm_assign_presched)};
static const entry config[] = {MODULE(mvm_config_uniform), MODULE(mvm_config_hot),
                               MODULE(mvm_config_fixedpoint)};
static const entry predict[] = {MODULE(mvm_predict_gate), MODULE(mvm_predict_residual),
                                MODULE(mvm_predict_learned),
                                MODULE(mvm_predict_oracle), MODULE(mvm_predict_speculative)};
static const entry place[] = {MODULE(mvm_place_uniform), MODULE(mvm_place_prism)};

#define ROLE(role_name, list) {role_name, list, sizeof list / sizeof *list}

static const struct {
    const char *name;
    const entry *modules;
    size_t n;
} roles[MVM_ROLE_COUNT] = {
    [MVM_ROLE_ROUTE] = ROLE("route", route),
    [MVM_ROLE_EVICT] = ROLE("evict", evict),
    [MVM_ROLE_ASSIGN] = ROLE("assign", assign),
    [MVM_ROLE_PREDICT] = ROLE("predict", predict),
    [MVM_ROLE_CONFIG] = ROLE("config", config),
    [MVM_ROLE_PLACE] = ROLE("place", place),
};

const void *mvm_policy_find(enum mvm_role role, const char *name)
{
    if ((unsigned)role >= MVM_ROLE_COUNT || !name)
        return NULL;
    for (size_t i = 0; i < roles[role].n; i++)
        if (strcmp(*roles[role].modules[i].name, name) == 0)
            return roles[role].modules[i].ops;
    return NULL;
}

const char *mvm_role_name(enum mvm_role role)
{
    return (unsigned)role < MVM_ROLE_COUNT ? roles[role].name : "unknown role";
}

void mvm_policy_names(enum mvm_role role, char *buf, size_t cap)
{
    if (cap == 0)
        return;
    buf[0] = '\0';
    size_t n = (unsigned)role < MVM_ROLE_COUNT ? roles[role].n : 0;
    if (n == 0) {
        snprintf(buf, cap, "(none)");
        return;
    }
    size_t len = 0;
    for (size_t i = 0; i < n && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? ", " : "",
                                *roles[role].modules[i].name);
    /* A list cut short says so rather than passing for the whole list. */
    if (len >= cap && cap > 4)
        memcpy(buf + cap - 4, "...", 4);
}
