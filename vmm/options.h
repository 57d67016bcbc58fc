/*
 * Every MOEVM_* tunable in one table (options.c), the way mimalloc's options.c does it:
 * name, type, default, one-line doc. docs/options.md is generated from this table
 * (`moevm options --markdown`) and a test checks that the two agree.
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

typedef enum mvm_option_id {
    MVM_OPTION_GPU_BUDGET,
    MVM_OPTION_BACKEND,
    MVM_OPTION_DEVICE,
    MVM_OPTION_PAGE_SIZE,
    MVM_OPTION_CLEAN_EVICT,
    MVM_OPTION_HOME_MAP,
    MVM_OPTION_LOG,
    MVM_OPTION_CUDA_LIBRARY,
    MVM_OPTION_THREADS,
    MVM_OPTION_CPU_SIMD,
    MVM_OPTION_PRELOAD_MIN,
    MVM_OPTION_OVERSUBSCRIBE,
    MVM_OPTION_PRELOAD_SLICES,
    MVM_OPTION_EVICT,
    MVM_OPTION_EVICT_ARGS,
    MVM_OPTION_PREDICT,
    MVM_OPTION_PREDICT_ARGS,
    MVM_OPTION_ROUTE,
    MVM_OPTION_ROUTE_ARGS,
    MVM_OPTION_CONFIG,
    MVM_OPTION_CONFIG_ARGS,
    MVM_OPTION_ASSIGN,
    MVM_OPTION_ASSIGN_ARGS,
    MVM_OPTION_ADMIT,
    MVM_OPTION_COST,
    MVM_OPTION_REPORT,
    MVM_OPTION_REPORT_SKIP,
    MVM_OPTION_KV_TYPE,
    MVM_OPTION_COUNT_
} mvm_option_id;

typedef enum mvm_option_type {
    MVM_OPT_SIZE,      /* bytes: 123, 64K, 1.5G, 2MiB (binary multiples) */
    MVM_OPT_BUDGET,    /* a size, a percentage of the experts' pages ("25%"), or "auto" */
    MVM_OPT_INT,       /* a non-negative integer */
    MVM_OPT_CHOICE,    /* one of a |-separated list; the value is its index */
    MVM_OPT_STRING,
} mvm_option_type;

typedef struct mvm_option_desc {
    const char *name;      /* MOEVM_... */
    mvm_option_type type;
    const char *def;       /* default, as it would be written in the environment */
    const char *choices;   /* MVM_OPT_CHOICE: "auto|host|cuda" */
    const char *doc;       /* one line */
} mvm_option_desc;

typedef struct mvm_option_value {
    int64_t i;         /* INT, CHOICE (index), SIZE (bytes), BUDGET (bytes, or
                          MVM_BUDGET_AUTO, or 0 with frac set) */
    double frac;       /* BUDGET given as a percentage: the fraction */
    const char *s;     /* STRING (points into the environment or the default) */
} mvm_option_value;

const mvm_option_desc *mvm_option_describe(mvm_option_id id);

/* Reads option `id` from the environment (or its default). On a malformed value returns
 * MVM_ERR_OPTION with a one-line message in msg. Does not touch the thread's last error, so
 * the logger can use it. */
mvm_status mvm_option_get(mvm_option_id id, mvm_option_value *out, char *msg, size_t msg_len);
/* The same, setting the thread's last error on failure. */
mvm_status mvm_option_read(mvm_option_id id, mvm_option_value *out);

/* Validates every MOEVM_* variable in the environment: malformed values are errors; names
 * that are not options are reported as warnings (with the closest known name). */
mvm_status mvm_options_check(void);

/* Parsers, exposed for the CLI and tests. Return 0 on success. */
int mvm_parse_size(const char *s, uint64_t *out);
int mvm_parse_budget(const char *s, uint64_t *bytes, double *frac);

/* Writes the options table as markdown (docs/options.md) or as "NAME=value" lines of the
 * values in effect. */
void mvm_options_print_markdown(FILE *f);
void mvm_options_print_effective(FILE *f);

#endif
