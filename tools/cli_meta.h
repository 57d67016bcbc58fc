/*
 * llama.cpp's options that change what a model file says before it is read: --override-kv
 * KEY=TYPE:VALUE[,...] (a metadata value in place of the file's: `qwen3moe.expert_used_count=
 * int:10` routes each token to 10 experts) and the rotary embedding's context extension
 * (--rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 32768: Qwen3's 128K context). `run`,
 * `chat`, `serve` and `perplexity` put the rows in their option tables and pass each option
 * to mvm_cli_meta_option (llama-bench takes neither).
 */
#ifndef MVM_TOOLS_CLI_META_H
#define MVM_TOOLS_CLI_META_H

#include <stdio.h>

#include "moevm/engine.h"
#include "tools/cli.h"

enum {
    MVM_CLI_M_KV = 1300, MVM_CLI_M_SCALING, MVM_CLI_M_SCALE, MVM_CLI_M_FREQ_BASE,
    MVM_CLI_M_FREQ_SCALE, MVM_CLI_M_ORIG_CTX, MVM_CLI_M_EXT, MVM_CLI_M_ATTN, MVM_CLI_M_BETA_FAST,
    MVM_CLI_M_BETA_SLOW,
};

#define MVM_CLI_META_OPTS                                                                       \
    {"override-kv", 0, 1, MVM_CLI_M_KV}, {"rope-scaling", 0, 1, MVM_CLI_M_SCALING},            \
    {"rope-scale", 0, 1, MVM_CLI_M_SCALE}, {"rope-freq-base", 0, 1, MVM_CLI_M_FREQ_BASE},      \
    {"rope-freq-scale", 0, 1, MVM_CLI_M_FREQ_SCALE},                                            \
    {"yarn-orig-ctx", 0, 1, MVM_CLI_M_ORIG_CTX}, {"yarn-ext-factor", 0, 1, MVM_CLI_M_EXT},     \
    {"yarn-attn-factor", 0, 1, MVM_CLI_M_ATTN}, {"yarn-beta-fast", 0, 1, MVM_CLI_M_BETA_FAST}, \
    {"yarn-beta-slow", 0, 1, MVM_CLI_M_BETA_SLOW}

#define MVM_CLI_MAX_OVERRIDES 64

typedef struct mvm_cli_meta {
    char *kv[MVM_CLI_MAX_OVERRIDES]; /* --override-kv's specs, one each, in order */
    uint32_t n_kv;
    mvm_rope_params rope;
} mvm_cli_meta;

/* Option id (one of the rows) into m: 0, or 2 after a one-line error; -1 when it is not one
 * of them. A spec that does not parse is refused here, before the model is read. */
int mvm_cli_meta_option(const char *cmd, const mvm_cli_iter *it, mvm_cli_meta *m);
/* m's overrides and RoPE options into p (which then points into m). */
void mvm_cli_meta_params(const mvm_cli_meta *m, mvm_engine_params *p);
/* The rows' help lines. */
void mvm_cli_meta_usage(FILE *f);
void mvm_cli_meta_free(mvm_cli_meta *m);

#endif
