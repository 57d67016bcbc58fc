/* Model data the predict modules need in `moevm sim` (tools/sim_inputs.c). */
#ifndef MVM_TOOLS_SIM_INPUTS_H
#define MVM_TOOLS_SIM_INPUTS_H

#include <stddef.h>
#include <stdint.h>

#include "moevm/moevm.h"
#include "tools/trace.h"

typedef struct mvm_sim_inputs {
    uint32_t n_layers;
    float **routers;          /* [L] -> [E][n_embd], or NULL */
    float **router_bias;      /* [L] -> [E] (gpt-oss's blk.N.ffn_gate_inp.bias), or NULL */
    void *predictor;          /* a train-predictor file's bytes, or NULL */
    size_t predictor_size;
} mvm_sim_inputs;

/* Every MoE layer's router (blk.N.ffn_gate_inp.weight, f32) of the GGUF at path, and its
 * bias where the file has one (blk.N.ffn_gate_inp.bias, f32), checked against the trace's
 * shape. */
mvm_status mvm_sim_load_routers(const char *path, const mvm_trace *t, mvm_sim_inputs *in);
/* The bytes of a predictor file (the learned module validates them). */
mvm_status mvm_sim_load_predictor(const char *path, mvm_sim_inputs *in);
void mvm_sim_inputs_free(mvm_sim_inputs *in);

#endif
