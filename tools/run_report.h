/*
 * `moevm run`'s closing report: the statistics line on stderr (for people: speeds, and
 * what the memory manager's modules did, only those the run used), or with -o json one
 * JSON object on stdout (for scripts: the text, the counts and timings, every counter of
 * the memory manager whatever the modules, and which modules were in use). docs/engine.md
 * lists the fields.
 */
#ifndef MVM_TOOLS_RUN_REPORT_H
#define MVM_TOOLS_RUN_REPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/dist/dist.h"
#include "engine/forward/forward.h"

typedef struct mvm_run_report {
    const char *model_path;
    const mvm_model *model;
    const mvm_ctx *ctx;
    const mvm_dist *dist;        /* NULL outside mpirun */
    const char *prompt;          /* the prompt's pieces, as the text mode prints them */
    size_t prompt_len;
    const char *text;            /* the generated tokens' pieces */
    size_t text_len;
    const int32_t *generated;    /* [n_generated] their ids */
    uint32_t n_prompt, n_generated, n_predict;
    uint32_t n_prefilled;        /* of the prompt's tokens, those evaluated: fewer when Ctrl-C
                                    stopped the prompt */
    double t_prefill, t_decode;  /* seconds */
    int interrupted;             /* Ctrl-C stopped the prompt or the generation */
    int reversed;                /* a reverse prompt (-r) ended the text */
} mvm_run_report;

/* The statistics line, and under mpirun the distributed mode's, on stderr. */
void mvm_run_report_text(const mvm_run_report *r);
/* The report as one JSON object on `out`; 0, or 1 after "moevm run: out of memory". */
int mvm_run_report_json(const mvm_run_report *r, FILE *out);

#endif
