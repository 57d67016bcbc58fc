/*
 * The host side of an MoE layer step, the same whichever backend computes (forward_cpu.c,
 * forward_cuda.c): the router's probabilities to each token's top-k, what the route module
 * makes of them, the route observer, the (token, expert) rows grouped by expert, and the
 * residency of the step's experts with the predictor's prefetch of the next layer.
 *
 * A step, for n tokens of `layer`:
 *   1. the backend writes the router's logits into probs ([n][n_expert]);
 *   2. mvm_moe_route() turns them into the routing and the grouped rows;
 *   3. mvm_moe_begin() makes the experts resident (or not, see wait) and pins them;
 *   4. the backend computes the experts through their fixed addresses;
 *   5. mvm_moe_end(), once that computation is over, reports the step and unpins them.
 */
#ifndef MVM_ENGINE_MOE_STEP_H
#define MVM_ENGINE_MOE_STEP_H

#include <stdint.h>

#include "engine/forward.h"

typedef struct mvm_moe {
    mvm_model *m;
    mvm_resid *resid;
    mvm_prefetcher *prefetch;
    mvm_substitutor *subst;
    float *router_table;        /* the routers as F32, when a predict or config module runs */
    const float **routers;      /* [n_layer] into router_table */
    int wait;                   /* mvm_resid_begin's: the reader needs the copies landed */
    uint32_t n_batch;
    float *probs;               /* [n_batch][n_expert]: the router's logits, then softmax */
    int *sel;                   /* [n_batch][K] the experts that run, best first */
    float *selw;                /* [n_batch][K] their weights */
    int *sel0;                  /* [n_batch][K] the router's own choice and weights, kept */
    float *selw0;               /*   for observers when the route module changed them */
    /* The step's rows: (token, expert) pairs grouped by expert, expert e's at off[e] ..
     * off[e] + cnt[e] - 1; row r is token row_tok[r] with weight row_w[r]; token i's k-th
     * choice is row tok_rows[i * K + k]. */
    uint32_t *cnt, *off, *row_tok, *tok_rows; /* [n_expert] x2, [n_batch * K] x2 */
    float *row_w;                             /* [n_batch * K] */
    int32_t *active;            /* the distinct experts of the step, ascending */
    uint32_t n_active;
    mvm_pstep step;             /* the step as the policy modules see it */
    mvm_status ahead;           /* the prefetcher's status, reported at the step's end */
    mvm_route_fn obs;
    void *obs_ctx;
} mvm_moe;

/* device_reader: the experts are read by a device that cannot read a non-resident expert's
 * home (mvm_space_info.home_mapped == 0), so every step waits for its copies whatever the
 * policies say. */
mvm_status mvm_moe_create(mvm_model *m, uint32_t n_batch, const mvm_ctx_policies *policies,
                          int device_reader, mvm_moe **out);
void mvm_moe_free(mvm_moe *s);

/* Step 2, with probs holding the router's logits of n tokens; hidden: their router input
 * ([n][n_embd] floats on the host, for observers and predictors), valid until the end. */
void mvm_moe_route(mvm_moe *s, uint32_t layer, uint32_t pos0, uint32_t n,
                   const float *hidden);
/* Step 3. On failure nothing stays pinned and the step must not be ended. */
mvm_status mvm_moe_begin(mvm_moe *s);
/* Step 5: the first failure of the step (a failed prefetch included: the pass ends). */
mvm_status mvm_moe_end(mvm_moe *s);

#endif
