/*
 * The residency manager's state, shared by its two files: residency.c (the modules, the
 * requests and prefetches, a step's end) and residency_step.c (a step's begin: its
 * requests, rounds, copies waited for and pins).
 */
#ifndef MVM_ENGINE_FORWARD_RESIDENCY_IMPL_H
#define MVM_ENGINE_FORWARD_RESIDENCY_IMPL_H

#include "engine/forward/residency.h"
#include "policy/evict_driver.h"

struct mvm_resid {
    mvm_space *space;
    int observed;               /* the open step's policies observed it (mvm_resid_observe) */
    uint32_t n_experts, n_total, ppe;
    mvm_pshape shape;
    mvm_cost cost;
    mvm_pview view, landed_view;
    uint32_t *resident;     /* [L*E] the view's: ppe once requested, 0 once evicted; set
                               through set_resident, which keeps ... */
    uint64_t *resident_bits; /* ... [(L*E + 63) / 64] a bit each where resident is not 0
                               (the evict driver's, mvm_evict_collect) */
    uint32_t *landed;       /* [L*E] landed_view's: ppe where the copy has landed (the
                               layer asked for last; other rows stay 0) */
    uint32_t landed_layer;  /* that layer, UINT32_MAX before the first */
    uint8_t *busy;          /* [L*E] the view's: used by the current step (shielded) */
    uint8_t *pinned;        /* [L*E] pinned by the current step */
    uint8_t *held;          /* [L*E] held by the config module (its table): never evicted */
    const uint8_t *remote;  /* [L*E] held by another rank (mvm_resid_set_remote) or NULL */
    uint8_t *by_prefetch;   /* [L*E] loaded ahead of its layer's next step, which has not
                               ended yet */
    uint8_t *moved;         /* [L*E] asked to load since mvm_resid_landed_all saw it landed
                               (evicted and asked again in between included) */
    uint8_t *spec;          /* [L*E] a copy of MoEpic's window, in its buffer (free pages) */
    uint32_t *spec_keep;    /* [L*E] its pages before: what stays if its layer does not use it */
    uint32_t *cand, *want;  /* [L*E + 1] eviction candidates, [L*E] the module's wishes */
    mvm_move **moves;       /* [E] a step's copies, all asked before any is waited for */
    const mvm_evict_ops *evict;
    void *evict_self;
    mvm_evict_driver victims; /* the evict module over resident, busy and cand */
    const mvm_config_ops *config; /* NULL: one budget for all layers, whole experts */
    void *config_self;
    const mvm_assign_ops *assign; /* NULL: not on a device, every expert where it is read */
    void *assign_self;
    int at_home;            /* nothing moves: every expert is read at its home */
    int defer;              /* prefetches and admissions wait for mvm_resid_defer_loads */
    uint32_t *deferred;     /* [L*E] those prefetches, in the order asked ... */
    uint32_t n_deferred;
    uint8_t *deferred_kind; /* [L*E] ... 1 for each (2: the assign module's plan) */
    int admit;              /* MOEVM_ADMIT: home runs are offered to the cache afterwards
                               (1: while no copy is in flight, 2: whatever is) */
    int read_through;       /* ... but not while the misses admit themselves
                               (mvm_resid_set_read_through) */
    const uint8_t *shield;  /* [L*E] never a victim while set (mvm_resid_set_shield), or
                               NULL */
    int ordered;            /* MOEVM_DETERMINISTIC: each copy lands before the next
                               decision (ordered_wait) */
    void *reader_stream;    /* the device stream a round's copies are ordered before
                               (mvm_resid_set_reader_stream), or NULL: waited for here */
    int read_view;          /* the reader reads a held copy where it lands (set_read_view) */
    uint64_t *view_addr;    /* [n_total]: where the reader reads a held expert (a copy's
                               landing, or a home read in place), 0: its own address */
    uint8_t *home_run;      /* [L*E] run from its home by the current step: 1 read in
                               place, 2 on the CPU */
    int slots;              /* a slot space (mvm_space_info.slots): a held expert is read
                               in its slot (mvm_expert_slot), never at its own address; no
                               split (whole experts only) */
    int split_said;         /* the config module's splits, not made there, said once */
    int home_in_place;      /* the GPU reads those at their homes' device addresses
                               (view_addr), the homes not mapped at the experts' own */
    uint32_t *plan;         /* [L*E] the assign module's prefetches */
    uint64_t *layer_pages;  /* [L] the config module's budgets (UINT64_MAX: none) */
    float *theta;           /* [L] its splits: the share of a used expert's pages kept */
    double log_cpu_scale;   /* log of view.cpu_scale (mvm_resid_note_cpu) */
    mvm_resid_stats stats;
};

/* residency.c: requests x (layer * n_experts + expert) resident, on demand or as a
 * prefetch, evicting while there is no room (unless !may_evict: MVM_ERR_NOSPACE); *move
 * (move not NULL) completes when it has landed. */
mvm_status mvm_resid_request(mvm_resid *r, uint32_t x, int demand, int may_evict,
                             mvm_move **move);
/* residency_step.c: lets go of the copies a round asked for and never waited for (it
 * failed, or was released before mvm_resid_hold_round); they land as they would. */
void mvm_resid_drop_moves(mvm_resid *r);

#endif
