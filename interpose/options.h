/*
 * The interposer's MOEVM_* options (vmm/options.h has the table they join). Pure data, so
 * that the CLI lists them (`moevm options`) without linking the preload library.
 */
#ifndef MVM_INTERPOSE_OPTIONS_H
#define MVM_INTERPOSE_OPTIONS_H

#include "vmm/options.h"

/* For mvm_options_register. */
extern const mvm_option_table mvm_interpose_options;

extern const mvm_option_desc mvm_opt_preload_min, mvm_opt_oversubscribe, mvm_opt_preload_slices,
    mvm_opt_preload_prefetch, mvm_opt_preload_routing, mvm_opt_report, mvm_opt_report_skip;

#endif
