/*
 * `moevm bench`'s output (-o), as llama-bench writes its own: a markdown table (text, or
 * md), CSV with a header line, a JSON array, or JSON lines; one record per measurement
 * (a configuration's ppN or tgN test) with every column. docs/engine.md lists the fields.
 */
#ifndef MVM_TOOLS_BENCH_OUT_H
#define MVM_TOOLS_BENCH_OUT_H

#include <stdint.h>
#include <stdio.h>

/* -o's values, for mvm_cli_choice; "md" is the text table too. */
enum { MVM_BENCH_TEXT, MVM_BENCH_CSV, MVM_BENCH_JSON, MVM_BENCH_JSONL, MVM_BENCH_MD };
extern const char *const mvm_bench_formats[];

typedef struct mvm_bench_row {
    const char *model;        /* the file, as given */
    const char *arch, *experts; /* the architecture; the experts' weight types */
    double experts_gib;       /* every expert's bytes */
    const char *backend;
    int threads;
    double budget_gib;        /* < 0: no budget, the experts read at their homes */
    const char *routing;      /* "own", or "replay" (--routing) */
    const char *kv;           /* the KV cache's type: "f16", "f32", "q8_0" */
    int gen;                  /* 0: ppN, N prompt tokens at once; 1: tgN, one at a time */
    uint32_t n_tokens, reps;
    uint32_t n_depth;         /* tokens in the KV cache before the test (-d) */
    const double *samples_ts; /* [reps] each timed repetition's tokens/s */
    double avg_ts, stddev_ts;
    double hit_rate;          /* of the expert accesses, 0..1; < 0 without a budget */
    double mib_per_token;     /* moved into the budget */
    double load_wait;         /* the share of the time the steps waited for their copies,
                                 0..1; < 0 without a budget */
} mvm_bench_row;

typedef struct mvm_bench_out {
    int format;
    FILE *f;
    uint32_t rows; /* written so far */
} mvm_bench_out;

/* One record, flushed (a long sweep shows its rows as they come); the first comes after the
 * table's header, the CSV's header line or the JSON array's opening. */
void mvm_bench_out_row(mvm_bench_out *o, const mvm_bench_row *r);
/* The JSON array's closing (also after a failure: the rows so far, or none, stay valid
 * JSON). */
void mvm_bench_out_end(mvm_bench_out *o);

#endif
