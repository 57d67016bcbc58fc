/*
 * llama.cpp's server's own API (serve_api.h; docs/serve.md): what its web UI, its Python
 * and shell clients and front ends written against it (SillyTavern, ...) call besides
 * OpenAI's routes. /completion's responses and stream events, and /tokenize, /detokenize,
 * /apply-template, /props and /slots, with the fields and defaults of the llama.cpp server the
 * project vendors, its server README, so a client cannot tell the two apart on
 * what both do. What moevm serve does not do (probabilities after sampling, the prompt's
 * log-probabilities) is refused with a 400 naming it, by the request reader.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"
#include "tools/sampler_order.h"
#include "tools/serve_api.h"

/* ---- text of tokens -------------------------------------------------------------------- */

/* Tokens' text, made valid UTF-8 for JSON (malloc'd). */
static char *detokenize(const serve_api *a, const int32_t *t, size_t n)
{
    size_t cap = 256, len = 0;
    char *s = malloc(cap);
    for (size_t i = 0; s && i < n; i++) {
        if (len + 256 > cap) {
            char *g = realloc(s, cap = 2 * cap + 256);
            if (!g)
                free(s);
            s = g;
            if (!s)
                break;
        }
        len += serve_api_piece(a, t[i], s + len, 256);
    }
    char *out = s ? mvm_cli_valid_utf8(s, len) : NULL;
    free(s);
    return out;
}

/* r->gen[from..to) */
static cJSON *id_array(const serve_req *r, uint32_t from, uint32_t to)
{
    cJSON *arr = cJSON_CreateArray();
    for (uint32_t i = from; arr && i < to; i++)
        cJSON_AddItemToArray(arr, cJSON_CreateNumber(r->gen[i]));
    return arr;
}

static char *print(cJSON *o) /* deletes o */
{
    char *out = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return out;
}

/* ---- /completion ------------------------------------------------------------------------- */

/* A float as the decimal it was given as (0.95, not 0.949999988079071). */
static double decimal(float f)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%.7g", f);
    return strtod(buf, NULL);
}

/* The further steps' parameters (engine.h), in llama.cpp's names and with its "off" values
 * where a 0 here means the default. */
static void further(cJSON *p, const mvm_sampler_params *sp)
{
    cJSON_AddNumberToObject(p, "frequency_penalty", decimal(sp->frequency_penalty));
    cJSON_AddNumberToObject(p, "presence_penalty", decimal(sp->presence_penalty));
    cJSON_AddNumberToObject(p, "dry_multiplier", decimal(sp->dry_multiplier));
    cJSON_AddNumberToObject(p, "dry_base", sp->dry_base ? decimal(sp->dry_base) : 1.75);
    cJSON_AddNumberToObject(p, "dry_allowed_length", sp->dry_allowed_length);
    cJSON_AddNumberToObject(p, "dry_penalty_last_n", sp->dry_last_n);
    cJSON_AddNumberToObject(p, "top_n_sigma", sp->top_n_sigma > 0 ? decimal(sp->top_n_sigma) : -1);
    cJSON_AddNumberToObject(p, "typical_p", sp->typical_p ? decimal(sp->typical_p) : 1.0);
    cJSON_AddNumberToObject(p, "xtc_probability", decimal(sp->xtc_probability));
    cJSON_AddNumberToObject(p, "xtc_threshold", decimal(sp->xtc_threshold));
    cJSON_AddNumberToObject(p, "dynatemp_range", decimal(sp->dynatemp_range));
    cJSON_AddNumberToObject(p, "dynatemp_exponent",
                            sp->dynatemp_exponent ? decimal(sp->dynatemp_exponent) : 1.0);
    cJSON_AddNumberToObject(p, "mirostat", sp->mirostat);
    cJSON_AddNumberToObject(p, "mirostat_tau", sp->mirostat_tau ? decimal(sp->mirostat_tau) : 5);
    cJSON_AddNumberToObject(p, "mirostat_eta",
                            sp->mirostat_eta ? decimal(sp->mirostat_eta) : 0.1);
    cJSON_AddNumberToObject(p, "min_keep", sp->min_keep);
}

/* The sampling a request runs with (or the server's defaults), in llama.cpp's names. */
static cJSON *params(const mvm_sampler_params *sp, int32_t n_predict, int ignore_eos,
                     int stream, uint32_t n_probs)
{
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "seed", (double)(uint32_t)sp->seed);
    cJSON_AddNumberToObject(p, "temperature", decimal(sp->temperature));
    cJSON_AddNumberToObject(p, "top_k", sp->top_k);
    cJSON_AddNumberToObject(p, "top_p", sp->top_p ? decimal(sp->top_p) : 1.0);
    cJSON_AddNumberToObject(p, "min_p", decimal(sp->min_p));
    cJSON_AddNumberToObject(p, "repeat_last_n", sp->repeat_last_n);
    cJSON_AddNumberToObject(p, "repeat_penalty",
                            sp->repeat_penalty ? decimal(sp->repeat_penalty) : 1.0);
    further(p, sp);
    cJSON_AddNumberToObject(p, "max_tokens", n_predict);
    cJSON_AddNumberToObject(p, "n_predict", n_predict);
    cJSON_AddBoolToObject(p, "ignore_eos", ignore_eos);
    cJSON_AddBoolToObject(p, "stream", stream);
    cJSON_AddNumberToObject(p, "n_probs", n_probs);
    cJSON *samplers = cJSON_AddArrayToObject(p, "samplers");
    static const uint8_t chain[] = {MVM_SAMPLER_PENALTIES, MVM_SAMPLER_DRY,
                                    MVM_SAMPLER_TOP_N_SIGMA, MVM_SAMPLER_TOP_K,
                                    MVM_SAMPLER_TYPICAL, MVM_SAMPLER_TOP_P, MVM_SAMPLER_MIN_P,
                                    MVM_SAMPLER_XTC, MVM_SAMPLER_TEMPERATURE, 0};
    const uint8_t *order = sp->order[0] ? sp->order : chain; /* unset: llama.cpp's */
    for (int i = 0; i < MVM_SAMPLER_MAX_STEPS && order[i]; i++)
        cJSON_AddItemToArray(samplers, cJSON_CreateString(mvm_cli_sampler_name(order[i])));
    return p;
}

static void timing(cJSON *t, const char *what, uint32_t n, double ms)
{
    char key[40];
    snprintf(key, sizeof key, "%s_n", what);
    cJSON_AddNumberToObject(t, key, n);
    snprintf(key, sizeof key, "%s_ms", what);
    cJSON_AddNumberToObject(t, key, ms);
    snprintf(key, sizeof key, "%s_per_token_ms", what);
    cJSON_AddNumberToObject(t, key, n ? ms / n : 0);
    snprintf(key, sizeof key, "%s_per_second", what);
    cJSON_AddNumberToObject(t, key, ms > 0 ? 1e3 * n / ms : 0);
}

/* The fields of an event or a response that both carry, of the text[0..n) the tokens
 * r->gen[from..to) made (their ids where streamed or asked for, as llama.cpp's server
 * gives them, and their probabilities where asked for); `last` adds the statistics. */
static cJSON *event(const serve_api *a, const serve_req *r, uint32_t index, const char *text,
                    size_t n, uint32_t from, uint32_t to, int last)
{
    cJSON *o = cJSON_CreateObject();
    char *t = mvm_cli_valid_utf8(text ? text : "", n);
    cJSON_AddNumberToObject(o, "index", index);
    cJSON_AddStringToObject(o, "content", t ? t : "");
    free(t);
    const int ids = r->stream || r->return_tokens;
    cJSON_AddItemToObject(o, "tokens", id_array(r, from, ids ? to : from));
    if (r->logprobs)
        cJSON_AddItemToObject(o, "completion_probabilities",
                              serve_api_logprobs(a, r, from, to, 1));
    cJSON_AddNumberToObject(o, "id_slot", r->slot);
    cJSON_AddBoolToObject(o, "stop", last);
    cJSON_AddNumberToObject(o, "tokens_predicted", r->n_gen);
    cJSON_AddNumberToObject(o, "tokens_evaluated", r->n_prompt);
    if (!last)
        return o;
    cJSON_AddStringToObject(o, "model", a->model_id);
    cJSON *gs = params(&r->sp, r->max_tokens, r->ignore_eos, r->stream,
                       r->logprobs ? r->top_logprobs : 0);
    cJSON *stop = cJSON_AddArrayToObject(gs, "stop");
    for (uint32_t i = 0; i < r->n_stop; i++)
        cJSON_AddItemToArray(stop, cJSON_CreateString(r->stop[i]));
    cJSON_AddNumberToObject(gs, "n_ctx", a->n_ctx);
    cJSON_AddStringToObject(gs, "model", a->model_id);
    cJSON_AddItemToObject(o, "generation_settings", gs);
    char *prompt = detokenize(a, r->prompt, r->n_prompt);
    cJSON_AddStringToObject(o, "prompt", prompt ? prompt : "");
    free(prompt);
    cJSON_AddBoolToObject(o, "has_new_line", r->text && memchr(r->text, '\n', r->len));
    cJSON_AddBoolToObject(o, "truncated", r->truncated);
    const int word = r->stop_word >= 0 && (uint32_t)r->stop_word < r->n_stop;
    const int limit = r->finish && !strcmp(r->finish, "length");
    cJSON_AddStringToObject(o, "stop_type", word ? "word" : limit ? "limit" : "eos");
    cJSON_AddStringToObject(o, "stopping_word", word ? r->stop[r->stop_word] : "");
    cJSON_AddNumberToObject(o, "tokens_cached", r->n_cached);
    cJSON *tm = cJSON_AddObjectToObject(o, "timings");
    cJSON_AddNumberToObject(tm, "cache_n", r->n_cached);
    timing(tm, "prompt", r->n_prompt - r->n_cached, 1e3 * (r->t_prompt - r->t_start));
    timing(tm, "predicted", r->n_gen, 1e3 * (r->t_end - r->t_prompt));
    return o;
}

char *serve_llama_response(const serve_api *a, const serve_req *r)
{
    return print(event(a, r, 0, r->text, r->len, 0, r->n_gen, 1));
}

char *serve_llama_response_list(const serve_api *a, const serve_req *const *r, uint32_t n)
{
    cJSON *list = cJSON_CreateArray();
    for (uint32_t i = 0; list && i < n; i++)
        cJSON_AddItemToArray(list, event(a, r[i], i, r[i]->text, r[i]->len, 0, r[i]->n_gen, 1));
    return print(list);
}

char *serve_llama_chunk(const serve_api *a, const serve_req *r, const char *text, size_t n,
                        uint32_t from, uint32_t to, int last)
{
    char *json = print(event(a, r, 0, text, n, from, to, last));
    size_t len = json ? strlen(json) + 9 : 0;
    char *out = json ? malloc(len) : NULL;
    if (out)
        snprintf(out, len, "data: %s\n\n", json);
    free(json);
    return out;
}

/* ---- /infill ------------------------------------------------------------------------------ */

/* A growing list of tokens. */
struct toks {
    int32_t *t;
    size_t n, cap;
};

static int push(struct toks *l, const int32_t *t, size_t n)
{
    if (!n)
        return 0;
    if (l->n + n > l->cap) {
        size_t cap = 2 * l->cap + n + 64;
        int32_t *g = realloc(l->t, cap * sizeof *g);
        if (!g)
            return -1;
        l->t = g, l->cap = cap;
    }
    memcpy(l->t + l->n, t, n * sizeof *t);
    l->n += n;
    return 0;
}

/* text (plain: control-token texts stay text) added to l; -1 with bad set, or without
 * memory. */
static int push_text(const serve_api *a, struct toks *l, const char *text, size_t len,
                     const char *what, char *bad, size_t cap)
{
    int32_t *t = malloc((len + 16) * sizeof *t);
    size_t n = 0;
    if (!t)
        return -1;
    int bad_text = mvm_engine_tokenize(a->e, text, len, 0, 0, t, len + 16, &n) != MVM_OK;
    if (bad_text)
        snprintf(bad, cap, "%s: %s", what, mvm_last_error());
    int st = bad_text ? -1 : push(l, t, n);
    free(t);
    return st;
}

/* A required string field; NULL with bad set. */
static const char *text_field(const cJSON *body, const char *key, int required, char *bad,
                              size_t cap)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, key);
    if (cJSON_IsString(v))
        return v->valuestring;
    if (!v && !required)
        return "";
    snprintf(bad, cap, "'%s' must be a string%s", key, required ? " (it is required)" : "");
    return NULL;
}

/* The repository-level context of input_extra ([{"text", "filename"}]), as llama.cpp's
 * server writes it: the repository's name, then each file's name and text after a file
 * separator (a "--- snippet ---" line where the model has none), then the file being
 * edited. */
static int extra_context(const serve_api *a, const cJSON *body, const mvm_engine_fim *fim,
                         struct toks *x, char *bad, size_t cap)
{
    const cJSON *extra = cJSON_GetObjectItemCaseSensitive(body, "input_extra");
    if (extra && !cJSON_IsNull(extra) && !cJSON_IsArray(extra)) {
        snprintf(bad, cap, "'input_extra' must be an array of {\"filename\", \"text\"}");
        return -1;
    }
    static const char snippet[] = "\n\n--- snippet ---\n\n", repo[] = "myproject\n";
    if (fim->rep >= 0 &&
        (push(x, &fim->rep, 1) || push_text(a, x, repo, sizeof repo - 1, "", bad, cap)))
        return -1;
    int i = 0;
    for (const cJSON *c = cJSON_IsArray(extra) ? extra->child : NULL; c; c = c->next, i++) {
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(c, "text");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(c, "filename");
        if (!cJSON_IsString(text) || (name && !cJSON_IsString(name))) {
            snprintf(bad, cap, "'input_extra'[%d] must be {\"text\": string, \"filename\": "
                     "string}", i);
            return -1;
        }
        char file[512];
        snprintf(file, sizeof file, "%.500s\n", name ? name->valuestring : "tmp");
        if (fim->sep >= 0 ? push(x, &fim->sep, 1) ||
                                push_text(a, x, file, strlen(file), "'input_extra'", bad, cap)
                          : push_text(a, x, snippet, sizeof snippet - 1, "", bad, cap))
            return -1;
        if (push_text(a, x, text->valuestring, strlen(text->valuestring), "'input_extra'", bad,
                      cap))
            return -1;
    }
    static const char current[] = "filename\n";
    return fim->sep >= 0 && (push(x, &fim->sep, 1) ||
                             push_text(a, x, current, sizeof current - 1, "", bad, cap))
               ? -1
               : 0;
}

int serve_llama_infill(const serve_api *a, const cJSON *body, serve_req *r, size_t *n,
                       char *bad, size_t cap)
{
    mvm_engine_fim fim;
    mvm_engine_get_fim(a->e, &fim);
    if (fim.pre < 0 || fim.suf < 0 || fim.mid < 0) {
        snprintf(bad, cap, SERVE_NOT_SUPPORTED ": its vocabulary has no fill-in-the-middle "
                 "prefix, suffix and middle tokens");
        return -1;
    }
    const char *prefix = text_field(body, "input_prefix", 1, bad, cap);
    const char *suffix = prefix ? text_field(body, "input_suffix", 1, bad, cap) : NULL;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(body, "prompt");
    struct toks pre = {0}, suf = {0}, x = {0}, out = {0};
    int32_t *pt = NULL, bos[4];
    size_t np = 0, nb = 0;
    int st = !suffix || push_text(a, &pre, prefix, strlen(prefix), "'input_prefix'", bad, cap) ||
             push_text(a, &suf, suffix, strlen(suffix), "'input_suffix'", bad, cap) ||
             (p && !cJSON_IsNull(p) &&
              serve_api_tokens(a, p, "'prompt'", 0, 1, &pt, &np, bad, cap)) ||
             extra_context(a, body, &fim, &x, bad, cap);
    if (!st) {
        /* as llama.cpp's server: prefix and suffix fit a batch, 3:1, the prompt after the
         * prefix; the extra context fills what the context holds beyond a batch and twice
         * the reply */
        const long B = a->n_batch;
        const long keep_pre = (long)pre.n < 3 * (B / 4) ? (long)pre.n : 3 * (B / 4);
        long keep_suf = B / 4 - (2 + (long)np);
        keep_suf = keep_suf < 0 ? 0 : keep_suf < (long)suf.n ? keep_suf : (long)suf.n;
        long keep_x = (long)a->n_ctx - B - 2L * r->max_tokens;
        keep_x = keep_x < 0 ? 0 : keep_x < (long)x.n ? keep_x : (long)x.n;
        mvm_engine_tokenize(a->e, "", 0, 1, 0, bos, 4, &nb);
        /* the ends of the extra context and of the prefix, their beginnings of the suffix */
        st = push(&out, keep_x ? x.t + x.n - keep_x : NULL, (size_t)keep_x) ||
             (nb == 1 && push(&out, bos, 1)) || push(&out, &fim.pre, 1) ||
             push(&out, keep_pre ? pre.t + pre.n - keep_pre : NULL, (size_t)keep_pre) ||
             push(&out, pt, np) ||
             push(&out, &fim.suf, 1) || push(&out, suf.t, (size_t)keep_suf) ||
             push(&out, &fim.mid, 1);
    }
    free(pre.t), free(suf.t), free(x.t), free(pt);
    if (st) {
        free(out.t);
        return -1;
    }
    r->prompt = out.t, *n = out.n;
    return 0;
}

/* ---- the other routes -------------------------------------------------------------------- */

/* body parsed into *root; an error object (status 400) when it is not a JSON object */
static char *parse(const char *body, size_t len, cJSON **root, int *status)
{
    char bad[300] = "";
    *status = 200;
    if ((*root = serve_api_parse(body, len, bad, sizeof bad)))
        return NULL;
    *status = 400;
    return serve_api_error(bad, "invalid_request_error");
}

static char *refuse(cJSON *root, const char *bad, int *status)
{
    cJSON_Delete(root);
    *status = bad[0] ? 400 : 500;
    return serve_api_error(bad[0] ? bad : "out of memory",
                           bad[0] ? "invalid_request_error" : "server_error");
}

/* A token's piece for /tokenize's with_pieces: a string where it is whole UTF-8, else its
 * bytes (a byte token, half of a character), as llama.cpp's server gives it. */
static cJSON *piece_json(const serve_api *a, int32_t id)
{
    char buf[256];
    size_t n = serve_api_piece(a, id, buf, sizeof buf);
    int valid = 1;
    for (size_t i = 0, k; valid && i < n; i += k)
        valid = (k = mvm_cli_utf8_char((const unsigned char *)buf + i, n - i)) != 0;
    if (valid) {
        buf[n < sizeof buf ? n : sizeof buf - 1] = '\0';
        return cJSON_CreateString(buf);
    }
    cJSON *bytes = cJSON_CreateArray();
    for (size_t i = 0; bytes && i < n; i++)
        cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)buf[i]));
    return bytes;
}

char *serve_llama_tokenize(const serve_api *a, const char *body, size_t len, int *status)
{
    cJSON *root;
    char *err = parse(body, len, &root, status), bad[512] = "";
    if (err)
        return err;
    int add_special = 0, parse_special = 1, with_pieces = 0;
    int32_t *t = NULL;
    size_t n = 0;
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(root, "content");
    if (serve_api_flag(root, "add_special", &add_special, bad, sizeof bad) ||
        serve_api_flag(root, "parse_special", &parse_special, bad, sizeof bad) ||
        serve_api_flag(root, "with_pieces", &with_pieces, bad, sizeof bad) ||
        (content && serve_api_tokens(a, content, "'content'", add_special, parse_special, &t, &n,
                                     bad, sizeof bad)))
        return refuse(root, bad, status);
    cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "tokens");
    for (size_t i = 0; arr && i < n; i++) {
        cJSON *item = cJSON_CreateNumber(t[i]);
        if (with_pieces) {
            cJSON *both = cJSON_CreateObject();
            cJSON_AddItemToObject(both, "id", item);
            cJSON_AddItemToObject(both, "piece", piece_json(a, t[i]));
            item = both;
        }
        cJSON_AddItemToArray(arr, item);
    }
    free(t);
    cJSON_Delete(root);
    return print(o);
}

char *serve_llama_detokenize(const serve_api *a, const char *body, size_t len, int *status)
{
    cJSON *root;
    char *err = parse(body, len, &root, status), bad[512] = "";
    if (err)
        return err;
    int32_t *t = NULL;
    size_t n = 0;
    const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    /* ids only: a string among them would be tokenized, which is not what was asked */
    int ids = !tokens || cJSON_IsArray(tokens);
    for (const cJSON *e = cJSON_IsArray(tokens) ? tokens->child : NULL; e; e = e->next)
        ids &= cJSON_IsNumber(e);
    if (!ids)
        snprintf(bad, sizeof bad, "'tokens' must be an array of token ids");
    if (!ids || (tokens && serve_api_tokens(a, tokens, "'tokens'", 0, 0, &t, &n, bad, sizeof bad)))
        return refuse(root, bad, status);
    char *text = detokenize(a, t, n);
    free(t);
    cJSON_Delete(root);
    if (!text)
        return NULL;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "content", text);
    free(text);
    return print(o);
}

char *serve_llama_apply_template(const serve_api *a, const char *body, size_t len,
                                 int *status)
{
    cJSON *root;
    char *err = parse(body, len, &root, status), bad[512] = "";
    if (err)
        return err;
    char *text = serve_api_chat_text(a, root, bad, sizeof bad);
    if (!text)
        return refuse(root, bad, status);
    cJSON_Delete(root);
    char *valid = mvm_cli_valid_utf8(text, strlen(text));
    free(text);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "prompt", valid ? valid : "");
    free(valid);
    return print(o);
}

char *serve_llama_slots(const serve_api *a, const serve_slot_info *slots)
{
    cJSON *list = cJSON_CreateArray();
    for (uint32_t i = 0; list && i < a->n_seq; i++) {
        const serve_slot_info *sl = &slots[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(list, o);
        cJSON_AddNumberToObject(o, "id", i);
        if (sl->busy)
            cJSON_AddStringToObject(o, "id_task", sl->id);
        else
            cJSON_AddNumberToObject(o, "id_task", -1);
        cJSON_AddNumberToObject(o, "n_ctx", a->n_ctx);
        cJSON_AddBoolToObject(o, "speculative", 0);
        cJSON_AddBoolToObject(o, "is_processing", sl->busy);
        cJSON_AddNumberToObject(o, "n_past", sl->n_cached); /* its cache's tokens */
        cJSON_AddItemToObject(o, "params",
                              sl->busy ? params(&sl->sp, sl->max_tokens, 0, 0, 0)
                                       : params(&a->defaults, a->default_max_tokens,
                                                a->default_ignore_eos, 0, 0));
        cJSON *next = cJSON_CreateObject();
        cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "next_token"), next);
        cJSON_AddBoolToObject(next, "has_next_token", sl->busy);
        cJSON_AddNumberToObject(next, "n_remain",
                                sl->busy && sl->max_tokens >= 0
                                    ? (double)sl->max_tokens - sl->n_gen : -1);
        cJSON_AddNumberToObject(next, "n_decoded", sl->busy ? sl->n_gen : 0);
    }
    return print(list);
}

char *serve_llama_props(const serve_api *a)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *dgs = cJSON_AddObjectToObject(o, "default_generation_settings");
    cJSON_AddItemToObject(dgs, "params", params(&a->defaults, a->default_max_tokens,
                                                a->default_ignore_eos, 0, 0));
    cJSON_AddNumberToObject(dgs, "n_ctx", a->n_ctx);
    cJSON_AddNumberToObject(o, "total_slots", a->n_seq);
    cJSON_AddStringToObject(o, "model_alias", a->model_id);
    cJSON_AddStringToObject(o, "model_path", a->model_path ? a->model_path : "");
    cJSON *mod = cJSON_AddObjectToObject(o, "modalities");
    cJSON_AddBoolToObject(mod, "vision", 0);
    cJSON_AddBoolToObject(mod, "audio", 0);
    const char *tmpl = mvm_engine_chat_template(a->e);
    char *valid = tmpl ? mvm_cli_valid_utf8(tmpl, strlen(tmpl)) : NULL;
    cJSON_AddStringToObject(o, "chat_template", valid ? valid : "");
    free(valid);
    char build[64];
    snprintf(build, sizeof build, "moevm %s", mvm_version());
    cJSON_AddStringToObject(o, "build_info", build);
    cJSON_AddBoolToObject(o, "endpoint_slots", 1);
    cJSON_AddBoolToObject(o, "endpoint_props", 0);
    cJSON_AddBoolToObject(o, "endpoint_metrics", 1);
    return print(o);
}
