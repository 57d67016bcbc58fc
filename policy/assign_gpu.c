/*
 * assign "gpu": the GPU-only baseline (docs/policies.md), the execution model of the GPU-only
 * offloaders the papers compare against (Mixtral-offloading, MoE-Infinity, MoEpic §4):
 * every active expert runs on the GPU, a resident one as it is (MVM_RUN_GPU), any other
 * after an on-demand load of its missing pages (MVM_RUN_GPU_LOAD). No paper gives it an
 * algorithm; its readings:
 *
 * - it never chooses another place, so it does not apply the memory constraint of
 *   assign_common.h: a load that finds no room is the caller's to degrade, and only the
 *   caller knows where to (the simulator runs such an expert zero-copy where the device
 *   reads host memory, else on the CPU). The other assign modules place experts
 *   themselves and do plan within the room;
 * - est_time is DALI's pipelined GPU time (Eq. 5: Σ max(transfer, compute), the
 *   next transfer overlapping this compute), so the baseline's estimate is comparable
 *   with greedy's.
 *
 * Parameter: zerocopy=1 reads every expert that is not wholly resident in place over the
 * bus (MVM_RUN_ZEROCOPY: the device reads the host homes in place, nothing moved), the
 * zero-copy baseline ("GPU zero-copy"); est_time is then Σ of the resident experts' compute
 * and the others' zero-copy time. Default 0. The module itself never loads; the engine's and
 * the simulator's admission (policy/admit.h, on by default) may load what it read in place
 * afterwards: MOEVM_ADMIT=off (sim --no-admit) for the pure baseline.
 */
#include "policy/assign_common.h"
#include "policy/modules.h"

static mvm_status gpu_create(const mvm_pinit *init, void **self)
{
    return mvm_assign_zc_create(init, "assign gpu", self);
}

static void gpu_assign_step(void *self, const mvm_pview *v, const mvm_pstep *step,
                            const float *ahead, uint32_t n_ahead, mvm_assignment *out)
{
    mvm_assign_zc *g = self;
    uint32_t n = mvm_assign_scan(&g->b, v, step, out);
    (void)ahead;
    (void)n_ahead;
    for (uint32_t i = 0; i < n; i++) {
        const mvm_aexp *x = &g->b.ex[i];
        if (x->pages && g->zerocopy) {
            out->where[x->e] = MVM_RUN_ZEROCOPY;
            out->est_time += mvm_cost_zerocopy(&g->b.cost, x->n);
        } else {
            out->where[x->e] = x->pages ? MVM_RUN_GPU_LOAD : MVM_RUN_GPU;
            out->est_time += mvm_assign_dali_gpu(x);
        }
    }
}

const mvm_assign_ops mvm_assign_gpu = {
    .name = "gpu",
    .about = "GPU only: resident experts as they are, every other loaded on demand "
             "(zerocopy=1: read in place from the host)",
    .create = gpu_create,
    .destroy = mvm_assign_zc_destroy,
    .assign = gpu_assign_step,
};
