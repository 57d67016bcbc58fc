/* The options chat and serve share (cli_engine.h). */
#include "tools/cli_engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/chat/chat_reply.h"
#include "vmm/error.h"

void mvm_cli_engine_init(mvm_cli_engine *e)
{
    *e = (mvm_cli_engine){
        .s = {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .seed = 42,
              .repeat_penalty = 1.0f, .repeat_last_n = 64},
        .n_predict = -1};
    mvm_cli_sampling_init(&e->sampling);
}

void mvm_cli_engine_free(mvm_cli_engine *e)
{
    mvm_cli_grammar_free(&e->grammar);
    mvm_cli_meta_free(&e->meta);
    mvm_cli_template_free(&e->tmpl);
    mvm_dry_breakers_free(e->breakers);
    e->breakers = NULL;
}

static int sampling_option(const mvm_cli_iter *it, mvm_cli_engine *e)
{
    const char *c = it->cmd, *f = it->flag, *v = it->value;
    uint32_t u;
    switch (it->id) {
    case MVM_CLI_E_NPREDICT: {
        if (v && strcmp(v, "-1") == 0) {
            e->n_predict = -1;
            return 0;
        }
        int bad = mvm_cli_u32(c, f, v, 0, 1u << 24, &u);
        e->n_predict = (int32_t)u;
        return bad;
    }
    case MVM_CLI_E_TEMP: return mvm_cli_float(c, f, v, 0, 100, &e->s.temperature);
    case MVM_CLI_E_TOPK: {
        int bad = mvm_cli_u32(c, f, v, 0, 1u << 24, &u);
        e->s.top_k = (int32_t)u;
        return bad;
    }
    case MVM_CLI_E_TOPP: return mvm_cli_float(c, f, v, 1e-6, 1, &e->s.top_p);
    case MVM_CLI_E_MINP: return mvm_cli_float(c, f, v, 0, 1, &e->s.min_p);
    case MVM_CLI_E_IGNORE_EOS: e->ignore_eos = 1; return 0;
    case MVM_CLI_E_REPEAT: return mvm_cli_float(c, f, v, 1e-3, 100, &e->s.repeat_penalty);
    case MVM_CLI_E_REPEAT_N: return mvm_cli_u32(c, f, v, 0, 1u << 24, &e->s.repeat_last_n);
    case MVM_CLI_E_SEED: {
        int bad = mvm_cli_u32(c, f, v, 0, UINT32_MAX, &u);
        e->s.seed = u;
        return bad;
    }
    default: return -1;
    }
}

int mvm_cli_engine_option(const mvm_cli_iter *it, mvm_cli_engine *e)
{
    const char *c = it->cmd, *f = it->flag, *v = it->value;
    mvm_engine_params *p = &e->p;
    switch (it->id) {
    case MVM_CLI_E_MODEL: p->model = v; return 0;
    case MVM_CLI_E_THREADS: return mvm_cli_u32(c, f, v, 1, 1024, &p->threads);
    case MVM_CLI_E_CTX: return mvm_cli_u32(c, f, v, 1, 1u << 22, &p->n_ctx);
    case MVM_CLI_E_BATCH: return mvm_cli_u32(c, f, v, 1, 4096, &p->n_batch);
    case MVM_CLI_E_BUDGET: p->gpu_budget = v; return 0;
    case MVM_CLI_E_NGL: mvm_cli_gpu_layers(c, f); return 0;
    case MVM_CLI_E_CPU_MOE: p->cpu_moe = 1; return mvm_cli_n_cpu_moe(c, f, v, &p->n_cpu_moe);
    case MVM_CLI_E_KV: return mvm_cli_kv_type(c, f, v, &p->kv_type);
    case MVM_CLI_E_EVICT: return mvm_cli_module(c, f, v, &p->evict);
    case MVM_CLI_E_PREDICT: return mvm_cli_module(c, f, v, &p->predict);
    case MVM_CLI_E_ROUTE: return mvm_cli_module(c, f, v, &p->route);
    case MVM_CLI_E_CONFIG: return mvm_cli_module(c, f, v, &p->config);
    case MVM_CLI_E_ASSIGN: return mvm_cli_module(c, f, v, &p->assign);
    case MVM_CLI_E_COST: p->cost = v; return 0;
    default: {
        int r = sampling_option(it, e);
        r = r >= 0 ? r : mvm_cli_sampling_option(c, it->id, f, v, &e->sampling);
        r = r >= 0 ? r : mvm_cli_meta_option(c, it, &e->meta);
        r = r >= 0 ? r : mvm_cli_template_option(c, it, &e->tmpl);
        return r >= 0 ? r : mvm_cli_grammar_option(c, it->id, f, v, &e->grammar);
    }
    }
}

int mvm_cli_engine_check(const char *cmd, mvm_cli_engine *e)
{
    mvm_cli_sampling_escape(&e->sampling);
    if (mvm_cli_need_model(cmd, e->p.model) ||
        mvm_cli_budget_or_cpu_moe(cmd, e->p.gpu_budget != NULL, e->p.cpu_moe) ||
        mvm_cli_grammar_load(cmd, &e->grammar))
        return 2;
    return -1;
}

void mvm_cli_engine_usage(FILE *f)
{
    fprintf(f,
            "  -m, --model     the GGUF model (required)\n"
            "  -t, --threads   CPU threads (default: the cores near the GPU, or all)\n"
            "  -c, --ctx-size  positions of a conversation's KV cache (default: the model's\n"
            "                  training context, at most 4096)\n"
            "  -b, --batch-size  prompt tokens per forward pass (default 512)\n"
            "  --gpu-budget    device memory for experts: a size (8G), a percentage of all\n"
            "                  experts (25%%) or auto (default MOEVM_GPU_BUDGET)\n"
            "  --n-cpu-moe, -ncmoe N  llama.cpp's, as a budget: the experts of all but N MoE\n"
            "                  layers, (layers - N) / layers of their pages (not with\n"
            "                  --gpu-budget); N >= the layers (99): every expert computed\n"
            "                  on the CPU, the rest on a GPU where there is one\n"
            "  -ngl, --n-gpu-layers N  llama.cpp's, accepted with any value and ignored:\n"
            "                  attention and the dense weights always go to the GPU when\n"
            "                  there is one\n"
            "  --cpu-moe, -cmoe  llama.cpp's: --n-cpu-moe of every layer (docs/llama-flags.md\n"
            "                  lists llama.cpp's other flags, taken and ignored or refused)\n"
            "  --kv-type, -ctk, -ctv  the KV cache's elements: f16 (default MOEVM_KV_TYPE),\n"
            "                  f32; on the CPU backend bf16, q8_0, q4_0, q4_1, q5_0, q5_1,\n"
            "                  iq4_nl\n"
            "  --evict, --predict, --route, --config, --assign  NAME[{k=v,...}]: the policy\n"
            "                  modules (docs/policies.md; default their MOEVM_* options)\n"
            "  --cost          the cost model: a preset or a `moevm calibrate` file\n"
            "  -n, --n-predict tokens a reply may take (default -1: until it ends)\n"
            "  --temp T        0 = greedy; default 0.8, with --top-k 40, --top-p 0.95,\n"
            "                  --min-p 0.05 (llama.cpp's)\n"
            "  --repeat-penalty P  the logits of the last --repeat-last-n tokens (default 64)\n"
            "                  divided by P (default 1: off)\n"
            "  -s, --seed N    the sampler's random stream (default 42)\n");
    mvm_cli_sampling_usage(f);
    fprintf(f,
            "  --ignore-eos    never sample an end-of-generation token (replies run to -n)\n");
    mvm_cli_template_usage(f);
    mvm_cli_grammar_usage(f);
    mvm_cli_meta_usage(f);
}

int mvm_cli_engine_load(const char *cmd, mvm_cli_engine *e, mvm_engine **out)
{
    size_t len = 0;
    char *tmpl = NULL;
    if (mvm_cli_template_text(cmd, &e->tmpl, &tmpl, &len))
        return 2;
    char label[600];
    snprintf(label, sizeof label, "loading %s", e->p.model);
    e->p.progress = mvm_cli_progress;
    e->p.progress_ctx = label;
    mvm_cli_meta_params(&e->meta, &e->p);
    mvm_status st = mvm_engine_load(&e->p, out);
    if (st == MVM_OK && tmpl && (st = mvm_engine_set_chat_template(*out, tmpl, len)) != MVM_OK) {
        int rc = mvm_cli_error(cmd, e->tmpl.file ? e->tmpl.file : "--chat-template");
        mvm_engine_free(*out);
        *out = NULL;
        free(tmpl);
        return rc;
    }
    free(tmpl);
    if (st != MVM_OK)
        return mvm_cli_error(cmd, "loading the model");
    mvm_engine_info in;
    mvm_engine_get_info(*out, &in);
    mvm_cli_sampling_apply(&e->sampling, in.n_ctx, &e->s);
    if (mvm_cli_sampling_breakers(cmd, &e->sampling, &e->s, *out, &e->breakers)) {
        mvm_engine_free(*out);
        *out = NULL;
        return 1;
    }
    if (e->p.cpu_moe)
        mvm_cli_cpu_moe_note(cmd, e->p.n_cpu_moe, in.n_layer);
    char budget[64] = "experts read at their homes";
    if (in.budget_bytes)
        snprintf(budget, sizeof budget, "expert budget %.1f MiB",
                 (double)in.budget_bytes / 1048576.0);
    char seqs[48] = "";
    if (in.n_seq > 1)
        snprintf(seqs, sizeof seqs, " in each of %u sequences", in.n_seq);
    fprintf(stderr, "model: %s (%s), %u layers, %u experts top-%u, vocab %u; computing on "
            "the %s, %s; %u positions%s\n", in.name, in.arch, in.n_layer, in.n_expert,
            in.n_expert_used, in.n_vocab, strcmp(in.backend, "cuda") ? "CPU" : "GPU", budget,
            in.n_ctx, seqs);
    return 0;
}

uint32_t mvm_cli_common_prefix(const int32_t *a, uint32_t na, const int32_t *b, uint32_t nb)
{
    uint32_t k = 0;
    while (k < na && k < nb && a[k] == b[k])
        k++;
    return k;
}

/* Tokens t[0..n) of sequence seq, each one's logits into logits' rows: one batch. */
static mvm_status eval_rows(mvm_engine *e, uint32_t seq, const int32_t *t, uint32_t n,
                            float *logits)
{
    mvm_engine_token *b = malloc(n * sizeof *b);
    if (!b)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; i < n; i++)
        b[i] = (mvm_engine_token){t[i], seq, 1};
    mvm_status st = mvm_engine_eval_batch(e, b, n, logits);
    free(b);
    return st;
}

mvm_status mvm_cli_eval_prompt(mvm_engine *e, uint32_t seq, const int32_t *tokens, uint32_t n,
                               float *logits, int all_logits, uint32_t *done)
{
    mvm_engine_info in;
    mvm_engine_get_info(e, &in);
    mvm_status st = MVM_OK;
    for (*done = 0; *done < n && !mvm_cli_interrupted && st == MVM_OK;) {
        uint32_t nb = n - *done < in.n_batch ? n - *done : in.n_batch;
        if (all_logits)
            st = eval_rows(e, seq, tokens + *done, nb, logits + (size_t)*done * in.n_vocab);
        else
            st = mvm_engine_eval(e, seq, tokens + *done, nb, *done + nb == n ? logits : NULL);
        *done += st == MVM_OK ? nb : 0;
    }
    return st;
}

uint32_t mvm_cli_keep_prefix(mvm_engine *e, uint32_t seq, const int32_t *prompt, uint32_t n,
                             const int32_t *cached, uint32_t n_cached)
{
    uint32_t k = mvm_cli_common_prefix(prompt, n, cached, n_cached);
    if (k == n) /* the last token's logits are needed: evaluate it again */
        k--;
    mvm_engine_truncate(e, seq, k);
    return mvm_engine_n_past(e, seq); /* fewer where a ring no longer holds the window */
}

mvm_status mvm_cli_prefill(mvm_engine *e, uint32_t seq, int32_t *cached, uint32_t *n_cached,
                           const int32_t *prompt, uint32_t n, float *logits, uint32_t *reused)
{
    uint32_t k = mvm_cli_keep_prefix(e, seq, prompt, n, cached, *n_cached);
    *n_cached = *reused = k;
    uint32_t done;
    mvm_status st = mvm_cli_eval_prompt(e, seq, prompt + k, n - k, logits, 0, &done);
    if (st == MVM_OK && done < n - k)
        st = MVM_ERR_CANCELLED;
    if (st != MVM_OK) { /* the batches done go too: the cache holds what cached says */
        mvm_engine_truncate(e, seq, k);
        *n_cached = *reused = mvm_engine_n_past(e, seq);
        return st;
    }
    memcpy(cached + k, prompt + k, (n - k) * sizeof *prompt);
    *n_cached = n;
    return MVM_OK;
}

uint32_t mvm_cli_reply_markers(const mvm_engine *e, int32_t *ids, uint32_t cap)
{
    static const char *const think[] = {"<think>", "</think>", NULL};
    const mvm_chat_syntax syntax = mvm_chat_syntax_of(mvm_engine_chat_template(e));
    const char *const *lists[] = {mvm_chat_syntax_markers(syntax), think};
    uint32_t n = 0;
    for (size_t l = 0; l < 2; l++)
        for (const char *const *m = lists[l]; *m && n < cap; m++) {
            int32_t id[2];
            size_t k = 0;
            char piece[8];
            if (mvm_engine_tokenize(e, *m, strlen(*m), 0, 1, id, 2, &k) == MVM_OK && k == 1 &&
                mvm_engine_token_piece(e, id[0], piece, sizeof piece) == 0)
                ids[n++] = id[0];
        }
    return n;
}

size_t mvm_cli_reply_piece(const mvm_engine *e, int32_t id, const int32_t *keep,
                           uint32_t n_keep, char *buf, size_t cap)
{
    int kept = 0;
    for (uint32_t k = 0; k < n_keep; k++)
        kept |= keep[k] == id;
    const size_t n = kept ? mvm_engine_token_piece_special(e, id, buf, cap)
                          : mvm_engine_token_piece(e, id, buf, cap);
    return n < cap ? n : cap;
}
