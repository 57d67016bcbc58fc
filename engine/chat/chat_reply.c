/* A chat reply read into its parts (chat_reply.h): the syntaxes, the reasoning, the content
 * around the calls, gpt-oss's channels. */
#include "engine/chat/chat_reply_impl.h"

#include <stdlib.h>
#include <string.h>

static const struct syntax {
    const char *name;
    const char *markers[8];
} syntaxes[] = {
    [MVM_CHAT_PLAIN] = {"plain", {NULL}},
    [MVM_CHAT_HARMONY] = {"harmony",
                          {"<|channel|>", "<|message|>", "<|start|>", "<|end|>", "<|constrain|>",
                           NULL}},
    [MVM_CHAT_MINIMAX_M2] = {"minimax-m2", {"<minimax:tool_call>", "</minimax:tool_call>", NULL}},
    [MVM_CHAT_GLM45] = {"glm-4.5",
                        {"<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>",
                         "</arg_value>", NULL}},
    [MVM_CHAT_QWEN3_CODER] = {"qwen3-coder", {"<tool_call>", "</tool_call>", NULL}},
    [MVM_CHAT_HERMES] = {"hermes", {"<tool_call>", "</tool_call>", NULL}},
    [MVM_CHAT_DEEPSEEK_R1] = {"deepseek-r1",
                              {"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>",
                               "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>",
                               NULL}},
    [MVM_CHAT_DEEPSEEK_V31] = {"deepseek-v3.1",
                               {"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>",
                                "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>",
                                NULL}},
    [MVM_CHAT_KIMI_K2] = {"kimi-k2",
                          {"<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
                           "<|tool_call_begin|>", "<|tool_call_end|>",
                           "<|tool_call_argument_begin|>", NULL}},
    [MVM_CHAT_MISTRAL] = {"mistral", {"[TOOL_CALLS]", "[ARGS]", NULL}},
};

/* every syntax's reasoning markers, which a vocabulary may have as control tokens */
static const char *const think_markers[] = {"<think>", "</think>", NULL};

mvm_chat_syntax mvm_chat_syntax_of(const char *src)
{
    if (!src)
        return MVM_CHAT_PLAIN;
    if (strstr(src, "<|channel|>"))
        return MVM_CHAT_HARMONY;
    if (strstr(src, "<minimax:tool_call>"))
        return MVM_CHAT_MINIMAX_M2;
    if (strstr(src, "<arg_key>"))
        return MVM_CHAT_GLM45;
    if (strstr(src, "<tool_call>"))
        return strstr(src, "<function=") && strstr(src, "<parameter=") ? MVM_CHAT_QWEN3_CODER
                                                                      : MVM_CHAT_HERMES;
    if (strstr(src, "tool▁call▁begin"))
        return strstr(src, "```json") ? MVM_CHAT_DEEPSEEK_R1 : MVM_CHAT_DEEPSEEK_V31;
    if (strstr(src, "<|tool_call_begin|>"))
        return MVM_CHAT_KIMI_K2;
    if (strstr(src, "[TOOL_CALLS]"))
        return MVM_CHAT_MISTRAL;
    return MVM_CHAT_PLAIN;
}

const char *mvm_chat_syntax_name(mvm_chat_syntax s)
{
    return (unsigned)s < sizeof syntaxes / sizeof syntaxes[0] ? syntaxes[s].name : "?";
}

const char *const *mvm_chat_syntax_markers(mvm_chat_syntax s)
{
    return (unsigned)s < sizeof syntaxes / sizeof syntaxes[0] ? syntaxes[s].markers
                                                               : syntaxes[0].markers;
}

/* ---- slices ------------------------------------------------------------------------------ */

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

const char *cr_find(cr_span s, const char *needle)
{
    const size_t k = strlen(needle);
    for (size_t i = 0; k && i + k <= s.n; i++)
        if (s.p[i] == needle[0] && !memcmp(s.p + i, needle, k))
            return s.p + i;
    return NULL;
}

static cr_span ltrim(cr_span s)
{
    while (s.n && is_space(*s.p))
        s.p++, s.n--;
    return s;
}

static cr_span rtrim(cr_span s)
{
    while (s.n && is_space(s.p[s.n - 1]))
        s.n--;
    return s;
}

cr_span cr_trim(cr_span s)
{
    return rtrim(ltrim(s));
}

static cr_span from(cr_span s, const char *at)
{
    return (cr_span){at, s.n - (size_t)(at - s.p)};
}

static int starts(cr_span s, const char *m)
{
    const size_t k = strlen(m);
    return s.n >= k && !memcmp(s.p, m, k);
}

/* The length of s's suffix that is a proper prefix of one of the markers. */
static size_t marker_tail(cr_span s, const char *const *markers)
{
    size_t best = 0;
    for (; markers && *markers; markers++) {
        const size_t k = strlen(*markers);
        for (size_t t = k && k - 1 < s.n ? k - 1 : k ? s.n : 0; t > best; t--)
            if (!memcmp(s.p + s.n - t, *markers, t)) {
                best = t;
                break;
            }
    }
    return best;
}

cr_span cr_releasable(cr_span s, const char *const *markers, int keep_space)
{
    for (size_t was = s.n + 1; was != s.n;) {
        was = s.n;
        s.n -= marker_tail(s, markers);
        s.n -= marker_tail(s, think_markers);
        if (!keep_space)
            s = rtrim(s);
    }
    size_t k = 0; /* a lead byte and its continuations, if short of the lead's length */
    while (k < s.n && k < 4 && ((unsigned char)s.p[s.n - 1 - k] & 0xC0) == 0x80)
        k++;
    if (k < s.n) {
        const unsigned char lead = (unsigned char)s.p[s.n - 1 - k];
        const size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
        if (need > k + 1)
            s.n -= k + 1;
    }
    return s;
}

/* ---- the message being built ----------------------------------------------------------- */

typedef struct reply {
    char *content, *reasoning;
    size_t n_content, n_reasoning, cap_content, cap_reasoning;
    cJSON *calls;
    int nomem;
} reply;

static void put(reply *r, int reasoning, cr_span s)
{
    char **buf = reasoning ? &r->reasoning : &r->content;
    size_t *n = reasoning ? &r->n_reasoning : &r->n_content;
    size_t *cap = reasoning ? &r->cap_reasoning : &r->cap_content;
    if (*n + s.n + 1 > *cap) {
        size_t want = (*n + s.n + 1) * 2;
        char *grown = realloc(*buf, want);
        if (!grown) {
            r->nomem = 1;
            return;
        }
        *buf = grown, *cap = want;
    }
    memcpy(*buf + *n, s.p, s.n);
    *n += s.n;
    (*buf)[*n] = '\0';
}

/* ---- reasoning -------------------------------------------------------------------------- */

int mvm_chat_prompt_thinks(const char *prompt)
{
    cr_span p = rtrim((cr_span){prompt, prompt ? strlen(prompt) : 0});
    return p.n >= 7 && !memcmp(p.p + p.n - 7, "<think>", 7);
}

/* Takes the reasoning block off the front of *s into r (or leaves it when there is none). */
static void reasoning(const mvm_chat_reply_opts *o, cr_span *s, int partial, reply *r)
{
    cr_span t = ltrim(*s);
    int open = o->thinking_open;
    if (!open && starts(t, "<think>"))
        open = 1, t.p += 7, t.n -= 7;
    else if (!open && partial && t.n < 7 && !memcmp(t.p, "<think>", t.n))
        open = 1, t.n = 0; /* may be the block's start: nothing to say yet */
    if (!open)
        return;
    const char *end = cr_find(t, "</think>");
    if (end) {
        put(r, 1, cr_trim((cr_span){t.p, (size_t)(end - t.p)}));
        *s = ltrim(from(t, end + 8));
        return;
    }
    put(r, 1, partial ? cr_releasable(ltrim(t), NULL, 0) : cr_trim(t));
    s->p += s->n, s->n = 0;
}

/* ---- content and calls ------------------------------------------------------------------ */

static void content_and_calls(const mvm_chat_reply_opts *o, cr_span s, int partial, reply *r)
{
    const char *start = o->tools ? cr_call_start(o->syntax) : "";
    const char *const starts_of[] = {start, NULL};
    int after_markup = 0;
    for (;;) {
        if (after_markup)
            s = ltrim(s);
        const char *at = *start ? cr_find(s, start) : NULL;
        if (!at) {
            put(r, 0, partial ? cr_releasable(s, starts_of, !*start) : s);
            return;
        }
        cr_span before = rtrim((cr_span){s.p, (size_t)(at - s.p)});
        size_t used = 0;
        const int got = cr_calls(o, from(s, at), partial, r->calls, &used);
        if (got == 1) {
            put(r, 0, before);
            s = from(s, at + used), after_markup = 1;
            continue;
        }
        if (got == 0) { /* a call still being written */
            put(r, 0, before);
            return;
        }
        /* not a call: its text is content; look past its opening marker */
        const size_t k = strlen(start);
        put(r, 0, (cr_span){s.p, (size_t)(at - s.p) + k});
        s = from(s, at + k), after_markup = 0;
    }
}

/* ---- gpt-oss's channels ------------------------------------------------------------------ */

/* The word after `key` in a harmony header (up to a space or markup), or an empty span. */
static cr_span header_word(cr_span h, const char *key)
{
    const char *at = cr_find(h, key);
    if (!at)
        return (cr_span){h.p, 0};
    cr_span w = from(h, at + strlen(key));
    size_t n = 0;
    while (n < w.n && !is_space(w.p[n]) && w.p[n] != '<')
        n++;
    return (cr_span){w.p, n};
}

/* One message: header<|message|>body[<|end|>]; `open` when the reply may still add to it. */
static void harmony_message(const mvm_chat_reply_opts *o, cr_span m, int open, int partial,
                            reply *r)
{
    static const char *const hold[] = {"<|end|>", "<|start|>", NULL};
    const char *body_at = cr_find(m, "<|message|>");
    if (!body_at) { /* no header (plain text), or one still being written (the last) */
        if ((!partial || !open) && !cr_find(m, "<|channel|>"))
            put(r, 0, m);
        return;
    }
    cr_span h = {m.p, (size_t)(body_at - m.p)}, body = from(m, body_at + 11);
    const char *end = cr_find(body, "<|end|>");
    if (end)
        body.n = (size_t)(end - body.p), open = 0;
    cr_span channel = header_word(h, "<|channel|>"), to = header_word(h, "to=");
    if (to.n > 10 && !memcmp(to.p, "functions.", 10) && o->tools) {
        const int writing = open && partial;
        if (writing && !o->held)
            return; /* unheld, a call is reported whole */
        if (cr_json_call(r->calls, (cr_span){to.p + 10, to.n - 10}, body, open && o->held) < 0 &&
            !writing)
            put(r, 0, body); /* not a call's arguments: what it said is kept */
        return;
    }
    const int thought = channel.n == 8 && !memcmp(channel.p, "analysis", 8);
    put(r, thought, open && partial ? cr_releasable(body, hold, 0) : body);
}

static void harmony(const mvm_chat_reply_opts *o, cr_span s, int partial, reply *r)
{
    for (;;) {
        const char *next = cr_find(s, "<|start|>");
        cr_span m = next ? (cr_span){s.p, (size_t)(next - s.p)} : s;
        harmony_message(o, m, !next, partial, r);
        if (!next)
            return;
        s = from(s, next + 9);
    }
}

/* ---- the entry --------------------------------------------------------------------------- */

cJSON *mvm_chat_reply_parse(const mvm_chat_reply_opts *o, const char *text, size_t len,
                            int partial)
{
    reply r = {0};
    cJSON *msg = cJSON_CreateObject();
    r.calls = cJSON_CreateArray();
    cr_span s = {text ? text : "", text ? len : 0};
    if (!msg || !r.calls || !cJSON_AddStringToObject(msg, "role", "assistant"))
        r.nomem = 1;
    else if (o->syntax == MVM_CHAT_HARMONY && o->reasoning)
        harmony(o, s, partial, &r);
    else {
        if (o->reasoning)
            reasoning(o, &s, partial, &r);
        content_and_calls(o, s, partial, &r);
    }
    const int calls = !r.nomem && cJSON_GetArraySize(r.calls) > 0;
    if (!r.nomem && !r.n_content && calls)
        r.nomem = !cJSON_AddNullToObject(msg, "content");
    else if (!r.nomem)
        r.nomem = !cJSON_AddStringToObject(msg, "content", r.content ? r.content : "");
    if (!r.nomem && r.n_reasoning)
        r.nomem = !cJSON_AddStringToObject(msg, "reasoning_content", r.reasoning);
    if (!r.nomem && calls)
        cJSON_AddItemToObject(msg, "tool_calls", r.calls), r.calls = NULL;
    free(r.content), free(r.reasoning);
    cJSON_Delete(r.calls);
    if (r.nomem) {
        cJSON_Delete(msg);
        return NULL;
    }
    return msg;
}
