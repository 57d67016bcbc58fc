/*
 * assign "twoptr": SMoE's CPU-assisted computing/loading scheduling (§IV-D, Algorithm 2 and
 * Eq. 4). Resident experts run on the GPU. The others, sorted by importance (gate score) best
 * first, are shared out by two pointers: while the load queue's time T_load is not above the
 * CPU's T_CPU, the best remaining expert is loaded (and then computed on the GPU); otherwise
 * the worst remaining one goes to the CPU. That balances Eq. 4,
 *     min max(T_load, T_CPU),   T_load = Σ C_load,  T_CPU = Σ C_CPU,
 * and loads the high-score experts because they are the ones likely to be reused.
 *
 * Readings:
 * - Eq. 4's C_cost is C_CPU. Costs come from the cost model instead of moving averages of
 *   the last p measurements (p is not given): C_load is the load of the expert's missing
 *   pages (t_load for a whole one), C_CPU = mvm_cost_cpu(n) for its n tokens. With equal
 *   costs this is the paper's n_load·C_load against n_CPU·C_CPU.
 * - GPU compute is left out of the model, as the paper does ("minimal GPU operation
 *   times"); est_time = max(T_load, T_CPU).
 * - Ties (T_load == T_CPU, the first step included) go to loading, as written.
 * - Counting the copies the paper ignores (starting T_load with the queued ones) needs
 *   queue state the view does not carry (assign_common.h); T_load starts at 0.
 * - Importance with a batch: the sum of the expert's gate weights over the step's tokens
 *   (the gate score itself for one token); ties by expert index.
 * - The memory constraint (assign_common.h): when the best remaining expert does not fit
 *   in the room left, it runs on the CPU instead (so T_CPU grows, as for any CPU expert).
 *
 * No parameters.
 */
#include "policy/assign_common.h"
#include "policy/modules.h"

static mvm_status twoptr_create(const mvm_pinit *init, void **self)
{
    return mvm_assign_base_create(init, "assign twoptr", self);
}

static void twoptr_assign(void *self, const mvm_pview *v, const mvm_pstep *step,
                          const float *ahead, uint32_t n_ahead, mvm_assignment *out)
{
    mvm_assign_base *b = self;
    uint32_t n = mvm_assign_scan(b, v, step, out), m = 0;
    uint64_t room = mvm_assign_room(v, step);
    double t_load = 0, t_cpu = 0;
    (void)ahead;
    (void)n_ahead;

    for (uint32_t i = 0; i < n; i++) {
        const mvm_aexp *x = &b->ex[i];
        if (!x->pages)
            out->where[x->e] = MVM_RUN_GPU;
        else
            b->rank[m++] = (mvm_rank){.key = x->score, .id = i};
    }
    mvm_rank_sort(b->rank, m); /* S: highest score first */
    uint32_t l = 0, r = m;     /* the unassigned experts are S[l..r) */
    while (l < r) {
        if (t_load <= t_cpu) {
            const mvm_aexp *x = &b->ex[b->rank[l++].id];
            if (x->pages <= room) {
                room -= x->pages;
                out->where[x->e] = MVM_RUN_GPU_LOAD;
                t_load += x->t_load;
            } else {
                out->where[x->e] = MVM_RUN_CPU;
                t_cpu += x->t_cpu;
            }
        } else {
            const mvm_aexp *x = &b->ex[b->rank[--r].id];
            out->where[x->e] = MVM_RUN_CPU;
            t_cpu += x->t_cpu;
        }
    }
    out->est_time = t_load > t_cpu ? t_load : t_cpu;
}

const mvm_assign_ops mvm_assign_twoptr = {
    .name = "twoptr",
    .about = "SMoE Alg. 2: two pointers over the missing experts by gate score, best loaded, "
             "worst to the CPU, balancing max(T_load, T_CPU)",
    .create = twoptr_create,
    .destroy = mvm_assign_base_destroy,
    .assign = twoptr_assign,
};
