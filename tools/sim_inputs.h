/* Model data the predict modules need in `moevm sim` and `moevm run` (tools/sim_inputs.c),
 * and the config module hot's offline profile. */
#ifndef MVM_TOOLS_SIM_INPUTS_H
#define MVM_TOOLS_SIM_INPUTS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/model/model.h"
#include "moevm/moevm.h"
#include "tools/trace.h"

typedef struct mvm_sim_inputs {
    mvm_model *model;         /* the GGUF that recorded the trace, probed; or NULL */
    mvm_model_router router;  /* its routers (router.r for the predictors) */
    void *predictor;          /* a train-predictor file's bytes, or NULL */
    size_t predictor_size;
    mvm_pprofile profile;     /* --hot-profile's counts (profile.counts NULL: none) */
} mvm_sim_inputs;

/* The routers of the GGUF at path, as the engine reads them (mvm_model_router: F32 rows of
 * any type, their biases and how they choose), checked against the trace's shape. */
mvm_status mvm_sim_load_routers(const char *path, const mvm_trace *t, mvm_sim_inputs *in);
/* The bytes of a predictor file (the learned module validates them). */
mvm_status mvm_sim_load_predictor(const char *path, mvm_sim_inputs *in);
/* PreScope's Counter over a recorded trace (`moevm run --trace-out`, or `moevm trace gen`):
 * the tokens each (layer, expert) processed, for config hot's table. The trace's errors are
 * mvm_trace_load's; MVM_ERR_INVALID for a trace without tokens. */
mvm_status mvm_sim_load_profile(const char *path, mvm_sim_inputs *in);
void mvm_sim_inputs_free(mvm_sim_inputs *in);

#endif
