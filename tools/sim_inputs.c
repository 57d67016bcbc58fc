/*
 * What `moevm sim` reads besides the trace: a model's router weights (for the gate and
 * residual predictors) and a trained predictor's file (for learned). The simulator and the
 * policies do no I/O; these do, and check what they read against the trace's shape.
 */
#include "tools/sim_inputs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/error.h"

void mvm_sim_inputs_free(mvm_sim_inputs *in)
{
    mvm_model_router_free(&in->router);
    mvm_model_free(in->model);
    free(in->predictor);
    *in = (mvm_sim_inputs){0};
}

mvm_status mvm_sim_load_routers(const char *path, const mvm_trace *t, mvm_sim_inputs *in)
{
    mvm_status st = mvm_model_probe(path, &in->model);
    if (st != MVM_OK)
        return st;
    const mvm_hparams *hp = &in->model->hp;
    const mvm_trace_header *h = &t->hdr;
    if (hp->n_layer != h->n_layers || hp->n_expert != h->n_experts || hp->n_embd != h->n_embd)
        return mvm_fail(MVM_ERR_INVALID, "%s: %u MoE layers x %u experts, %u wide; the trace "
                        "has %u x %u, %u wide (is this the model that recorded it?)", path,
                        hp->n_layer, hp->n_expert, hp->n_embd, h->n_layers, h->n_experts,
                        h->n_embd);
    return mvm_model_router_init(in->model, 1, &in->router);
}

mvm_status mvm_sim_load_predictor(const char *path, mvm_sim_inputs *in)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return mvm_fail(MVM_ERR_INVALID, "%s: cannot open: %s", path, strerror(errno));
    mvm_status st = MVM_OK;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n <= 0 || fseek(f, 0, SEEK_SET) != 0)
        st = mvm_fail(MVM_ERR_INVALID, "%s: empty or unreadable", path);
    else if (!(in->predictor = malloc((size_t)n)))
        st = mvm_fail(MVM_ERR_NOMEM, "out of memory for %s", path);
    else if (fread(in->predictor, 1, (size_t)n, f) != (size_t)n)
        st = mvm_fail(MVM_ERR_INVALID, "%s: short read", path);
    else
        in->predictor_size = (size_t)n;
    fclose(f);
    return st;
}
