/*
 * Which policy module the engine runs for a role: the caller's choice (a CLI flag) when
 * there is one, else the role's MOEVM_* options (vmm/options.h), checked against the
 * registry (policy/registry.c) with errors a user can act on.
 */
#ifndef MVM_ENGINE_CHOOSE_H
#define MVM_ENGINE_CHOOSE_H

#include "policy/policy.h"
#include "vmm/options.h"

/* name given: that module, with `args` ("" when NULL: the options' parameters belong to
 * the options' module); name NULL: the options name_opt and args_opt. *ops is NULL for
 * "none" where none_ok. MVM_ERR_INVALID naming the module, where it came from and the
 * modules there are; MVM_ERR_OPTION for a malformed option. */
mvm_status mvm_engine_choose(enum mvm_role role, const char *name, const char *args,
                             mvm_option_id name_opt, mvm_option_id args_opt, int none_ok,
                             const void **ops, const char **args_out);

#endif
