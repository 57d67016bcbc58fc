/* The policies' MOEVM_* options (policy_options.h). */
#include "policy/policy_options.h"

const mvm_option_desc mvm_opt_evict = {
    "MOEVM_EVICT", MVM_OPT_STRING, "auto", NULL,
    "engine and interposer: the evict policy module (auto: adaptive in "
    "the engine, reuse in the interposer; adaptive, reuse, lru, lfu, "
    "affinity, score, workload, lcp; docs/policies.md)"};

const mvm_option_desc mvm_opt_evict_args = {
    "MOEVM_EVICT_ARGS", MVM_OPT_STRING, "", NULL,
    "engine and interposer: the evict module's parameters, "
    "\"name=value,...\""};

const mvm_option_desc mvm_opt_predict = {
    "MOEVM_PREDICT", MVM_OPT_STRING, "none", NULL,
    "engine: the predict policy module whose forecast of the next "
    "layer's experts is prefetched (none, gate, residual, learned, "
    "speculative: SMoE's partial pass through the next layer; "
    "docs/policies.md)"};

const mvm_option_desc mvm_opt_predict_args = {
    "MOEVM_PREDICT_ARGS", MVM_OPT_STRING, "", NULL,
    "engine: the predict module's parameters, \"name=value,...\""};

const mvm_option_desc mvm_opt_route = {
    "MOEVM_ROUTE", MVM_OPT_STRING, "none", NULL,
    "engine: the route policy module, which may run a resident expert "
    "in place of a selected one that is not (none: the exact model; "
    "importance; docs/policies.md)"};

const mvm_option_desc mvm_opt_route_args = {
    "MOEVM_ROUTE_ARGS", MVM_OPT_STRING, "", NULL,
    "engine: the route module's parameters, \"name=value,...\""};

const mvm_option_desc mvm_opt_config = {
    "MOEVM_CONFIG", MVM_OPT_STRING, "none", NULL,
    "engine: the config policy module, which sets per-layer budgets "
    "and the split θ of cached experts (none: one budget for all "
    "layers; uniform, hot, fixedpoint; docs/policies.md)"};

const mvm_option_desc mvm_opt_config_args = {
    "MOEVM_CONFIG_ARGS", MVM_OPT_STRING, "", NULL,
    "engine: the config module's parameters, \"name=value,...\""};

const mvm_option_desc mvm_opt_assign = {
    "MOEVM_ASSIGN", MVM_OPT_STRING, "gpu", NULL,
    "engine on a GPU: the assign policy module, which runs each expert "
    "of a step on the GPU (resident, loaded, or read from its home) or "
    "on the CPU (gpu: always the GPU; twoptr, greedy, presched; "
    "docs/policies.md)"};

const mvm_option_desc mvm_opt_assign_args = {
    "MOEVM_ASSIGN_ARGS", MVM_OPT_STRING, "", NULL,
    "engine: the assign module's parameters, \"name=value,...\""};

const mvm_option_desc mvm_opt_cost = {
    "MOEVM_COST", MVM_OPT_STRING, "h100", NULL,
    "engine and simulator: the machine the cost model describes, a "
    "preset (rtx3090, a6000, a100, h100) or a JSON cost file "
    "(docs/cost-format.md; `moevm calibrate` writes one)"};

static const mvm_option_desc *const list[] = {
    &mvm_opt_evict, &mvm_opt_evict_args, &mvm_opt_predict, &mvm_opt_predict_args, &mvm_opt_route,
    &mvm_opt_route_args, &mvm_opt_config, &mvm_opt_config_args, &mvm_opt_assign,
    &mvm_opt_assign_args, &mvm_opt_cost,
};

const mvm_option_table mvm_policy_options = {list, sizeof list / sizeof *list};
