/*
 * The sampling options of llama.cpp's tools beyond temperature, top-k, top-p, min-p and the
 * repetition penalty (which each command had already): the frequency and presence
 * penalties, DRY, top-n-sigma, typical, XTC, the dynamic temperature and Mirostat, in
 * llama.cpp's spellings and with its defaults. `run`, `chat` and `serve` put the rows in
 * their option tables and pass each option to mvm_cli_sampling_option.
 */
#ifndef MVM_TOOLS_CLI_SAMPLING_H
#define MVM_TOOLS_CLI_SAMPLING_H

#include <stdio.h>

#include "moevm/engine.h"
#include "tools/cli.h"

enum {
    MVM_CLI_S_FREQ = 1200, MVM_CLI_S_PRESENCE, MVM_CLI_S_DRY_MULT, MVM_CLI_S_DRY_BASE,
    MVM_CLI_S_DRY_ALLOWED, MVM_CLI_S_DRY_LAST_N, MVM_CLI_S_DRY_BREAKER, MVM_CLI_S_SIGMA,
    MVM_CLI_S_TYPICAL, MVM_CLI_S_XTC_P, MVM_CLI_S_XTC_T, MVM_CLI_S_DYNATEMP,
    MVM_CLI_S_DYNATEMP_EXP, MVM_CLI_S_MIROSTAT, MVM_CLI_S_MIROSTAT_LR, MVM_CLI_S_MIROSTAT_ENT,
    MVM_CLI_S_SAMPLERS, MVM_CLI_S_SEQ, MVM_CLI_S_THINK, MVM_CLI_S_THINK_MSG, MVM_CLI_S_ESCAPE,
    MVM_CLI_S_NO_ESCAPE,
};

#define MVM_CLI_SAMPLING_OPTS                                                                   \
    {"frequency-penalty", 0, 1, MVM_CLI_S_FREQ}, {"presence-penalty", 0, 1, MVM_CLI_S_PRESENCE}, \
    {"dry-multiplier", 0, 1, MVM_CLI_S_DRY_MULT}, {"dry-base", 0, 1, MVM_CLI_S_DRY_BASE},        \
    {"dry-allowed-length", 0, 1, MVM_CLI_S_DRY_ALLOWED},                                        \
    {"dry-penalty-last-n", 0, 1, MVM_CLI_S_DRY_LAST_N},                                         \
    {"dry-sequence-breaker", 0, 1, MVM_CLI_S_DRY_BREAKER},                                      \
    {"top-nsigma", 0, 1, MVM_CLI_S_SIGMA}, {"top-n-sigma", 0, 1, MVM_CLI_S_SIGMA},              \
    {"typical", 0, 1, MVM_CLI_S_TYPICAL}, {"typical-p", 0, 1, MVM_CLI_S_TYPICAL},               \
    {"xtc-probability", 0, 1, MVM_CLI_S_XTC_P}, {"xtc-threshold", 0, 1, MVM_CLI_S_XTC_T},       \
    {"dynatemp-range", 0, 1, MVM_CLI_S_DYNATEMP}, {"dynatemp-exp", 0, 1, MVM_CLI_S_DYNATEMP_EXP}, \
    {"mirostat", 0, 1, MVM_CLI_S_MIROSTAT}, {"mirostat-lr", 0, 1, MVM_CLI_S_MIROSTAT_LR},       \
    {"mirostat-ent", 0, 1, MVM_CLI_S_MIROSTAT_ENT}, {"samplers", 0, 1, MVM_CLI_S_SAMPLERS},     \
    {"sampling-seq", 0, 1, MVM_CLI_S_SEQ}, {"sampler-seq", 0, 1, MVM_CLI_S_SEQ},               \
    {"reasoning-budget", 0, 1, MVM_CLI_S_THINK},                                                \
    {"reasoning-budget-message", 0, 1, MVM_CLI_S_THINK_MSG}, MVM_CLI_ESCAPE_OPTS

/* llama.cpp's -e / --escape (its default) and --no-escape (mvm_cli_unescape): also in
 * `perplexity`'s table, for its text. */
#define MVM_CLI_ESCAPE_OPTS                                                                     \
    {NULL, 'e', 0, MVM_CLI_S_ESCAPE}, {"escape", 0, 0, MVM_CLI_S_ESCAPE},                       \
    {"no-escape", 0, 0, MVM_CLI_S_NO_ESCAPE}

#define MVM_CLI_MAX_BREAKERS 16

typedef struct mvm_cli_sampling {
    /* the fields these options set (the rest are the command's) */
    mvm_sampler_params s;
    int32_t dry_last_n;  /* llama.cpp's: -1 the context, 0 off */
    const char *breakers[MVM_CLI_MAX_BREAKERS]; /* llama.cpp's defaults until one is given */
    size_t n_breakers;
    int breakers_given;
    int requests_sample;       /* serve: a request may turn DRY on, so its breakers are made
                               whether or not the command line does */
    int32_t think_budget;      /* --reasoning-budget: -1 none (chat and serve) */
    const char *think_message; /* --reasoning-budget-message, or NULL */
    int escape;                /* llama.cpp's escapes in the breakers given (and run's prompt):
                                  1 unless --no-escape */
} mvm_cli_sampling;

/* llama.cpp's defaults: every step off, DRY's base 1.75, allowed length 2, the last 64
 * tokens scanned, its breakers "\n", ":", "\"", "*"; Mirostat's tau 5, eta 0.1. */
void mvm_cli_sampling_init(mvm_cli_sampling *c);
/* Option id (one of the rows) into c: 0, or 2 after a one-line error; -1 when it is not
 * one of them. --dry-sequence-breaker replaces the defaults (each one given adds one;
 * "none": none). */
int mvm_cli_sampling_option(const char *cmd, int id, const char *flag, const char *value,
                            mvm_cli_sampling *c);
/* After the last option: the breakers given, unescaped as llama.cpp's are (in place: they
 * are the command line's) unless --no-escape. */
void mvm_cli_sampling_escape(mvm_cli_sampling *c);
/* c's fields into *s (the rest of *s kept); n_ctx resolves a dry_last_n of -1. */
void mvm_cli_sampling_apply(const mvm_cli_sampling *c, uint32_t n_ctx, mvm_sampler_params *s);
/* The breakers for s's DRY, made from e's vocabulary when DRY is on or a request may turn
 * it on (requests_sample; *out NULL when neither):
 * 0, or 1 after "moevm CMD: ..." on stderr. */
int mvm_cli_sampling_breakers(const char *cmd, const mvm_cli_sampling *c,
                              const mvm_sampler_params *s, const mvm_engine *e,
                              mvm_dry_breakers **out);
void mvm_cli_sampling_usage(FILE *f);

#endif
