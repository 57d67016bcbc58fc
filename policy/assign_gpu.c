/*
 * assign "gpu": the GPU-only baseline (DESIGN.md §3), the execution model of the GPU-only
 * offloaders the seeds compare against (Mixtral-offloading, MoE-Infinity, seed 003 §4):
 * every active expert runs on the GPU, a resident one as it is (MVM_RUN_GPU), any other
 * after an on-demand load of its missing pages (MVM_RUN_GPU_LOAD). No paper gives it an
 * algorithm; its readings:
 *
 * - it never chooses another place, so it does not apply the memory constraint of
 *   assign_common.h: a load that finds no room is the caller's to degrade, and only the
 *   caller knows where to (the simulator runs such an expert zero-copy where the device
 *   reads host memory, else on the CPU). The other assign modules place experts
 *   themselves and do plan within the room;
 * - est_time is DALI's pipelined GPU time (seed 002 Eq. 5: Σ max(transfer, compute), the
 *   next transfer overlapping this compute), so the baseline's estimate is comparable
 *   with greedy's.
 *
 * No parameters.
 */
#include "policy/assign_common.h"
#include "policy/modules.h"

static mvm_status gpu_create(const mvm_pinit *init, void **self)
{
    return mvm_assign_base_create(init, "assign gpu", self);
}

static void gpu_assign(void *self, const mvm_pview *v, const mvm_pstep *step,
                       const float *ahead, uint32_t n_ahead, mvm_assignment *out)
{
    mvm_assign_base *b = self;
    uint32_t n = mvm_assign_scan(b, v, step, out);
    (void)ahead;
    (void)n_ahead;
    for (uint32_t i = 0; i < n; i++) {
        const mvm_aexp *x = &b->ex[i];
        out->where[x->e] = x->pages ? MVM_RUN_GPU_LOAD : MVM_RUN_GPU;
        out->est_time += mvm_assign_dali_gpu(x);
    }
}

const mvm_assign_ops mvm_assign_gpu = {
    .name = "gpu",
    .about = "GPU only: resident experts as they are, every other loaded on demand",
    .create = gpu_create,
    .destroy = mvm_assign_base_destroy,
    .assign = gpu_assign,
};
