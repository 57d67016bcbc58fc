/*
 * Which policy module the engine runs for a role: the caller's choice (a CLI flag) when
 * there is one, else the role's MOEVM_* options (vmm/options.h), checked against the
 * registry (policy/registry.c) with errors a user can act on.
 */
#ifndef MVM_POLICY_CHOOSE_H
#define MVM_POLICY_CHOOSE_H

#include "policy/policy.h"
#include "vmm/options.h"

/* What evict "auto" (MOEVM_EVICT's default) is in the engine: the adaptive mix, which in the
 * simulator's 72 cells is never more than 0.1 points below LRU and beats reuse in all but
 * one, and in the engine hit 38.8% where reuse hit 36.0% and LRU 32.4%
 * (docs/perf/policies.md, "Should it be the default?"). The interposer's "auto" is
 * MVM_INTERPOSE_EVICT_DEFAULT: it sees each miss, not each use, which adaptive's ghosts
 * would miscount. */
#define MVM_ENGINE_EVICT_DEFAULT "adaptive"
#define MVM_INTERPOSE_EVICT_DEFAULT "reuse"

/* name given: that module, with `args` ("" when NULL: the options' parameters belong to
 * the options' module); name NULL: the role's options (MOEVM_ROUTE, MOEVM_EVICT,
 * MOEVM_PREDICT, MOEVM_CONFIG, MOEVM_ASSIGN and their _ARGS). *ops is NULL for "none" in
 * the roles that may run no module (predict, config). MVM_ERR_INVALID naming the module,
 * where it came from and the modules there are, or a role the engine does not run;
 * MVM_ERR_OPTION for a malformed option. */
mvm_status mvm_engine_choose(enum mvm_role role, const char *name, const char *args,
                             const void **ops, const char **args_out);

/* A module given as "name" or "name{k=v,...}" (the CLI's flags, the engine API's fields),
 * split in place: *params NULL when there are none. -1 when a brace is not closed at the
 * end, else 0. */
int mvm_policy_split(char *p, const char **name, const char **params);

/* The module a spec names for an engine role: spec ("name" or "name{k=v,...}", the engine
 * API's fields) split in place as mvm_policy_split splits it, and chosen as
 * mvm_engine_choose chooses (spec NULL: the role's options; *name and *params NULL then).
 * MVM_ERR_INVALID naming the role and the spec where a brace is not closed at its end. */
mvm_status mvm_engine_choose_spec(enum mvm_role role, char *spec, const char **name,
                                  const char **params, const void **ops);

#endif
