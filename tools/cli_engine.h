/*
 * The options `moevm chat` and `moevm serve` share: the model and where it runs (fields of
 * the engine API's mvm_engine_params) and how replies are sampled, in llama.cpp's spellings
 * where it has them. A command puts the rows in its option table and passes each option
 * found to mvm_cli_engine_option first.
 */
#ifndef MVM_TOOLS_CLI_ENGINE_H
#define MVM_TOOLS_CLI_ENGINE_H

#include "engine/forward/sampler.h"
#include "moevm/engine.h"
#include "tools/cli.h"
#include "tools/cli_grammar.h"
#include "tools/cli_meta.h"
#include "tools/cli_template.h"
#include "tools/cli_sampling.h"

enum {
    MVM_CLI_E_MODEL = 1000, MVM_CLI_E_THREADS, MVM_CLI_E_CTX, MVM_CLI_E_BATCH,
    MVM_CLI_E_BUDGET, MVM_CLI_E_NGL, MVM_CLI_E_KV, MVM_CLI_E_EVICT, MVM_CLI_E_PREDICT,
    MVM_CLI_E_ROUTE, MVM_CLI_E_CONFIG, MVM_CLI_E_ASSIGN, MVM_CLI_E_COST,
    MVM_CLI_E_NPREDICT, MVM_CLI_E_TEMP, MVM_CLI_E_TOPK, MVM_CLI_E_TOPP, MVM_CLI_E_MINP,
    MVM_CLI_E_SEED, MVM_CLI_E_REPEAT, MVM_CLI_E_REPEAT_N, MVM_CLI_E_IGNORE_EOS,
    MVM_CLI_E_CPU_MOE, MVM_CLI_E_LAST
};

/* The rows, for a command's mvm_cli_opt table. */
#define MVM_CLI_ENGINE_OPTS                                                                     \
    {"model", 'm', 1, MVM_CLI_E_MODEL}, {"threads", 't', 1, MVM_CLI_E_THREADS},                 \
    {"ctx-size", 'c', 1, MVM_CLI_E_CTX}, {"ctx", 0, 1, MVM_CLI_E_CTX},                          \
    {"batch-size", 'b', 1, MVM_CLI_E_BATCH}, {"batch", 0, 1, MVM_CLI_E_BATCH},                  \
    {"gpu-budget", 0, 1, MVM_CLI_E_BUDGET},                                                     \
    MVM_CLI_GPU_OPTS(MVM_CLI_E_NGL, MVM_CLI_E_CPU_MOE, MVM_CLI_E_KV),                           \
    {"kv-type", 0, 1, MVM_CLI_E_KV},                                                            \
    {"evict", 0, 1, MVM_CLI_E_EVICT}, {"predict", 0, 1, MVM_CLI_E_PREDICT},                     \
    {"route", 0, 1, MVM_CLI_E_ROUTE}, {"config", 0, 1, MVM_CLI_E_CONFIG},                       \
    {"assign", 0, 1, MVM_CLI_E_ASSIGN}, {"cost", 0, 1, MVM_CLI_E_COST},                         \
    {NULL, 'n', 1, MVM_CLI_E_NPREDICT}, {"n-predict", 0, 1, MVM_CLI_E_NPREDICT},                \
    {"temp", 0, 1, MVM_CLI_E_TEMP}, {"top-k", 0, 1, MVM_CLI_E_TOPK},                            \
    {"top-p", 0, 1, MVM_CLI_E_TOPP}, {"min-p", 0, 1, MVM_CLI_E_MINP},                           \
    {"seed", 's', 1, MVM_CLI_E_SEED}, {"repeat-penalty", 0, 1, MVM_CLI_E_REPEAT},              \
    {"repeat-last-n", 0, 1, MVM_CLI_E_REPEAT_N}, {"ignore-eos", 0, 0, MVM_CLI_E_IGNORE_EOS},  \
    MVM_CLI_TEMPLATE_OPTS, MVM_CLI_GRAMMAR_OPTS, MVM_CLI_SAMPLING_OPTS, MVM_CLI_META_OPTS

typedef struct mvm_cli_engine {
    mvm_engine_params p;
    mvm_sampler_params s;
    int32_t n_predict; /* tokens a reply may take; -1: until it ends or the context is full */
    int ignore_eos;    /* end-of-generation tokens are never sampled */
    mvm_cli_template tmpl;     /* the chat template in place of the model's, its variables */
    mvm_cli_grammar grammar;   /* --grammar, --json-schema: every reply's constraint */
    mvm_cli_sampling sampling; /* llama.cpp's other sampling options, in s once loaded */
    mvm_dry_breakers *breakers; /* DRY's, made at the load; NULL without DRY */
    mvm_cli_meta meta;          /* --override-kv, the RoPE options: p's at the load */
} mvm_cli_engine;

/* The defaults: llama.cpp's sampling (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05,
 * no repetition penalty over the last 64), seed 42, replies until they end. */
void mvm_cli_engine_init(mvm_cli_engine *e);
/* Frees what the options and the load made (the grammar, DRY's breakers). */
void mvm_cli_engine_free(mvm_cli_engine *e);
/* it->id one of the rows: applied, 0; 2 after a one-line error; -1 when it is not one. */
int mvm_cli_engine_option(const mvm_cli_iter *it, mvm_cli_engine *e);
/* After the last option: -1 to go on; 2 after a one-line error (no -m, both --gpu-budget
 * and --n-cpu-moe, or a grammar that cannot be read or parsed). */
int mvm_cli_engine_check(const char *cmd, mvm_cli_engine *e);
/* The rows' help lines. */
void mvm_cli_engine_usage(FILE *f);
/* Loads e->p's model with a progress line, and says on stderr what was loaded; with
 * e->tmpl's template, that one in place of the model's (a file read first, so a missing one
 * fails before the load); the sampling options then complete e->s (the context known), and
 * DRY's breakers are made (e->breakers: mvm_cli_engine_free). 0; or, after "moevm <cmd>:
 * ...", 2 for a template that cannot be read, 1 for any other failure (*out then NULL). */
int mvm_cli_engine_load(const char *cmd, mvm_cli_engine *e, mvm_engine **out);
/* The tokens a[0..na) and b[0..nb) share at their start. */
uint32_t mvm_cli_common_prefix(const int32_t *a, uint32_t na, const int32_t *b, uint32_t nb);
/* Evaluates tokens[0..n) after sequence seq's cached positions a batch (-b) at a time, so
 * that Ctrl-C stops it between two (mvm_cli_interrupted; engine.h evaluates a call whole):
 * *done, the tokens evaluated, is n unless it did, and the batches done stay cached.
 * logits: the last token's n_vocab floats, or with all_logits every token's (n rows, as
 * far as *done); NULL for none. On a failure *done counts the batches before it. */
mvm_status mvm_cli_eval_prompt(mvm_engine *e, uint32_t seq, const int32_t *tokens, uint32_t n,
                               float *logits, int all_logits, uint32_t *done);
/* Keeps in sequence seq of e, whose cache holds cached[0..n_cached), what prompt[0..n)
 * (n >= 1) starts with, but its last token (whose logits are wanted); the positions kept:
 * fewer where a sliding-window ring no longer holds their window (mvm_engine_truncate). */
uint32_t mvm_cli_keep_prefix(mvm_engine *e, uint32_t seq, const int32_t *prompt, uint32_t n,
                             const int32_t *cached, uint32_t n_cached);
/* Evaluates prompt[0..n) (n >= 1) in sequence seq of e, whose cache holds
 * cached[0..*n_cached): only what follows their common prefix, and at least the last token
 * (its logits are wanted), by mvm_cli_eval_prompt; cached then holds the prompt. *reused:
 * the prompt's tokens not evaluated. On a failure, and after Ctrl-C (MVM_ERR_CANCELLED), the
 * sequence and cached hold the common prefix alone: the prompt's own tokens are dropped. */
mvm_status mvm_cli_prefill(mvm_engine *e, uint32_t seq, int32_t *cached, uint32_t *n_cached,
                           const int32_t *prompt, uint32_t n, float *logits, uint32_t *reused);

/* The control tokens among the markup that a chat reply's reader sees (its syntax's,
 * engine/chat/chat_reply.h, found from e's template, and <think>, </think>): a reply's
 * text must keep their texts, which decoding drops (llama.cpp's preserved tokens). Into
 * ids[0..cap); the count. */
uint32_t mvm_cli_reply_markers(const mvm_engine *e, int32_t *ids, uint32_t cap);
/* Token id's bytes into buf[0..cap) (mvm_engine_token_piece), a control token among
 * keep[0..n_keep) as its text; the length, at most cap. */
size_t mvm_cli_reply_piece(const mvm_engine *e, int32_t id, const int32_t *keep,
                           uint32_t n_keep, char *buf, size_t cap);

#endif
