/*
 * Every MOEVM_* tunable in one table, the way mimalloc's options.c does it: name, type,
 * default, one-line doc. Each layer declares the options it owns beside its code (vmm's
 * below, policy/policy_options.h, engine/forward/engine_options.h, interpose/options.h) as
 * an mvm_option_table; a program registers the tables of the layers it links, and the one
 * table is their union, in registration order. docs/options.md is generated from the CLI's
 * (`moevm options --markdown`, every layer) and a test checks that the two agree.
 *
 * Values come from the environment (the CLI sets the same names from its flags). A
 * malformed value is an error naming the variable, never a silent default.
 */
#ifndef MVM_VMM_OPTIONS_H
#define MVM_VMM_OPTIONS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "moevm/moevm.h"

typedef enum mvm_option_type {
    MVM_OPT_SIZE,      /* bytes: 123, 64K, 1.5G, 2MiB (binary multiples) */
    MVM_OPT_BUDGET,    /* a size, a percentage of the experts' pages ("25%"), or "auto" */
    MVM_OPT_INT,       /* a non-negative integer; "auto" too where that is the default (-1) */
    MVM_OPT_CHOICE,    /* one of a |-separated list; the value is its index */
    MVM_OPT_STRING,
} mvm_option_type;

typedef struct mvm_option_desc {
    const char *name;      /* MOEVM_... */
    mvm_option_type type;
    const char *def;       /* default, as it would be written in the environment */
    const char *choices;   /* MVM_OPT_CHOICE: "auto|host|cuda"; MVM_OPT_INT: its range,
                              "0..1024", or NULL for any non-negative one */
    const char *doc;       /* one line */
} mvm_option_desc;

typedef struct mvm_option_value {
    int64_t i;         /* INT, CHOICE (index), SIZE (bytes), BUDGET (bytes, or
                          MVM_BUDGET_AUTO, or 0 with frac set) */
    double frac;       /* BUDGET given as a percentage: the fraction */
    const char *s;     /* STRING (points into the environment or the default) */
} mvm_option_value;

/* A layer's options, in the order the docs list them. */
typedef struct mvm_option_table {
    const mvm_option_desc *const *opts;
    size_t n;
} mvm_option_table;

/* vmm's own: always part of the table. */
extern const mvm_option_desc mvm_opt_gpu_budget, mvm_opt_backend, mvm_opt_device,
    mvm_opt_page_size, mvm_opt_clean_evict, mvm_opt_home_map, mvm_opt_huge_pages,
    mvm_opt_copy_piece, mvm_opt_copy_streams, mvm_opt_move_spin, mvm_opt_log, mvm_opt_cuda_library;

/* Adds a layer's table (again: a no-op). Call from one thread at start, before the checks
 * and listings below run; MVM_ERR_INVALID past 8 tables. */
mvm_status mvm_options_register(const mvm_option_table *t);

/* Reads option d from the environment (or its default). On a malformed value returns
 * MVM_ERR_OPTION with a one-line message in msg. Does not touch the thread's last error, so
 * the logger can use it. Reading needs no registration. */
mvm_status mvm_option_get(const mvm_option_desc *d, mvm_option_value *out, char *msg,
                          size_t msg_len);
/* The same, setting the thread's last error on failure. */
mvm_status mvm_option_read(const mvm_option_desc *d, mvm_option_value *out);

/* Validates every registered option's value in the environment (malformed values are
 * errors); MOEVM_* names no registered table has are reported as warnings (with the
 * closest known name): what a program does not link, it does not read. */
mvm_status mvm_options_check(void);

/* Parsers, exposed for the CLI and tests. Return 0 on success. */
int mvm_parse_size(const char *s, uint64_t *out);
int mvm_parse_budget(const char *s, uint64_t *bytes, double *frac);

/* Writes the registered options as a markdown table (docs/options.md) or as "NAME=value"
 * lines of the values in effect. */
void mvm_options_print_markdown(FILE *f);
void mvm_options_print_effective(FILE *f);

#endif
