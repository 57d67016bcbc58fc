/* The engine's choice of policy modules (choose.h). */
#include "engine/choose.h"

#include <string.h>

#include "vmm/error.h"

mvm_status mvm_engine_choose(enum mvm_role role, const char *name, const char *args,
                             mvm_option_id name_opt, mvm_option_id args_opt, int none_ok,
                             const void **ops, const char **args_out)
{
    mvm_option_value n = {.s = name}, a = {.s = name ? (args ? args : "") : NULL};
    mvm_status st = MVM_OK;
    if (!n.s)
        st = mvm_option_read(name_opt, &n);
    if (st == MVM_OK && !a.s)
        st = mvm_option_read(args_opt, &a);
    if (st != MVM_OK)
        return st;
    *ops = NULL;
    *args_out = a.s;
    if (none_ok && strcmp(n.s, "none") == 0)
        return MVM_OK;
    if ((*ops = mvm_policy_find(role, n.s)))
        return MVM_OK;
    char names[256];
    mvm_policy_names(role, names, sizeof names);
    return mvm_fail(MVM_ERR_INVALID, "%s%s%s: no such %s policy (available: %s%s)",
                    name ? "" : mvm_option_describe(name_opt)->name, name ? "" : "=", n.s,
                    mvm_role_name(role), none_ok ? "none, " : "", names);
}
