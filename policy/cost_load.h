/*
 * The machine the cost model describes (policy/cost.h), as a user names it: a preset or
 * a JSON cost file (docs/cost-format.md, written by `moevm calibrate`). `moevm run`,
 * `moevm sim` and the engine's residency share it, so one MOEVM_COST governs them all.
 */
#ifndef MVM_POLICY_COST_LOAD_H
#define MVM_POLICY_COST_LOAD_H

#include "policy/cost.h"

/* spec: a preset name, else a file's path; NULL: the MOEVM_COST option. `what` names the
 * flag in messages ("--cost x: ..."; "MOEVM_COST=x: ..." for the option). MVM_ERR_INVALID
 * with a one-line message naming the spec for a name that is neither a preset nor a
 * readable file, a file over 16 KiB, or what mvm_machine_parse_json rejects; MVM_ERR_OPTION for a malformed
 * MOEVM_COST. *out is written only on success. */
mvm_status mvm_machine_load(const char *spec, const char *what, mvm_machine *out);

#endif
