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

#include "engine/gguf.h"
#include "vmm/error.h"

void mvm_sim_inputs_free(mvm_sim_inputs *in)
{
    for (uint32_t l = 0; l < in->n_layers; l++) {
        free(in->routers ? in->routers[l] : NULL);
        free(in->router_bias ? in->router_bias[l] : NULL);
    }
    free(in->routers);
    free(in->router_bias);
    free(in->predictor);
    *in = (mvm_sim_inputs){0};
}

/* Layer l's router bias into in->router_bias, where the file has one. */
static mvm_status load_bias(const mvm_gguf *g, const char *path, uint32_t l, uint32_t E,
                            mvm_sim_inputs *in)
{
    char name[64];
    snprintf(name, sizeof name, "blk.%u.ffn_gate_inp.bias", l);
    const mvm_gguf_tensor *b = mvm_gguf_find_tensor(g, name);
    if (!b)
        return MVM_OK;
    if (b->type != MVM_GGML_F32 || b->n_dims != 1 || b->ne[0] != E)
        return mvm_fail(MVM_ERR_INVALID, "%s: %s is %s [%llu]; the trace needs f32 [%u]", path,
                        name, mvm_ggml_type_name(b->type), (unsigned long long)b->ne[0], E);
    if (!in->router_bias && !(in->router_bias = calloc(in->n_layers, sizeof *in->router_bias)))
        return mvm_fail(MVM_ERR_NOMEM, "out of memory");
    if (!(in->router_bias[l] = malloc(E * sizeof(float))))
        return mvm_fail(MVM_ERR_NOMEM, "out of memory");
    memcpy(in->router_bias[l], b->data, E * sizeof(float));
    return MVM_OK;
}

mvm_status mvm_sim_load_routers(const char *path, const mvm_trace *t, mvm_sim_inputs *in)
{
    mvm_gguf *g;
    mvm_status st = mvm_gguf_open(path, &g);
    if (st != MVM_OK)
        return st;
    const uint32_t L = t->hdr.n_layers, E = t->hdr.n_experts, D = t->hdr.n_embd;
    in->n_layers = L;
    in->routers = calloc(L, sizeof *in->routers);
    if (!in->routers)
        st = mvm_fail(MVM_ERR_NOMEM, "out of memory");
    for (uint32_t l = 0; l < L && st == MVM_OK; l++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%u.ffn_gate_inp.weight", l);
        const mvm_gguf_tensor *w = mvm_gguf_find_tensor(g, name);
        if (!w)
            st = mvm_fail(MVM_ERR_INVALID, "%s: no tensor %s (the trace has %u MoE layers)", path,
                          name, L);
        else if (w->type != MVM_GGML_F32 || w->ne[0] != D || w->ne[1] != E)
            st = mvm_fail(MVM_ERR_INVALID, "%s: %s is %s [%llu, %llu]; the trace needs f32 "
                          "[%u, %u] (is this the model that recorded it?)", path, name,
                          mvm_ggml_type_name(w->type), (unsigned long long)w->ne[0],
                          (unsigned long long)w->ne[1], D, E);
        else if (!(in->routers[l] = malloc((size_t)E * D * sizeof(float))))
            st = mvm_fail(MVM_ERR_NOMEM, "out of memory");
        else
            memcpy(in->routers[l], w->data, (size_t)E * D * sizeof(float));
        if (st == MVM_OK)
            st = load_bias(g, path, l, E, in);
    }
    mvm_gguf_close(g);
    return st;
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
