/*
 * `moevm bench`: prompt processing and generation speed of a model, as llama.cpp's
 * llama-bench measures them (ppN: N prompt tokens in one evaluation; tgN: N tokens one at a
 * time; random token ids, a fresh KV cache each repetition, one untimed warm-up first; the
 * logits of each evaluation's last token computed, as llama-bench's are), over
 * a grid of thread counts and device budgets, so that a budget sweep shows what the expert
 * space costs. Each row adds what llama-bench cannot: the share of expert accesses that
 * found the expert resident, and the bytes moved into the budget per token.
 *
 * The warm-up also fills the budget, so the timed repetitions measure the steady state of
 * the evict policy, not the cold start (`moevm run` reports that).
 *
 * --routing TRACE.jsonl is a benchmark mode: random-weight models route with almost no
 * locality, so caches and predictors look worse on them than on real models. It replays a
 * trace's expert choices (`moevm run --trace-out` of a real model, or `moevm trace gen`)
 * in place of the router's: the computation is the same, the text is meaningless. The table
 * says which routing each row used. The replay runs on through the trace across
 * repetitions (wrapping at its end), so the timed repetitions do not repeat the warm-up's
 * tokens.
 *
 * -d (llama-bench's --n-depth) runs each test after a prompt of that many tokens, evaluated
 * untimed into the fresh cache of each repetition (the warm-up's too): tgN @ dD is decode
 * reading a KV cache D tokens deep, what a long conversation's replies cost.
 *
 * -o chooses how the rows come out (tools/bench_out.h): the markdown table, CSV, JSON.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/compute/clock.h"
#include "engine/forward/forward.h"
#include "engine/plan/plan.h"
#include "policy/cost_load.h"
#include "tools/bench_out.h"
#include "tools/cli.h"
#include "tools/trace.h"
#include "vmm/error.h"

#define BENCH_MAX_AXIS 16  /* values of a list (-p, -n, -d, -t, --gpu-budget, --kv-type) */
#define BENCH_MAX_REPS 1000 /* -r */

struct bench_args {
    const char *model, *evict, *evict_args, *routing;
    const char *kv_types[BENCH_MAX_AXIS]; /* --kv-type's (-ctk's, -ctv's) list, each in turn */
    uint32_t n_kv_types;                  /* 0: MOEVM_KV_TYPE's */
    /* -p's and -n's lists: a ppN test for each nonzero N, then a tgN test for each */
    uint32_t n_prompt[BENCH_MAX_AXIS], n_prompts, n_gen[BENCH_MAX_AXIS], n_gens;
    uint32_t n_depth[BENCH_MAX_AXIS], n_depths; /* -d: each test once at each depth */
    uint32_t reps, batch;
    uint32_t threads[BENCH_MAX_AXIS], n_threads;
    char *budgets[BENCH_MAX_AXIS]; /* NULL: MOEVM_GPU_BUDGET */
    uint32_t n_budgets;
    uint32_t cpu_moe[BENCH_MAX_AXIS]; /* --n-cpu-moe's, the budgets instead when n_cpu_moe */
    uint32_t n_cpu_moe;
    int format; /* -o: mvm_bench_formats */
};

static void usage(FILE *f)
{
    fputs("usage: moevm bench -m MODEL.gguf [-p N[,...]] [-n N[,...]] [-d N[,...]] [-r REPS]\n"
          "                   [-t THREADS[,...]]\n"
          "                   [--gpu-budget SIZE|PCT[,...] | --n-cpu-moe N[,...]]\n"
          "                   [--evict NAME[{k=v,...}]] [-b N] [--kv-type TYPE[,...]]\n"
          "                   [--routing TRACE.jsonl] [-o text|csv|json|jsonl]\n"
          "  -m, --model   the GGUF model\n"
          "  -p, --n-prompt  prompt tokens evaluated at once: the ppN test, one for each N of\n"
          "                the list (default 512; 0: none)\n"
          "  -n, --n-gen   tokens generated one at a time: the tgN test, one for each N of the\n"
          "                list (default 128; 0: none)\n"
          "  -d, --n-depth  tokens in the KV cache before each test (llama-bench's: a prompt\n"
          "                of random tokens evaluated untimed first), one row for each N of\n"
          "                the list (default 0): tgN @ dD is decode after D tokens of context\n"
          "  -r, --repetitions  timed repetitions of each test, after one warm-up (default 5)\n"
          "  -t, --threads thread counts to try (default: the cores near the GPU, or all)\n"
          "  --gpu-budget  device budgets to try, each a size, a percentage of the experts\n"
          "                or auto (default MOEVM_GPU_BUDGET; on the CPU auto reads the experts\n"
          "                at their homes, the budget column's 'home', and a budget emulates a\n"
          "                device)\n"
          "  --n-cpu-moe, -ncmoe  llama-bench's, as budgets to try: the experts of all but N\n"
          "                MoE layers, (layers - N) / layers of their pages (not with\n"
          "                --gpu-budget); N >= the layers (99): every expert computed on\n"
          "                the CPU, the rest on a GPU where there is one (budget 'home')\n"
          "  -ngl, --n-gpu-layers  llama-bench's, accepted with any value and ignored:\n"
          "                attention and dense weights always go to the GPU when there is one\n"
          "  --cpu-moe, -cmoe  llama.cpp's: --n-cpu-moe of every layer (docs/llama-flags.md\n"
          "                lists llama.cpp's other flags, taken and ignored or refused)\n"
          "  --evict       the evict policy module (default MOEVM_EVICT; docs/policies.md)\n"
          "  -b, --batch, --batch-size  prompt tokens per forward pass (default 512)\n"
          "  --kv-type, -ctk, -ctv  the KV cache's elements (run's), each type of\n"
          "                the list in turn (default MOEVM_KV_TYPE, f16); -ctk's and -ctv's\n"
          "                lists must be the same: one type keys and values alike\n"
          "  --routing     benchmark mode: replay this routing trace's expert choices (moevm\n"
          "                run --trace-out of a real model, or moevm trace gen) instead of\n"
          "                the router's; the trace must have the model's layers, experts, top-k\n"
          "  -o, --output, --output-format  how the rows come out on stdout, one per test of\n"
          "                a configuration: text (default; md, its llama-bench name): a\n"
          "                markdown table; csv: a header line, then the rows; json: an array\n"
          "                of objects; jsonl: an object a line. Their fields: docs/engine.md\n"
          "The table: tokens/s as mean +- standard deviation over the repetitions, the expert\n"
          "hit rate and the MiB moved into the budget per token. CSV and JSON give the hit\n"
          "rate as a fraction, and JSON each repetition's tokens/s too.\n",
          f);
}

/* "1,2,4" into the list `out` of at most BENCH_MAX_AXIS values, split in place. */
static int split_list(const char *flag, char *v, char **out, uint32_t *n)
{
    *n = 0;
    if (*v && mvm_cli_list("bench", flag, v))
        return 2;
    for (char *save = NULL, *p = strtok_r(v, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        if (*n == BENCH_MAX_AXIS) {
            fprintf(stderr, "moevm bench: %s: at most %d values\n", flag, BENCH_MAX_AXIS);
            return 2;
        }
        out[(*n)++] = p;
    }
    if (*n == 0) {
        fprintf(stderr, "moevm bench: %s: expected a comma-separated list\n", flag);
        return 2;
    }
    return 0;
}

/* --kv-type's list, or llama-bench's -ctk / -ctv lists, which must be the same list here:
 * moevm's cache keeps keys and values in one type (mvm_cli_kv_type checks each pair). */
static int parse_kv_types(struct bench_args *a, const char *flag, char *v)
{
    char *items[BENCH_MAX_AXIS];
    uint32_t n;
    if (split_list(flag, v, items, &n))
        return 2;
    const int paired = a->n_kv_types && mvm_cli_kv_llama_flag(flag);
    if (paired && n != a->n_kv_types) {
        fprintf(stderr, "moevm bench: %s: a list of %u, after one of %u: moevm's KV cache keeps "
                "keys and values in one type\n", flag, n, a->n_kv_types);
        return 2;
    }
    for (uint32_t i = 0; i < n; i++) {
        const char *t = paired ? a->kv_types[i] : NULL;
        if (mvm_cli_kv_type("bench", flag, items[i], &t))
            return 2;
        a->kv_types[i] = t;
    }
    a->n_kv_types = n;
    return 0;
}

/* The list's type of the largest cache (f32, then f16, then q8_0), which the space is
 * planned for; NULL: MOEVM_KV_TYPE's. */
static const char *largest_kv(const struct bench_args *a)
{
    static const char *const by_size[] = {"f32", "f16", "q8_0"};
    for (size_t s = 0; s < sizeof by_size / sizeof *by_size; s++)
        for (uint32_t i = 0; i < a->n_kv_types; i++)
            if (!strcmp(a->kv_types[i], by_size[s]))
                return by_size[s];
    return NULL;
}

/* -p's, -n's, -t's or --n-cpu-moe's list of integers in [lo, hi] into out[], *n of them. */
static int parse_u32_list(const char *flag, char *v, uint32_t lo, uint32_t hi, uint32_t *out,
                          uint32_t *n)
{
    char *items[BENCH_MAX_AXIS];
    int bad = split_list(flag, v, items, n);
    for (uint32_t i = 0; !bad && i < *n; i++)
        bad = mvm_cli_u32("bench", flag, items[i], lo, hi, &out[i]);
    return bad;
}

enum {
    O_MODEL = 1, O_PROMPT, O_GEN, O_REPS, O_THREADS, O_BUDGET, O_CPU_MOE, O_NGL, O_EVICT,
    O_BATCH, O_KV_TYPE, O_ROUTING, O_OUTPUT, O_DEPTH
};

/* The options, llama-bench's spellings among them where they mean the same. */
static const mvm_cli_opt bench_opts[] = {
    {"model", 'm', 1, O_MODEL},       {"n-prompt", 'p', 1, O_PROMPT},
    {"n-gen", 'n', 1, O_GEN},         {"n-depth", 'd', 1, O_DEPTH},
    {"repetitions", 'r', 1, O_REPS},
    {"threads", 't', 1, O_THREADS},   {"gpu-budget", 0, 1, O_BUDGET},
    MVM_CLI_GPU_OPTS(O_NGL, O_CPU_MOE, O_KV_TYPE), {"evict", 0, 1, O_EVICT},
    {"batch", 'b', 1, O_BATCH},       {"batch-size", 0, 1, O_BATCH},
    {"kv-type", 0, 1, O_KV_TYPE},     {"routing", 0, 1, O_ROUTING},
    {"output", 'o', 1, O_OUTPUT},     {"output-format", 0, 1, O_OUTPUT},
    {0}};

static int parse_option(struct bench_args *a, int id, const char *f, char *v)
{
    switch (id) {
    case O_MODEL: a->model = v; return 0;
    case O_ROUTING: a->routing = v; return 0;
    case O_NGL: mvm_cli_gpu_layers("bench", f); return 0;
    case O_PROMPT: return parse_u32_list(f, v, 0, 1u << 16, a->n_prompt, &a->n_prompts);
    case O_GEN: return parse_u32_list(f, v, 0, 1u << 16, a->n_gen, &a->n_gens);
    case O_DEPTH: return parse_u32_list(f, v, 0, 1u << 20, a->n_depth, &a->n_depths);
    case O_REPS: return mvm_cli_u32("bench", f, v, 1, BENCH_MAX_REPS, &a->reps);
    case O_THREADS: return parse_u32_list(f, v, 1, 1024, a->threads, &a->n_threads);
    case O_BUDGET: return split_list(f, v, a->budgets, &a->n_budgets);
    case O_CPU_MOE:
        if (!v) /* --cpu-moe, every layer */
            return a->n_cpu_moe = 1, mvm_cli_n_cpu_moe("bench", f, NULL, a->cpu_moe);
        return parse_u32_list(f, v, 0, MVM_CLI_CPU_MOE_ALL, a->cpu_moe, &a->n_cpu_moe);
    case O_EVICT: return mvm_cli_policy("bench", f, v, &a->evict, &a->evict_args);
    case O_BATCH: return mvm_cli_u32("bench", f, v, 1, 4096, &a->batch);
    case O_KV_TYPE: return parse_kv_types(a, f, v);
    case O_OUTPUT: return mvm_cli_choice("bench", f, v, mvm_bench_formats, &a->format);
    }
    return 0;
}

/* The largest of v[0 .. n). */
static uint32_t most(const uint32_t *v, uint32_t n)
{
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

static int parse_args(int argc, char **argv, struct bench_args *a)
{
    *a = (struct bench_args){.n_prompt = {512}, .n_prompts = 1, .n_gen = {128}, .n_gens = 1,
                             .n_depths = 1, .reps = 5, .batch = MVM_DEFAULT_BATCH, .n_threads = 1,
                             .n_budgets = 1};
    mvm_cli_iter it = {.cmd = "bench", .usage = usage, .opts = bench_opts, .argc = argc,
                       .argv = argv};
    int next, budget_given = 0;
    while ((next = mvm_cli_next(&it)) == MVM_CLI_OPTION) {
        budget_given |= it.id == O_BUDGET;
        if (parse_option(a, it.id, it.flag, it.value))
            return 2;
    }
    if (next != MVM_CLI_END)
        return next;
    if (mvm_cli_need_model("bench", a->model))
        return 2;
    if (most(a->n_prompt, a->n_prompts) == 0 && most(a->n_gen, a->n_gens) == 0) {
        fprintf(stderr, "moevm bench: -p 0 and -n 0 leave nothing to measure\n");
        return 2;
    }
    if (mvm_cli_budget_or_cpu_moe("bench", budget_given, a->n_cpu_moe != 0))
        return 2;
    /* every budget before the first measurement, not after minutes of them */
    for (uint32_t b = 0; b < a->n_budgets; b++) {
        mvm_space_desc desc;
        int bad = mvm_cli_space_desc("bench", "--gpu-budget", a->budgets[b], &desc);
        if (bad)
            return bad;
    }
    if (a->n_cpu_moe)
        a->n_budgets = a->n_cpu_moe;
    return -1;
}

/* A routing trace replayed (--routing): token `pos` of the current repetition is the
 * trace's token (base + pos) mod its length. */
struct replay {
    const mvm_trace *t;
    uint64_t base;
};

static void replay_route(void *ctx, uint32_t layer, uint32_t pos, int *sel, float *w)
{
    const struct replay *r = ctx;
    uint32_t tok = (uint32_t)((r->base + pos) % r->t->n_tokens);
    const int32_t *x = mvm_trace_experts(r->t, tok, layer);
    const float *xw = mvm_trace_weights(r->t, tok, layer);
    for (uint32_t k = 0; k < r->t->hdr.top_k; k++) {
        sel[k] = x[k];
        w[k] = xw[k];
    }
}

/* The trace must route the model: its layers, experts and top-k. */
static int replay_check(const mvm_trace *t, const mvm_model *m, const char *path)
{
    const mvm_hparams *hp = &m->hp;
    if (t->hdr.n_layers == hp->n_layer && t->hdr.n_experts == hp->n_expert &&
        t->hdr.top_k == hp->n_expert_used && t->n_tokens > 0)
        return 0;
    fprintf(stderr, "moevm bench: --routing %s: the trace routes %u layers of %u experts, top "
            "%u (%u tokens); the model has %u MoE layers of %u experts, top %u\n", path,
            t->hdr.n_layers, t->hdr.n_experts, t->hdr.top_k, t->n_tokens, hp->n_layer,
            hp->n_expert, hp->n_expert_used);
    return 2;
}

/* One configuration's loaded model and the generator of its token ids. */
struct bench_run {
    const struct bench_args *a;
    struct replay *replay; /* NULL: the model's own routing */
    mvm_model *model;
    mvm_pool *pool;
    const mvm_machine *machine;
    uint64_t rng;
    int32_t *tokens; /* ids for the longest prompt or depth (at least 1) */
    float *logits;   /* n_vocab: each evaluation's last token's, as llama-bench computes them */
    int progress;    /* stderr is a terminal */
    mvm_bench_out *out;
};

static int32_t random_token(struct bench_run *r)
{
    r->rng = r->rng * 6364136223846793005ull + 1442695040888963407ull; /* Knuth's LCG */
    return (int32_t)((r->rng >> 33) % r->model->hp.n_vocab);
}

/* What one repetition of a test measured. */
struct rep_result {
    double seconds;      /* the test's tokens, at once or one at a time */
    uint64_t accesses, hits, moved; /* the experts', and the bytes moved */
    double waited;       /* seconds the steps waited for their copies */
};

/* Tokens of the untimed depth evaluated at a time: a deep cache takes minutes to fill (100000
 * positions of OLMoE's shape on two cores), so a terminal is told how far it is after each. */
#define DEPTH_CHUNK 4096u

/* One repetition of a test on ctx: n tokens at once (gen 0) or one at a time (gen 1), after
 * `depth` tokens evaluated untimed into an empty KV cache. */
static mvm_status run_test(struct bench_run *r, mvm_ctx *ctx, int gen, uint32_t n,
                           uint32_t depth, struct rep_result *out)
{
    mvm_ctx_reset(ctx);
    mvm_status st = MVM_OK;
    for (uint32_t i = 0; i < depth; i++)
        r->tokens[i] = random_token(r);
    for (uint32_t at = 0; at < depth; at += DEPTH_CHUNK) {
        const uint32_t k = depth - at < DEPTH_CHUNK ? depth - at : DEPTH_CHUNK;
        if ((st = mvm_ctx_eval(ctx, r->tokens + at, k, NULL, 0)) != MVM_OK)
            return st;
        if (r->progress && depth > DEPTH_CHUNK)
            fprintf(stderr, "\r%s%u @ d%u: the cache, %u of %u tokens", gen ? "tg" : "pp", n,
                    depth, at + k, depth);
    }
    for (uint32_t i = 0; i < (gen ? 1 : n); i++)
        r->tokens[i] = random_token(r);
    mvm_stats before, after;
    mvm_resid_stats rs0, rs1;
    mvm_space_get_stats(r->model->space, &before);
    mvm_resid_get_stats(mvm_ctx_residency(ctx), &rs0);
    double t0 = mvm_now_s();
    if (!gen)
        st = mvm_ctx_eval(ctx, r->tokens, n, r->logits, 0);
    for (uint32_t i = 0; gen && i < n && st == MVM_OK; i++) {
        int32_t t = random_token(r); /* drawn while timed: a few ns against a forward pass */
        st = mvm_ctx_eval(ctx, &t, 1, r->logits, 0);
    }
    out->seconds = mvm_now_s() - t0;
    mvm_space_get_stats(r->model->space, &after);
    mvm_resid_get_stats(mvm_ctx_residency(ctx), &rs1);
    out->accesses = rs1.accesses - rs0.accesses;
    out->hits = rs1.hits - rs0.hits;
    out->moved = after.bytes_moved - before.bytes_moved;
    out->waited = rs1.wait_s - rs0.wait_s;
    if (r->replay)
        r->replay->base += depth + n;
    return st;
}

/* The warm-up and the repetitions of test `gen` at `depth` (see run_test), and its row: `row` holds
 * the configuration's columns. One context serves them all, as llama-bench's does: its
 * buffers are touched by the warm-up, not by a timed run (a fresh context's first prompt of
 * 512 spent about a quarter of its time in page faults: docs/perf/cpu.md), and its
 * residency policy goes on learning from one repetition to the next, as a server's would. */
static int bench_test(struct bench_run *r, int gen, uint32_t n, uint32_t depth,
                      const char *kv, mvm_bench_row row)
{
    const struct bench_args *a = r->a;
    double sum = 0, sum2 = 0, samples[BENCH_MAX_REPS], seconds = 0, waited = 0;
    uint64_t accesses = 0, hits = 0, moved = 0;
    mvm_ctx_policies pol = {.residency = {.evict = a->evict, .evict_args = a->evict_args,
                                          .machine = r->machine},
                            .kv_type = kv};
    if (r->replay) {
        pol.route_override = replay_route;
        pol.route_override_ctx = r->replay;
    }
    mvm_ctx *ctx;
    if (mvm_ctx_create(r->model, r->pool, depth + n, a->batch, &pol, &ctx) != MVM_OK)
        return mvm_cli_error("bench", "creating the context");
    row.kv = mvm_ctx_kv_type(ctx); /* a static name: "f16", ... */
    for (uint32_t rep = 0; rep <= a->reps; rep++) {
        struct rep_result res;
        if (run_test(r, ctx, gen, n, depth, &res) != MVM_OK) {
            mvm_ctx_free(ctx);
            return mvm_cli_error("bench", gen ? "generation" : "prompt");
        }
        if (r->progress) /* on a terminal only: a log would fill with the redraws */
            fprintf(stderr, "\r%-60s\r%s%u%s%.0u: %s %u of %u", "", gen ? "tg" : "pp", n,
                    depth ? " @ d" : "", depth, rep ? "repetition" : "warm-up", rep ? rep : 1,
                    rep ? a->reps : 1);
        if (rep == 0)
            continue;
        double tps = res.seconds > 0 ? n / res.seconds : 0;
        samples[rep - 1] = tps;
        sum += tps;
        sum2 += tps * tps;
        accesses += res.accesses;
        hits += res.hits;
        moved += res.moved;
        seconds += res.seconds;
        waited += res.waited;
    }
    mvm_ctx_free(ctx);
    if (r->progress)
        fprintf(stderr, "\r%*s\r", 60, "");
    double mean = sum / a->reps;
    double var = a->reps > 1 ? (sum2 - sum * mean) / (a->reps - 1) : 0;
    row.gen = gen;
    row.n_tokens = n;
    row.n_depth = depth;
    row.reps = a->reps;
    row.samples_ts = samples;
    row.avg_ts = mean;
    row.stddev_ts = var > 0 ? sqrt(var) : 0.0;
    /* experts read at their homes: no residency to report */
    row.hit_rate = r->model->experts_at_home ? -1
                 : accesses ? (double)hits / (double)accesses : 0.0;
    row.mib_per_token = (double)moved / 1048576.0 / ((double)n * a->reps);
    row.load_wait = r->model->experts_at_home ? -1 : seconds > 0 ? waited / seconds : 0.0;
    mvm_bench_out_row(r->out, &row);
    return 0;
}

/* The model loaded on `pool` for budget b: --gpu-budget's, or --n-cpu-moe's once the
 * model's shape is known. 0, or the exit code after a one-line error. */
static int bench_load(const struct bench_args *a, mvm_pool *pool, uint32_t b, mvm_model **out)
{
    mvm_space_desc desc;
    int rc = mvm_cli_space_desc("bench", "--gpu-budget", a->n_cpu_moe ? NULL : a->budgets[b],
                                &desc);
    mvm_model *m = NULL;
    if (rc || mvm_model_open(a->model, &m) != MVM_OK)
        return rc ? rc : mvm_cli_error("bench", "loading the model");
    if (a->n_cpu_moe && (rc = mvm_cli_cpu_moe("bench", a->cpu_moe[b], m, &desc))) {
        mvm_model_free(m);
        return rc;
    }
    char label[600];
    snprintf(label, sizeof label, "loading %s", a->model);
    /* the longest test's positions, after the deepest cache */
    const uint32_t pp = most(a->n_prompt, a->n_prompts), tg = most(a->n_gen, a->n_gens);
    const mvm_ctx_shape ctx = {(pp > tg ? pp : tg) + most(a->n_depth, a->n_depths), a->batch,
                               largest_kv(a)};
    mvm_space *space;
    mvm_status st = mvm_plan_space(m, &ctx, &desc, &space);
    if (st == MVM_OK)
        st = mvm_model_load_experts(m, space, pool, NULL, mvm_cli_progress, label);
    if (st != MVM_OK) {
        rc = mvm_cli_error("bench", "loading the model");
        mvm_model_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

/* Loads the model for one budget on `pool` and runs both tests. */
static int bench_config(const struct bench_args *a, const mvm_machine *machine, mvm_pool *pool,
                        uint32_t b, struct replay *replay, mvm_bench_out *out)
{
    struct bench_run r = {.a = a, .pool = pool, .machine = machine, .rng = 42,
                          .progress = isatty(STDERR_FILENO), .replay = replay, .out = out};
    int rc = bench_load(a, pool, b, &r.model);
    if (rc)
        return rc;
    if (replay && (rc = replay_check(replay->t, r.model, a->routing))) {
        mvm_model_free(r.model);
        return rc;
    }
    const uint32_t pp = most(a->n_prompt, a->n_prompts), depth = most(a->n_depth, a->n_depths);
    const uint32_t n_ids = pp > depth ? pp : depth, tg = most(a->n_gen, a->n_gens);
    const uint32_t used = (pp > tg ? pp : tg) + depth, trained = r.model->hp.n_ctx_train;
    if (b == 0 && trained && used > trained) /* as moevm run and llama.cpp warn */
        fprintf(stderr, "moevm bench: warning: the deepest test reaches %u positions, past the %u "
                "the model was trained on (context_length)\n", used, trained);
    r.tokens = malloc((n_ids ? n_ids : 1) * sizeof *r.tokens);
    r.logits = malloc(r.model->hp.n_vocab * sizeof *r.logits);
    if (!r.tokens || !r.logits) {
        free(r.tokens), free(r.logits);
        mvm_model_free(r.model);
        return mvm_cli_error("bench", NULL);
    }
    mvm_space_info info;
    mvm_space_get_info(r.model->space, &info);
    char types[64];
    const mvm_bench_row row = {
        .model = a->model, .arch = r.model->arch->name,
        .experts = mvm_model_expert_types(r.model, types, sizeof types),
        .experts_gib = (double)r.model->expert_bytes * r.model->hp.n_layer *
                       r.model->hp.n_expert / 1073741824.0,
        .backend = info.backend, .threads = mvm_pool_size(pool),
        .budget_gib = r.model->experts_at_home
            ? -1 : (double)info.device_bytes / 1073741824.0,
        .routing = replay ? "replay" : "own"};
    /* llama-bench's order: each cache type in turn (its parameters' instances), and there
     * each test at every depth in turn */
    for (uint32_t k = 0; !rc && k < (a->n_kv_types ? a->n_kv_types : 1); k++) {
        const char *kv = a->n_kv_types ? a->kv_types[k] : NULL;
        for (uint32_t i = 0; !rc && i < a->n_prompts; i++)
            for (uint32_t d = 0; !rc && a->n_prompt[i] && d < a->n_depths; d++)
                rc = bench_test(&r, 0, a->n_prompt[i], a->n_depth[d], kv, row);
        for (uint32_t i = 0; !rc && i < a->n_gens; i++)
            for (uint32_t d = 0; !rc && a->n_gen[i] && d < a->n_depths; d++)
                rc = bench_test(&r, 1, a->n_gen[i], a->n_depth[d], kv, row);
    }
    free(r.tokens), free(r.logits);
    mvm_model_free(r.model);
    return rc;
}

int mvm_cmd_bench(int argc, char **argv)
{
    struct bench_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0)
        return rc;
    rc = 0;
    mvm_machine machine;
    if (mvm_machine_load(NULL, "MOEVM_COST", &machine) != MVM_OK)
        return mvm_cli_error("bench", NULL);
    struct replay replay = {0};
    mvm_trace *trace = NULL;
    if (a.routing && mvm_trace_load(a.routing, &trace) != MVM_OK)
        return mvm_cli_error("bench", "--routing");
    replay.t = trace;
    mvm_bench_out out = {.format = a.format, .f = stdout};
    for (uint32_t t = 0; !rc && t < a.n_threads; t++) {
        mvm_pool *pool;
        if ((rc = mvm_cli_threads("bench", a.threads[t], &pool)))
            break;
        for (uint32_t b = 0; !rc && b < a.n_budgets; b++)
            rc = bench_config(&a, &machine, pool, b, trace ? &replay : NULL, &out);
        mvm_pool_destroy(pool);
    }
    mvm_bench_out_end(&out);
    mvm_trace_free(trace);
    return rc;
}
