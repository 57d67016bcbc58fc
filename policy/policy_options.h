/*
 * The policies' MOEVM_* options (vmm/options.h has the table they join): the module of each
 * role and its parameters (policy/choose.h reads them), and the cost model's machine
 * (policy/cost_load.h).
 */
#ifndef MVM_POLICY_POLICY_OPTIONS_H
#define MVM_POLICY_POLICY_OPTIONS_H

#include "vmm/options.h"

/* For mvm_options_register. */
extern const mvm_option_table mvm_policy_options;

extern const mvm_option_desc mvm_opt_evict, mvm_opt_evict_args, mvm_opt_predict,
    mvm_opt_predict_args, mvm_opt_route, mvm_opt_route_args, mvm_opt_config, mvm_opt_config_args,
    mvm_opt_assign, mvm_opt_assign_args, mvm_opt_cost;

#endif
