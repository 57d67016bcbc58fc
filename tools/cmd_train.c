/* `moevm train-predictor`: trains the per-layer models of predict "learned" (PreScope's
 * LLaPor; policy/predictor_mlp.h) on a trace recorded with hidden states, prints each
 * layer's held-out top-k hit rate next to two baselines (the previous layer's experts, the
 * most popular experts), and writes the predictor file through PATH.tmp and a rename, so a
 * reader never sees half a file. The training itself is the pure function
 * mvm_predictor_train; this file reads, reports and writes. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/predictor_mlp.h"
#include "tools/cli.h"
#include "tools/trace.h"
#include "vmm/error.h"
#include "vmm/file_replace.h"

static const char *const cmd = "train-predictor";

static void usage(FILE *f)
{
    mvm_predictor_train_opts o;
    mvm_predictor_train_defaults(&o);
    fprintf(f,
            "usage: moevm train-predictor --trace T.jsonl --out P.bin [--rank R] [--hidden H]\n"
            "                             [--epochs N] [--batch B] [--lr X] [--lambda X]\n"
            "                             [--gamma X] [--seed S] [--holdout F]\n"
            "trains predict \"learned\" (PreScope's LLaPor): per MoE layer, a small model that\n"
            "predicts the layer's experts from the previous layer's hidden state and routing.\n"
            "The trace needs hidden states (`moevm run --trace-out FILE --trace-hidden`).\n"
            "  --trace    the routing trace (docs/trace-format.md)\n"
            "  --out      the predictor file to write (give it to the learned predictor)\n"
            "  --rank     PCA width of the hidden state, middle layers; first and last layers\n"
            "             half of it; at most n_embd (default %u)\n"
            "  --hidden   width of each layer's MLP, 1..%u (default %u)\n"
            "  --epochs   passes over the training tokens (default %u)\n"
            "  --batch    tokens per AdamW step (default %u)\n"
            "  --lr       peak learning rate of the first and last layers, the middle ones 3x,\n"
            "             (0, 1] (default %g)\n"
            "  --lambda   weight of the focal loss, first and last layers, 0..1000 (default %g)\n"
            "  --gamma    focal loss exponent, 0..10 (default %g)\n"
            "  --seed     same seed and trace, same file (default %llu)\n"
            "  --holdout  share of tokens, the trace's last ones, held out to report the hit\n"
            "             rates, 0..0.9 (default %g)\n",
            o.rank, MVM_PREDICTOR_MAX_HIDDEN, o.hidden, o.epochs, o.batch, o.lr, o.lambda,
            o.gamma, (unsigned long long)o.seed, o.holdout);
}

typedef struct args {
    const char *trace, *out;
    mvm_predictor_train_opts o;
} args;

/* MVM_CLI_END to go on, else the exit code (--help, or a bad option's message printed). */
static int parse(int argc, char **argv, args *a)
{
    mvm_predictor_train_defaults(&a->o);
    enum { O_TRACE = 1, O_OUT, O_RANK, O_HIDDEN, O_EPOCHS, O_BATCH, O_SEED, O_LR, O_LAMBDA,
           O_GAMMA, O_HOLDOUT };
    static const mvm_cli_opt opts[] = {
        {"trace", 0, 1, O_TRACE},   {"out", 0, 1, O_OUT},       {"rank", 0, 1, O_RANK},
        {"hidden", 0, 1, O_HIDDEN}, {"epochs", 0, 1, O_EPOCHS}, {"batch", 0, 1, O_BATCH},
        {"seed", 0, 1, O_SEED},     {"lr", 0, 1, O_LR},         {"lambda", 0, 1, O_LAMBDA},
        {"gamma", 0, 1, O_GAMMA},   {"holdout", 0, 1, O_HOLDOUT}, {0}};
    mvm_cli_iter it = {.cmd = cmd, .usage = usage, .opts = opts, .argc = argc, .argv = argv};
    int next;
    while ((next = mvm_cli_next(&it)) == MVM_CLI_OPTION) {
        const char *f = it.flag, *v = it.value;
        uint32_t u = 0;
        int rc = 0;
        switch (it.id) {
        case O_TRACE: a->trace = v; break;
        case O_OUT: a->out = v; break;
        case O_RANK: rc = mvm_cli_u32(cmd, f, v, 1, UINT32_MAX, &a->o.rank); break;
        case O_HIDDEN:
            rc = mvm_cli_u32(cmd, f, v, 1, MVM_PREDICTOR_MAX_HIDDEN, &a->o.hidden);
            break;
        case O_EPOCHS: rc = mvm_cli_u32(cmd, f, v, 1, 100000, &a->o.epochs); break;
        case O_BATCH: rc = mvm_cli_u32(cmd, f, v, 1, UINT32_MAX, &a->o.batch); break;
        case O_SEED:
            rc = mvm_cli_u32(cmd, f, v, 0, UINT32_MAX, &u);
            a->o.seed = u;
            break;
        case O_LR: rc = mvm_cli_float_to_double(cmd, f, v, 1e-9, 1, &a->o.lr); break;
        case O_LAMBDA: rc = mvm_cli_float_to_double(cmd, f, v, 0, 1000, &a->o.lambda); break;
        case O_GAMMA: rc = mvm_cli_float_to_double(cmd, f, v, 0, 10, &a->o.gamma); break;
        case O_HOLDOUT: rc = mvm_cli_float_to_double(cmd, f, v, 0, 0.9, &a->o.holdout); break;
        }
        if (rc)
            return rc;
    }
    if (next != MVM_CLI_END)
        return next;
    if (!a->trace || !a->out) {
        fprintf(stderr, "moevm %s: %s is required (--help for usage)\n", cmd,
                !a->trace ? "--trace T.jsonl" : "--out P.bin");
        return 2;
    }
    return MVM_CLI_END;
}

/* The progress line of each trained layer, on stderr. */
typedef struct progress {
    uint32_t n_layers;
} progress;

static const char *group(uint32_t kind, uint32_t t, uint32_t n_layers)
{
    if (kind == MVM_PREDICTOR_GATED)
        return "middle";
    return t < n_layers / 2 ? "input" : "output";
}

static void on_layer(void *ctx, uint32_t t, const mvm_predictor_eval *ev)
{
    const progress *p = ctx;
    fprintf(stderr, "%s: layer %u/%u (%s, rank %u): loss %.4f", cmd, t, p->n_layers - 1,
            group(ev->kind, t, p->n_layers), ev->rank, ev->loss);
    if (ev->n_test)
        fprintf(stderr, ", held-out hit %.1f%%", 100 * ev->hit);
    fputc('\n', stderr);
}

static void print_table(const args *a, const mvm_trace *t, const mvm_predictor_eval *ev,
                        size_t size)
{
    const uint32_t L = t->hdr.n_layers;
    printf("%s: %u layer models, %zu bytes, from %s (%u tokens: %u to train, %u held out)\n",
           a->out, L - 1, size, a->trace, t->n_tokens, ev[1].n_train, ev[1].n_test);
    if (!ev[1].n_test)
        return;
    double sum[3] = {0};
    printf("%6s  %-6s  %4s  %7s  %10s  %10s\n", "layer", "group", "rank", "model", "prev-layer",
           "popularity");
    for (uint32_t l = 1; l < L; l++) {
        printf("%6u  %-6s  %4u  %6.1f%%  %9.1f%%  %9.1f%%\n", l, group(ev[l].kind, l, L),
               ev[l].rank, 100 * ev[l].hit, 100 * ev[l].hit_prev, 100 * ev[l].hit_pop);
        sum[0] += ev[l].hit;
        sum[1] += ev[l].hit_prev;
        sum[2] += ev[l].hit_pop;
    }
    printf("%6s  %-6s  %4s  %6.1f%%  %9.1f%%  %9.1f%%\n", "mean", "", "", 100 * sum[0] / (L - 1),
           100 * sum[1] / (L - 1), 100 * sum[2] / (L - 1));
    printf("\nheld-out top-%u hit rate: the share of the experts each token actually selected\n"
           "that are among the predicted top-%u; prev-layer predicts layer l+1's experts to be\n"
           "layer l's (same ids), popularity the training tokens' %u most frequent experts.\n",
           t->hdr.top_k, t->hdr.top_k, t->hdr.top_k);
}

/* Writes size bytes over path (vmm/file_replace.h). 0, or 1 with the error printed. */
static int write_file(const char *path, const void *bytes, size_t size)
{
    mvm_file_replace file;
    if (mvm_file_replace_open(&file, path, "wb") != MVM_OK)
        return mvm_cli_error(cmd, NULL);
    mvm_status st = MVM_OK;
    if (fwrite(bytes, 1, size, file.f) != size)
        st = mvm_fail(MVM_ERR_BACKEND, "%s: writing failed: %s", file.tmp, strerror(errno));
    if (mvm_file_replace_commit(&file, st) != MVM_OK)
        return mvm_cli_error(cmd, NULL);
    return 0;
}

int mvm_cmd_train_predictor(int argc, char **argv)
{
    args a = {0};
    int rc = parse(argc, argv, &a);
    if (rc != MVM_CLI_END)
        return rc;
    mvm_trace *t;
    if (mvm_trace_load(a.trace, &t) != MVM_OK)
        return mvm_cli_error(cmd, NULL);
    if (!t->hidden) {
        fprintf(stderr, "moevm %s: %s: has no hidden states; record with `moevm run --trace-out "
                "FILE --trace-hidden`\n", cmd, a.trace);
        mvm_trace_free(t);
        return 1;
    }
    const mvm_trace_header *h = &t->hdr;
    mvm_predictor_data d = {.n_layers = h->n_layers, .n_experts = h->n_experts,
                            .top_k = h->top_k, .n_embd = h->n_embd, .n_tokens = t->n_tokens,
                            .hidden = t->hidden, .experts = t->experts, .weights = t->weights};
    progress p = {.n_layers = h->n_layers};
    a.o.progress = on_layer;
    a.o.ctx = &p;
    mvm_predictor_eval *ev = calloc(h->n_layers, sizeof *ev);
    void *blob = NULL;
    size_t size = 0;
    if (!ev) {
        fprintf(stderr, "moevm %s: out of memory\n", cmd);
        mvm_trace_free(t);
        return 1;
    }
    fprintf(stderr, "%s: %s: %u tokens, %u layers, %u experts, top-%u, n_embd %u\n", cmd,
            a.trace, t->n_tokens, h->n_layers, h->n_experts, h->top_k, h->n_embd);
    if (mvm_predictor_train(&d, &a.o, ev, &blob, &size) != MVM_OK) {
        rc = mvm_cli_error(cmd, NULL);
    } else {
        rc = write_file(a.out, blob, size);
        if (!rc)
            print_table(&a, t, ev, size);
    }
    free(blob);
    free(ev);
    mvm_trace_free(t);
    return rc;
}
