/* The engine's choice of policy modules (choose.h). */
#include "policy/choose.h"

#include <string.h>

#include "policy/policy_options.h"
#include "vmm/error.h"

/* Each engine role's options, and whether it may run no module at all. */
static const struct {
    const mvm_option_desc *name, *args;
    int none_ok;
    int engine;
} roles[MVM_ROLE_COUNT] = {
    [MVM_ROLE_ROUTE] = {&mvm_opt_route, &mvm_opt_route_args, 0, 1},
    [MVM_ROLE_EVICT] = {&mvm_opt_evict, &mvm_opt_evict_args, 0, 1},
    [MVM_ROLE_PREDICT] = {&mvm_opt_predict, &mvm_opt_predict_args, 1, 1},
    [MVM_ROLE_CONFIG] = {&mvm_opt_config, &mvm_opt_config_args, 1, 1},
    [MVM_ROLE_ASSIGN] = {&mvm_opt_assign, &mvm_opt_assign_args, 0, 1},
};

mvm_status mvm_engine_choose(enum mvm_role role, const char *name, const char *args,
                             const void **ops, const char **args_out)
{
    *ops = NULL;
    *args_out = NULL;
    if ((unsigned)role >= MVM_ROLE_COUNT || !roles[role].engine)
        return mvm_fail(MVM_ERR_INVALID, "the engine runs no %s module",
                        (unsigned)role < MVM_ROLE_COUNT ? mvm_role_name(role) : "such");
    mvm_option_value n = {.s = name}, a = {.s = name ? (args ? args : "") : NULL};
    mvm_status st = MVM_OK;
    if (!n.s)
        st = mvm_option_read(roles[role].name, &n);
    if (st == MVM_OK && !a.s)
        st = mvm_option_read(roles[role].args, &a);
    if (st != MVM_OK)
        return st;
    if (role == MVM_ROLE_EVICT && strcmp(n.s, "auto") == 0)
        n.s = MVM_ENGINE_EVICT_DEFAULT;
    *args_out = a.s;
    if (roles[role].none_ok && strcmp(n.s, "none") == 0) {
        if (!a.s[0])
            return MVM_OK;
        *args_out = NULL;
        if (name)
            return mvm_fail(MVM_ERR_INVALID, "%s none{%s}: none takes no parameters",
                            mvm_role_name(role), a.s);
        return mvm_fail(MVM_ERR_INVALID, "%s=%s: %s none takes no parameters",
                        roles[role].args->name, a.s, mvm_role_name(role));
    }
    if ((*ops = mvm_policy_find(role, n.s)))
        return MVM_OK;
    char names[256];
    mvm_policy_names(role, names, sizeof names);
    return mvm_fail(MVM_ERR_INVALID, "%s%s%s: no such %s policy (available: %s%s)",
                    name ? "" : roles[role].name->name, name ? "" : "=",
                    n.s, mvm_role_name(role), roles[role].none_ok ? "none, " : "", names);
}

int mvm_policy_split(char *p, const char **name, const char **params)
{
    char *brace = strchr(p, '{');
    *name = p;
    *params = NULL;
    if (!brace)
        return 0;
    char *close = strrchr(brace, '}');
    if (!close || close[1])
        return -1;
    *brace = *close = '\0';
    *params = brace + 1;
    return 0;
}

mvm_status mvm_engine_choose_spec(enum mvm_role role, char *spec, const char **name,
                                  const char **params, const void **ops)
{
    *name = *params = NULL;
    *ops = NULL;
    if (spec && mvm_policy_split(spec, name, params))
        return mvm_fail(MVM_ERR_INVALID, "%s module '%s': expected NAME or NAME{k=v,...}",
                        mvm_role_name(role), spec);
    const char *args;
    return mvm_engine_choose(role, *name, *params, ops, &args);
}
