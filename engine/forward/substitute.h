/*
 * The engine's route role (docs/engine.md, "Experts in the space"): after a layer's router has
 * chosen its experts, the route module (MOEVM_ROUTE; policy/: `importance`, SMoE's
 * substitution) may run an expert that is already on the device in place of a selected one
 * that is not, for tokens where the router barely preferred the missing one. The substituted
 * experts are what the layer computes, loads and reports to the other modules; the router's
 * own choice is what a routing trace records (with the substitution beside it), so that
 * `moevm sim` replays the model, not this run's residency.
 *
 * The module sees the residency as it is when the layer routes: an expert counts as
 * resident only once its copy has landed (mvm_resid_landed_view).
 */
#ifndef MVM_ENGINE_FORWARD_SUBSTITUTE_H
#define MVM_ENGINE_FORWARD_SUBSTITUTE_H

#include <stdint.h>

#include "engine/forward/residency.h"

typedef struct mvm_substitutor mvm_substitutor;

typedef struct mvm_route_params {
    const char *route;          /* the module; "none": the router's choice stands; NULL:
                                   MOEVM_ROUTE */
    const char *route_args;     /* its parameters (NULL: none, or MOEVM_ROUTE_ARGS) */
} mvm_route_params;

/* *out is NULL (and MVM_OK) for "none". MVM_ERR_INVALID naming the module or its
 * parameter; MVM_ERR_OPTION for a malformed MOEVM_ROUTE[_ARGS]. */
mvm_status mvm_substitutor_create(mvm_resid *resid, const mvm_route_params *p,
                                  mvm_substitutor **out);
void mvm_substitutor_destroy(mvm_substitutor *s);
/* "none" for NULL. */
const char *mvm_substitutor_name(const mvm_substitutor *s);
/* Lets the module rewrite step->experts and step->weights (n_tok rows of top_k) against
 * the residency of step->layer; returns the substitutions made. NULL: none. */
uint32_t mvm_substitutor_route(mvm_substitutor *s, mvm_pstep *step);
/* Substitutions since creation. */
uint64_t mvm_substitutor_count(const mvm_substitutor *s);

#endif
