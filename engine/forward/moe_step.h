/*
 * The host side of an MoE layer step, the same whichever backend computes (forward_cpu.c,
 * forward_cuda.c): the router's probabilities to each token's top-k, what the route module
 * makes of them, the route observer, the (token, expert) rows grouped by expert, and the
 * residency of the step's experts with the prefetches ahead: the assign module's plan
 * (made with the predictor's forecasts) on a device, else the predictor's own.
 *
 * A step, for n tokens of `layer`:
 *   1. the backend writes the router's logits into probs ([n][n_expert]);
 *   2. mvm_moe_route() turns them into the routing and the grouped rows;
 *   3. mvm_moe_begin() places the experts (on a device, by the assign module: the GPU
 *      computes todo, the CPU cpu), makes the GPU's resident (or not, see wait) and pins
 *      them: all of them, or on a device that cannot read the homes, whose budget may not
 *      hold them together, the first round of them (round[0..n_round)), of which only
 *      round[0..n_ready) need be landed: the others' copies are asked, not waited for;
 *   4. the backend computes the round's ready experts through their fixed addresses and
 *      the CPU's from their homes while the others land, calls mvm_moe_hold(), computes
 *      the rest; in rounds it then, once they are done, calls mvm_moe_next_round() until
 *      n_round is 0;
 *   5. mvm_moe_end(), once that computation is over, reports the step and unpins them.
 */
#ifndef MVM_ENGINE_FORWARD_MOE_STEP_H
#define MVM_ENGINE_FORWARD_MOE_STEP_H

#include <stdint.h>

#include "engine/forward/forward.h"

typedef struct mvm_moe {
    mvm_model *m;
    mvm_resid *resid;
    mvm_prefetcher *prefetch;
    mvm_substitutor *subst;
    mvm_model_router router;    /* how the model routes: the engine's routing and the
                                   predictors' (policy/router.h); the weights as F32 when a
                                   predict or config module runs */
    int wait;                   /* mvm_resid_begin's: the step waits for its copies */
    void (*route_override)(void *, uint32_t, uint32_t, int *, float *); /* mvm_ctx_policies' */
    void *route_override_ctx;
    int on_device;              /* a GPU computes: the assign module places the experts */
    int rounds;                 /* it cannot read the homes: steps run in rounds that fit
                                   the budget (mvm_resid_begin_round) */
    int zerocopy;               /* an expert may be read in place, at its home (MVM_RUN_ZEROCOPY) */
    uint32_t n_forecast;        /* layers ahead the assign module is given forecasts of */
    uint32_t n_batch;
    float *probs;               /* [n_batch][n_expert]: the router's logits, then softmax
                                   (or sigmoid: mvm_hparams.sigmoid_gate) */
    float *choose;              /* [2][n_expert]: a token's scores as routing chooses by them,
                                   then its expert groups' */
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
    /* Experts computed elsewhere (forward.h's mvm_ctx_set_elsewhere): remote ([L*E], NULL
     * when none) marks them; the step's are left out of active and its count and follow
     * them, in active[n_active .. n_active + n_remote): only the rest is placed, pinned and
     * run here. */
    const uint8_t *remote;
    uint32_t n_remote;
    const struct mvm_elsewhere *elsewhere;
    uint8_t *where;             /* [n_expert] enum mvm_where: the assign module's places */
    const uint8_t *replay_own;  /* NULL, or for a step the device routed at a budget
                                   (mvm_moe_replay) [n_expert]: 1 where its kernels read the
                                   expert resident, 0 at its home in place, 2 where the
                                   CPU's threads ran it (MOEVM_DEVICE_CPU): its places, in
                                   the assign module's stead */
    int32_t *todo;              /* [n_expert] the experts the GPU computes (all of them on
                                   the CPU backend), in the order rounds take them */
    uint32_t n_todo;
    uint32_t n_home;            /* todo[0..n_home): read at their homes, in the first round */
    const int32_t *round;       /* those of them pinned to be computed now */
    uint32_t round_home;        /* round[0..round_home): of those read at their homes */
    uint32_t n_round, n_run;    /* their number; the todo experts computed before them */
    uint32_t n_ready;           /* round[0..n_ready) landed and pinned; the rest once
                                   mvm_moe_hold returns */
    uint8_t *landed;            /* [n_expert] when the step speculates (mvm_moe_speculates):
                                   1 for its experts that were resident as it began */
    int32_t *cpu;               /* [n_expert] the experts the device pass runs on the CPU */
    uint32_t n_cpu;
    const uint32_t *plan;       /* the assign module's prefetches (mvm_resid_assign) */
    uint32_t n_plan;
    int begun;                  /* the step's experts are pinned, until it ends */
    mvm_pstep step;             /* the step as the policy modules see it */
    mvm_status ahead;           /* the prefetcher's status, reported at the step's end */
    int serving;                /* the step is another rank's (mvm_moe_take_rows) */
    mvm_route_fn obs;
    void *obs_ctx;
} mvm_moe;

/* on_device: a GPU computes the experts, placed by the assign module (the rest run on
 * the CPU from their homes). home_mapped (mvm_space_info's): a non-resident expert's own
 * address shows its home; without it the experts loaded run in rounds that fit the budget
 * and wait for their copies. home_readable (mvm_space_info's): the device can read a home
 * in place, at its own address or its home's (what the assign module may choose,
 * MVM_RUN_ZEROCOPY); without either, what it would read there runs on the CPU. */
mvm_status mvm_moe_create(mvm_model *m, uint32_t n_batch, const mvm_ctx_policies *policies,
                          int on_device, int home_mapped, int home_readable, mvm_moe **out);
void mvm_moe_free(mvm_moe *s);

/* Step 2, with probs holding the router's logits of n tokens at positions pos[0..n) (what
 * observers see; NULL: 0 .. n - 1); hidden: their router input ([n][n_embd] floats on the
 * host, for observers and predictors), valid until the end. */
void mvm_moe_route(mvm_moe *s, uint32_t layer, const uint32_t *pos, uint32_t n,
                   const float *hidden);
/* Step 2 for a step the device routed (forward_cuda.c, moe_routed_here): as
 * mvm_moe_route, but each token's experts and weights are sel and w ([n][K], best first),
 * the device's (NULL: the host routes, which is mvm_moe_route); probs still hold the
 * logits, from which the observer's probabilities come. */
void mvm_moe_route_as(mvm_moe *s, uint32_t layer, const uint32_t *pos, uint32_t n,
                      const float *hidden, const int32_t *sel, const float *w);
/* Whether nothing but their residency lies between a step's router and its experts for
 * the host to decide: no speculative pass, no distributed mode. (A route module only
 * substitutes for experts that are not resident; a replayed trace, mvm_moe_override, is
 * known before the router runs.) */
int mvm_moe_routes_alone(const mvm_moe *s);
/* A benchmark's replayed routing (mvm_ctx_policies.route_override) of the token at pos
 * in `layer`, asked before its router has run: its K experts and weights into sel and w,
 * and 1; 0 (nothing written) without one. */
int mvm_moe_override(const mvm_moe *s, uint32_t layer, uint32_t pos, int *sel, float *w);
/* Whether a benchmark's replayed routing takes the router's place. */
int mvm_moe_overridden(const mvm_moe *s);
/* Steps 3 to 5 for a step whose experts have run already (the device routed it: every
 * one resident and pinned, or at a budget where replay_own says): begins it, takes its
 * rounds and ends it, so that the policies, the statistics and the observers see it as
 * any other. */
mvm_status mvm_moe_replay(mvm_moe *s);
/* Step 2 for a step another rank routed (the distributed mode's server, dist.h): the rows
 * of experts[0..n_exp) of `layer` for n tokens whose expert input is hidden ([n][n_embd],
 * host, valid until the end), expert e's rows at off[e] .. off[e] + cnt[e] - 1 of row_tok
 * and row_w. A token's k-th choice past its rows here is -1 in sel, MVM_MOE_NO_ROW in
 * tok_rows. The evict and config modules see the step without router scores; the predictor
 * does not (another stream's tokens, at one layer). The experts must be this process's and
 * distinct, the tokens < n: MVM_ERR_INVALID for a token with more than K rows. */
#define MVM_MOE_NO_ROW UINT32_MAX
mvm_status mvm_moe_take_rows(mvm_moe *s, uint32_t layer, uint32_t n, const float *hidden,
                             const int32_t *experts, uint32_t n_exp, const uint32_t *cnt,
                             const uint32_t *off, const uint32_t *row_tok, const float *row_w);
/* Step 3. On failure nothing stays pinned (mvm_moe_end then does nothing). */
mvm_status mvm_moe_begin(mvm_moe *s);
/* Between steps 3 and 4, with a speculative predict module (SMoE, policy.h): whether this
 * step wants the backend's speculative pass (a later MoE layer exists) ... */
int mvm_moe_speculates(const mvm_moe *s);
/* ... and its result once the shared experts and those resident at the step's start have
 * run: next_hidden ([n][n_embd]), the next layer's MoE input estimated from them; the
 * forecast made from it is prefetched (a failed copy is reported by mvm_moe_end). */
void mvm_moe_speculate(mvm_moe *s, const float *next_hidden);
/* Step 4, before the backend reads round[n_ready..n_round): waits for their copies and
 * pins them (n_ready becomes n_round). On failure the step stays begun: mvm_moe_end,
 * once what was queued is done, unpins it. */
mvm_status mvm_moe_hold(mvm_moe *s);
/* Step 4, after the round's experts have been computed: unpins them and pins the next
 * round (its ready part, as mvm_moe_begin); n_round 0 when every expert of the step has
 * run. On failure as mvm_moe_begin. */
mvm_status mvm_moe_next_round(mvm_moe *s);
/* Between steps 4 and 5, optional: the residency's policies observe the step now, while the
 * backend's kernels still run (mvm_resid_observe), not at mvm_moe_end. */
void mvm_moe_observe(mvm_moe *s);
/* Step 5: the first failure of the step (a failed prefetch included: the pass ends). */
mvm_status mvm_moe_end(mvm_moe *s);

#endif
