/*
 * The engine's predict role (docs/engine.md, "Experts in the space"): while a layer's experts
 * compute, the predict module (MOEVM_PREDICT: gate, residual, learned; policy/) forecasts
 * which experts the next layer will route to, and the most likely of them, up to top_k, are
 * prefetched through the residency manager, so their copies overlap this layer's compute.
 * Experts no token is predicted to use are never prefetched. When the next layer routes
 * (mvm_prefetcher_cut), the copies that have not started and that it does not use are
 * taken back: left queued they would go out after the layer they were for, while its own
 * misses need the bus (in the simulator, on a 6-block OLMoE-1B-7B shape's own routing at
 * 25%, the gate forecast's prefetches cost 12% left, 4% taken back, and an exact forecast
 * keeps its gain either way: docs/perf/engine.md, session 81). After the layer, the module
 * observes the real routing (the residual predictor calibrates on it).
 *
 * MOEVM_PREFETCH=window is MoEpic's speculative prefetcher (§3.3, the protocol of its
 * Fig. 3d): the experts the module ranks (its rank op, the router's probabilities: Eq. 3;
 * else those its forecast names) are asked for, most likely first, each only its pages not
 * resident (under config fixedpoint's split, the bottom), while the buffer holds them:
 * top_k experts' pages, MoEpic's U_b = K (so more than top_k bottoms fit), taken from the
 * free pages (the buffer is not cache: a window copy evicts nothing, and one its layer does
 * not use goes when the layer ends); when the layer routes (mvm_prefetcher_cut) the copies
 * that have not started are taken back, and the experts the router chose load on demand.
 * "Terminate prefetching" is read as issuing no more: a copy already running lands.
 *
 * As the simulator does when no assign module plans prefetches (tools/sim.c), one layer
 * ahead, from the layer's MoE input (its router's input). On the GPU pass the assign
 * module sees the forecasts first, up to MVM_ASSIGN_AHEAD layers ahead, and a module that
 * plans prefetches itself (presched) replaces these.
 */
#ifndef MVM_ENGINE_FORWARD_PREFETCH_H
#define MVM_ENGINE_FORWARD_PREFETCH_H

#include <stddef.h>

#include "engine/forward/residency.h"
#include "engine/model/model.h"

typedef struct mvm_prefetcher mvm_prefetcher;

typedef struct mvm_prefetch_params {
    const char *predict;        /* the module; "none" for no prefetching; NULL: MOEVM_PREDICT */
    const char *predict_args;   /* its parameters (NULL: none, or MOEVM_PREDICT_ARGS) */
    const void *predictor;      /* predict learned: a `moevm train-predictor` file's bytes */
    size_t predictor_size;
} mvm_prefetch_params;

/* *out is NULL (and MVM_OK) when the module is "none". MVM_ERR_INVALID naming the module
 * or its parameter. router: the model's routers (F32 weights, mvm_model_routers_f32) and
 * how they choose, which gate and residual read (NULL or no weights: none); learned reads
 * the predictor. */
mvm_status mvm_prefetcher_create(const mvm_model *m, mvm_resid *resid, const mvm_router *router,
                                 const mvm_prefetch_params *p, mvm_prefetcher **out);
void mvm_prefetcher_destroy(mvm_prefetcher *p);
const char *mvm_prefetcher_name(const mvm_prefetcher *p);
/* Layer step->layer has routed (step->hidden: its MoE input, step->n_tok rows): prefetch
 * the most likely experts of the next layer, from the forecast mvm_prefetcher_predict
 * made for this step if it made one, else from one made now. Fails only on a failed
 * copy. */
mvm_status mvm_prefetcher_ahead(mvm_prefetcher *p, const mvm_pstep *step);
/* The module's forecasts for layers step->layer + 1 .. + max_ahead (at most
 * MVM_ASSIGN_AHEAD; fewer where the model or the module's reach ends): *ahead = [n][E]
 * probabilities, valid until the next call; returns n (0 and NULL without a module). */
uint32_t mvm_prefetcher_predict(mvm_prefetcher *p, const mvm_pstep *step, uint32_t max_ahead,
                                const float **ahead);
/* Layer step->layer has routed (before its experts are requested): the forecast's copies
 * for it that have not started and that it does not use are taken back. */
void mvm_prefetcher_cut(mvm_prefetcher *p, const mvm_pstep *step);
/* The layer's real routing, after it ran. */
void mvm_prefetcher_observe(mvm_prefetcher *p, const mvm_pstep *step);
/* Whether the module predicts from step->next_hidden (policy.h: SMoE's speculative pass,
 * which the backend runs before asking mvm_prefetcher_ahead); 0 without a module. */
int mvm_prefetcher_speculative(const mvm_prefetcher *p);
/* Whether it prefetches MoEpic's window (MOEVM_PREFETCH=window), whose copies a step that
 * does not use them evicts; 0 without a module. */
int mvm_prefetcher_window(const mvm_prefetcher *p);

/* How good the forecasts were, whatever the residency: of the experts named (the most
 * likely, up to top_k per forecast, in the window too), how many the next layer's routing
 * then used. */
typedef struct mvm_prefetch_stats {
    uint64_t forecasts;         /* forecasts made (mvm_prefetcher_ahead) */
    uint64_t named;             /* experts they named */
    uint64_t named_used;        /* of them, routed to by that layer's step */
} mvm_prefetch_stats;
void mvm_prefetcher_get_stats(const mvm_prefetcher *p, mvm_prefetch_stats *out);

#endif
