/* The `moevm` command's subcommands and their shared helpers. Each subcommand returns the
 * process exit code: 0 on success, 1 on a failure it reported, 2 on bad usage. */
#ifndef MVM_TOOLS_CLI_H
#define MVM_TOOLS_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "engine/compute/pool.h"

int mvm_cmd_info(int argc, char **argv);
int mvm_cmd_demo(int argc, char **argv);
int mvm_cmd_options(int argc, char **argv);
int mvm_cmd_mkmodel(int argc, char **argv);
int mvm_cmd_run(int argc, char **argv);
int mvm_cmd_bench(int argc, char **argv);
int mvm_cmd_calibrate(int argc, char **argv);
int mvm_cmd_tokenize(int argc, char **argv);
int mvm_cmd_sim(int argc, char **argv);   /* tools/cmd_sim.c */
int mvm_cmd_trace(int argc, char **argv); /* tools/cmd_trace.c */
int mvm_cmd_train_predictor(int argc, char **argv); /* tools/cmd_train.c */

/* Walks a command's options: "--flag value" pairs, and the switches (flags without a value)
 * named in `switches`, a NULL-terminated list or NULL. */
typedef struct mvm_cli_iter {
    const char *cmd;                /* messages read "moevm <cmd>: ..." */
    const char *help;               /* where the options are listed; NULL: "--help" */
    void (*usage)(FILE *);          /* prints them, for --help and -h */
    const char *const *switches;
    int argc, i;
    char **argv;
    const char *flag; /* the option mvm_cli_next returned */
    char *value;      /* its value, split in place by some parsers; NULL for a switch */
} mvm_cli_iter;

/* What mvm_cli_next found. HELP and BAD are the command's exit codes, and END is the
 * parsers' "go on". */
enum { MVM_CLI_OPTION = -2, MVM_CLI_END = -1, MVM_CLI_HELP = 0, MVM_CLI_BAD = 2 };

/* The next option in it->flag and it->value (MVM_CLI_OPTION); MVM_CLI_END after the last;
 * MVM_CLI_HELP after printing the usage for --help or -h; MVM_CLI_BAD after
 * "moevm <cmd>: <flag> needs a value (see --help)". */
int mvm_cli_next(mvm_cli_iter *it);
/* "moevm <cmd>: unknown option <flag> (see --help)" on stderr; returns 2. */
int mvm_cli_unknown(const mvm_cli_iter *it);

/* "moevm: <what>: <mvm_last_error()>" on stderr; returns 1. */
int mvm_cli_error(const char *what);

/* Parses `value` of option `flag` of command `cmd` as an integer in [lo, hi]; on failure
 * prints "moevm <cmd>: <flag> <value>: ..." and returns 2, else 0. */
int mvm_cli_u32(const char *cmd, const char *flag, const char *value, uint32_t lo, uint32_t hi,
                uint32_t *out);
int mvm_cli_float(const char *cmd, const char *flag, const char *value, double lo, double hi,
                  float *out);

/* --kv-type's value: "f16" or "f32" into *out, 0; else "moevm <cmd>: --kv-type <value>:
 * expected f16 or f32" and 2. */
int mvm_cli_kv_type(const char *cmd, const char *value, const char **out);
/* 0 when -m was given; else "moevm <cmd>: -m MODEL.gguf is required ..." and 2. */
int mvm_cli_need_model(const char *cmd, const char *model);
/* A policy given as "name" or "name{k=v,...}", split in place (params NULL when there are
 * none). -1 when a brace is not closed at the end. */
int mvm_cli_split_policy(char *p, const char **name, const char **params);
/* The same for the value of option `flag` of command `cmd`: on a malformed value prints
 * "moevm <cmd>: <flag> <value>: expected NAME or NAME{k=v,...}" and returns 2, else 0. */
int mvm_cli_policy(const char *cmd, const char *flag, char *value, const char **name,
                   const char **params);

/* --server-mem of `moevm sim --servers` and of distributed runs: one value, or one per
 * server (n), each a size or a percentage of `all` (every expert's bytes), into cap[n].
 * NULL: 1.5x an even share each, room for copies of the busiest experts. 2 after
 * "moevm <cmd>: --server-mem ..." on a malformed value, else 0. */
int mvm_cli_capacities(const char *cmd, const char *text, uint32_t n, uint64_t all,
                       uint64_t *cap);
/* *desc from the MOEVM_* options, with the device budget given by option `flag` of command
 * `cmd` when budget is not NULL. 0, or 1 (a bad option) or 2 (a malformed budget) after a
 * one-line error. */
int mvm_cli_space_desc(const char *cmd, const char *flag, const char *budget,
                       mvm_space_desc *desc);
/* The engine's CPU side for command `cmd`: MOEVM_CPU_SIMD applied, and a pool of `threads`
 * (0: MOEVM_THREADS, else one per core near the GPU or of the caller's node) pinned by the
 * topology. 0, or 1 after a one-line error. */
int mvm_cli_threads(const char *cmd, uint32_t threads, mvm_pool **out);

/* A progress callback for long work (loading, writing models): ctx is the label. Shows a
 * percentage on stderr — redrawn in place on a terminal, every 10% otherwise — and only
 * for work over 64 MiB, so small runs stay quiet. */
void mvm_cli_progress(void *label, uint64_t done, uint64_t total);

#endif
