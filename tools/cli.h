/* The `moevm` command's subcommands and their shared helpers. Each subcommand returns the
 * process exit code: 0 on success, 1 on a failure it reported, 2 on bad usage. */
#ifndef MVM_TOOLS_CLI_H
#define MVM_TOOLS_CLI_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/compute/pool.h"
#include "engine/model/model.h"

int mvm_cmd_info(int argc, char **argv);
int mvm_cmd_demo(int argc, char **argv);
int mvm_cmd_options(int argc, char **argv);
int mvm_cmd_mkmodel(int argc, char **argv);
int mvm_cmd_run(int argc, char **argv);
int mvm_cmd_chat(int argc, char **argv);  /* tools/cmd_chat.c */
int mvm_cmd_serve(int argc, char **argv); /* tools/cmd_serve.c */
int mvm_cmd_bench(int argc, char **argv);
int mvm_cmd_calibrate(int argc, char **argv);
int mvm_cmd_tokenize(int argc, char **argv);
int mvm_cmd_perplexity(int argc, char **argv);
int mvm_cmd_sim(int argc, char **argv);   /* tools/cmd_sim.c */
int mvm_cmd_trace(int argc, char **argv); /* tools/cmd_trace.c */
int mvm_cmd_train_predictor(int argc, char **argv); /* tools/cmd_train.c */

/*
 * Options. Each command declares its options in one table and walks them with
 * mvm_cli_next, which drives glibc's getopt_long over it: the standard parser, so
 * "--flag value", "--flag=value", "-f value" and "-fvalue" all work, "--" ends the options,
 * and options and arguments may come in any order (getopt permutes argv). getopt_long
 * would also take any unique prefix of a long name; mvm_cli_next refuses those, so an
 * option is only ever its exact name (a prefix that is unique today is ambiguous tomorrow,
 * and --predict must never be read as --predictor). getopt's own messages are off: every
 * error is one line "moevm <cmd>: ... (see --help)" and exit code 2.
 *
 *   enum { O_MODEL = 1, O_CTX, O_VERBOSE };
 *   static const mvm_cli_opt opts[] = {
 *       {"model", 'm', 1, O_MODEL}, {"ctx", 'c', 1, O_CTX}, {"ctx-size", 0, 1, O_CTX},
 *       {"verbose", 0, 0, O_VERBOSE}, {0}};
 *   mvm_cli_iter it = {.cmd = "run", .usage = usage, .opts = opts, .argc = argc, .argv = argv};
 *   int next;
 *   while ((next = mvm_cli_next(&it)) == MVM_CLI_OPTION)
 *       switch (it.id) {
 *       case O_MODEL: model = it.value; break;
 *       case O_CTX: if (mvm_cli_u32("run", it.flag, it.value, 1, 4096, &ctx)) return 2; break;
 *       case O_VERBOSE: verbose = 1; break;
 *       }
 *   if (next != MVM_CLI_END)
 *       return next; // --help printed (0), or a bad option reported (2)
 */

/* One row of a command's option table; a row of zeros ends it. Rows may share an id: the
 * spellings of one option (--ctx, --ctx-size, -c). --help and -h are every command's and
 * are not listed. */
typedef struct mvm_cli_opt {
    const char *name; /* the long name, typed --name; one that starts with '-' ("-ngl") is
                         typed with one dash, as llama.cpp spells a few; NULL: a letter only */
    char letter;      /* the short option, typed -c; 0: none */
    char value;       /* 1: it takes a value; 0: a switch, which refuses one (--x=1) */
    int id;           /* the command's number for it, > 0: it->id when it is found */
} mvm_cli_opt;

/* The walk over argv[1..argc) (argv[0] is the command). Set the inputs; read the outputs
 * after each mvm_cli_next. argv is permuted in place, as getopt_long does. */
typedef struct mvm_cli_iter {
    /* inputs */
    const char *cmd;          /* messages read "moevm <cmd>: ..." */
    const char *help;         /* where the options are listed; NULL: "--help" */
    void (*usage)(FILE *);    /* prints them, for --help and -h */
    const mvm_cli_opt *opts;  /* the table; NULL: none but --help */
    int max_args;             /* positional arguments the command takes (0 for most) */
    int argc;
    char **argv;
    /* outputs */
    int id;                   /* the option found (its row's id) */
    const char *flag;         /* as typed, without "=value" ("--ctx", "-c"), for messages */
    char *value;              /* its value, in argv (some parsers split it in place); NULL
                                 for a switch */
    char **args;              /* after MVM_CLI_END: the positional arguments, n_args of them */
    int n_args;
    /* mvm_cli_next's own */
    int started;
    char flag_buf[64];
    char alias_buf[256];
    const struct mvm_cli_llama_flag *llama; /* the llama.cpp flag being read (cli_llama.h) */
} mvm_cli_iter;

/* What mvm_cli_next found. HELP and BAD are the command's exit codes, and END is the
 * parsers' "go on". */
enum { MVM_CLI_OPTION = -2, MVM_CLI_END = -1, MVM_CLI_HELP = 0, MVM_CLI_BAD = 2 };

/* The next option: MVM_CLI_OPTION with it->id, it->flag and it->value; MVM_CLI_END after
 * the last (it->args then holds the positional arguments); MVM_CLI_HELP after printing the
 * usage on stdout for --help or -h; MVM_CLI_BAD after one line on stderr: "moevm <cmd>:
 * unknown option --x (see --help)", "... --x needs a value ...", "... --x takes no value
 * ...", or "... unexpected argument 'x' ..." (more positional arguments than max_args).
 * getopt's state is global: a walk starts afresh at each new iterator, one at a time. */
int mvm_cli_next(mvm_cli_iter *it);

/* Every message of the commands is one line "moevm <cmd>: ...". This one is
 * "moevm <cmd>: <what>: <mvm_last_error()>" on stderr ("moevm <cmd>: <mvm_last_error()>"
 * for a NULL what; the error's own leading "<cmd>: " dropped); returns 1. */
int mvm_cli_error(const char *cmd, const char *what);

/* A comma-separated list's text: no item empty ("1,,2", ",1", "1,"), which strtok would
 * silently skip. Else prints "moevm <cmd>: <flag> <value>: an empty item" and returns 2. */
int mvm_cli_list(const char *cmd, const char *flag, const char *value);

/* Parses `value` of option `flag` of command `cmd` as an integer in [lo, hi]; on failure
 * prints "moevm <cmd>: <flag> <value>: ..." and returns 2, else 0. */
int mvm_cli_u32(const char *cmd, const char *flag, const char *value, uint32_t lo, uint32_t hi,
                uint32_t *out);
int mvm_cli_float(const char *cmd, const char *flag, const char *value, double lo, double hi,
                  float *out);
/* mvm_cli_float into a double: the value keeps float's precision, as these options have
 * always been read (a run given the same flags computes the same). *out is left alone on
 * failure. */
int mvm_cli_float_to_double(const char *cmd, const char *flag, const char *value, double lo,
                            double hi, double *out);

/* llama.cpp's GPU and cache options, spelled alike in every command that loads a model, for
 * its option table: -ngl, --gpu-layers, --n-gpu-layers N (mvm_cli_gpu_layers), --n-cpu-moe,
 * -ncmoe N (mvm_cli_cpu_moe) and -ctk, -ctv (--cache-type-k, --cache-type-v: the cache's
 * type, mvm_cli_kv_type); ngl, cpu_moe and kv are the command's ids for them (kv: its
 * --kv-type's). */
#define MVM_CLI_GPU_OPTS(ngl, cpu_moe, kv)                                                    \
    {"-ngl", 0, 1, ngl}, {"gpu-layers", 0, 1, ngl}, {"n-gpu-layers", 0, 1, ngl},             \
    {"n-cpu-moe", 0, 1, cpu_moe}, {"-ncmoe", 0, 1, cpu_moe}, {"cpu-moe", 0, 0, cpu_moe},      \
    {"-cmoe", 0, 0, cpu_moe}, {"-ctk", 0, 1, kv}, {"cache-type-k", 0, 1, kv},                 \
    {"-ctv", 0, 1, kv}, {"cache-type-v", 0, 1, kv}, MVM_CLI_LLAMA_OPTS
/* llama.cpp's other flags that its users bring along, in every command that loads a model:
 * with these rows in its table, a flag the table has no row for is looked up among
 * llama.cpp's (tools/cli_llama.c), accepted with a note or refused with the moevm way to say
 * it, and never reaches the command. (The rows stand for them all: one for the flags that
 * take a value, one for the others.) */
#define MVM_CLI_LLAMA (1 << 20) /* their id, which mvm_cli_next handles itself */
#define MVM_CLI_LLAMA_OPTS                                                                    \
    {"\x01llama-v", 0, 1, MVM_CLI_LLAMA}, {"\x01llama-f", 0, 0, MVM_CLI_LLAMA}
/* -ngl / --n-gpu-layers N of llama.cpp, accepted with any value: moevm places experts by a
 * byte budget, and attention and dense weights always go to the GPU when there is one. The
 * first call says so on stderr, once per process. */
void mvm_cli_gpu_layers(const char *cmd, const char *flag);
/* --n-cpu-moe's largest N, which llama.cpp's --cpu-moe (-cmoe, every MoE layer's experts on
 * the CPU) stands for: no one's typing. */
#define MVM_CLI_CPU_MOE_ALL (1u << 16)
/* --n-cpu-moe's value N, 0..MVM_CLI_CPU_MOE_ALL (llama.cpp users type 99 for "every
 * layer"): into *n, 0; else 2 after "moevm <cmd>: <flag> <value>: ...". No value (--cpu-moe):
 * MVM_CLI_CPU_MOE_ALL. */
int mvm_cli_n_cpu_moe(const char *cmd, const char *flag, const char *value, uint32_t *n);
/* 0 unless both --gpu-budget and --n-cpu-moe were given: then 2 after one line saying so. */
int mvm_cli_budget_or_cpu_moe(const char *cmd, int budget_given, int cpu_moe_given);
/* --n-cpu-moe N of llama.cpp into desc once model m is open (plan.h's mvm_plan_cpu_moe): the
 * budget of the experts of all but N of its MoE layers; N >= its layers, every expert on
 * the CPU, with mvm_cli_cpu_moe_note. 0; or 2 after "moevm <cmd>: --n-cpu-moe N: ...". */
int mvm_cli_cpu_moe(const char *cmd, uint32_t n_cpu_moe, mvm_model *m, mvm_space_desc *desc);
/* When --n-cpu-moe N keeps the experts of every one of n_layer MoE layers on the CPU, one
 * line on stderr saying what that means: the CPU computes every expert, a GPU the rest. */
void mvm_cli_cpu_moe_note(const char *cmd, uint32_t n_cpu_moe, uint32_t n_layer);

/* llama.cpp's escapes (common.cpp's string_process_escapes, which its tools apply to -p, -f's
 * text and --dry-sequence-breaker unless --no-escape): \n, \r, \t, \', \", \\ and \xHH
 * become their characters in place; any other backslash stays, with what follows it.
 * \x00 stays as typed: a C string cannot hold the NUL it stands for. */
void mvm_cli_unescape(char *s);

/* Ctrl-C for the commands it stops rather than ends (run, chat): set by SIGINT once
 * mvm_cli_catch_sigint has run; the command clears it when it has stopped. */
extern volatile sig_atomic_t mvm_cli_interrupted;
/* From now on SIGINT sets mvm_cli_interrupted. flags: sigaction's (SA_RESTART: reads and
 * writes are not cut short; SA_RESETHAND: a second Ctrl-C ends the program). */
void mvm_cli_catch_sigint(int flags);
/* The whole of `path` (stdin for "-"), NUL-terminated, in a malloc'ed buffer, its length
 * in *len; NULL after "moevm <cmd>: <path>: ..." on stderr, also for a file holding a NUL
 * byte (not text: whatever reads it would stop there). */
char *mvm_cli_read_text(const char *cmd, const char *path, size_t *len);

/* `value` of option `flag` one of names[] (NULL-terminated): its index into *out, 0; else
 * "moevm <cmd>: <flag> <value>: expected a, b or c" and 2. */
int mvm_cli_choice(const char *cmd, const char *flag, const char *value,
                   const char *const *names, int *out);
/* The cache's type from --kv-type, or llama.cpp's -ctk / -ctv (flag as typed): "f16", "f32"
 * or "q8_0" into *out, 0; else "moevm <cmd>: <flag> <value>: expected ..." and 2. moevm's
 * cache keeps keys and values in one type: -ctk or -ctv sets both, with a note once a
 * process, and one that differs from the type given before (-ctk q8_0 -ctv f16) is refused
 * with 2 after a line saying so. */
int mvm_cli_kv_type(const char *cmd, const char *flag, const char *value, const char **out);
/* Whether flag (as typed) is llama.cpp's -ctk or -ctv (--cache-type-k, --cache-type-v),
 * whose values must agree, rather than --kv-type. */
int mvm_cli_kv_llama_flag(const char *flag);
/* 0 when -m was given; else "moevm <cmd>: -m MODEL.gguf is required ..." and 2. */
int mvm_cli_need_model(const char *cmd, const char *model);
/* A policy given as "name" or "name{k=v,...}" (policy/choose.h's mvm_policy_split) for the
 * value of option `flag` of command `cmd`: on a malformed value prints
 * "moevm <cmd>: <flag> <value>: expected NAME or NAME{k=v,...}" and returns 2, else 0. */
int mvm_cli_policy(const char *cmd, const char *flag, char *value, const char **name,
                   const char **params);
/* The same check on a copy, the value kept whole into *out, as the engine API takes a
 * module (moevm/engine.h's mvm_engine_params). */
int mvm_cli_module(const char *cmd, const char *flag, const char *value, const char **out);

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
 * (0: MOEVM_THREADS, else one per core, near the GPU once a space on one is made) pinned
 * by the topology. 0, or 1 after a one-line error. */
int mvm_cli_threads(const char *cmd, uint32_t threads, mvm_pool **out);

/* A progress callback for long work (loading, writing models): ctx is the label. Shows a
 * percentage on stderr — redrawn in place on a terminal, every 10% otherwise — and only
 * for work over 64 MiB, so small runs stay quiet. */
void mvm_cli_progress(void *label, uint64_t done, uint64_t total);

/* The length of the valid UTF-8 character at s[0..n) (n >= 1), 0 when it is not one (a
 * stray continuation byte, an overlong form, a surrogate, past U+10FFFF, cut short). */
size_t mvm_cli_utf8_char(const unsigned char *s, size_t n);
/* text[0..n) as valid UTF-8, NUL-terminated (malloc'd; NULL when out of memory): a model
 * may emit bytes that are not (byte tokens of a character it never finished), and JSON
 * must be; each bad byte becomes U+FFFD, as Python's errors="replace" does, and so does a
 * NUL (a byte token <0x00>), which would otherwise end the string there and cut the rest. */
char *mvm_cli_valid_utf8(const char *text, size_t n);

#endif
