/*
 * llama.cpp's flags that a moevm command has no row for (tools/cli_llama.c): each accepted
 * with a note said once, or refused with the moevm way to say it. mvm_cli_next (cli.c) looks
 * a flag up here when the command's table has MVM_CLI_LLAMA_OPTS and no row of that
 * spelling; the commands never see these flags.
 */
#ifndef MVM_TOOLS_CLI_LLAMA_H
#define MVM_TOOLS_CLI_LLAMA_H

#include <stddef.h>

#include "tools/cli.h"

#define MVM_CLI_LLAMA_NAMES 6

typedef struct mvm_cli_llama_flag {
    const char *names[MVM_CLI_LLAMA_NAMES]; /* as typed: "-tb", "--threads-batch" */
    unsigned cmds;               /* the commands that take it (a bit each: run, chat, serve,
                                    bench, perplexity) */
    int value;                   /* it takes a value */
    const char *const *choices;  /* the values it takes; NULL: any */
    int refuse;                  /* 0: accepted with the note; 1: refused with it */
    const char *say;             /* what moevm does instead */
} mvm_cli_llama_flag;

/* The table's i-th entry, NULL past the last (for tests). */
const mvm_cli_llama_flag *mvm_cli_llama_at(size_t i);
/* The flag typed[0..len) ("-tb", "--metrics") for command cmd, or NULL. */
const mvm_cli_llama_flag *mvm_cli_llama_find(const char *cmd, const char *typed, size_t len);
/* f as typed (with its value, or NULL): 0 after its note (once a process), or 2 after the
 * line refusing it or its value. */
int mvm_cli_llama_apply(const char *cmd, const mvm_cli_llama_flag *f, const char *typed,
                        const char *value);

#endif
