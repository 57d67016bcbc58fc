/* Writing routing traces (trace_out.h). */
#include "tools/trace_out.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/trace.h"
#include "vmm/error.h"

struct mvm_trace_out {
    FILE *f;
    char *path;
    uint32_t req;
    bool with_hidden;
};

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
    /* The header only lends the strings to the writer: the casts never lead to a write. */
    mvm_trace_header h = {
        .model = (char *)m->name, .arch = (char *)m->arch->name, .n_layers = hp->n_layer,
        .n_experts = hp->n_expert, .top_k = hp->n_expert_used, .expert_bytes = m->expert_bytes,
        .n_embd = hp->n_embd, .n_ff_exp = hp->n_ff_exp,
        .weights_renormalised = hp->norm_topk != 0, .sigmoid_scores = hp->sigmoid_gate != 0,
    };
    if (mvm_trace_put_header(t->f, &h) != 0) {
        fclose(t->f);
        free(t->path);
        free(t);
        return mvm_fail(MVM_ERR_NOMEM, "out of memory");
    }
    *out = t;
    return MVM_OK;
}

void mvm_trace_set_request(mvm_trace_out *t, uint32_t req)
{
    t->req = req;
}

void mvm_trace_route(void *ctx, const mvm_route_record *r)
{
    mvm_trace_out *t = ctx;
    mvm_trace_line line = {
        .req = t->req, .tok = r->pos, .layer = r->layer, .n_experts = r->n_expert,
        .top_k = r->k, .n_embd = r->n_embd, .scores = r->probs, .experts = r->selected,
        .weights = r->weights, .ran = r->ran, .ran_weights = r->ran_weights,
        .hidden = t->with_hidden ? r->hidden : NULL,
    };
    mvm_trace_put_line(t->f, &line, 0);
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
