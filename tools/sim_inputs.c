/*
 * What `moevm sim` and `moevm run` read for the policies: a model's router weights (for the
 * gate and residual predictors), a trained predictor's file (for learned) and a routing
 * profile (for config hot). The simulator and the policies do no I/O; these do, and check
 * what they read against the trace's shape.
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
    free((uint64_t *)in->profile.counts);
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

mvm_status mvm_sim_load_profile(const char *path, mvm_sim_inputs *in)
{
    mvm_trace *t;
    mvm_status st = mvm_trace_load(path, &t);
    if (st != MVM_OK)
        return st;
    const uint32_t L = t->hdr.n_layers, E = t->hdr.n_experts, K = t->hdr.top_k;
    uint64_t *counts = calloc((size_t)L * E, sizeof *counts);
    if (!counts)
        st = mvm_fail(MVM_ERR_NOMEM, "out of memory for the profile of %s", path);
    else if (!t->n_tokens)
        st = mvm_fail(MVM_ERR_INVALID, "%s: no tokens to profile", path);
    for (uint32_t i = 0; st == MVM_OK && i < t->n_tokens; i++)
        for (uint32_t l = 0; l < L; l++)
            for (uint32_t k = 0; k < K; k++)
                counts[(size_t)l * E + (uint32_t)mvm_trace_experts(t, i, l)[k]]++;
    if (st == MVM_OK)
        in->profile = (mvm_pprofile){.n_layers = L, .n_experts = E, .n_tokens = t->n_tokens,
                                     .counts = counts};
    else
        free(counts);
    mvm_trace_free(t);
    return st;
}
