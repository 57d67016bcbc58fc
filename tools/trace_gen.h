/*
 * Synthetic routing traces (`moevm trace gen`) and the statistics they are built to control
 * (`moevm trace stats`), so a generated or a recorded trace can be checked against the
 * published numbers. The model of routing and where every default comes from are in
 * trace_gen.c's header.
 */
#ifndef MVM_TOOLS_TRACE_GEN_H
#define MVM_TOOLS_TRACE_GEN_H

#include <stdint.h>

#include "tools/trace.h"

typedef struct mvm_trace_gen {
    char shape[64];            /* "qwen3-30b-a3b", or "L,E,K[,EMBD,FF]" */
    mvm_trace_header hdr;      /* the shape; model NULL (generate names it), arch static */
    uint32_t tokens;           /* in all requests together, >= 1 */
    uint32_t requests;         /* 1..tokens, equal shares of the tokens */
    double skew;               /* Zipf exponent of each layer's expert popularity, 0..8 */
    double reuse;              /* P(a selection carries over to the next token), 0..1 */
    double layer_corr;         /* P(a layer's top expert follows the previous layer's), 0..1 */
    uint32_t shift_every;      /* a new task (new popularity ranking) every N tokens; 0 never */
    double drift;              /* σ of each expert's slowly drifting logit offset (the
                                  context), 0..8 nats; 0: none */
    uint32_t drift_tokens;     /* its time constant in tokens, >= 1 */
    int latent_scores;         /* 1: the scores are the softmax of the latent logits
                                  (popularity and context) without the per-token draw that
                                  selects: not a router's, the best a policy could know
                                  (the online bound of docs/perf/policies.md) */
    uint64_t seed;
} mvm_trace_gen;

/* The defaults, shape qwen3-30b-a3b. */
void mvm_trace_gen_init(mvm_trace_gen *g);
/* Sets the shape from a name (mvm_trace_gen_shape_names) or "L,E,K" with optional
 * ",EMBD,FF" (default 2048,1024); MVM_ERR_INVALID with a one-line message otherwise. */
mvm_status mvm_trace_gen_set_shape(mvm_trace_gen *g, const char *shape);
/* A named shape cut to its first `blocks` blocks, as `moevm mkmodel --layers` cuts the model
 * (so that a benchmark's trace routes the smaller file): the MoE layers are the blocks past
 * the leading dense ones. MVM_ERR_INVALID for an "L,E,K" shape or too few blocks. */
mvm_status mvm_trace_gen_cut_layers(mvm_trace_gen *g, uint32_t blocks);
/* "mixtral-8x7b, qwen3-30b-a3b, qwen1.5-moe-a2.7b, olmoe-1b-7b, deepseek-v2-lite" */
const char *mvm_trace_gen_shape_names(void);
/* A trace of g->tokens tokens; the same g gives the same trace. MVM_ERR_INVALID naming a
 * parameter out of range, MVM_ERR_NOMEM. */
mvm_status mvm_trace_generate(const mvm_trace_gen *g, mvm_trace **out);

/* Per layer, measured on any trace: */
typedef struct mvm_trace_layer_stats {
    double top_share;   /* share of selections on the layer's top ceil(E/8) experts */
    double entropy;     /* entropy of the experts' selection counts / ln E, 0..1 */
    double reuse;       /* share of a token's selections also made by the previous token of
                           its request (tok - 1) at this layer */
    double reuse8;      /* the same within the previous 8 tokens, over the tokens that have
                           8 (0 when none has) */
    double pair_share;  /* share of (layer-1 expert, layer expert) selection pairs on the top
                           20% of the E*E pairs; 0 at layer 0 */
    double follow;      /* share of tokens whose top expert is the one most often following
                           their previous-layer top expert (an in-sample lookup table, so it
                           reads high on short traces); 0 at layer 0 */
} mvm_trace_layer_stats;

/* per_layer[n_layers]; mean: the layers' mean (pair_share and follow over layers >= 1).
 * MVM_ERR_INVALID for a trace without tokens, MVM_ERR_NOMEM. */
mvm_status mvm_trace_stats(const mvm_trace *t, mvm_trace_layer_stats *per_layer,
                           mvm_trace_layer_stats *mean);

#endif
