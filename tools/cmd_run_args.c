/* `moevm run`'s options (tools/cmd_run.h): the help, the table, their checks. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dist/dist.h"
#include "engine/plan/plan.h"
#include "tools/cli.h"
#include "tools/cmd_run.h"

/* The prompt's and the text's options. */
static void usage_text(FILE *f)
{
    fprintf(f,
            "  -m, --model   the GGUF model (or its first split part)\n"
            "  -p, --prompt  the prompt (\\n, \\t... are read as llama.cpp reads them; -f's\n"
            "                text too; --no-escape: as typed)\n"
            "  -f, --file    the prompt from a file ('-': standard input), less one final\n"
            "                newline (as llama.cpp's -f)\n"
            "  --tokens      the prompt as token ids (a model without a vocabulary prints ids)\n"
            "  -n, --n-predict  tokens to generate (default 64); stops early at end-of-text\n"
            "  --ignore-eos  never sample an end-of-generation token: always -n tokens (or\n"
            "                until a grammar is finished)\n"
            "  -r, --reverse-prompt S  stop once the text ends in S, within two bytes\n"
            "                (llama.cpp's, outside a conversation; repeatable)\n"
            "  -sp, --special  control tokens written as their texts (<|im_end|>...)\n"
            "  --no-display-prompt  the generated text alone, without the prompt before\n"
            "                it (--display-prompt: with it, the default)\n");
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: moevm run -m MODEL.gguf [-p PROMPT | -f FILE | --tokens ID,ID,...] [-n N]\n"
            "                 [-t THREADS] [--temp T] [--top-k K] [--top-p P] [--min-p P]\n"
            "                 [--repeat-penalty X] [--repeat-last-n N] [-s SEED] [-c N] [-b N]\n"
            "                 [llama.cpp's other sampling options, below]\n"
            "                 [--kv-type T] [--gpu-budget SIZE|PCT | --n-cpu-moe N]\n"
            "                 [--evict NAME[{k=v,...}]]\n"
            "                 [--predict NAME[{k=v,...}] [--predictor FILE]]\n"
            "                 [--route NAME[{k=v,...}]]\n"
            "                 [--config NAME[{k=v,...}] [--hot-profile TRACE.jsonl]]\n"
            "                 [--assign NAME[{k=v,...}]] [--cost PRESET|FILE.json]\n"
            "                 [--trace-out FILE.jsonl [--trace-hidden]] [--logits-out FILE]\n"
            "                 [--ignore-eos] [-o text|json]\n"
            "                 [--grammar GBNF | --grammar-file F | -j SCHEMA | -jf F]\n"
            "       mpirun -n RANKS moevm run ... [--place NAME[{k=v,...}]]\n"
            "                 [--server-mem SIZE|PCT[,...]] [--period TOKENS] [--homes N]\n");
    usage_text(f);
    fprintf(f,
            "  -t, --threads threads (default: the cores near the GPU, or all)\n"
            "  --temp        0 = greedy (deterministic); default 0.8, top-k 40, top-p 0.95\n"
            "  --top-k, --top-p, --min-p  the sampling filters (0, 1 and 0 are off; min-p\n"
            "                default 0, llama.cpp's 0.05)\n"
            "  --repeat-penalty  the logits of the last --repeat-last-n tokens, the prompt's\n"
            "                included, divided by X where positive, multiplied where not\n"
            "                (default 1 = off; --repeat-last-n default 64, 0 = off)\n"
            "  -s, --seed    the sampling seed (default 42)\n");
    mvm_cli_sampling_usage(f);
    fprintf(f,
            "  -c, --ctx, --ctx-size  KV cache positions (default or 0: prompt + n)\n"
            "  -b, --batch, --batch-size  prompt tokens per forward pass (default 512)\n"
            "  --kv-type, -ctk, -ctv  the KV cache's elements, keys and values alike: f16\n"
            "                (default MOEVM_KV_TYPE, f16) or f32; on the CPU backend also\n"
            "                bf16, q8_0 (about half of f16's memory), q4_0, q4_1, q5_0, q5_1,\n"
            "                iq4_nl\n"
            "  --gpu-budget  device budget for expert pages (default MOEVM_GPU_BUDGET; on the\n"
            "                CPU, auto reads every expert at its home and a budget emulates a\n"
            "                device: policies to study, copies to pay)\n"
            "  --n-cpu-moe, -ncmoe  llama.cpp's, as a budget: the experts of all but N MoE\n"
            "                layers, (layers - N) / layers of their pages (not with\n"
            "                --gpu-budget); N >= the layers (99): every expert computed on\n"
            "                the CPU, the rest on a GPU where there is one\n"
            "  -ngl, --n-gpu-layers  llama.cpp's, accepted with any value and ignored:\n"
            "                attention and dense weights always go to the GPU when there is one\n"
            "  --cpu-moe, -cmoe  llama.cpp's: --n-cpu-moe of every layer (docs/llama-flags.md\n"
            "                lists llama.cpp's other flags, taken and ignored or refused)\n"
            "  --evict       the evict policy module and its parameters, e.g. lru or\n"
            "                score{n=8} (default MOEVM_EVICT; docs/policies.md)\n"
            "  --predict     the predict module whose forecast of the next layer's experts\n"
            "                is prefetched: none, gate, residual, learned, speculative (SMoE's\n"
            "                partial pass through the next layer) (default MOEVM_PREDICT);\n"
            "                --predictor: learned's `moevm train-predictor` file\n"
            "  --route       the route module: none (default MOEVM_ROUTE: the exact model) or\n"
            "                importance{alpha=A}: a resident expert may stand in for a selected\n"
            "                one that is not, when the router barely preferred it (SMoE)\n"
            "  --config      the config module: none (default MOEVM_CONFIG: one budget), or\n"
            "                per-layer budgets and splits: uniform, hot, fixedpoint (MoEpic);\n"
            "                --hot-profile: hot's table from a profiling run's --trace-out,\n"
            "                loaded at start and held (PreScope; else the run's first tokens)\n"
            "  --assign      on a GPU, where each expert runs: gpu (default MOEVM_ASSIGN: all\n"
            "                on the GPU), or also on the CPU threads from the host copy:\n"
            "                twoptr (SMoE), greedy (DALI), presched (PreScope)\n"
            "  --cost        the machine the policies' cost model describes: a preset\n"
            "                (rtx3090, a6000, a100, h100) or a cost file from `moevm calibrate`\n"
            "                (default MOEVM_COST)\n"
            "  --trace-out   routing of every token and layer, JSON lines (docs/trace-format.md)\n"
            "  --trace-hidden  with --trace-out: also each layer's router input, for\n"
            "                `moevm train-predictor` and the gate/residual predictors (large)\n"
            "  --logits-out  every evaluated position's logits (binary, see docs/engine.md)\n");
    mvm_cli_grammar_usage(f);
    mvm_cli_meta_usage(f);
    fprintf(f,
            "  -o, --output-format  text (default): the text as it is generated, and a\n"
            "                statistics line on stderr (the modules the run used); json: one\n"
            "                JSON object on stdout at the end instead: the prompt and text,\n"
            "                token counts, prefill and decode speeds, the memory manager's\n"
            "                counters and modules (docs/engine.md)\n"
            "Ctrl-C stops the prompt's evaluation or the generation; the statistics (or the\n"
            "JSON, \"interrupted\": true) still come, and the exit code is 130.\n"
            "Under mpirun the experts are spread over the ranks; rank 0 runs the request and\n"
            "the others compute the experts they hold, each on the CPU or on its own GPU (a\n"
            "machine's GPUs taken in turn; MOEVM_DEVICE: one for all) (docs/distributed.md):\n"
            "  --homes       ranks 0..N-1 each run the request, seeded -s + rank, and serve\n"
            "                the others (Prism's home servers; default 1); mpirun's\n"
            "                --tag-output tells their texts apart\n"
            "  --place       the place module: prism (default; Prism's placement) or uniform\n"
            "  --server-mem  expert memory per rank: a size or a percentage of all experts,\n"
            "                one or one per rank (default: 1.5x an even share)\n"
            "  --period      tokens between placements, 0 to keep the first (default 256)\n"
            "A value follows its option or joins it with '=': --ctx 512, --ctx=512, -c512.\n");
}

enum {
    O_MODEL = 1, O_PROMPT, O_FILE, O_TOKENS, O_N, O_THREADS, O_TEMP, O_TOP_K, O_TOP_P,
    O_MIN_P, O_REPEAT_PENALTY, O_REPEAT_LAST_N, O_SEED, O_CTX, O_BATCH, O_KV_TYPE, O_BUDGET,
    O_CPU_MOE, O_NGL, O_EVICT, O_PREDICT, O_PREDICTOR, O_ROUTE, O_CONFIG, O_ASSIGN, O_COST,
    O_TRACE_OUT, O_TRACE_HIDDEN, O_LOGITS_OUT, O_PLACE, O_SERVER_MEM, O_PERIOD, O_OUTPUT,
    O_IGNORE_EOS, O_HOT_PROFILE, O_HOMES, O_REVERSE, O_SPECIAL, O_DISPLAY, O_NO_DISPLAY
};

/* The options, llama.cpp's spellings among them where they mean the same. */
static const mvm_cli_opt run_opts[] = {
    {"model", 'm', 1, O_MODEL},         {"prompt", 'p', 1, O_PROMPT},
    {"file", 'f', 1, O_FILE},           {"tokens", 0, 1, O_TOKENS},
    {"n-predict", 'n', 1, O_N},         {"threads", 't', 1, O_THREADS},
    {"temp", 0, 1, O_TEMP},             {"top-k", 0, 1, O_TOP_K},
    {"top-p", 0, 1, O_TOP_P},           {"min-p", 0, 1, O_MIN_P},
    {"repeat-penalty", 0, 1, O_REPEAT_PENALTY}, {"repeat-last-n", 0, 1, O_REPEAT_LAST_N},
    {"seed", 's', 1, O_SEED},           {"ctx", 'c', 1, O_CTX},
    {"ctx-size", 0, 1, O_CTX},          {"batch", 'b', 1, O_BATCH},
    {"batch-size", 0, 1, O_BATCH},      {"kv-type", 0, 1, O_KV_TYPE},
    {"gpu-budget", 0, 1, O_BUDGET},     MVM_CLI_GPU_OPTS(O_NGL, O_CPU_MOE, O_KV_TYPE),
    {"evict", 0, 1, O_EVICT},           {"predict", 0, 1, O_PREDICT},
    {"predictor", 0, 1, O_PREDICTOR},   {"route", 0, 1, O_ROUTE},
    {"config", 0, 1, O_CONFIG},         {"assign", 0, 1, O_ASSIGN},
    {"cost", 0, 1, O_COST},             {"trace-out", 0, 1, O_TRACE_OUT},
    {"trace-hidden", 0, 0, O_TRACE_HIDDEN}, {"logits-out", 0, 1, O_LOGITS_OUT},
    {"place", 0, 1, O_PLACE},           {"server-mem", 0, 1, O_SERVER_MEM},
    {"period", 0, 1, O_PERIOD},         {"homes", 0, 1, O_HOMES},
    {"output-format", 'o', 1, O_OUTPUT},
    {"ignore-eos", 0, 0, O_IGNORE_EOS}, {"hot-profile", 0, 1, O_HOT_PROFILE},
    {"reverse-prompt", 'r', 1, O_REVERSE}, {"special", 0, 0, O_SPECIAL},
    {"-sp", 0, 0, O_SPECIAL},           {"display-prompt", 0, 0, O_DISPLAY},
    {"no-display-prompt", 0, 0, O_NO_DISPLAY},
    MVM_CLI_GRAMMAR_OPTS, MVM_CLI_SAMPLING_OPTS, MVM_CLI_META_OPTS, {0}};

/* One option into a; 0, or 2 after its one-line error. */
static int parse_option(struct run_args *a, const mvm_cli_iter *it)
{
    const int id = it->id;
    const char *f = it->flag;
    char *v = it->value;
    a->dist_flag |= id == O_PLACE || id == O_SERVER_MEM || id == O_PERIOD || id == O_HOMES;
    int g = mvm_cli_grammar_option("run", id, f, v, &a->grammar);
    if (g < 0)
        g = mvm_cli_sampling_option("run", id, f, v, &a->sampling);
    if (g < 0)
        g = mvm_cli_meta_option("run", it, &a->meta);
    if (g >= 0)
        return g;
    switch (id) {
    case O_MODEL: a->model = v; return 0;
    case O_PROMPT: a->prompt = v; return 0;
    case O_FILE: a->file = v; return 0;
    case O_TOKENS: a->tokens = v; return 0;
    case O_TRACE_OUT: a->trace_out = v; return 0;
    case O_TRACE_HIDDEN: a->trace_hidden = 1; return 0;
    case O_IGNORE_EOS: a->ignore_eos = 1; return 0;
    case O_SPECIAL: a->special = 1; return 0;
    case O_DISPLAY: a->no_prompt = 0; return 0;
    case O_NO_DISPLAY: a->no_prompt = 1; return 0;
    case O_REVERSE:
        if (!*v || strlen(v) > MVM_RUN_MAX_REVERSE_LEN || a->n_reverse == MVM_RUN_MAX_REVERSE) {
            fprintf(stderr, "moevm run: %s: %s\n", f,
                    !*v ? "an empty reverse prompt"
                    : a->n_reverse == MVM_RUN_MAX_REVERSE ? "at most 16 reverse prompts"
                                                         : "a reverse prompt of 256 bytes at most");
            return 2;
        }
        a->reverse[a->n_reverse++] = v;
        return 0;
    case O_LOGITS_OUT: a->logits_out = v; return 0;
    case O_BUDGET: a->budget = v; return 0;
    case O_NGL: mvm_cli_gpu_layers("run", f); return 0;
    case O_PREDICTOR: a->predictor = v; return 0;
    case O_HOT_PROFILE: a->hot_profile = v; return 0;
    case O_COST: a->cost = v; return 0;
    case O_SERVER_MEM: a->server_mem = v; return 0;
    case O_EVICT: return mvm_cli_module("run", f, v, &a->evict);
    case O_PREDICT: return mvm_cli_module("run", f, v, &a->predict);
    case O_ROUTE: return mvm_cli_module("run", f, v, &a->route);
    case O_CONFIG: return mvm_cli_module("run", f, v, &a->config);
    case O_ASSIGN: return mvm_cli_module("run", f, v, &a->assign);
    case O_PLACE: return mvm_cli_policy("run", f, v, &a->place, &a->place_args);
    case O_PERIOD: return mvm_cli_u32("run", f, v, 0, UINT32_MAX, &a->period);
    case O_HOMES: return mvm_cli_u32("run", f, v, 1, 1u << 16, &a->homes);
    case O_N: return mvm_cli_u32("run", f, v, 0, 1u << 20, &a->n_predict);
    case O_THREADS: return mvm_cli_u32("run", f, v, 1, 1024, &a->threads);
    case O_CTX: return mvm_cli_u32("run", f, v, 0, 1u << 22, &a->ctx);
    case O_BATCH: return mvm_cli_u32("run", f, v, 1, 4096, &a->batch);
    case O_KV_TYPE: return mvm_cli_kv_type("run", f, v, &a->kv_type);
    case O_SEED: return mvm_cli_u32("run", f, v, 0, UINT32_MAX, &a->seed);
    case O_TOP_K: return mvm_cli_u32("run", f, v, 0, 1u << 24, &a->top_k);
    case O_TEMP: return mvm_cli_float("run", f, v, 0, 100, &a->temp);
    case O_TOP_P: return mvm_cli_float("run", f, v, 1e-6, 1, &a->top_p);
    case O_MIN_P: return mvm_cli_float("run", f, v, 0, 1, &a->min_p);
    case O_REPEAT_PENALTY: return mvm_cli_float("run", f, v, 1e-6, 1e6, &a->repeat_penalty);
    case O_REPEAT_LAST_N: return mvm_cli_u32("run", f, v, 0, UINT32_MAX, &a->repeat_last_n);
    case O_CPU_MOE:
        a->cpu_moe_given = 1;
        return mvm_cli_n_cpu_moe("run", f, v, &a->n_cpu_moe);
    case O_OUTPUT: {
        static const char *const formats[] = {"text", "json", NULL};
        return mvm_cli_choice("run", f, v, formats, &a->json);
    }
    }
    return 0;
}

/* -f's prompt, read now so that an unreadable file fails before the model loads; one
 * final newline dropped, as llama.cpp's -f does, so `echo TEXT > F; -f F` is -p TEXT. */
static int read_prompt(struct run_args *a)
{
    size_t len;
    if (!(a->file_text = mvm_cli_read_text("run", a->file, &len)))
        return 1;
    if (len && a->file_text[len - 1] == '\n')
        a->file_text[len - 1] = '\0';
    a->prompt = a->file_text;
    return 0;
}

/* The options' combinations. -1: go on; else the exit code after a one-line error. */
static int check_args(struct run_args *a)
{
    if (mvm_cli_need_model("run", a->model))
        return 2;
    const char *given[3] = {0};
    int n = 0;
    if (a->prompt)
        given[n++] = "-p";
    if (a->file)
        given[n++] = "-f";
    if (a->tokens)
        given[n++] = "--tokens";
    if (n > 1) {
        fprintf(stderr, "moevm run: give %s or %s, not both\n", given[0], given[1]);
        return 2;
    }
    if (mvm_cli_budget_or_cpu_moe("run", a->budget != NULL, a->cpu_moe_given))
        return 2;
    if (a->dist_flag && !mvm_dist_launched()) {
        fprintf(stderr, "moevm run: --place, --server-mem, --period and --homes apply to a run "
                "started by mpirun with several ranks (docs/distributed.md)\n");
        return 2;
    }
    if (a->trace_hidden && !a->trace_out) {
        fprintf(stderr, "moevm run: --trace-hidden needs --trace-out FILE.jsonl\n");
        return 2;
    }
    if (mvm_cli_grammar_load("run", &a->grammar))
        return 2;
    if (a->sampling.think_budget >= 0 || a->sampling.think_message) {
        fprintf(stderr, "moevm run: --reasoning-budget applies to a chat's replies (moevm chat, "
                "moevm serve)\n");
        return 2;
    }
    if (a->file && read_prompt(a))
        return 1;
    mvm_cli_sampling_escape(&a->sampling);
    if (a->prompt && a->sampling.escape) /* llama.cpp's, -f's text too */
        mvm_cli_unescape((char *)a->prompt);
    for (uint32_t i = 0; a->sampling.escape && i < a->n_reverse; i++)
        mvm_cli_unescape((char *)a->reverse[i]); /* argv's */
    return -1;
}

int mvm_run_parse_args(int argc, char **argv, struct run_args *a)
{
    *a = (struct run_args){.n_predict = 64, .batch = MVM_DEFAULT_BATCH, .seed = 42,
                           .top_k = 40, .temp = 0.8f, .top_p = 0.95f, .period = 256, .homes = 1,
                           .repeat_penalty = 1, .repeat_last_n = 64};
    mvm_cli_sampling_init(&a->sampling);
    mvm_cli_iter it = {.cmd = "run", .usage = usage, .opts = run_opts, .argc = argc,
                       .argv = argv};
    int next;
    while ((next = mvm_cli_next(&it)) == MVM_CLI_OPTION)
        if (parse_option(a, &it))
            return 2;
    return next != MVM_CLI_END ? next : check_args(a);
}

int mvm_run_parse_tokens(const char *s, int32_t **ids, uint32_t *n)
{
    size_t cap = 1;
    for (const char *p = s; *p; p++)
        cap += *p == ',';
    *ids = malloc(cap * sizeof **ids);
    *n = 0;
    for (const char *p = s; *ids;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "moevm run: --tokens %s: expected comma-separated token ids\n", s);
            return 2;
        }
        (*ids)[(*n)++] = (int32_t)v;
        if (!*end)
            return 0;
        p = end + 1;
    }
    fprintf(stderr, "moevm run: out of memory\n");
    return 1;
}
