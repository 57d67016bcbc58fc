/* `moevm trace gen | stats`: synthetic routing traces, and the statistics that compare a
 * trace (generated or recorded by `moevm run --trace-out`) with the published ones. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"
#include "tools/trace_gen.h"

static void usage(FILE *f)
{
    mvm_trace_gen d;
    mvm_trace_gen_init(&d);
    fprintf(f,
            "usage: moevm trace gen --shape NAME|L,E,K[,EMBD,FF] [--layers N] [--tokens N]\n"
            "                       [--requests R] [--skew S] [--reuse P] [--layer-corr C]\n"
            "                       [--shift-every N] [--drift S] [--drift-tokens T]\n"
            "                       [--seed N] -o OUT.jsonl\n"
            "       moevm trace stats FILE.jsonl\n"
            "gen writes a synthetic routing trace (docs/trace-format.md):\n"
            "  --shape        %s,\n"
            "                 or L layers, E experts, top-K (EMBD, FF default 2048, 1024)\n"
            "  --layers       a named shape's first N blocks, as `moevm mkmodel --layers N`\n"
            "                 makes the model (its MoE layers: those not leading dense blocks)\n"
            "  --tokens       tokens in all (default %u)\n"
            "  --requests     requests sharing them equally (default %u)\n"
            "  --skew         Zipf exponent of each layer's expert popularity, 0..8 (default %g)\n"
            "  --reuse        probability that a selection carries over to the next token,\n"
            "                 0..1 (default %g)\n"
            "  --layer-corr   probability that a layer's top expert follows the previous\n"
            "                 layer's, 0..1 (default %g)\n"
            "  --shift-every  a new task (other hot experts) every N tokens, 0 = never\n"
            "                 (default %u)\n"
            "  --drift        strength (nats) of the context: each expert's logit offset,\n"
            "                 drifting from token to token, 0..8 (default %g)\n"
            "  --drift-tokens how many tokens the context lasts (its time constant, default %u)\n"
            "  --latent-scores  record the scores without the per-token draw that selects\n"
            "                 (popularity and context only): not a router's, the most an\n"
            "                 online policy could know; for bounds (docs/perf/policies.md)\n"
            "  --seed         same seed, same trace (default %llu)\n"
            "stats prints per layer the top-1/8 experts' share of selections, the normalised\n"
            "entropy, the reuse rates (next token, within 8) and the adjacent-layer correlation,\n"
            "with the published numbers to compare with.\n",
            mvm_trace_gen_shape_names(), d.tokens, d.requests, d.skew, d.reuse, d.layer_corr,
            d.shift_every, d.drift, d.drift_tokens, (unsigned long long)d.seed);
}

static int cmd_gen(int argc, char **argv)
{
    static const char *cmd = "trace gen";
    mvm_trace_gen g;
    mvm_trace_gen_init(&g);
    const char *shape = NULL, *out = NULL;
    uint32_t blocks = 0; /* 0: the shape's own */
    enum { O_LATENT = 1, O_SHAPE, O_OUT, O_TOKENS, O_REQUESTS, O_SHIFT, O_SEED, O_SKEW,
           O_REUSE, O_DRIFT, O_DRIFT_TOKENS, O_LAYER_CORR, O_LAYERS };
    static const mvm_cli_opt opts[] = {
        {"latent-scores", 0, 0, O_LATENT}, {"shape", 0, 1, O_SHAPE},
        {"output", 'o', 1, O_OUT},         {"tokens", 0, 1, O_TOKENS},
        {"requests", 0, 1, O_REQUESTS},    {"shift-every", 0, 1, O_SHIFT},
        {"seed", 0, 1, O_SEED},            {"skew", 0, 1, O_SKEW},
        {"reuse", 0, 1, O_REUSE},          {"drift", 0, 1, O_DRIFT},
        {"drift-tokens", 0, 1, O_DRIFT_TOKENS}, {"layer-corr", 0, 1, O_LAYER_CORR},
        {"layers", 0, 1, O_LAYERS},        {0}};
    mvm_cli_iter it = {.cmd = cmd, .usage = usage, .opts = opts, .argc = argc, .argv = argv};
    int next;
    while ((next = mvm_cli_next(&it)) == MVM_CLI_OPTION) {
        const char *a = it.flag, *v = it.value;
        uint32_t u = 0;
        int rc = 0;
        switch (it.id) {
        case O_LATENT: g.latent_scores = 1; break;
        case O_SHAPE: shape = v; break;
        case O_OUT: out = v; break;
        case O_LAYERS: rc = mvm_cli_u32(cmd, a, v, 1, UINT32_MAX, &blocks); break;
        case O_TOKENS: rc = mvm_cli_u32(cmd, a, v, 1, UINT32_MAX, &g.tokens); break;
        case O_REQUESTS: rc = mvm_cli_u32(cmd, a, v, 1, UINT32_MAX, &g.requests); break;
        case O_SHIFT: rc = mvm_cli_u32(cmd, a, v, 0, UINT32_MAX, &g.shift_every); break;
        case O_DRIFT_TOKENS: rc = mvm_cli_u32(cmd, a, v, 1, UINT32_MAX, &g.drift_tokens); break;
        case O_SEED:
            rc = mvm_cli_u32(cmd, a, v, 0, UINT32_MAX, &u);
            g.seed = u;
            break;
        case O_SKEW: rc = mvm_cli_float_to_double(cmd, a, v, 0, 8, &g.skew); break;
        case O_REUSE: rc = mvm_cli_float_to_double(cmd, a, v, 0, 1, &g.reuse); break;
        case O_DRIFT: rc = mvm_cli_float_to_double(cmd, a, v, 0, 8, &g.drift); break;
        case O_LAYER_CORR: rc = mvm_cli_float_to_double(cmd, a, v, 0, 1, &g.layer_corr); break;
        }
        if (rc)
            return rc;
    }
    if (next != MVM_CLI_END)
        return next;
    if (!shape || !out) {
        fprintf(stderr, "moevm %s: %s is required (--help for usage)\n", cmd,
                !shape ? "--shape" : "-o OUT.jsonl");
        return 2;
    }
    if (mvm_trace_gen_set_shape(&g, shape) != MVM_OK) {
        fprintf(stderr, "moevm %s: --shape: %s\n", cmd, mvm_last_error());
        return 2;
    }
    if (blocks && mvm_trace_gen_cut_layers(&g, blocks) != MVM_OK) {
        fprintf(stderr, "moevm %s: --layers: %s\n", cmd, mvm_last_error());
        return 2;
    }
    if (g.requests > g.tokens) {
        fprintf(stderr, "moevm %s: --requests %u: more requests than the %u tokens\n", cmd,
                g.requests, g.tokens);
        return 2;
    }
    mvm_trace *t;
    if (mvm_trace_generate(&g, &t) != MVM_OK)
        return mvm_cli_error(cmd, NULL);
    mvm_status st = mvm_trace_save(t, out);
    mvm_trace_free(t);
    if (st != MVM_OK)
        return mvm_cli_error(cmd, NULL);
    printf("%s: %u tokens in %u request%s, %s (%u layers, %u experts, top-%u)\n", out, g.tokens,
           g.requests, g.requests == 1 ? "" : "s", g.shape, g.hdr.n_layers, g.hdr.n_experts,
           g.hdr.top_k);
    return 0;
}

static void print_row(const char *label, const mvm_trace_layer_stats *s, int first_layer)
{
    printf("%6s  %8.1f%%  %7.3f  %6.1f%%  %6.1f%%", label, 100 * s->top_share, s->entropy,
           100 * s->reuse, 100 * s->reuse8);
    if (first_layer)
        printf("  %10s  %7s\n", "-", "-");
    else
        printf("  %9.1f%%  %6.1f%%\n", 100 * s->pair_share, 100 * s->follow);
}

static int cmd_stats(int argc, char **argv)
{
    mvm_cli_iter it = {.cmd = "trace stats", .usage = usage, .max_args = 1, .argc = argc,
                       .argv = argv};
    int next = mvm_cli_next(&it); /* no options but --help; the file */
    if (next != MVM_CLI_END)
        return next;
    if (it.n_args != 1) {
        fprintf(stderr, "moevm trace stats: FILE.jsonl is required (see --help)\n");
        return 2;
    }
    const char *path = it.args[0];
    mvm_trace *t;
    if (mvm_trace_load(path, &t) != MVM_OK)
        return mvm_cli_error("trace stats", NULL);
    const mvm_trace_header *h = &t->hdr;
    mvm_trace_layer_stats mean;
    mvm_trace_layer_stats *per = malloc(h->n_layers * sizeof *per);
    if (!per || mvm_trace_stats(t, per, &mean) != MVM_OK) {
        int rc = per ? mvm_cli_error("trace stats", NULL) : 1;
        if (!per)
            fprintf(stderr, "moevm trace stats: out of memory\n");
        free(per);
        mvm_trace_free(t);
        return rc;
    }
    printf("%s: \"%s\" (%s), %u layers, %u experts, top-%u, %u tokens\n", path, h->model,
           h->arch, h->n_layers, h->n_experts, h->top_k, t->n_tokens);
    printf("%6s  %9s  %7s  %7s  %7s  %10s  %7s\n", "layer", "top-1/8", "entropy", "reuse",
           "reuse-8", "pairs-20%", "follow");
    for (uint32_t l = 0; l < h->n_layers; l++) {
        char label[16];
        snprintf(label, sizeof label, "%u", l);
        print_row(label, &per[l], l == 0);
    }
    print_row("mean", &mean, h->n_layers == 1);
    printf("\ntop-1/8: share of selections on the layer's top E/8 experts; entropy: of the\n"
           "selection counts, / ln E; reuse: share of selections the previous token also made;\n"
           "reuse-8: made by one of the previous 8 tokens (tokens that have 8);\n"
           "pairs-20%%: share of adjacent-layer expert pairs on the top 20%% of pairs; follow:\n"
           "top expert = the most frequent successor of the previous layer's (in-sample).\n"
           "Published (sources in moevm's tools/trace_gen.c): Qwen3-30B-A3B\n"
           "top-16/128 41-68%%, entropy 0.74-0.875, reuse 38.9-45%%, reuse-8 80%%;\n"
           "pairs-20%% 45%% DeepSeek-V3, 68%% Qwen3-235B, 80%% Llama4; follow 44.9%% Mixtral\n"
           "(from one previous expert).\n");
    free(per);
    mvm_trace_free(t);
    return 0;
}

int mvm_cmd_trace(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "gen") == 0)
        return cmd_gen(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "stats") == 0)
        return cmd_stats(argc - 1, argv + 1);
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(stdout);
        return 0;
    }
    if (argc >= 2)
        fprintf(stderr, "moevm trace: unknown subcommand '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
