/*
 * Routing traces in memory, and their files (JSON Lines, docs/trace-format.md): what
 * `moevm run --trace-out` records (tools/trace_out.c), `moevm trace gen` synthesises
 * (tools/trace_gen.h) and `moevm sim` replays (tools/sim.h).
 *
 * A trace is a header plus n_tokens tokens, each a distinct (req, tok) pair, in the order in
 * which the file first mentions them; per token and MoE layer, dense rows of the router's
 * probabilities over all experts, the top_k selected experts (best first) and their
 * weights, and optionally the layer's MoE input (hidden state). Loading checks everything
 * the format promises, so the simulator and the statistics can index the arrays blindly.
 */
#ifndef MVM_TOOLS_TRACE_H
#define MVM_TOOLS_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "moevm/moevm.h"

typedef struct mvm_trace_header {
    char *model, *arch;              /* owned by the trace */
    uint32_t n_layers, n_experts, top_k;
    uint64_t expert_bytes;           /* one expert in moevm's channel-major layout */
    uint32_t n_embd, n_ff_exp;
    int weights_renormalised;        /* the selected experts' weights were rescaled to sum 1 */
    int sigmoid_scores;              /* "scores": "sigmoid" (each expert's own sigmoid, as
                                        DeepSeek-V3's and GLM-4.5's routers), not "softmax" */
} mvm_trace_header;

typedef struct mvm_trace {
    mvm_trace_header hdr;
    uint32_t n_tokens;
    uint32_t *req, *tok;             /* [n_tokens] */
    float *scores;                   /* [n_tokens][n_layers][n_experts] */
    int32_t *experts;                /* [n_tokens][n_layers][top_k], distinct, best first */
    float *weights;                  /* [n_tokens][n_layers][top_k] */
    float *hidden;                   /* [n_tokens][n_layers][n_embd]; NULL when not recorded */
} mvm_trace;

/* The rows of token i (0 <= i < n_tokens) at layer l. */
static inline size_t mvm_trace_row(const mvm_trace *t, uint32_t i, uint32_t l)
{
    return (size_t)i * t->hdr.n_layers + l;
}
static inline float *mvm_trace_scores(const mvm_trace *t, uint32_t i, uint32_t l)
{
    return t->scores + mvm_trace_row(t, i, l) * t->hdr.n_experts;
}
static inline int32_t *mvm_trace_experts(const mvm_trace *t, uint32_t i, uint32_t l)
{
    return t->experts + mvm_trace_row(t, i, l) * t->hdr.top_k;
}
static inline float *mvm_trace_weights(const mvm_trace *t, uint32_t i, uint32_t l)
{
    return t->weights + mvm_trace_row(t, i, l) * t->hdr.top_k;
}
static inline float *mvm_trace_hidden(const mvm_trace *t, uint32_t i, uint32_t l)
{
    return t->hidden + mvm_trace_row(t, i, l) * t->hdr.n_embd;
}

/* A trace of n_tokens tokens of the shape in *h (strings copied; model and arch must not be
 * NULL), every array zeroed, req 0 and tok 0, 1, ...: for generators to fill in. hidden is
 * allocated only with with_hidden. MVM_ERR_INVALID for a zero or inconsistent shape
 * (top_k > n_experts), MVM_ERR_NOMEM. */
mvm_status mvm_trace_new(const mvm_trace_header *h, uint32_t n_tokens, int with_hidden,
                         mvm_trace **out);

/* Reads and validates a trace file, one line at a time. Errors are one line,
 * "PATH:LINE: what is wrong" (MVM_ERR_INVALID; MVM_ERR_NOMEM). */
mvm_status mvm_trace_load(const char *path, mvm_trace **out);

/* Writes t in the format the engine writes (floats with as few digits as read back
 * exactly), through PATH.tmp and a rename, so a reader never sees half a file.
 * MVM_ERR_INVALID if t breaks a rule load would enforce (naming token and layer),
 * MVM_ERR_BACKEND if writing fails. */
mvm_status mvm_trace_save(const mvm_trace *t, const char *path);

/* NULL is a no-op. */
void mvm_trace_free(mvm_trace *t);

/* ---- the one writer of the format: mvm_trace_save and the engine's recorder
 *      (tools/trace_out.c) both write through these two ---- */

/* One record line. ran/ran_weights (what the route module computed instead) and hidden are
 * optional: NULL leaves the field out. */
typedef struct mvm_trace_line {
    uint32_t req, tok, layer;
    uint32_t n_experts, top_k, n_embd;
    const float *scores;             /* [n_experts] */
    const int32_t *experts;          /* [top_k] */
    const float *weights;            /* [top_k] */
    const int32_t *ran;              /* [top_k] or NULL */
    const float *ran_weights;        /* [top_k], with ran */
    const float *hidden;             /* [n_embd] or NULL */
} mvm_trace_line;

/* The header line (cJSON escapes the strings). -1 when out of memory. */
int mvm_trace_put_header(FILE *f, const mvm_trace_header *h);
/* A record line. exact: every float with as few digits as read back exactly (6 or 9);
 * otherwise 6 significant digits, enough to rank and average scores at a third of full
 * precision's size (a Qwen3-30B token is 48 lines of 128 scores). Errors show in ferror(f). */
void mvm_trace_put_line(FILE *f, const mvm_trace_line *r, int exact);

#endif
