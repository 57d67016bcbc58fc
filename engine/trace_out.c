/* Writing routing traces (trace_out.h). */
#include "engine/trace_out.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/error.h"

struct mvm_trace_out {
    FILE *f;
    char *path;
    uint32_t req;
    bool with_hidden;
};

/* JSON string body: the model name may hold anything. */
static void put_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

mvm_status mvm_trace_open(const char *path, const mvm_model *m, int with_hidden,
                          mvm_trace_out **out)
{
    *out = NULL;
    mvm_trace_out *t = calloc(1, sizeof *t);
    if (!t || !(t->path = strdup(path))) {
        free(t);
        return mvm_fail(MVM_ERR_NOMEM, "out of memory");
    }
    if (!(t->f = fopen(path, "w"))) {
        mvm_status st = mvm_fail(MVM_ERR_INVALID, "%s: cannot create: %s", path, strerror(errno));
        free(t->path);
        free(t);
        return st;
    }
    t->with_hidden = with_hidden != 0;
    const mvm_hparams *hp = &m->hp;
    fprintf(t->f, "{\"format\":\"moevm-trace\",\"version\":1,\"model\":");
    put_json_string(t->f, m->name);
    fprintf(t->f, ",\"arch\":\"%s\",\"n_layers\":%u,\"n_experts\":%u,\"top_k\":%u,"
            "\"expert_bytes\":%llu,\"n_embd\":%u,\"n_ff_exp\":%u,\"scores\":\"softmax\","
            "\"weights_renormalised\":%s}\n", m->arch->name, hp->n_layer, hp->n_expert,
            hp->n_expert_used, (unsigned long long)m->expert_bytes, hp->n_embd, hp->n_ff_exp,
            m->arch->norm_topk ? "true" : "false");
    *out = t;
    return MVM_OK;
}

void mvm_trace_set_request(mvm_trace_out *t, uint32_t req)
{
    t->req = req;
}

void mvm_trace_route(void *ctx, uint32_t pos, uint32_t layer, const float *probs,
                     uint32_t n_expert, const int *selected, const float *weights, uint32_t k,
                     const float *hidden, uint32_t n_embd)
{
    mvm_trace_out *t = ctx;
    /* 6 significant digits: enough to rank and average scores, a third of full precision's
     * size (a Qwen3-30B token is 48 lines of 128 scores). */
    fprintf(t->f, "{\"req\":%u,\"tok\":%u,\"layer\":%u,\"scores\":[", t->req, pos, layer);
    for (uint32_t e = 0; e < n_expert; e++)
        fprintf(t->f, e ? ",%.6g" : "%.6g", (double)probs[e]);
    fprintf(t->f, "],\"experts\":[");
    for (uint32_t i = 0; i < k; i++)
        fprintf(t->f, i ? ",%d" : "%d", selected[i]);
    fprintf(t->f, "],\"weights\":[");
    for (uint32_t i = 0; i < k; i++)
        fprintf(t->f, i ? ",%.6g" : "%.6g", (double)weights[i]);
    if (t->with_hidden) {
        fprintf(t->f, "],\"hidden\":[");
        for (uint32_t d = 0; d < n_embd; d++)
            fprintf(t->f, d ? ",%.6g" : "%.6g", (double)hidden[d]);
    }
    fprintf(t->f, "]}\n");
}

mvm_status mvm_trace_close(mvm_trace_out *t)
{
    if (!t)
        return MVM_OK;
    int bad = ferror(t->f);
    bad |= fclose(t->f) != 0;
    mvm_status st = bad ? mvm_fail(MVM_ERR_BACKEND, "%s: writing the trace failed: %s", t->path,
                                   strerror(errno))
                        : MVM_OK;
    free(t->path);
    free(t);
    return st;
}
