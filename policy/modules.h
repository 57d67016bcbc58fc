/*
 * Every policy module's ops table, sorted by role (in enum mvm_role order) and by name
 * within a role. The registry (registry.c) lists the same modules; a module is reachable by
 * name only once it is in both places.
 */
#ifndef MVM_POLICY_MODULES_H
#define MVM_POLICY_MODULES_H

#include "policy/policy.h"

/* route */
extern const mvm_route_ops mvm_route_importance;
extern const mvm_route_ops mvm_route_none;

/* evict */
extern const mvm_evict_ops mvm_evict_adaptive;
extern const mvm_evict_ops mvm_evict_affinity;
extern const mvm_evict_ops mvm_evict_belady;
extern const mvm_evict_ops mvm_evict_lcp;
extern const mvm_evict_ops mvm_evict_lfu;
extern const mvm_evict_ops mvm_evict_lru;
extern const mvm_evict_ops mvm_evict_reuse;
extern const mvm_evict_ops mvm_evict_score;
extern const mvm_evict_ops mvm_evict_workload;
/* evict affinity's look at a step for each of its E experts (top-k K), into out[E]: where
 * several modules read it, computed once and passed as mvm_pstep.looks. */
void mvm_affinity_looks(const mvm_pstep *step, uint32_t E, uint32_t K, float *out);

/* assign */
extern const mvm_assign_ops mvm_assign_gpu;
extern const mvm_assign_ops mvm_assign_greedy;
extern const mvm_assign_ops mvm_assign_presched;
extern const mvm_assign_ops mvm_assign_twoptr;

/* predict */
extern const mvm_predict_ops mvm_predict_gate;
extern const mvm_predict_ops mvm_predict_learned;
extern const mvm_predict_ops mvm_predict_oracle;
extern const mvm_predict_ops mvm_predict_residual;
extern const mvm_predict_ops mvm_predict_speculative;

/* config */
extern const mvm_config_ops mvm_config_fixedpoint;
extern const mvm_config_ops mvm_config_hot;
extern const mvm_config_ops mvm_config_uniform;

/* place */
extern const mvm_place_ops mvm_place_prism;
extern const mvm_place_ops mvm_place_uniform;

#endif
