/* Shared by the two halves of `moevm sim` (tools/cmd_sim.c, tools/cmd_sim_cluster.c). */
#ifndef MVM_TOOLS_CMD_SIM_H
#define MVM_TOOLS_CMD_SIM_H

#include "policy/cost.h"
#include "tools/trace.h"

/* --cost: a preset name or a JSON cost file, for the trace's shape. 0, or 1 after printing
 * a one-line error. */
int mvm_sim_cli_cost(const char *spec, const mvm_trace *t, mvm_cost *cost);

/* "name" or "name{params}" in p, split in place (params NULL when absent). -1 when a brace
 * is not closed at the end. */
int mvm_sim_cli_split_policy(char *p, const char **name, const char **params);

/* `moevm sim --servers N ...`: the multi-server model (tools/sim_cluster.h). */
int mvm_sim_cluster_cli(int argc, char **argv);

#endif
