/*
 * `moevm run`: load a GGUF MoE model (experts into a moevm space), prefill a prompt,
 * generate, print the text as it comes and a closing statistics line on stderr — or, with
 * -o json, one JSON object at the end (tools/run_report.h). Ctrl-C stops the prompt's
 * evaluation (between two batches) or the generation, and the report still comes (exit
 * 130). --trace-out records the routing for the simulator; --logits-out writes every
 * evaluated position's logits (the numerical tests compare them with tests/ref).
 *
 * From the filled model on, run is a client of the engine API (moevm/engine.h), as chat and
 * serve are: tokenizing, evaluating, sampling. Its load up to the filled model is its own,
 * and its report, trace and distributed mode read the engine's model and context
 * (engine/api/engine_parts.h says why the public API cannot serve those).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/api/engine_parts.h"
#include "engine/compute/clock.h"
#include "engine/dist/dist.h"
#include "engine/plan/plan.h"
#include "policy/choose.h"
#include "policy/cost_load.h"
#include "tools/cli.h"
#include "tools/cli_engine.h"
#include "tools/cmd_run.h"
#include "tools/logits_out.h"
#include "tools/run_report.h"
#include "tools/sim_inputs.h"
#include "tools/trace_out.h"
#include "vmm/error.h"
#include "vmm/options.h"
#include "vmm/topo.h"

/* What the generation printed, kept for -o json: the prompt's pieces, then the text's. */
struct text_out {
    char *p;
    size_t n, cap, prompt_len;
    int failed; /* out of memory: the rest was dropped */
};

struct session {
    struct run_args a;
    mvm_dist *dist;      /* under mpirun (dist.h), else NULL */
    int server;          /* a rank that only computes experts for the homes (dist.h) */
    int placed;          /* every rank has loaded its experts: the job runs from here */
    uint64_t *capacity;  /* [ranks] the distributed mode's expert memory per rank */
    mvm_machine machine; /* --cost */
    mvm_pool *pool;
    mvm_model *model;
    mvm_engine *e;       /* over model and pool (the leader's) */
    mvm_trace_out *trace;
    mvm_sampler *sampler;
    mvm_grammar *grammar; /* --grammar's, constraining sampler; NULL without one */
    mvm_dry_breakers *breakers; /* DRY's, read by sampler; NULL without DRY */
    mvm_logits_out lf;
    mvm_sim_inputs inputs; /* --predictor's bytes, --hot-profile's counts */
    int32_t *prompt; /* then the tokens generated after it */
    uint32_t n_prompt, prefilled, generated; /* prefilled < n_prompt: Ctrl-C in the prompt */
    double t_prefill, t_decode;
    float *logits;
    struct text_out out;
    int generating, reversed;    /* the prompt is written; -r ended the text */
    char tail[2 * MVM_RUN_MAX_REVERSE_LEN]; /* the generated text's last tail_n bytes */
    size_t tail_n;
};

/* -r: whether the generated text ends in one of the reverse prompts, or in one and at most
 * two bytes more (llama.cpp's allowance outside a conversation, where a token may carry
 * the prompt and a character after it). */
static int reverse_hit(const struct session *s)
{
    for (uint32_t i = 0; i < s->a.n_reverse; i++) {
        const char *r = s->a.reverse[i];
        const size_t len = strlen(r), from = s->tail_n > len + 2 ? s->tail_n - len - 2 : 0;
        for (size_t at = from; at + len <= s->tail_n; at++)
            if (!memcmp(s->tail + at, r, len))
                return 1;
    }
    return 0;
}

/* Token id's piece (its id without a vocabulary): on stdout as it comes, or kept for the
 * JSON report; and with -r, the generated text's last bytes. */
static void emit_piece(struct session *s, int32_t id)
{
    char buf[256];
    size_t n = !mvm_engine_has_vocab(s->e) ? (size_t)snprintf(buf, sizeof buf, " %d", id)
               : s->a.special ? mvm_engine_token_piece_special(s->e, id, buf, sizeof buf)
                              : mvm_engine_token_piece(s->e, id, buf, sizeof buf);
    n = n < sizeof buf ? n : sizeof buf;
    if (s->generating && s->a.n_reverse) {
        const size_t keep = sizeof s->tail - n < s->tail_n ? sizeof s->tail - n : s->tail_n;
        memmove(s->tail, s->tail + s->tail_n - keep, keep);
        memcpy(s->tail + keep, buf, n);
        s->tail_n = keep + n;
    }
    struct text_out *o = &s->out;
    if (!s->a.json) {
        if (s->generating || !s->a.no_prompt)
            fwrite(buf, 1, n, stdout);
        return;
    }
    if (o->n + n > o->cap) {
        char *grown = o->failed ? NULL : realloc(o->p, o->cap = 2 * o->cap + n + 256);
        if (!grown) {
            o->failed = 1;
            return;
        }
        o->p = grown;
    }
    memcpy(o->p + o->n, buf, n);
    o->n += n;
}

/* The positions the run takes: --ctx, else the prompt's and -n's, the prompt counted as a
 * token a byte plus 8 (BOS and the like): the context is made with the engine, before the
 * engine's tokenizer reads the prompt. The rows past the tokens are address space the CPU
 * never touches, and on a GPU the automatic budget keeps room for them anyway. A vocabulary
 * that needs more tokens than bytes (make_prompt allows it) can outgrow the bound:
 * check_context says so. */
static uint32_t ctx_bound(const struct run_args *a)
{
    if (a->ctx)
        return a->ctx;
    uint64_t n = 8 + a->n_predict;
    if (a->tokens)
        for (const char *p = a->tokens; *p; p++)
            n += *p == ',';
    else
        n += a->prompt ? strlen(a->prompt) : 0;
    return n < UINT32_MAX ? (uint32_t)n : UINT32_MAX;
}

/* The distributed mode's ranks on one machine take its GPUs in turn (the first rank the
 * first device), unless MOEVM_DEVICE names one. 0 where no device answers. */
static int rank_device(const mvm_dist *d)
{
    int n = 0;
    while (n < 64 && mvm_cuda_probe(n) == MVM_OK)
        n++;
    return n ? (int)(mvm_dist_local_rank(d) % (uint32_t)n) : 0;
}

/* The checks before the model is read: the space's options, the modules' names, the cost
 * model, the predictor file, the threads. */
static int prepare(struct session *s, mvm_space_desc *desc)
{
    const struct run_args *a = &s->a;
    int bad = mvm_cli_space_desc("run", "--gpu-budget", a->budget, desc);
    if (bad)
        return bad;
    if (s->dist && desc->backend != MVM_BACKEND_HOST && !getenv("MOEVM_DEVICE"))
        desc->device = rank_device(s->dist);
    /* The modules' names before the model loads (their parameters are checked once it has:
     * the modules need its shape). */
    const struct { enum mvm_role role; const char *value, *flag; } roles[] = {
        {MVM_ROLE_EVICT, a->evict, "--evict"}, {MVM_ROLE_PREDICT, a->predict, "--predict"},
        {MVM_ROLE_ROUTE, a->route, "--route"}, {MVM_ROLE_CONFIG, a->config, "--config"},
        {MVM_ROLE_ASSIGN, a->assign, "--assign"}};
    for (size_t i = 0; i < sizeof roles / sizeof *roles; i++) {
        const char *v = roles[i].value, *args;
        char name[256];
        snprintf(name, sizeof name, "%.*s", v ? (int)strcspn(v, "{") : 0, v ? v : "");
        const void *ops;
        if (mvm_engine_choose(roles[i].role, v ? name : NULL, NULL, &ops, &args))
            return mvm_cli_error("run", v ? roles[i].flag : "options");
    }
    if (mvm_machine_load(a->cost, "--cost", &s->machine) != MVM_OK)
        return mvm_cli_error("run", NULL);
    if (a->predictor && mvm_sim_load_predictor(a->predictor, &s->inputs) != MVM_OK)
        return mvm_cli_error("run", "--predictor");
    if (a->hot_profile && mvm_sim_load_profile(a->hot_profile, &s->inputs) != MVM_OK)
        return mvm_cli_error("run", "--hot-profile");
    return mvm_cli_threads("run", a->threads, &s->pool);
}

/* The distributed mode's first placement (every rank), once every rank has opened the
 * model (st: this one's outcome): *held, the experts this one loads. */
static int place(struct session *s, mvm_status st, const uint8_t **held)
{
    const struct run_args *a = &s->a;
    if ((st = mvm_dist_agree(s->dist, st)) != MVM_OK)
        return s->server ? 1 : mvm_cli_error("run", "distributed mode");
    const mvm_model *m = s->model;
    uint32_t n = mvm_dist_size(s->dist);
    const mvm_hparams *hp = &m->hp;
    int rc = !(s->capacity = calloc(n, sizeof *s->capacity)) ? mvm_cli_error("run", NULL)
        : mvm_cli_capacities("run", a->server_mem, n,
                             m->expert_bytes * hp->n_layer * hp->n_expert, s->capacity);
    if (!rc) {
        mvm_dist_params p = {.place = a->place, .place_args = a->place_args,
                             .capacity_bytes = s->capacity, .period = a->period,
                             .homes = a->homes, .n_batch = a->batch,
                             .machine = &s->machine};
        if (mvm_dist_plan(s->dist, m, &p, held) != MVM_OK)
            rc = s->server ? 1 : mvm_cli_error("run", "distributed mode");
    }
    return rc;
}

/* What was loaded and where it computes, on stderr. */
static void print_model(const struct session *s, const mvm_space_desc *desc, double seconds)
{
    const mvm_hparams *hp = &s->model->hp;
    mvm_space_info info;
    mvm_space_get_info(s->model->space, &info);
    char compute[192]; /* where the forward pass runs: the space's device, or the CPU */
    if (strcmp(info.backend, "cuda") == 0)
        snprintf(compute, sizeof compute, "computing on %s", info.device);
    else
        snprintf(compute, sizeof compute, "%d threads, %s kernels", mvm_pool_size(s->pool),
                 mvm_k_simd_name(mvm_k_simd_current()));
    double eb = (double)s->model->expert_bytes;
    char types[64], rope[48] = "", dense[64] = "";
    /* deepseek2's and glm4moe's leading dense blocks, glm4moe's NextN blocks: not layers
     * of the expert space */
    if (hp->n_dense || hp->n_nextn)
        snprintf(dense, sizeof dense, " (+%u dense%s)", hp->n_dense,
                 hp->n_nextn ? ", NextN not computed" : "");
    if (hp->rope.freq_scale != 1.0f)
        snprintf(rope, sizeof rope, ", RoPE %s x%g", hp->rope.ext_factor != 0 ? "YaRN" : "linear",
                 1.0 / hp->rope.freq_scale);
    char budget[128];
    if (s->model->experts_at_home && strcmp(info.backend, "cuda") == 0) /* --n-cpu-moe 99 */
        snprintf(budget, sizeof budget, "every expert computed on %d CPU threads at its home",
                 mvm_pool_size(s->pool));
    else if (s->model->experts_at_home)
        snprintf(budget, sizeof budget, "experts read at their homes (no budget)");
    else if (info.packed) /* every expert back to back, each its own bytes */
        snprintf(budget, sizeof budget, "every expert resident, packed in %.1f MiB (%.1f in "
                 "pages)", (double)info.device_bytes / 1048576.0,
                 (double)info.device_pages * (double)info.page_size / 1048576.0);
    else
        snprintf(budget, sizeof budget, "budget %u pages of %llu KiB", info.device_pages,
                 (unsigned long long)(info.page_size >> 10));
    /* an automatic budget on a GPU: what it left beside itself */
    if (desc->device_reserve && strcmp(info.backend, "cuda") == 0)
        snprintf(budget + strlen(budget), sizeof budget - strlen(budget),
                 " (auto: %.0f MiB of the device kept for the context)",
                 (double)desc->device_reserve / 1048576.0);
    fprintf(stderr, "model: %s (%s), %u layers%s, %u experts top-%u of %.1f %s (%s), vocab %u%s; "
            "loaded in %.2f s\nspace: %s backend, %s; %s; cost model %s\n",
            s->model->name, s->model->arch->name, hp->n_layer, dense, hp->n_expert,
            hp->n_expert_used,
            eb >= 1048576 ? eb / 1048576 : eb / 1024, eb >= 1048576 ? "MiB" : "KiB",
            mvm_model_expert_types(s->model, types, sizeof types), hp->n_vocab, rope,
            seconds, info.backend, budget, compute, s->machine.name);
    /* A module that places experts by their costs, planning with a preset's: on the lent
     * 16-vCPU H200 machine the h100 preset's CPU side halved greedy's decode
     * (docs/perf/offload.md). Names only; a bad one is the engine's error, later. */
    char spec[128];
    const char *name, *params, *args;
    const void *ops;
    snprintf(spec, sizeof spec, "%s", s->a.assign ? s->a.assign : "");
    if (strcmp(info.backend, "cuda") == 0 && mvm_machine_preset(s->machine.name) &&
        mvm_policy_split(spec, &name, &params) == 0 &&
        mvm_engine_choose(MVM_ROLE_ASSIGN, s->a.assign ? name : NULL, NULL, &ops, &args) ==
            MVM_OK &&
        strcmp(((const mvm_assign_ops *)ops)->name, "gpu") != 0)
        fprintf(stderr, "note: assign %s plans with the %s preset's costs, not this machine's "
                        "(`moevm calibrate -m MODEL -o cost.json`, then --cost cost.json)\n",
                ((const mvm_assign_ops *)ops)->name, s->machine.name);
}

/* The engine over the filled model: its tokenizer (a model without one runs on --tokens'
 * ids), and the context of ctx_bound's positions with the run's modules. */
static int make_engine(struct session *s)
{
    const struct run_args *a = &s->a;
    /* a context that serves the other homes on its GPU takes their batches too */
    uint32_t serve = s->dist ? mvm_dist_serve_batch(s->dist) : 0;
    const mvm_engine_params p = {
        .model = a->model, .n_ctx = ctx_bound(a), .n_batch = a->batch > serve ? a->batch : serve,
        .kv_type = a->kv_type,
        .evict = a->evict, .predict = a->predict, .route = a->route, .config = a->config,
        .assign = a->assign, .cost = a->cost, .predictor = s->inputs.predictor,
        .predictor_size = s->inputs.predictor_size, .hot_counts = s->inputs.profile.counts,
        .hot_layers = s->inputs.profile.n_layers, .hot_experts = s->inputs.profile.n_experts,
        .hot_tokens = s->inputs.profile.n_tokens};
    if (mvm_engine_adopt(&p, s->pool, s->model, a->tokens != NULL, &s->e) != MVM_OK)
        return mvm_cli_error("run", NULL);
    return 0;
}

static int load(struct session *s)
{
    const struct run_args *a = &s->a;
    mvm_space_desc desc;
    int rc = prepare(s, &desc);
    if (s->dist)
        rc = mvm_dist_agree_rc(s->dist, rc);
    if (rc)
        return rc;
    double t0 = mvm_now_s();
    const mvm_model_meta meta = {(const char *const *)a->meta.kv, a->meta.n_kv, &a->meta.rope};
    mvm_status st = mvm_model_open_meta(a->model, &meta, &s->model);
    const uint8_t *held = NULL;
    if (s->dist && (rc = place(s, st, &held)))
        return rc;
    if (!s->dist && st != MVM_OK)
        return mvm_cli_error("run", "loading the model");
    if (a->cpu_moe_given && /* every rank alike: the same shape */
        (rc = mvm_cli_cpu_moe("run", a->n_cpu_moe, s->model, &desc)))
        return rc;
    char label[600];
    snprintf(label, sizeof label, "loading %s", a->model);
    /* on a GPU with an automatic budget, room for this run's context beside the experts */
    const mvm_ctx_shape ctx = {ctx_bound(a), a->batch, a->kv_type, a->predict,
                               .keep_pages = s->dist != NULL};
    mvm_space *space;
    st = mvm_plan_space(s->model, &ctx, &desc, &space);
    if (st == MVM_OK)
        st = mvm_model_load_experts(s->model, space, s->pool, held,
                                    s->server ? NULL : mvm_cli_progress, label);
    if (s->dist)
        st = mvm_dist_agree(s->dist, st);
    if (st != MVM_OK)
        return s->server ? 1 : mvm_cli_error("run", "loading the model");
    s->placed = 1; /* a failure from here on is this rank's alone */
    mvm_space_info info;
    mvm_space_get_info(s->model->space, &info);
    if (s->server) /* the leader speaks for the job; an engine only to compute on a GPU */
        return strcmp(info.backend, "cuda") ? 0 : make_engine(s);
    print_model(s, &desc, mvm_now_s() - t0);
    if ((rc = make_engine(s)) || !s->dist)
        return rc;
    /* a home from now on: it serves the others until every home's stream has ended */
    mvm_engine_info in;
    mvm_engine_get_info(s->e, &in);
    if (mvm_dist_attach(s->dist, mvm_engine_ctx(s->e), s->model, s->pool, in.n_batch) !=
        MVM_OK)
        return mvm_cli_error("run", "distributed mode");
    return 0;
}

static int make_prompt(struct session *s)
{
    const struct run_args *a = &s->a;
    if (a->tokens)
        return mvm_run_parse_tokens(a->tokens, &s->prompt, &s->n_prompt);
    const char *text = a->prompt ? a->prompt : "";
    size_t len = strlen(text), cap = len + 8;
    if (!(s->prompt = malloc(cap * sizeof *s->prompt)))
        return 1;
    size_t n;
    mvm_status st = mvm_engine_tokenize(s->e, text, len, 1, 0, s->prompt, cap, &n);
    if (st == MVM_ERR_RANGE) { /* a vocabulary that needs more tokens than bytes */
        int32_t *bigger = realloc(s->prompt, n * sizeof *s->prompt);
        if (!bigger)
            return 1;
        s->prompt = bigger;
        st = mvm_engine_tokenize(s->e, text, len, 1, 0, s->prompt, n, &n);
    }
    if (st != MVM_OK)
        return mvm_cli_error("run", "tokenizing the prompt");
    s->n_prompt = (uint32_t)n;
    if (n == 0) {
        fprintf(stderr, "moevm run: the prompt is empty and the model adds no BOS token: give "
                "-p TEXT\n");
        return 2;
    }
    return 0;
}

/* The prompt and -n must fit the context; positions past the model's training context get
 * a warning, as llama.cpp gives. 0, or 2 after a one-line error. */
static int check_context(const struct session *s)
{
    const struct run_args *a = &s->a;
    mvm_engine_info in;
    mvm_engine_get_info(s->e, &in);
    const uint32_t need = s->n_prompt + a->n_predict, used = a->ctx ? a->ctx : need;
    if (need > in.n_ctx) { /* --ctx's, or a vocabulary needing more tokens than ctx_bound's */
        fprintf(stderr, "moevm run: --ctx %u is less than the prompt (%u tokens) + -n %u%s\n",
                in.n_ctx, s->n_prompt, a->n_predict,
                a->ctx ? "" : " (the default, sized by the prompt's bytes: give --ctx)");
        return 2;
    }
    if (used > in.n_ctx_train) /* as llama.cpp warns: positions the model never saw */
        fprintf(stderr, "moevm run: warning: %u positions exceed the %u the model was trained "
                "on (context_length): expect worse output past them\n", used, in.n_ctx_train);
    return 0;
}

/* What the generation writes and samples with: the trace, the logits file, the sampler,
 * the logits' rows, room after the prompt for the tokens generated (the repetition penalty
 * looks back over both). The trace and the distributed mode hook into the context itself:
 * the public API has neither. */
static int prepare_generation(struct session *s)
{
    const struct run_args *a = &s->a;
    mvm_ctx *ctx = mvm_engine_ctx(s->e);
    mvm_engine_info in;
    mvm_engine_get_info(s->e, &in);
    fprintf(stderr, "context: %u positions, batches of %u, KV cache %.1f MiB (%s)\n", in.n_ctx,
            in.n_batch, (double)mvm_ctx_kv_bytes(ctx) / 1048576.0, mvm_ctx_kv_type(ctx));
    if (a->trace_out) {
        if (mvm_trace_open(a->trace_out, s->model, a->trace_hidden, &s->trace) != MVM_OK)
            return mvm_cli_error("run", "--trace-out");
        mvm_ctx_set_route_observer(ctx, mvm_trace_route, s->trace);
    }
    if (a->logits_out && mvm_logits_open(&s->lf, a->logits_out, in.n_vocab))
        return 1;
    mvm_sampler_params sp = {.temperature = a->temp, .top_k = (int32_t)a->top_k,
                             .top_p = a->top_p, .min_p = a->min_p,
                             .seed = a->seed + (s->dist ? mvm_dist_rank(s->dist) : 0),
                             .repeat_penalty = a->repeat_penalty,
                             .repeat_last_n = a->repeat_last_n};
    mvm_cli_sampling_apply(&a->sampling, in.n_ctx, &sp);
    if (mvm_sampler_create(&sp, in.n_vocab, &s->sampler) != MVM_OK)
        return mvm_cli_error("run", "sampler");
    if (mvm_cli_sampling_breakers("run", &a->sampling, &sp, s->e, &s->breakers))
        return 1;
    mvm_sampler_set_dry_breakers(s->sampler, s->breakers);
    if (mvm_cli_grammar_attach("run", &a->grammar, s->e, s->sampler, &s->grammar))
        return 1;
    size_t rows = a->logits_out ? s->n_prompt : 1;
    int32_t *tokens = realloc(s->prompt, ((size_t)s->n_prompt + a->n_predict) * sizeof *tokens);
    if (tokens)
        s->prompt = tokens;
    if (!tokens || !(s->logits = malloc(rows * in.n_vocab * sizeof(float)))) {
        fprintf(stderr, "moevm run: out of memory for the logits\n");
        return 1;
    }
    return 0;
}

/* The closing report; the exit code: 130 after Ctrl-C, as a shell reports it. */
static int report(const struct session *s)
{
    const struct run_args *a = &s->a;
    const struct text_out *o = &s->out;
    if (o->failed) {
        fprintf(stderr, "moevm run: out of memory for the text\n");
        return 1;
    }
    mvm_run_report r = {.model_path = a->model, .model = s->model, .ctx = mvm_engine_ctx(s->e),
                        .dist = s->dist, .prompt = o->p, .prompt_len = o->prompt_len,
                        .text = o->p ? o->p + o->prompt_len : NULL,
                        .text_len = o->n - o->prompt_len,
                        .generated = s->prompt + s->n_prompt, .n_prompt = s->n_prompt,
                        .n_prefilled = s->prefilled, .n_generated = s->generated,
                        .n_predict = a->n_predict, .t_prefill = s->t_prefill,
                        .t_decode = s->t_decode, .interrupted = mvm_cli_interrupted,
                        .reversed = s->reversed};
    if (!a->json) {
        printf("\n");
        fflush(stdout); /* the text before the statistics on a terminal showing both */
    }
    if (mvm_cli_interrupted && s->prefilled < s->n_prompt)
        fprintf(stderr, "moevm run: interrupted: %u of the prompt's %u tokens evaluated, none "
                "generated\n", s->prefilled, s->n_prompt);
    else if (mvm_cli_interrupted)
        fprintf(stderr, "moevm run: interrupted: %u of %u tokens generated\n", s->generated,
                a->n_predict);
    if (a->json && mvm_run_report_json(&r, stdout))
        return 1;
    if (!a->json)
        mvm_run_report_text(&r);
    return mvm_cli_interrupted ? 130 : 0;
}

/* The prompt, a batch at a time until Ctrl-C; s->logits then follow its last token. */
static int prefill(struct session *s)
{
    const struct run_args *a = &s->a;
    const uint32_t n_vocab = mvm_engine_n_vocab(s->e);
    double t0 = mvm_now_s();
    mvm_status st = mvm_cli_eval_prompt(s->e, 0, s->prompt, s->n_prompt, s->logits,
                                        a->logits_out != NULL, &s->prefilled);
    s->t_prefill = mvm_now_s() - t0;
    if (st != MVM_OK)
        return mvm_cli_error("run", "prefill");
    mvm_logits_add(&s->lf, s->prompt, 0, a->logits_out ? s->prefilled : 0, s->logits);
    if (a->logits_out && s->prefilled == s->n_prompt) /* the last row, for the first sample */
        memmove(s->logits, s->logits + (size_t)(s->n_prompt - 1) * n_vocab,
                n_vocab * sizeof(float));
    return 0;
}

static int generate(struct session *s)
{
    const struct run_args *a = &s->a;
    int rc = check_context(s);
    if (!rc)
        rc = prepare_generation(s);
    if (rc)
        return rc;
    for (uint32_t i = 0; i < s->n_prompt; i++)
        emit_piece(s, s->prompt[i]);
    s->out.prompt_len = s->out.n;
    s->generating = 1;
    fflush(stdout);
    if ((rc = prefill(s)))
        return rc;
    const uint32_t n_vocab = mvm_engine_n_vocab(s->e);
    double t0 = mvm_now_s();
    while (s->generated < a->n_predict && !mvm_cli_interrupted) {
        if (a->ignore_eos)
            mvm_engine_mask_eog(s->e, s->logits);
        int32_t next = mvm_sampler_sample_after(s->sampler, s->logits, n_vocab, s->prompt,
                                                s->n_prompt + s->generated);
        if (next < 0 && s->grammar && mvm_grammar_finished(s->grammar))
            break; /* with --ignore-eos: the grammar's sentence is whole */
        if (next < 0) {
            fprintf(stderr, "moevm run: no token can be sampled: %s\n", s->grammar
                    ? "none that the grammar allows has a probability" : "every logit is NaN");
            return 1;
        }
        if (mvm_engine_is_eog(s->e, next))
            break;
        emit_piece(s, next);
        fflush(stdout);
        uint32_t pos = mvm_engine_n_past(s->e, 0);
        if (mvm_engine_eval(s->e, 0, &next, 1, s->logits) != MVM_OK)
            return mvm_cli_error("run", "decode");
        mvm_logits_add(&s->lf, &next, pos, a->logits_out ? 1 : 0, s->logits);
        s->prompt[s->n_prompt + s->generated++] = next;
        if (a->n_reverse && (s->reversed = reverse_hit(s)))
            break;
    }
    s->t_decode = mvm_now_s() - t0;
    return report(s);
}

int mvm_cmd_run(int argc, char **argv)
{
    struct session s = {0};
    int rc = mvm_run_parse_args(argc, argv, &s.a);
    if (rc >= 0) {
        mvm_cli_meta_free(&s.a.meta);
        mvm_cli_grammar_free(&s.a.grammar);
        return rc;
    }
    if (mvm_dist_init(&s.dist) != MVM_OK)
        return mvm_cli_error("run", "distributed mode");
    s.server = s.dist && mvm_dist_rank(s.dist) >= s.a.homes;
    rc = load(&s);
    /* Ctrl-C from now on stops the prompt or the generation, not the program: the report
     * still comes. A second one (the handler reset) ends it at once, when one batch takes
     * long. SA_RESTART: the trace's and the logits' writes must not fail with EINTR. */
    if (!rc)
        mvm_cli_catch_sigint(SA_RESTART | SA_RESETHAND);
    int serving = !rc && s.server;
    if (serving && mvm_dist_serve(s.dist, s.model, s.pool, s.e ? mvm_engine_ctx(s.e) : NULL) !=
                   MVM_OK)
        rc = mvm_cli_error("run", "expert server");
    if (!rc && !s.server)
        rc = make_prompt(&s);
    if (!rc && !s.server)
        rc = generate(&s);
    /* a home's failure of its own (a parameter its engine refused, a prompt too long)
     * still lets the others finish; one in the exchange, or a home that never began
     * serving while others may wait for it, ends every rank */
    int dist_failed = 0;
    if (s.dist && !s.server && s.placed && mvm_dist_stop(s.dist) != MVM_OK)
        dist_failed = 1, rc = rc ? rc : mvm_cli_error("run", "distributed mode");
    if (s.trace && s.e) /* the steps a decode token still owes it first (mvm_ctx_settle) */
        mvm_ctx_set_route_observer(mvm_engine_ctx(s.e), NULL, NULL);
    if (mvm_trace_close(s.trace) != MVM_OK && !rc)
        rc = mvm_cli_error("run", "--trace-out");
    if (mvm_logits_close(&s.lf, s.a.logits_out) && !rc)
        rc = 1;
    mvm_sampler_free(s.sampler);
    mvm_dry_breakers_free(s.breakers);
    mvm_grammar_free(s.grammar);
    mvm_cli_grammar_free(&s.a.grammar);
    mvm_cli_meta_free(&s.a.meta);
    mvm_engine_free(s.e); /* before the model and the pool it uses */
    mvm_model_free(s.model);
    mvm_pool_destroy(s.pool);
    mvm_sim_inputs_free(&s.inputs);
    free(s.prompt);
    free(s.a.file_text);
    free(s.logits);
    free(s.capacity);
    free(s.out.p);
    mvm_dist_finish(s.dist, (serving || dist_failed) && rc);
    return rc;
}
