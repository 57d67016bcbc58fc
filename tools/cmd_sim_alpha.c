/*
 * `moevm sim --alpha-for MS`: SMoE's choice of the substitution threshold α for a latency
 * budget (§V-C, Eq. 5). The paper profiles TPOT at several α on the deployment, fits a
 * low-degree polynomial and takes the smallest α whose fitted TPOT meets the budget (accuracy
 * loss grows with α, so the smallest feasible α loses least). Here the simulator is the
 * profiler: the trace is replayed with route "importance" at evenly spaced α over [0, 1] and
 * the other roles as given, and the fit and search are mvm_importance_alpha_for_budget's. The
 * substitutions per token are printed next to the times because they are the accuracy cost the
 * simulator can see.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "policy/route_alpha.h"
#include "tools/cli.h"
#include "tools/cmd_sim.h"
#include "vmm/error.h"

int mvm_sim_alpha_cli(const mvm_trace *t, const mvm_cost *cost, mvm_sim_config *cfg,
                      double target_ms, uint32_t degree, uint32_t points)
{
    double *alpha = malloc(points * sizeof *alpha), *ms = malloc(points * sizeof *ms);
    if (!alpha || !ms) {
        free(alpha), free(ms);
        fprintf(stderr, "moevm sim: out of memory\n");
        return 1;
    }
    cfg->policy[MVM_ROLE_ROUTE] = "importance";
    printf("%7s %9s %7s %12s\n", "alpha", "ms/token", "hit %", "subst/token");
    int rc = 0;
    for (uint32_t i = 0; i < points && !rc; i++) {
        char params[32];
        alpha[i] = (double)i / (double)(points - 1);
        snprintf(params, sizeof params, "alpha=%.17g", alpha[i]);
        cfg->params[MVM_ROLE_ROUTE] = params;
        mvm_sim_result r;
        if (mvm_sim_run(t, cost, cfg, &r) != MVM_OK) {
            rc = mvm_cli_error("sim", NULL);
            break;
        }
        double tok = r.tokens ? (double)r.tokens : 1;
        ms[i] = 1e3 * r.time / tok;
        printf("%7.3f %9.3f %7.1f %12.2f\n", alpha[i], ms[i],
               100.0 * (double)r.hits / (double)(r.accesses ? r.accesses : 1),
               (double)r.substitutions / tok);
    }
    cfg->params[MVM_ROLE_ROUTE] = NULL;
    double best;
    if (!rc && mvm_importance_alpha_for_budget(alpha, ms, points, degree, target_ms, &best) !=
                   MVM_OK) {
        fprintf(stderr, "moevm sim: --alpha-for %g: %s\n", target_ms, mvm_last_error());
        rc = 1;
    } else if (!rc) {
        best = ceil(best * 1000) / 1000; /* printed to 3 places: rounded towards the budget */
        printf("alpha %.3f is the smallest that meets %g ms/token (a degree-%u fit over %u "
               "points, SMoE §V-C)\nuse: --route 'importance{alpha=%.3f}'\n",
               best, target_ms, degree, points, best);
    }
    free(alpha), free(ms);
    return rc;
}
