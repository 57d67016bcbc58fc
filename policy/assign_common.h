/*
 * What every assign module needs from a step before it decides (policy.h, role "assign"):
 * the active experts of the layer with their costs from the shared cost model (cost.h),
 * and how many pages a load may take.
 *
 * Residency, as the view gives it (policy.h mvm_pview): an expert with resident[x] >=
 * pages_per_expert runs on the GPU as it is (MVM_RUN_GPU); any other needs a load of its
 * missing pages (MVM_RUN_GPU_LOAD, a page prefix already resident costs nothing) or runs
 * elsewhere. The view cannot tell a move in flight apart: `busy` also marks experts pinned
 * for use (the simulator pins the layer's experts before assign), so a prefetch still
 * landing is planned as a load like any other missing expert, and the caller, which knows
 * its moves, waits for the one under way instead of starting another.
 *
 * The memory constraint DALI's greedy leaves out (its Eq. 9, which Algorithm 1 never checks),
 * applied by every module that chooses places (twoptr, greedy, presched; gpu leaves a load
 * without room to the caller): loads planned for a step may take at most
 *   room = (capacity_pages - used_pages) + evictable,
 *   evictable = resident pages of experts that are not busy and not active in this layer,
 * i.e. the free pages plus what the evict policy could free without touching an expert
 * that this layer computes. A missing expert needs pages_per_expert - resident[x] pages.
 */
#ifndef MVM_POLICY_ASSIGN_COMMON_H
#define MVM_POLICY_ASSIGN_COMMON_H

#include "policy/policy.h"
#include "policy/rank.h"

/* One active expert of the step. */
typedef struct mvm_aexp {
    uint32_t e;       /* expert index within the layer */
    uint32_t n;       /* tokens routed to it (step->counts) */
    uint32_t pages;   /* pages a load must bring; 0 when resident */
    double score;     /* Σ over the step's tokens of its gate weight: SMoE's importance */
    double t_load;    /* seconds to load the missing pages (0 when resident) */
    double t_gpu;     /* GPU compute for n tokens, mvm_cost_gpu */
    double t_cpu;     /* CPU compute for n tokens, mvm_cost_cpu */
} mvm_aexp;

/* The state every assign module starts from; modules with more state embed it. */
typedef struct mvm_assign_base {
    mvm_pshape shape; /* copies: the init's pointers need not outlive create */
    mvm_cost cost;
    mvm_aexp *ex;     /* [E] the step's active experts, by expert index */
    mvm_rank *rank;   /* [E] scratch for the module's ordering */
    uint32_t *slot;   /* [E] expert -> its index in ex (scan's own scratch) */
} mvm_assign_base;

mvm_status mvm_assign_base_init(mvm_assign_base *b, const mvm_pinit *init, const char *module);
void mvm_assign_base_free(mvm_assign_base *b);

/* For modules that have no parameters and no state beyond the base: *self is a base. */
mvm_status mvm_assign_base_create(const mvm_pinit *init, const char *module, void **self);
void mvm_assign_base_destroy(void *self);

/* Clears out (every expert MVM_RUN_NONE, no prefetch, est_time 0) and fills b->ex with the
 * layer's active experts (counts > 0) in expert order; returns how many. */
uint32_t mvm_assign_scan(mvm_assign_base *b, const mvm_pview *v, const mvm_pstep *step,
                         mvm_assignment *out);

/* Pages loads may take in this step (the memory constraint above). */
uint64_t mvm_assign_room(const mvm_pview *v, const mvm_pstep *step);

/* Seconds to load the pages of an expert of `pages` missing pages: the missing share of its
 * bytes through mvm_cost_load_bytes (a whole expert costs exactly t_load). */
double mvm_assign_load_time(const mvm_assign_base *b, uint32_t pages);

/* DALI's pipelined GPU cost of one expert (Eq. 5): the next expert's transfer overlaps
 * this one's compute, so each costs max(transfer, compute); a resident one its compute. */
double mvm_assign_dali_gpu(const mvm_aexp *x);

/* A module whose one parameter is zerocopy=0|1 (1: an expert not wholly resident may be read
 * in place from its home over PCIe, HOST_NUMA devices): gpu and greedy. */
typedef struct mvm_assign_zc {
    mvm_assign_base b;
    int zerocopy;
} mvm_assign_zc;

mvm_status mvm_assign_zc_create(const mvm_pinit *init, const char *module, void **self);
void mvm_assign_zc_destroy(void *self);

#endif
