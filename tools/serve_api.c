/*
 * The OpenAI API's JSON (serve_api.h). Fields the server does not use (user, n_keep, ...)
 * are accepted and ignored, as llama.cpp's server does, so that
 * clients sending them work; the fields it does use are checked, and a wrong type or range
 * is a 400 naming the field.
 */
#include "tools/serve_api.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tools/cli.h"
#include "vmm/error.h"

/* message on one line: a control character in it (a field's name or value it quotes) as
 * an escape, \n or \x01, so that a client's log shows it and the line stays one. */
char *serve_api_one_line(const char *message)
{
    size_t n = 0;
    for (const char *p = message; *p; p++)
        n += (unsigned char)*p < 0x20 ? 4 : 1;
    char *out = malloc(n + 1), *o = out;
    for (const char *p = message; out && *p; p++) {
        const unsigned char c = (unsigned char)*p;
        if (c >= 0x20)
            *o++ = (char)c;
        else if (c == '\n' || c == '\t')
            *o++ = '\\', *o++ = c == '\n' ? 'n' : 't';
        else
            o += sprintf(o, "\\x%02x", c);
    }
    if (out)
        *o = '\0';
    return out;
}

char *serve_api_error(const char *message, const char *type)
{
    cJSON *root = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(root, "error");
    char *line = serve_api_one_line(message);
    cJSON_AddStringToObject(err, "message", line ? line : "out of memory");
    free(line);
    cJSON_AddStringToObject(err, "type", type);
    cJSON_AddNullToObject(err, "param");
    cJSON_AddNullToObject(err, "code");
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return out;
}

int serve_api_number(const cJSON *body, const char *key, double lo, double hi, int whole,
                  double *out, char *bad, size_t cap)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, key);
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi) ||
        (whole && v->valuedouble != floor(v->valuedouble))) {
        snprintf(bad, cap, "'%s' must be %s in [%g, %g]", key, whole ? "an integer" : "a number",
                 lo, hi);
        return -1;
    }
    *out = v->valuedouble;
    return 0;
}

int serve_api_flag(const cJSON *body, const char *key, int *out, char *bad, size_t cap)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, key);
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsBool(v)) {
        snprintf(bad, cap, "'%s' must be true or false", key);
        return -1;
    }
    *out = cJSON_IsTrue(v);
    return 0;
}

static int stops(const cJSON *body, serve_req *r, char *bad, size_t cap)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, "stop");
    if (!v || cJSON_IsNull(v))
        return 0;
    const cJSON *one = cJSON_IsString(v) ? v : NULL, *it = one ? one : v->child;
    if (!one && (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > SERVE_MAX_STOP))
        goto fail;
    for (; it; it = one ? NULL : it->next) {
        if (!cJSON_IsString(it) || !it->valuestring[0] || strlen(it->valuestring) > 256)
            goto fail;
        if (!(r->stop[r->n_stop++] = strdup(it->valuestring)))
            goto fail;
    }
    return 0;
fail:
    snprintf(bad, cap, "'stop' must be a non-empty string or an array of up to %d of them "
             "(each at most 256 bytes)", SERVE_MAX_STOP);
    return -1;
}

/* OpenAI's content may be a string or an array of parts {"type": "text", "text": ...}:
 * the template gets a string. */
static int flatten_content(cJSON *msg, int i, char *bad, size_t cap)
{
    cJSON *c = cJSON_GetObjectItemCaseSensitive(msg, "content");
    if (!c || cJSON_IsString(c) || cJSON_IsNull(c))
        return 0;
    if (!cJSON_IsArray(c)) {
        snprintf(bad, cap, "messages[%d].content must be a string or an array of text parts", i);
        return -1;
    }
    size_t len = 0;
    for (const cJSON *p = c->child; p; p = p->next) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (!cJSON_IsString(t)) {
            snprintf(bad, cap, "messages[%d].content: only text parts are supported", i);
            return -1;
        }
        len += strlen(t->valuestring);
    }
    /* each part copied once at its place: strcat's walk to the end made the server's
     * largest body (8 MiB: 335,000 parts of 13 letters) cost 7.7 s of a core, 0.3 now */
    char *joined = malloc(len + 1), *at = joined;
    for (const cJSON *p = c->child; joined && p; p = p->next) {
        const char *t = cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring;
        const size_t n = strlen(t);
        memcpy(at, t, n);
        at += n;
    }
    if (!joined)
        return -1;
    *at = '\0';
    cJSON_ReplaceItemInObjectCaseSensitive(msg, "content", cJSON_CreateString(joined));
    free(joined);
    return 0;
}

/* OpenAI's reasoning_effort, as llama.cpp's server reads it: "none" turns thinking off
 * (the template's enable_thinking false), any other value goes to the template as
 * `reasoning_effort` (gpt-oss's reads it), over chat_template_kwargs'. */
static int reasoning_effort(const cJSON *body, cJSON *vars, char *bad, size_t cap)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(body, "reasoning_effort");
    if (!e || cJSON_IsNull(e) || (cJSON_IsString(e) && !e->valuestring[0]))
        return 0;
    if (!cJSON_IsString(e)) {
        snprintf(bad, cap, "'reasoning_effort' must be a string (\"none\", \"low\", "
                 "\"medium\", \"high\")");
        return -1;
    }
    const int none = !strcmp(e->valuestring, "none");
    cJSON *v = none ? cJSON_CreateFalse() : cJSON_CreateString(e->valuestring);
    const char *key = none ? "enable_thinking" : "reasoning_effort";
    cJSON_DeleteItemFromObjectCaseSensitive(vars, key);
    if (none)
        cJSON_DeleteItemFromObjectCaseSensitive(vars, "reasoning_effort");
    if (!v || !cJSON_AddItemToObject(vars, key, v)) {
        cJSON_Delete(v);
        return -1;
    }
    return 0;
}

char *serve_api_chat_text(const serve_api *a, cJSON *body, char *bad, size_t cap)
{
    cJSON *msgs = cJSON_GetObjectItemCaseSensitive(body, "messages");
    if (!cJSON_IsArray(msgs) || !msgs->child) {
        snprintf(bad, cap, "'messages' must be a non-empty array of {role, content}");
        return NULL;
    }
    int i = 0;
    for (cJSON *m = msgs->child; m; m = m->next, i++)
        if (flatten_content(m, i, bad, cap))
            return NULL;
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(body, "chat_template_kwargs");
    if (kw && !cJSON_IsNull(kw) && !cJSON_IsObject(kw)) {
        snprintf(bad, cap, "'chat_template_kwargs' must be an object");
        return NULL;
    }
    cJSON *vars = a->default_kwargs ? cJSON_Duplicate(a->default_kwargs, 1)
                                    : cJSON_CreateObject();
    for (const cJSON *k = cJSON_IsObject(kw) ? kw->child : NULL; vars && k; k = k->next) {
        cJSON *copy = cJSON_Duplicate(k, 1); /* the request's over the command line's */
        cJSON_DeleteItemFromObjectCaseSensitive(vars, k->string);
        if (!copy || !cJSON_AddItemToObject(vars, k->string, copy)) {
            cJSON_Delete(copy);
            cJSON_Delete(vars), vars = NULL;
        }
    }
    if (!vars || serve_tools_template_vars(body, vars) ||
        reasoning_effort(body, vars, bad, cap)) {
        cJSON_Delete(vars);
        return NULL;
    }
    char *json = cJSON_PrintUnformatted(msgs), *text = NULL;
    char *extra = vars->child ? cJSON_PrintUnformatted(vars) : NULL;
    cJSON_Delete(vars);
    if (json && mvm_engine_chat_format(a->e, json, extra, 1, &text) != MVM_OK)
        snprintf(bad, cap, "%s", mvm_last_error());
    free(json), free(extra);
    return text;
}

int serve_api_tokens(const serve_api *a, const cJSON *p, const char *field, int add_special,
                     int parse_special, int32_t **out, size_t *n, char *bad, size_t cap)
{
    *out = NULL, *n = 0;
    const cJSON *one = cJSON_IsString(p) ? p : NULL, *it = one ? one : p ? p->child : NULL;
    size_t room = 16, strings = 0, ids = 0, nested = 0;
    if (!one && !cJSON_IsArray(p))
        goto shape;
    for (const cJSON *e = it; e; e = one ? NULL : e->next) {
        nested += cJSON_IsArray(e) || cJSON_IsObject(e); /* prompts, or a multimodal one */
        if (!nested && !cJSON_IsString(e) && !cJSON_IsNumber(e))
            goto shape;
        strings += cJSON_IsString(e), ids += cJSON_IsNumber(e);
        room += cJSON_IsString(e) ? strlen(e->valuestring) + 16 : 1;
    }
    /* llama.cpp's server reads a list of strings alone as that many prompts, and a list
     * with an id in it as one prompt */
    if (nested || (strings > 1 && !ids)) {
        snprintf(bad, cap, "%s holds several prompts; moevm serve takes one a request: send "
                 "each as a request of its own (they are batched together)", field);
        return -1;
    }
    if (!(*out = malloc(room * sizeof **out)))
        return -1;
    /* a BOS only where the prompt begins with text, as llama.cpp's tokenize_mixed */
    int first = 1, i = 0;
    for (const cJSON *e = it; e; e = one ? NULL : e->next, first = 0, i++) {
        if (cJSON_IsNumber(e)) {
            const double id = e->valuedouble;
            if (!(id >= 0 && id < a->n_vocab && id == floor(id))) {
                snprintf(bad, cap, "%s[%d]: %g is not a token of the vocabulary (0 to %u)",
                         field, i, id, a->n_vocab - 1);
                goto fail;
            }
            (*out)[(*n)++] = (int32_t)id;
            continue;
        }
        size_t k = 0, len = strlen(e->valuestring);
        if (mvm_engine_tokenize(a->e, e->valuestring, len, add_special && first, parse_special,
                                *out + *n, room - *n, &k) != MVM_OK) {
            snprintf(bad, cap, "%s: %s", field, mvm_last_error());
            goto fail;
        }
        *n += k;
    }
    return 0;
fail:
    free(*out);
    *out = NULL, *n = 0;
    return -1;
shape:
    snprintf(bad, cap, "%s must be a string, an array of token ids, or an array of both",
             field);
    return -1;
}

/* The request's prompt tokens into r: the chat in its template, or a completion's prompt p
 * (its control-token texts parsed, as llama.cpp's server does); it must fit the context. */
static int prompt(const serve_api *a, cJSON *body, const cJSON *p, const char *field,
                  int infill, serve_req *r, char *bad, size_t cap)
{
    size_t n = 0;
    if (r->kind == SERVE_CHAT) {
        char *text = serve_api_chat_text(a, body, bad, cap);
        const size_t len = text ? strlen(text) : 0;
        r->reply.thinking_open = text && mvm_chat_prompt_thinks(text);
        r->prompt = text ? malloc((len + 16) * sizeof *r->prompt) : NULL;
        mvm_status st = r->prompt ? mvm_engine_tokenize(a->e, text, len, 1, 1, r->prompt,
                                                        len + 16, &n)
                                  : MVM_ERR_NOMEM;
        if (r->prompt && st != MVM_OK) /* else out of memory (no message: a 500) */
            snprintf(bad, cap, "the prompt: %s", mvm_last_error());
        free(text);
        if (st != MVM_OK)
            return -1;
    } else if (infill ? serve_llama_infill(a, body, r, &n, bad, cap)
                      : serve_api_tokens(a, p, field, 1, 1, &r->prompt, &n, bad, cap)) {
        return -1;
    }
    if (n == 0) {
        snprintf(bad, cap, "%s is empty", r->kind == SERVE_CHAT ? "the prompt" : field);
        return -1;
    }
    if (n >= a->n_ctx) {
        snprintf(bad, cap, "%s takes %zu tokens; the context holds %u (-c)",
                 r->kind == SERVE_CHAT ? "the prompt" : field, n, a->n_ctx);
        return -1;
    }
    r->n_prompt = (uint32_t)n;
    return 0;
}

/* Several prompts in a completion's "prompt", as llama.cpp's server and OpenAI's API take
 * them: a list of strings alone, or a list holding lists (each a prompt of ids, or mixed).
 * A list with an id in it at its top is one prompt. */
static int several(const cJSON *p)
{
    int strings = 0, ids = 0, nested = 0;
    for (const cJSON *e = cJSON_IsArray(p) ? p->child : NULL; e; e = e->next)
        strings += cJSON_IsString(e), ids += cJSON_IsNumber(e),
            nested += cJSON_IsArray(e) || cJSON_IsObject(e);
    return !ids && (nested || strings > 1);
}

/* A request like r (a prompt of its own to come); NULL without memory. */
static serve_req *sibling(serve_req *r)
{
    serve_req *c = serve_req_new();
    if (!c)
        return NULL;
    c->kind = r->kind, c->stream = r->stream, c->max_tokens = r->max_tokens;
    c->t_max_predict = r->t_max_predict;
    c->ignore_eos = r->ignore_eos, c->cache_prompt = r->cache_prompt;
    c->return_tokens = r->return_tokens, c->id_slot = r->id_slot;
    c->logprobs = r->logprobs, c->top_logprobs = r->top_logprobs, c->sp = r->sp;
    c->post_sampling = r->post_sampling, c->think_tokens = r->think_tokens;
    if (r->think_message && !(c->think_message = strdup(r->think_message))) {
        serve_req_release(c);
        return NULL;
    }
    c->breakers = r->breakers;
    if (r->own_breakers) { /* read from r's: r stays until c goes */
        pthread_mutex_lock(&r->mu);
        r->refs++;
        pthread_mutex_unlock(&r->mu);
        c->owner = r;
    }
    if (serve_tools_copy(r, c) || serve_bias_copy(r, c)) {
        serve_req_release(c);
        return NULL;
    }
    for (uint32_t i = 0; i < r->n_stop; i++)
        if (!(c->stop[c->n_stop++] = strdup(r->stop[i]))) {
            serve_req_release(c);
            return NULL;
        }
    return c;
}

/* What JSON forbids in a string and cJSON lets through: a raw control character; and what a
 * C string cannot hold: an escaped U+0000 (cJSON would cut the text there). NULL if none. */
static const char *string_problem(const char *s, size_t len)
{
    int in = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (!in) {
            in = ch == '"';
        } else if (ch == '"') {
            in = 0;
        } else if (ch < 0x20) {
            return "a string holds a raw control character (JSON wants it escaped)";
        } else if (ch == '\\' && i + 1 < len) {
            if (s[++i] == 'u' && i + 4 < len && !strncmp(s + i + 1, "0000", 4))
                return "a string holds U+0000, which the server does not take";
        }
    }
    return NULL;
}

cJSON *serve_api_parse(const char *body, size_t len, char *bad, size_t cap)
{
    const char *end = NULL, *why = string_problem(body, len);
    cJSON *root = why ? NULL : cJSON_ParseWithLengthOpts(body, len, &end, 0);
    while (root && end < body + len && *end && strchr(" \t\r\n", *end))
        end++;
    if (root && (!cJSON_IsObject(root) || end < body + len)) {
        why = cJSON_IsObject(root) ? "the body has more after its JSON object" : NULL;
        cJSON_Delete(root);
        root = NULL;
    }
    if (!root)
        snprintf(bad, cap, "%s", why ? why : "the body is not a JSON object");
    return root;
}

/* What llama.cpp's server or OpenAI's API do that moevm's does not, refused rather than
 * ignored: a reply that silently lacks them would look like one that honoured them. */
static int unsupported(const cJSON *body, char *bad, size_t cap)
{
    static const struct { const char *field, *why; } refused[] = {
        {"echo", "the prompt's log-probabilities are not supported by moevm serve"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, refused[i].field);
        if (v && !cJSON_IsNull(v) && !cJSON_IsFalse(v) &&
            !(cJSON_IsString(v) && !v->valuestring[0])) {
            snprintf(bad, cap, "'%s': %s", refused[i].field, refused[i].why);
            return -1;
        }
    }
    return 0;
}

/* The log-probabilities a request asks for, in its API's words: llama.cpp's n_probs (the
 * alternatives; any at all reports them), OpenAI's chat logprobs (true) and top_logprobs,
 * and its completions' logprobs (the alternatives, 0 for the token's own alone). */
static int logprobs(const cJSON *body, serve_req *r, char *bad, size_t cap)
{
    double top = -1;
    const double most = SERVE_MAX_LOGPROBS;
    if (r->kind == SERVE_LLAMA) {
        if (serve_api_number(body, "n_probs", 0, most, 1, &top, bad, cap))
            return -1;
        r->logprobs = top > 0;
    } else if (r->kind == SERVE_COMPLETION) {
        if (serve_api_number(body, "logprobs", 0, most, 1, &top, bad, cap))
            return -1;
        r->logprobs = top >= 0;
    } else {
        if (serve_api_flag(body, "logprobs", &r->logprobs, bad, cap) ||
            serve_api_number(body, "top_logprobs", 0, most, 1, &top, bad, cap))
            return -1;
        if (top >= 0 && !r->logprobs) {
            snprintf(bad, cap, "'top_logprobs' needs 'logprobs': true");
            return -1;
        }
    }
    r->top_logprobs = top > 0 ? (uint32_t)top : 0;
    /* llama.cpp's post_sampling_probs: the probabilities the draw was made from; in the
     * entries llama.cpp's /completion and the chat API share ("prob", "top_probs"), which
     * OpenAI's legacy completions do not have */
    if (serve_api_flag(body, "post_sampling_probs", &r->post_sampling, bad, cap))
        return -1;
    if (r->post_sampling && r->kind == SERVE_COMPLETION && r->logprobs) {
        snprintf(bad, cap, "'post_sampling_probs': OpenAI's completions report "
                 "log-probabilities; llama.cpp's /completion and the chat API report these");
        return -1;
    }
    return 0;
}

/* The fields every route shares with llama.cpp's server: the slot and its cache. */
static int slot_fields(const serve_api *a, const cJSON *body, serve_req *r, char *bad,
                       size_t cap)
{
    double slot = -1;
    if (serve_api_number(body, "id_slot", -1, a->n_seq ? a->n_seq - 1.0 : 0, 1, &slot, bad, cap) ||
        serve_api_flag(body, "cache_prompt", &r->cache_prompt, bad, cap) ||
        serve_api_flag(body, "return_tokens", &r->return_tokens, bad, cap))
        return -1;
    r->id_slot = (int32_t)slot;
    return 0;
}

/* The grammar of a forced tool call, or the lazy one of a call the reply may make, made
 * for r's prompt. */
static int bind_tools(const serve_api *a, serve_req *r, char *bad, size_t cap)
{
    r->lazy_call &= !r->grammar; /* the request's grammar, or the server's --grammar, stands */
    if (!r->force_call && !r->lazy_call) {
        /* a grammar's sentence is the whole reply, not the rest of the reasoning that the
         * prompt opened */
        if (r->grammar)
            r->reply.thinking_open = 0;
        return 0;
    }
    char *gbnf = serve_tools_grammar(r, bad, cap);
    int rc = gbnf ? serve_grammar_bind(a, gbnf, r, bad, cap) : -1;
    free(gbnf);
    if (!rc && r->lazy_call)
        rc = serve_tools_lazy(r, bad, cap);
    r->reply.held = !rc; /* a call begun ends as one: it may be streamed while written */
    return rc;
}

uint32_t serve_api_requests(const serve_api *a, enum serve_kind kind, const char *body,
                            size_t len, serve_req **out, uint32_t max, int *status,
                            char **error)
{
    static atomic_uint counter;
    char bad[512] = "";
    *status = 400;
    *error = NULL;
    const int infill = kind == SERVE_INFILL; /* then a /completion of that prompt */
    kind = infill ? SERVE_LLAMA : kind;
    char *gbnf = NULL;
    cJSON *root = serve_api_parse(body, len, bad, sizeof bad);
    serve_req *r = root ? serve_req_new() : NULL;
    int ok = r != NULL, stream = 0, ignore_eos = a->default_ignore_eos;
    if (r)
        r->kind = kind;
    ok = ok && !serve_sampling_read(a, root, r, bad, sizeof bad) &&
         !stops(root, r, bad, sizeof bad);
    ok = ok && !serve_api_flag(root, "stream", &stream, bad, sizeof bad) &&
         !serve_api_flag(root, "ignore_eos", &ignore_eos, bad, sizeof bad);
    ok = ok && !unsupported(root, bad, sizeof bad) && !slot_fields(a, root, r, bad, sizeof bad) &&
         !logprobs(root, r, bad, sizeof bad) &&
         !serve_grammar_text(a, root, &gbnf, bad, sizeof bad) &&
         !serve_bias_read(a, root, r, bad, sizeof bad) &&
         !serve_think_read(a, root, r, bad, sizeof bad) &&
         (kind != SERVE_CHAT || !serve_tools_read(a, root, r, bad, sizeof bad));
    if (ok && r->force_call) /* its own grammar, made once the prompt is known */
        free(gbnf), gbnf = NULL;
    const cJSON *p = root ? cJSON_GetObjectItemCaseSensitive(root, "prompt") : NULL;
    const int list = ok && kind != SERVE_CHAT && !infill && several(p);
    double choices = 1; /* OpenAI's n: that many replies to the one prompt */
    ok = ok && !serve_api_number(root, "n", 1, SERVE_MAX_PROMPTS, 1, &choices, bad, sizeof bad);
    const uint32_t n = list ? (uint32_t)cJSON_GetArraySize(p) : (uint32_t)choices;
    if (ok && list && (n > max || stream || choices > 1)) {
        snprintf(bad, sizeof bad, choices > 1 ? "'n' above 1 takes one prompt, not a list"
                 : stream ? "'prompt' lists %u prompts; a stream takes one (send each as a "
                            "request of its own: they are batched together)"
                          : "'prompt' lists %u prompts; at most %u a request", n, max);
        ok = 0;
    } else if (ok && n > 1 && (n > max || stream)) {
        snprintf(bad, sizeof bad, stream ? "'n' above 1 is not streamed: ask for one reply"
                                         : "'n' %u: at most %u replies a request", n, max);
        ok = 0;
    }
    if (ok) {
        r->stream = stream;
        r->ignore_eos = ignore_eos;
        r->created = (long)time(NULL);
    }
    uint32_t made = 0;
    const cJSON *e = list ? p->child : p;
    for (uint32_t i = 0; ok && i < n; i++, e = list ? e->next : e) {
        serve_req *q = i == 0 ? r : sibling(r);
        if (q && !list) /* n replies to one prompt: a random stream each */
            q->sp.seed = r->sp.seed + i;
        char field[40];
        snprintf(field, sizeof field, list ? "'prompt'[%u]" : "'prompt'", i);
        if (q)
            out[made++] = q;
        ok = q && !prompt(a, root, e, field, infill, q, bad, sizeof bad) &&
             !serve_grammar_bind(a, gbnf, q, bad, sizeof bad) &&
             !bind_tools(a, q, bad, sizeof bad) && !serve_think_bind(a, q, bad, sizeof bad);
        if (ok)
            snprintf(q->id, sizeof q->id, "%s-%u", kind == SERVE_CHAT ? "chatcmpl" : "cmpl",
                     atomic_fetch_add(&counter, 1));
    }
    if (!ok) {
        if (!bad[0])
            snprintf(bad, sizeof bad, "out of memory"), *status = 500;
        if (!strncmp(bad, SERVE_NOT_SUPPORTED, strlen(SERVE_NOT_SUPPORTED)))
            *status = 501; /* a model that cannot do it, as llama.cpp's server says */
        *error = serve_api_error(bad, *status == 400   ? "invalid_request_error"
                                      : *status == 501 ? "not_supported_error"
                                                       : "server_error");
        if (!made)
            serve_req_release(r);
        for (uint32_t i = 0; i < made; i++)
            serve_req_release(out[i]);
        made = 0;
    }
    cJSON_Delete(root);
    free(gbnf);
    return made;
}

serve_req *serve_api_request(const serve_api *a, enum serve_kind kind, const char *body,
                             size_t len, int *status, char **error)
{
    serve_req *r = NULL;
    return serve_api_requests(a, kind, body, len, &r, 1, status, error) ? r : NULL;
}

static cJSON *envelope(const serve_api *a, const serve_req *r, int chunk)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "object", r->kind == SERVE_CHAT ? (chunk ? "chat.completion.chunk"
                                                          : "chat.completion")
                                                 : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)r->created);
    cJSON_AddStringToObject(o, "model", a->model_id);
    return o;
}

/* The tokens of requests r[0..n): one response's, or a list's summed. */
static void usage(cJSON *o, const serve_req *const *r, uint32_t n)
{
    double prompt = 0, completion = 0;
    for (uint32_t i = 0; i < n; i++)
        prompt += r[i]->n_prompt, completion += r[i]->n_gen;
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", completion);
    cJSON_AddNumberToObject(u, "total_tokens", prompt + completion);
}

/* One choice: a message (chat), a delta (chat chunk) or text (completions); the
 * log-probabilities of the tokens r->gen[from..to) where asked for. */
static void choice(const serve_api *a, cJSON *choices, uint32_t index, const serve_req *r,
                   const char *text, size_t n, uint32_t from, uint32_t to, int chunk,
                   int first, const char *finish)
{
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", index);
    /* a model may emit bytes that are not UTF-8 (byte tokens of a character it never
     * finished), and JSON must be: each bad byte becomes U+FFFD */
    char *t = mvm_cli_valid_utf8(text, n);
    int calls = 0;
    if (r->kind == SERVE_CHAT && r->parse_reply && !chunk) {
        cJSON *m = serve_tools_message(r, t ? t : "", t ? strlen(t) : 0);
        calls = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(m, "tool_calls"));
        cJSON_AddItemToObject(c, "message", m ? m : cJSON_CreateObject());
    } else if (r->kind == SERVE_CHAT) {
        cJSON *m = cJSON_AddObjectToObject(c, chunk ? "delta" : "message");
        if (!chunk || first)
            cJSON_AddStringToObject(m, "role", "assistant");
        if (!chunk || n)
            cJSON_AddStringToObject(m, "content", t ? t : "");
    } else {
        cJSON_AddStringToObject(c, "text", t ? t : "");
    }
    free(t);
    if (!r->logprobs) {
        cJSON_AddNullToObject(c, "logprobs");
    } else if (r->kind == SERVE_CHAT) {
        cJSON_AddItemToObject(cJSON_AddObjectToObject(c, "logprobs"), "content",
                              serve_api_logprobs(a, r, from, to, 0));
    } else {
        cJSON_AddItemToObject(c, "logprobs", serve_api_logprobs_legacy(a, r, from, to));
    }
    if (finish)
        cJSON_AddStringToObject(c, "finish_reason", serve_tools_finish(finish, calls));
    else
        cJSON_AddNullToObject(c, "finish_reason");
}

char *serve_api_response(const serve_api *a, const serve_req *r)
{
    return serve_api_response_list(a, &r, 1);
}

char *serve_api_response_list(const serve_api *a, const serve_req *const *r, uint32_t n)
{
    cJSON *o = envelope(a, r[0], 0), *choices = cJSON_AddArrayToObject(o, "choices");
    for (uint32_t i = 0; i < n; i++)
        choice(a, choices, i, r[i], r[i]->text, r[i]->len, 0, r[i]->n_gen, 0, 0, r[i]->finish);
    usage(o, r, n);
    char *out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return out;
}

char *serve_api_count(const serve_api *a, const char *chat, size_t len, const char *object,
                      int *status)
{
    char *err = NULL;
    serve_req *r = serve_api_request(a, SERVE_CHAT, chat, len, status, &err);
    if (!r)
        return err;
    char out[96];
    snprintf(out, sizeof out, "{%s%s%s\"input_tokens\":%u}", object ? "\"object\":\"" : "",
             object ? object : "", object ? "\"," : "", r->n_prompt);
    serve_req_release(r);
    *status = 200;
    return strdup(out);
}

/* POST /v1/chat/completions/input_tokens (llama.cpp's server's, after OpenAI's
 * /v1/responses/input_tokens). */
char *serve_api_chat_count(const serve_api *a, const char *body, size_t len, int *status)
{
    return serve_api_count(a, body, len, "response.input_tokens", status);
}

char *serve_api_delta_events(const cJSON *delta, const serve_delta_sink *sink)
{
    const cJSON *think = cJSON_GetObjectItemCaseSensitive(delta, "reasoning_content");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(delta, "content"), *c;
    char *buf = NULL;
    size_t len = 0;
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(delta, "tool_calls");
    int rc = cJSON_IsString(think) ? sink->text(sink->ctx, 1, think->valuestring, &buf, &len) : 0;
    /* more of a call begun before (no id) comes before text: text grows only after a call's
     * block ends; a new call (its id) after the text before it */
    cJSON_ArrayForEach(c, calls)
    {
        if (!rc && !cJSON_GetObjectItemCaseSensitive(c, "id"))
            rc = sink->call(sink->ctx, c, &buf, &len);
    }
    if (!rc && cJSON_IsString(text))
        rc = sink->text(sink->ctx, 2, text->valuestring, &buf, &len);
    cJSON_ArrayForEach(c, calls)
    {
        if (!rc && cJSON_GetObjectItemCaseSensitive(c, "id"))
            rc = sink->call(sink->ctx, c, &buf, &len);
    }
    if (rc)
        free(buf), buf = NULL;
    return buf;
}

cJSON *serve_api_typed(const char *type)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    return o;
}

int serve_api_typed_event(char **buf, size_t *len, cJSON *o)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "type");
    char *json = cJSON_IsString(type) ? cJSON_PrintUnformatted(o) : NULL;
    const size_t n = json ? strlen(json) + strlen(type->valuestring) + 20 : 0;
    char *grown = json ? realloc(*buf, *len + n + 1) : NULL;
    if (grown)
        *len += (size_t)sprintf(grown + *len, "event: %s\ndata: %s\n\n", type->valuestring, json);
    *buf = grown ? grown : *buf;
    free(json);
    cJSON_Delete(o);
    return grown ? 0 : -1;
}

/* o as a server-sent event (malloc'd); o is freed. */
static char *event(cJSON *o)
{
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!json)
        return NULL;
    size_t len = strlen(json) + 9;
    char *out = malloc(len);
    if (out)
        snprintf(out, len, "data: %s\n\n", json);
    free(json);
    return out;
}

char *serve_api_chunk(const serve_api *a, const serve_req *r, const char *text, size_t n,
                      uint32_t from, uint32_t to, int first, const char *finish)
{
    cJSON *o = envelope(a, r, 1);
    choice(a, cJSON_AddArrayToObject(o, "choices"), 0, r, text, n, from, to, 1, first, finish);
    if (finish)
        usage(o, &r, 1);
    return event(o);
}

char *serve_api_chunk_delta(const serve_api *a, const serve_req *r, cJSON *delta,
                            uint32_t from, uint32_t to)
{
    cJSON *o = envelope(a, r, 1), *choices = cJSON_AddArrayToObject(o, "choices");
    choice(a, choices, 0, r, NULL, 0, from, to, 1, 0, NULL);
    if (!choices || !choices->child ||
        !cJSON_ReplaceItemInObjectCaseSensitive(choices->child, "delta", delta))
        cJSON_Delete(delta);
    return event(o);
}
