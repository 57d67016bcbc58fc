/* Writing routing traces (trace_out.h). */
#include "tools/trace_out.h"

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
            "\"expert_bytes\":%llu,\"n_embd\":%u,\"n_ff_exp\":%u,\"scores\":\"%s\","
            "\"weights_renormalised\":%s}\n", m->arch->name, hp->n_layer, hp->n_expert,
            hp->n_expert_used, (unsigned long long)m->expert_bytes, hp->n_embd, hp->n_ff_exp,
            hp->sigmoid_gate ? "sigmoid" : "softmax", hp->norm_topk ? "true" : "false");
    *out = t;
    return MVM_OK;
}

void mvm_trace_set_request(mvm_trace_out *t, uint32_t req)
{
    t->req = req;
}

/* ,"key":[n numbers]. 6 significant digits: enough to rank and average scores, a third of
 * full precision's size (a Qwen3-30B token is 48 lines of 128 scores). */
static void put_floats(FILE *f, const char *key, const float *x, uint32_t n)
{
    fprintf(f, ",\"%s\":[", key);
    for (uint32_t i = 0; i < n; i++)
        fprintf(f, i ? ",%.6g" : "%.6g", (double)x[i]);
    fputc(']', f);
}

static void put_ints(FILE *f, const char *key, const int *x, uint32_t n)
{
    fprintf(f, ",\"%s\":[", key);
    for (uint32_t i = 0; i < n; i++)
        fprintf(f, i ? ",%d" : "%d", x[i]);
    fputc(']', f);
}

void mvm_trace_route(void *ctx, const mvm_route_record *r)
{
    mvm_trace_out *t = ctx;
    fprintf(t->f, "{\"req\":%u,\"tok\":%u,\"layer\":%u", t->req, r->pos, r->layer);
    put_floats(t->f, "scores", r->probs, r->n_expert);
    put_ints(t->f, "experts", r->selected, r->k);
    put_floats(t->f, "weights", r->weights, r->k);
    if (r->ran) {
        put_ints(t->f, "ran", r->ran, r->k);
        put_floats(t->f, "ran_weights", r->ran_weights, r->k);
    }
    if (t->with_hidden)
        put_floats(t->f, "hidden", r->hidden, r->n_embd);
    fprintf(t->f, "}\n");
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
