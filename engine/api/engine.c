/*
 * The engine API (include/moevm/engine.h): the steps of loading a model — options checked,
 * threads, the model opened, its space planned and filled, the tokenizer, the chat template,
 * one inference context of n_seq sequences — behind one handle; and the parts `moevm run`
 * reads beyond it (engine_parts.h).
 */
#include "moevm/engine.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "engine/api/engine_parts.h"
#include "engine/api/threads.h"
#include "engine/chat/chat_template.h"
#include "engine/forward/engine_options.h"
#include "engine/forward/forward.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/grammar_impl.h"
#include "engine/plan/plan.h"
#include "engine/tokenizer/tokenizer.h"
#include "policy/choose.h"
#include "policy/cost_load.h"
#include "policy/policy_options.h"
#include "vmm/error.h"
#include "vmm/options.h"

/* A module as "name{k=v}", split into an owned copy. */
struct module {
    char *buf;
    const char *name, *args;
};

struct mvm_engine {
    mvm_pool *pool;
    mvm_model *model;
    int borrowed;          /* pool and model are the caller's (mvm_engine_adopt) */
    mvm_tokenizer *tok;    /* NULL: a model without a vocabulary (mvm_engine_adopt) */
    mvm_chat_template *tmpl;
    char *tmpl_error;      /* why there is no template; NULL when it compiled */
    mvm_ctx *ctx;
    int32_t *eog;          /* the end-of-generation tokens */
    uint32_t n_eog;
    mvm_machine machine;
    struct module mod[MVM_ROLE_COUNT];
    uint32_t n_ctx, n_batch;
    uint64_t tokens;
    struct gr_vocab *grammar_vocab; /* decoded for grammars the first time one is bound */
    pthread_mutex_t grammar_mu;
};

static const enum mvm_role roles[] = {MVM_ROLE_EVICT, MVM_ROLE_PREDICT, MVM_ROLE_ROUTE,
                                      MVM_ROLE_CONFIG, MVM_ROLE_ASSIGN};
#define N_ROLES (sizeof roles / sizeof *roles)

static const char *role_value(const mvm_engine_params *p, enum mvm_role r)
{
    switch (r) {
    case MVM_ROLE_EVICT: return p->evict;
    case MVM_ROLE_PREDICT: return p->predict;
    case MVM_ROLE_ROUTE: return p->route;
    case MVM_ROLE_CONFIG: return p->config;
    case MVM_ROLE_ASSIGN: return p->assign;
    default: return NULL;
    }
}

/* The checks of what the context takes: the batch, the modules' names, the cost model. */
static mvm_status check_context(mvm_engine *e, const mvm_engine_params *p)
{
    if (p->n_batch > 4096)
        return mvm_fail(MVM_ERR_INVALID, "engine: a batch of %u tokens (at most 4096)",
                        p->n_batch);
    mvm_status st;
    for (size_t i = 0; i < N_ROLES; i++) {
        struct module *m = &e->mod[roles[i]];
        const char *v = role_value(p, roles[i]);
        if (!v)
            continue;
        if (!(m->buf = strdup(v)))
            return mvm_fail(MVM_ERR_NOMEM, "out of memory");
        const void *ops;
        if ((st = mvm_engine_choose_spec(roles[i], m->buf, &m->name, &m->args, &ops)))
            return st;
    }
    return mvm_machine_load(p->cost, "cost", &e->machine);
}

/* The checks before the model is read: the budget, and the context's. */
static mvm_status check_params(mvm_engine *e, const mvm_engine_params *p, mvm_space_desc *desc)
{
    if (!p || !p->model)
        return mvm_fail(MVM_ERR_INVALID, "engine: no model file given");
    if (p->cpu_moe && p->gpu_budget)
        return mvm_fail(MVM_ERR_INVALID, "engine: give gpu_budget or n_cpu_moe, not both "
                        "(both set the experts' device budget)");
    mvm_status st = mvm_space_desc_init(desc);
    if (st != MVM_OK)
        return st;
    if (p->gpu_budget &&
        mvm_parse_budget(p->gpu_budget, &desc->device_budget, &desc->device_budget_frac))
        return mvm_fail(MVM_ERR_INVALID, "GPU budget '%s': expected a size (8G), a "
                        "percentage (25%%) or auto", p->gpu_budget);
    return check_context(e, p);
}

/* Each sequence's positions and the batch, once the model's training context is known
 * (plan.h's mvm_plan_ctx). */
static void size_context(mvm_engine *e, const mvm_engine_params *p)
{
    const mvm_ctx_shape asked = {p->n_ctx, p->n_batch, NULL};
    const mvm_ctx_shape s = mvm_plan_ctx(e->model, &asked, p->n_seq);
    e->n_ctx = s.n_ctx;
    e->n_batch = s.n_batch;
}

static mvm_status open_model(mvm_engine *e, const mvm_engine_params *p, mvm_space_desc *desc)
{
    const mvm_model_meta meta = {p->kv_overrides, p->n_kv_overrides, &p->rope};
    mvm_status st = mvm_model_open_meta(p->model, &meta, &e->model);
    if (st == MVM_OK && p->cpu_moe)
        st = mvm_plan_cpu_moe(e->model, p->n_cpu_moe, desc);
    if (st != MVM_OK)
        return st;
    size_context(e, p);
    const uint32_t n_seq = p->n_seq ? p->n_seq : 1;
    /* an automatic GPU budget leaves room for every sequence's cache (rings counted as full
     * rows: a little more than they take) */
    uint64_t rows = (uint64_t)e->n_ctx * n_seq;
    const mvm_ctx_shape shape = {rows < UINT32_MAX ? (uint32_t)rows : UINT32_MAX, e->n_batch,
                                 p->kv_type, p->predict};
    mvm_space *space;
    st = mvm_plan_space(e->model, &shape, desc, &space);
    if (st == MVM_OK)
        st = mvm_model_load_experts(e->model, space, e->pool, NULL, p->progress,
                                    p->progress_ctx);
    return st;
}

static mvm_status open_text(mvm_engine *e, int vocab_optional)
{
    mvm_status st = mvm_tokenizer_load(e->model->gguf, &e->tok);
    if (st != MVM_OK)
        st = mvm_fail_prefix(st, "%s: tokenizer", e->model->path);
    if (st != MVM_OK && vocab_optional) { /* token ids in and out; text calls say why not */
        e->tok = NULL;
        e->tmpl_error = strdup(mvm_last_error());
        return e->tmpl_error ? MVM_OK : mvm_fail(MVM_ERR_NOMEM, "out of memory");
    }
    if (st != MVM_OK)
        return st;
    if (mvm_tokenizer_n_vocab(e->tok) != e->model->hp.n_vocab)
        return mvm_fail(MVM_ERR_INVALID, "%s: the tokenizer has %u tokens but token_embd has "
                        "%u rows", e->model->path, mvm_tokenizer_n_vocab(e->tok),
                        e->model->hp.n_vocab);
    const uint32_t V = e->model->hp.n_vocab;
    for (uint32_t id = 0; id < V; id++)
        e->n_eog += mvm_tokenizer_is_eog(e->tok, (int32_t)id) != 0;
    if (e->n_eog && !(e->eog = malloc(e->n_eog * sizeof *e->eog)))
        return mvm_fail(MVM_ERR_NOMEM, "out of memory");
    for (uint32_t id = 0, k = 0; id < V; id++)
        if (mvm_tokenizer_is_eog(e->tok, (int32_t)id))
            e->eog[k++] = (int32_t)id;
    /* A template this subset of Jinja cannot read leaves the model usable for plain text;
     * chat_format reports it. */
    if (mvm_chat_template_open(e->model->gguf, e->tok, &e->tmpl) != MVM_OK &&
        !(e->tmpl_error = strdup(mvm_last_error())))
        return mvm_fail(MVM_ERR_NOMEM, "out of memory");
    return MVM_OK;
}

static mvm_status make_ctx(mvm_engine *e, const mvm_engine_params *p)
{
    const struct module *m = e->mod;
    const mvm_pprofile profile = {.n_layers = p->hot_layers, .n_experts = p->hot_experts,
                                  .n_tokens = p->hot_tokens, .counts = p->hot_counts};
    mvm_ctx_policies pol = {
        .residency = {.evict = m[MVM_ROLE_EVICT].name, .evict_args = m[MVM_ROLE_EVICT].args,
                      .config = m[MVM_ROLE_CONFIG].name,
                      .config_args = m[MVM_ROLE_CONFIG].args,
                      .assign = m[MVM_ROLE_ASSIGN].name,
                      .assign_args = m[MVM_ROLE_ASSIGN].args, .machine = &e->machine,
                      .profile = p->hot_counts ? &profile : NULL},
        .prefetch = {.predict = m[MVM_ROLE_PREDICT].name,
                     .predict_args = m[MVM_ROLE_PREDICT].args, .predictor = p->predictor,
                     .predictor_size = p->predictor_size},
        .routing = {.route = m[MVM_ROLE_ROUTE].name, .route_args = m[MVM_ROLE_ROUTE].args},
        .kv_type = p->kv_type,
        .n_seq = p->n_seq};
    mvm_status st = mvm_ctx_create(e->model, e->pool, e->n_ctx, e->n_batch, &pol, &e->ctx);
    return st == MVM_OK ? st : mvm_fail_prefix(st, "the inference context");
}

/* The text and the context once the model is filled (st: how the steps before went); the
 * engine into *out, or freed. */
static mvm_status finish(mvm_engine *e, const mvm_engine_params *p, int vocab_optional,
                         mvm_status st, mvm_engine **out)
{
    if (st == MVM_OK)
        st = open_text(e, vocab_optional);
    if (st == MVM_OK)
        st = make_ctx(e, p);
    if (st != MVM_OK) {
        mvm_engine_free(e);
        return st;
    }
    *out = e;
    return MVM_OK;
}

mvm_status mvm_engine_load(const mvm_engine_params *p, mvm_engine **out)
{
    *out = NULL;
    /* an application embedding the engine reads the same MOEVM_* options as the CLI */
    mvm_options_register(&mvm_engine_options);
    mvm_options_register(&mvm_policy_options);
    mvm_engine *e = calloc(1, sizeof *e);
    if (!e)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the engine");
    pthread_mutex_init(&e->grammar_mu, NULL);
    mvm_space_desc desc;
    mvm_status st = mvm_options_check();
    if (st == MVM_OK)
        st = check_params(e, p, &desc);
    if (st == MVM_OK)
        st = mvm_threads_pool(p->threads, &e->pool);
    if (st == MVM_OK)
        st = open_model(e, p, &desc);
    return finish(e, p, 0, st, out);
}

mvm_status mvm_engine_adopt(const mvm_engine_params *p, mvm_pool *pool, mvm_model *m,
                            int vocab_optional, mvm_engine **out)
{
    *out = NULL;
    mvm_engine *e = calloc(1, sizeof *e);
    if (!e)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the engine");
    pthread_mutex_init(&e->grammar_mu, NULL);
    e->pool = pool, e->model = m, e->borrowed = 1;
    size_context(e, p);
    return finish(e, p, vocab_optional, check_context(e, p), out);
}

mvm_model *mvm_engine_model(const mvm_engine *e) { return e->model; }

mvm_ctx *mvm_engine_ctx(const mvm_engine *e) { return e->ctx; }

int mvm_engine_has_vocab(const mvm_engine *e) { return e->tok != NULL; }

/* The vocabulary decoded for grammars the first time one is made (under a lock: any
 * thread may make one), kept for the engine's life. */
mvm_status mvm_grammar_create(const mvm_engine *e, const char *gbnf, mvm_grammar **out)
{
    *out = NULL;
    mvm_engine *w = (mvm_engine *)e; /* a cache filled once; what it caches never changes */
    mvm_status st = MVM_OK;
    pthread_mutex_lock(&w->grammar_mu);
    if (!w->grammar_vocab)
        st = gr_vocab_build(e, &w->grammar_vocab);
    pthread_mutex_unlock(&w->grammar_mu);
    if (st == MVM_OK && (st = mvm_grammar_parse(gbnf, out)) == MVM_OK)
        gr_bind(*out, w->grammar_vocab);
    return st;
}

void mvm_engine_free(mvm_engine *e)
{
    if (!e)
        return;
    mvm_ctx_free(e->ctx);
    mvm_chat_template_free(e->tmpl);
    free(e->tmpl_error);
    free(e->eog);
    mvm_tokenizer_free(e->tok);
    gr_vocab_free(e->grammar_vocab);
    pthread_mutex_destroy(&e->grammar_mu);
    if (!e->borrowed) {
        mvm_model_free(e->model);
        mvm_pool_destroy(e->pool);
    }
    for (size_t i = 0; i < MVM_ROLE_COUNT; i++)
        free(e->mod[i].buf);
    free(e);
}

void mvm_engine_get_info(const mvm_engine *e, mvm_engine_info *out)
{
    const mvm_hparams *hp = &e->model->hp;
    mvm_space_info si;
    mvm_space_get_info(e->model->space, &si);
    *out = (mvm_engine_info){
        .name = e->model->name, .arch = e->model->arch->name, .backend = mvm_ctx_backend(e->ctx),
        .n_vocab = hp->n_vocab, .n_ctx = e->n_ctx, .n_ctx_train = hp->n_ctx_train,
        .n_seq = mvm_ctx_n_seq(e->ctx), .n_batch = e->n_batch, .n_layer = hp->n_layer,
        .n_expert = hp->n_expert, .n_expert_used = hp->n_expert_used,
        .expert_bytes = e->model->expert_bytes,
        .budget_bytes = e->model->experts_at_home ? 0 : si.device_bytes,
        .chat_template = e->tmpl && !mvm_chat_template_builtin(e->tmpl)};
}

uint32_t mvm_engine_n_vocab(const mvm_engine *e) { return e->model->hp.n_vocab; }

mvm_status mvm_engine_tokenize(const mvm_engine *e, const char *text, size_t len,
                               int add_special, int parse_special, int32_t *out, size_t cap,
                               size_t *n)
{
    if (!e->tok)
        return mvm_fail(MVM_ERR_UNSUPPORTED, "%s", e->tmpl_error);
    return parse_special ? mvm_tokenizer_encode_special(e->tok, text, len, add_special, out, cap, n)
                         : mvm_tokenizer_encode(e->tok, text, len, add_special, out, cap, n);
}

size_t mvm_engine_token_piece(const mvm_engine *e, int32_t id, char *buf, size_t cap)
{
    return e->tok ? mvm_tokenizer_piece(e->tok, id, buf, cap) : 0;
}

size_t mvm_engine_token_piece_special(const mvm_engine *e, int32_t id, char *buf, size_t cap)
{
    return e->tok ? mvm_tokenizer_piece_special(e->tok, id, buf, cap) : 0;
}

int mvm_engine_is_eog(const mvm_engine *e, int32_t id)
{
    return e->tok && mvm_tokenizer_is_eog(e->tok, id);
}

void mvm_engine_mask_eog(const mvm_engine *e, float *logits)
{
    for (uint32_t i = 0; i < e->n_eog; i++)
        logits[e->eog[i]] = -INFINITY;
}

void mvm_engine_get_fim(const mvm_engine *e, mvm_engine_fim *out)
{
    int32_t f[MVM_FIM_COUNT];
    for (int i = 0; i < MVM_FIM_COUNT; i++)
        f[i] = e->tok ? mvm_tokenizer_fim(e->tok, (enum mvm_fim)i) : -1;
    *out = (mvm_engine_fim){f[MVM_FIM_PRE], f[MVM_FIM_SUF], f[MVM_FIM_MID],
                            f[MVM_FIM_PAD], f[MVM_FIM_REP], f[MVM_FIM_SEP]};
}

const char *mvm_engine_token_text(const mvm_engine *e, int32_t id)
{
    return e->tok ? mvm_tokenizer_text(e->tok, id) : NULL;
}

mvm_status mvm_engine_eval(mvm_engine *e, uint32_t seq, const int32_t *tokens, uint32_t n,
                           float *logits)
{
    mvm_status st = mvm_ctx_select_seq(e->ctx, seq);
    if (st == MVM_OK && (st = mvm_ctx_eval(e->ctx, tokens, n, logits, 0)) == MVM_OK)
        e->tokens += n;
    return st;
}

mvm_status mvm_engine_eval_batch(mvm_engine *e, const mvm_engine_token *tokens, uint32_t n,
                                 float *logits)
{
    mvm_status st = mvm_ctx_eval_batch(e->ctx, tokens, n, logits);
    if (st == MVM_OK)
        e->tokens += n;
    return st;
}

uint32_t mvm_engine_n_past(const mvm_engine *e, uint32_t seq)
{
    return mvm_ctx_seq_n_past(e->ctx, seq); /* a query: the selection stays */
}

void mvm_engine_truncate(mvm_engine *e, uint32_t seq, uint32_t n)
{
    if (mvm_ctx_select_seq(e->ctx, seq) == MVM_OK)
        mvm_ctx_truncate(e->ctx, n);
}

mvm_status mvm_engine_chat_format(const mvm_engine *e, const char *messages_json,
                                  const char *extra_json, int add_generation_prompt,
                                  char **out)
{
    *out = NULL;
    if (!e->tmpl)
        return mvm_fail(MVM_ERR_UNSUPPORTED, "%s", e->tmpl_error);
    cJSON *msgs = cJSON_Parse(messages_json ? messages_json : "");
    cJSON *extra = extra_json ? cJSON_Parse(extra_json) : NULL;
    mvm_status st = !msgs ? mvm_fail(MVM_ERR_INVALID, "messages: not valid JSON")
                    : extra_json && !extra ? mvm_fail(MVM_ERR_INVALID, "chat template "
                                                      "variables: not valid JSON")
                    : mvm_chat_template_apply(e->tmpl, msgs, extra, add_generation_prompt, out);
    cJSON_Delete(msgs);
    cJSON_Delete(extra);
    return st;
}

const char *mvm_engine_chat_template(const mvm_engine *e)
{
    return e->tmpl ? mvm_chat_template_source(e->tmpl) : NULL;
}

mvm_status mvm_engine_set_chat_template(mvm_engine *e, const char *src, size_t len)
{
    if (!e->tok)
        return mvm_fail(MVM_ERR_UNSUPPORTED, "%s", e->tmpl_error);
    mvm_chat_template *t;
    mvm_status st = mvm_chat_template_from_text(src, len, e->tok, &t);
    if (st != MVM_OK)
        return st;
    mvm_chat_template_free(e->tmpl);
    free(e->tmpl_error);
    e->tmpl = t;
    e->tmpl_error = NULL;
    return MVM_OK;
}

void mvm_engine_get_stats(const mvm_engine *e, mvm_engine_stats *out)
{
    mvm_resid_stats rs;
    mvm_stats vs;
    mvm_space_info si;
    mvm_resid_get_stats(mvm_ctx_residency(e->ctx), &rs);
    mvm_space_get_stats(e->model->space, &vs);
    mvm_space_get_info(e->model->space, &si);
    *out = (mvm_engine_stats){
        .accesses = rs.accesses, .hits = rs.hits, .evictions = rs.evictions,
        .prefetches = rs.prefetches, .prefetch_used = rs.prefetch_used,
        .bytes_moved = vs.bytes_moved,
        .budget_bytes = e->model->experts_at_home ? 0 : si.device_bytes,
        .resident_bytes = (uint64_t)vs.resident_pages * si.page_size, .tokens = e->tokens};
}
