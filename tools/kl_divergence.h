/*
 * `moevm perplexity`'s KL divergence (docs/engine.md): a base model's log-probabilities
 * saved in llama.cpp's llama-perplexity file (--kl-divergence-base), and another model's
 * distributions compared with them (--kl-divergence), the statistics llama.cpp prints.
 * The file is llama.cpp's, byte for byte, so either program reads the other's:
 *   "_logits_", i32 n_ctx, i32 n_vocab, i32 n_chunk, i32 tokens[n_chunk * n_ctx], then for
 *   each scored position (each chunk's second half but its last, chunk after chunk) a row
 *   of nv = 2 * ((n_vocab + 1) / 2) + 4 u16: f32 scale, f32 min_log_prob, then each
 *   token's log-probability as round((logit - min_logit) / scale), min_logit the largest
 *   logit less 16 (or the smallest, if higher) and 0 below it; log p = scale * q +
 *   min_log_prob.
 */
#ifndef MVM_TOOLS_KL_DIVERGENCE_H
#define MVM_TOOLS_KL_DIVERGENCE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct mvm_kld_file {
    FILE *f;
    const char *path;
    uint32_t n_ctx, n_vocab, n_chunk;
    int32_t *tokens;        /* [n_chunk * n_ctx], read from a base file */
    uint16_t *row;          /* [nv] */
    size_t nv;
    int writing;            /* created by mvm_kld_create */
} mvm_kld_file;

/* Creates path with the header and the tokens. 0, or -1 with the reason (mvm_last_error)
 * naming the file; so do the calls below. */
int mvm_kld_create(mvm_kld_file *k, const char *path, uint32_t n_ctx, uint32_t n_vocab,
                   uint32_t n_chunk, const int32_t *tokens);
/* A position's row from its logits[0..n_vocab). */
int mvm_kld_write_row(mvm_kld_file *k, const float *logits);
/* Opens a base file: its header and tokens (what it says it holds, there before any of it
 * is allocated for). */
int mvm_kld_open(mvm_kld_file *k, const char *path);
/* Whether it is the model's: its vocabulary the same size, its tokens in it. */
int mvm_kld_check_vocab(const mvm_kld_file *k, uint32_t n_vocab);
/* The next row into k->row (-1: the file ends early). */
int mvm_kld_read_row(mvm_kld_file *k);
/* Closes, the rows flushed when writing. A file being
 * written that is not to be kept (its run failed), or that could not be flushed, is
 * removed rather than left cut short. */
int mvm_kld_close(mvm_kld_file *k, int keep);

/* The comparison's sums, and each position's KLD and Δp for the percentiles. */
typedef struct mvm_kld {
    double sum_nll, sum_nll2, sum_nll_base, sum_nll_base2, sum_nll_nll_base;
    double sum_kld, sum_kld2, sum_p_diff, sum_p_diff2, sum_p_diff4;
    uint64_t n_same_top, count;
    float *kld, *p_diff;    /* [cap] */
    size_t cap;
} mvm_kld;

/* llama-perplexity's log-softmax sums of logits[0..n): the largest into *max (its first
 * index into *top), and the sum of expf(logit - largest), in double. */
double mvm_kld_sum_exp(const float *logits, uint32_t n, float *max, uint32_t *top);
/* Room for n positions; 0, or -1 without memory. */
int mvm_kld_init(mvm_kld *s, size_t n);
void mvm_kld_free(mvm_kld *s);
/* A position: the model's logits[0..n_vocab) against the base file's row for it, target
 * the token that followed; returns its negative log-likelihood under the model. */
double mvm_kld_add(mvm_kld *s, const float *logits, uint32_t n_vocab, const uint16_t *base,
                   int32_t target);
/* llama-perplexity's line after a chunk (its header before the first), and its summary. */
void mvm_kld_print_chunk(const mvm_kld *s, uint32_t chunk);
void mvm_kld_print_summary(mvm_kld *s);

#endif
