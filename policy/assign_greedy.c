/*
 * assign "greedy": DALI's Greedy Assignment (§4.1, Algorithm 1). The layer is the 0-1 program
 * of Eqs. 3-9,
 *     min max(T_gpu, T_cpu),  T_cpu = Σ t_cpu(w_i)·C_i,  T_gpu = Σ t_gpu(w_i)·G_i,
 *     t_gpu(w) = max(Trans(w), compute(w))  (Eq. 5; Trans = 0 for a resident expert),
 * solved greedily: the active experts in descending |t_gpu - t_cpu|, each to the side whose
 * cumulative time would be smaller after taking it, ties to the GPU (line 12's <=). That is
 * list scheduling on two unrelated machines; the "least resulting finish time" rule keeps
 * the makespan within Σ_i min(t_gpu_i, t_cpu_i) <= 2·OPT whatever the order (each step
 * raises the maximum by at most the job's smaller time; OPT is at least half the sum of
 * the smaller times) — tests/test_policy_assign.c checks both against brute force.
 *
 * Readings:
 * - Costs: t_cpu = mvm_cost_cpu(w), compute = mvm_cost_gpu(w), Trans = the load of the
 *   expert's missing pages (t_load for a whole expert), from the cost model instead of the
 *   paper's warm-up profile tables. Inactive experts are skipped (lines 9-10) by not being
 *   in the list at all, so t(0) needs no special value.
 * - The memory constraint Eq. 9 that Algorithm 1 never checks: an expert
 *   that needs a load may take the GPU side only if its missing pages fit in the room
 *   (assign_common.h: free pages plus what is evictable without touching this layer's
 *   experts); when they do not, it goes to the CPU whatever the times say. With that
 *   constraint binding there is no constant ratio to the optimum (one large partial expert
 *   can take the room that several small ones needed), and the tests say so.
 * - A resident expert may still go to the CPU when the GPU side is the longer one, as the
 *   0-1 program allows; it is never loaded.
 * - est_time = max(T_gpu, T_cpu) of the resulting assignment.
 * - Reading the expert in place (not in the paper, which only loads): with zerocopy=1, an
 *   expert not wholly resident has a second GPU option, the zero-copy read at PCIe speed,
 *   which needs no room; its GPU time is the faster of the two that are possible. So each
 *   miss runs where the cost model says it finishes first: on the CPU, read in place, or
 *   loaded (and never loaded without room).
 *
 * Parameter: zerocopy=0|1 (default 0; the engine's MOEVM_ASSIGN_ARGS).
 */
#include <math.h>

#include "policy/assign_common.h"
#include "policy/modules.h"

static mvm_status greedy_create(const mvm_pinit *init, void **self)
{
    return mvm_assign_zc_create(init, "assign greedy", self);
}

/* The expert's time on the GPU side and how (*where): resident, loaded (Eq. 5, only with
 * the room for its pages) or read in place (zerocopy=1); INFINITY when none is possible. */
static double gpu_side(const mvm_assign_zc *z, const mvm_aexp *x, uint64_t room, uint8_t *where)
{
    uint8_t w = MVM_RUN_GPU;
    double g = x->pages ? INFINITY : x->t_gpu;
    if (x->pages && x->pages <= room) {
        g = mvm_assign_dali_gpu(x);
        w = MVM_RUN_GPU_LOAD;
    }
    if (x->pages && z->zerocopy && mvm_cost_zerocopy(&z->b.cost, x->n) < g) {
        g = mvm_cost_zerocopy(&z->b.cost, x->n);
        w = MVM_RUN_ZEROCOPY;
    }
    if (where)
        *where = w;
    return g;
}

static void greedy_assign(void *self, const mvm_pview *v, const mvm_pstep *step,
                          const float *ahead, uint32_t n_ahead, mvm_assignment *out)
{
    mvm_assign_zc *z = self;
    mvm_assign_base *b = &z->b;
    uint32_t n = mvm_assign_scan(b, v, step, out);
    uint64_t room = mvm_assign_room(v, step);
    double T_gpu = 0, T_cpu = 0;
    (void)ahead;
    (void)n_ahead;

    for (uint32_t i = 0; i < n; i++)
        b->rank[i] = (mvm_rank){.key = fabs(gpu_side(z, &b->ex[i], UINT64_MAX, NULL) -
                                            b->ex[i].t_cpu),
                                .id = i};
    mvm_rank_sort(b->rank, n); /* line 5: descending |t_gpu - t_cpu| */
    for (uint32_t r = 0; r < n; r++) {
        const mvm_aexp *x = &b->ex[b->rank[r].id];
        uint8_t where;
        double g = gpu_side(z, x, room, &where);
        if (T_gpu + g <= T_cpu + x->t_cpu) {
            if (where == MVM_RUN_GPU_LOAD)
                room -= x->pages;
            out->where[x->e] = where;
            T_gpu += g;
        } else {
            out->where[x->e] = MVM_RUN_CPU;
            T_cpu += x->t_cpu;
        }
    }
    out->est_time = T_gpu > T_cpu ? T_gpu : T_cpu;
}

const mvm_assign_ops mvm_assign_greedy = {
    .name = "greedy",
    .about = "DALI Alg. 1: min-max CPU/GPU list scheduling by |t_gpu - t_cpu|, loads only "
             "while the budget has room",
    .create = greedy_create,
    .destroy = mvm_assign_zc_destroy,
    .assign = greedy_assign,
};
