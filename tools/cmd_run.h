/*
 * `moevm run`'s command line (tools/cmd_run_args.c), which tools/cmd_run.c runs.
 */
#ifndef MVM_TOOLS_CMD_RUN_H
#define MVM_TOOLS_CMD_RUN_H

#include <stdint.h>

#include "tools/cli_grammar.h"
#include "tools/cli_meta.h"
#include "tools/cli_sampling.h"

#define MVM_RUN_MAX_REVERSE 16      /* -r's, each at most */
#define MVM_RUN_MAX_REVERSE_LEN 256 /* bytes */

struct run_args {
    const char *model, *prompt, *file, *tokens, *trace_out, *logits_out, *budget;
    /* the modules, "name" or "name{k=v,...}"; NULL: their MOEVM_* options */
    const char *evict, *predict, *route, *config, *assign;
    const char *predictor, *hot_profile;
    const char *cost;                   /* NULL: MOEVM_COST */
    const char *kv_type;                /* NULL: MOEVM_KV_TYPE */
    const char *place, *place_args, *server_mem; /* the distributed mode's (dist.h) */
    char *file_text;                    /* -f's, which prompt points to */
    uint32_t n_predict, threads, ctx, batch, seed, top_k, period, homes, repeat_last_n;
    uint32_t n_cpu_moe;
    float temp, top_p, min_p, repeat_penalty;
    int trace_hidden, cpu_moe_given, dist_flag;
    int json;       /* -o json: the report as one JSON object on stdout, not the text */
    int ignore_eos; /* end-of-generation tokens are never sampled */
    int special;    /* --special: control tokens written as their texts (llama.cpp's -sp) */
    int no_prompt;  /* --no-display-prompt: the text without the prompt before it */
    mvm_cli_grammar grammar; /* --grammar, --json-schema */
    mvm_cli_sampling sampling; /* --frequency-penalty, --dry-*, --mirostat, ... */
    mvm_cli_meta meta;         /* --override-kv, --rope-scaling, ... */
    const char *reverse[MVM_RUN_MAX_REVERSE]; /* -r's: the text stops where it ends in one */
    uint32_t n_reverse;
};

/* Parses and checks the options (reading -f's file). -1: go on; else the exit code, after
 * the help or a one-line error. */
int mvm_run_parse_args(int argc, char **argv, struct run_args *a);
/* "5,17,3" -> ids; 2 on a malformed list, 1 out of memory, after a one-line error. */
int mvm_run_parse_tokens(const char *s, int32_t **ids, uint32_t *n);

#endif
