/*
 * A multi-server simulation for the place role (after Prism): replays a routing trace over a
 * cluster of servers that hold experts as a place module (policy.h, mvm_place_ops) decides,
 * and reports what the placement costs in latency and bytes. It is the simple end of the
 * paper's §IV-C simulator: no queueing, one token at a time per server, the cost model of
 * policy/cost.h.
 *
 * The model:
 *  - Homes: request `req` of the trace lives on server req mod S; its tokens never move
 *    (Prism redirects no request, §III-A). A per-server workload skew is the trace's to
 *    make: give the requests of each residue class their own routing (their own "task").
 *  - A token at a layer: attention (attn_time) on its home, then its top_k experts
 *    concurrently; one the home holds runs there, mvm_cost_gpu(1); one it lacks runs on the
 *    nearest holder r (the smallest call time from the home) as a remote call,
 *    mvm_cost_net over the link home→r (rtt[h][r], bw[h][r]; hidden states of n_embd BF16
 *    elements each way) plus mvm_cost_gpu(1) there. The layer ends with its slowest expert
 *    (Eq. 1's max); a token's latency is the sum over layers. Servers do not queue: a
 *    remote call finds its holder free (the paper's load-dependent compute is not modelled).
 *  - Time: tokens start in trace order (the trace's order is the arrival order), each on its
 *    home as soon as the home finished its previous token and not before the token ahead
 *    of it in the trace started; servers work in parallel.
 *  - Placement: the module is called once before the first token with no statistics (the
 *    paper's "initialized randomly" start; this initial placement is loaded for free) and
 *    then every period_tokens tokens (0: never again) with the token-weighted counts
 *    [S][L][E] of the home servers' selections since its last call. A placement that adds
 *    experts is a migration: each addition is copied from its nearest holder in the old
 *    placement (rtt[r][n] + expert_bytes / bw[r][n]), one after another into a server,
 *    servers in parallel, so it takes T_mig = the largest per-server sum (the module is told
 *    the simulated seconds since its last call, mvm_cluster.period_s, with which prism
 *    bounds its migrations: `land`); the old placement
 *    serves every token that starts before (call time + T_mig), the new one every token
 *    after (copy first, then switch). A call due while a migration is still copying waits for
 *    the next period boundary after it ends; the counts keep accumulating meanwhile. Migration
 *    traffic does not slow remote calls.
 *  - Checks: every placement a module returns must hold every expert on some server and
 *    fit each server's capacity (capacity_bytes / expert_bytes experts), and a module that
 *    returns 0 must leave the placement as it came (the place contract); otherwise the run
 *    fails naming the module.
 */
#ifndef MVM_TOOLS_SIM_CLUSTER_H
#define MVM_TOOLS_SIM_CLUSTER_H

#include <stdint.h>

#include "policy/policy.h"
#include "tools/trace.h"

typedef struct mvm_sim_cluster_result {
    uint32_t n_servers;
    uint64_t tokens;
    double mean_latency;        /* s per token */
    double time;                /* s until the last token ends */
    uint64_t calls;             /* token × selected expert pairs */
    uint64_t local_calls;       /* of them, run on the token's home */
    double local_share;         /* local_calls / calls; 0 without calls */
    uint32_t placements;        /* calls of the module, the initial one included */
    uint32_t migrations;        /* placements adopted after the initial one */
    uint64_t bytes_migrated;    /* bytes copied by migrations (the initial load excluded) */
    double t_migration;         /* s, the migrations' copy times added up */
    uint64_t *home_tokens;      /* [S] tokens homed on each server */
    double *home_latency;       /* [S] their mean latency, s (0 without tokens) */
    uint64_t *served;           /* [S] expert calls each server ran, for itself or others */
} mvm_sim_cluster_result;

/* Runs the whole trace with place module `place_name` (parameters "a=1,b=2" or NULL).
 * MVM_ERR_INVALID for an unknown module or bad parameters, a cluster that is malformed
 * (no servers, rtt < 0, bw <= 0 between two servers) or whose capacity cannot hold every
 * expert once, or a placement that breaks the checks above (the message names the module
 * and what is wrong); MVM_ERR_NOMEM. On success *out owns its arrays: release them with
 * mvm_sim_cluster_result_free. On failure *out is zeroed. */
mvm_status mvm_sim_cluster_run(const mvm_trace *t, const mvm_cost *cost, const mvm_cluster *c,
                               const char *place_name, const char *place_params,
                               uint32_t period_tokens, mvm_sim_cluster_result *out);

/* Frees the arrays of a result (zeroed after); a zeroed result is a no-op. */
void mvm_sim_cluster_result_free(mvm_sim_cluster_result *r);

#endif
