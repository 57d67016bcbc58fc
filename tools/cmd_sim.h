/* Shared by the two halves of `moevm sim` (tools/cmd_sim.c, tools/cmd_sim_cluster.c). */
#ifndef MVM_TOOLS_CMD_SIM_H
#define MVM_TOOLS_CMD_SIM_H

#include "policy/cost.h"
#include "tools/cli.h"
#include "tools/sim.h"
#include "tools/trace.h"

/* --cost: a preset name or a JSON cost file (NULL: MOEVM_COST), for the trace's shape. 0,
 * or 1 after printing a one-line error. */
int mvm_sim_cli_cost(const char *spec, const mvm_trace *t, mvm_cost *cost);

/* `moevm sim --alpha-for MS` (tools/cmd_sim_alpha.c): replays the trace with route
 * importance at `points` α evenly spaced over [0, 1] and cfg's other roles, prints the
 * table and the smallest α whose degree-`degree` fit meets target_ms per token. 0, or 1
 * after a one-line error (an unreachable target among them). Leaves cfg's route unset. */
int mvm_sim_alpha_cli(const mvm_trace *t, const mvm_cost *cost, mvm_sim_config *cfg,
                      double target_ms, uint32_t degree, uint32_t points);

/* `moevm sim`'s single-run options (tools/cmd_sim.c), which the multi-server model names
 * as not applying to it. */
extern const mvm_cli_opt mvm_sim_opts[];

/* `moevm sim --servers N ...`: the multi-server model (tools/sim_cluster.h). */
int mvm_sim_cluster_cli(int argc, char **argv);

#endif
