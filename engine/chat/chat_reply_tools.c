/* The grammars that force a tool call (mvm_chat_tool_grammar, chat_reply.h): each tool's
 * arguments by its parameters schema (mvm_json_schema_to_grammar), its rules renamed apart,
 * in its syntax's markup.
 *
 * Forcible: the syntaxes whose arguments are a JSON object in plain markup (hermes,
 * deepseek-v3.1, kimi-k2, mistral). The reply begins with the call: a reasoning block of
 * its own is not allowed first (llama.cpp's grammars allow one where thinking is on; an
 * unbounded block let a model think to its length limit and never call). Where the prompt
 * opened the block, its rest comes first, any text without a '<', closed by </think>. */
#include "engine/chat/chat_reply_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moevm/engine.h"
#include "vmm/error.h"

int mvm_chat_syntax_forcible(mvm_chat_syntax s)
{
    return s == MVM_CHAT_HERMES || s == MVM_CHAT_DEEPSEEK_V31 || s == MVM_CHAT_KIMI_K2 ||
           s == MVM_CHAT_MISTRAL;
}

const char *mvm_chat_tool_trigger(mvm_chat_syntax s)
{
    switch (s) {
    case MVM_CHAT_HERMES: return "<tool_call>";
    case MVM_CHAT_DEEPSEEK_V31: return "<｜tool▁calls▁begin｜>";
    case MVM_CHAT_KIMI_K2: return "<|tool_calls_section_begin|>";
    case MVM_CHAT_MISTRAL: return "[TOOL_CALLS]";
    default: return NULL;
    }
}

typedef struct text {
    char *p;
    size_t n, cap;
    int nomem;
} text;

static void add(text *t, const char *fmt, ...) MVM_PRINTF(2, 3);
static void add(text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (t->nomem || k < 0)
        return;
    if (t->n + (size_t)k + 1 > t->cap) {
        size_t want = (t->n + (size_t)k + 1) * 2;
        char *g = realloc(t->p, want);
        if (!g) {
            t->nomem = 1;
            return;
        }
        t->p = g, t->cap = want;
    }
    va_start(ap, fmt);
    vsnprintf(t->p + t->n, t->cap - t->n, fmt, ap);
    va_end(ap);
    t->n += (size_t)k;
}

static int name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-';
}

/* The converter's grammar g with every rule name prefixed: names are words outside
 * "literals", [classes] and {counts}. */
static void add_renamed(text *t, const char *g, const char *prefix)
{
    for (const char *p = g; *p;) {
        if (*p == '"' || *p == '[' || *p == '{') {
            const char close = *p == '"' ? '"' : *p == '[' ? ']' : '}';
            const char *q = p + 1;
            while (*q && *q != close)
                q += q[0] == '\\' && q[1] ? 2 : 1;
            q += *q != '\0';
            add(t, "%.*s", (int)(q - p), p);
            p = q;
        } else if (name_char(*p)) {
            const char *q = p;
            while (name_char(*q))
                q++;
            add(t, "%s%.*s", prefix, (int)(q - p), p);
            p = q;
        } else {
            add(t, "%c", *p++);
        }
    }
}

/* A GBNF literal of s: quotes and backslashes escaped, controls as \xHH. */
static void add_literal(text *t, const char *s)
{
    add(t, "\"");
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            add(t, "\\%c", c);
        else if (c < 0x20)
            add(t, "\\x%02X", c);
        else
            add(t, "%c", c);
    }
    add(t, "\"");
}

/* call-<i> ::= the syntax's text around t<i>-root, the arguments */
static void add_call_rule(text *t, mvm_chat_syntax s, size_t i, const char *name)
{
    add(t, "call-%zu ::= ", i);
    cJSON *str = cJSON_CreateString(name);
    char *json_name = str ? cJSON_PrintUnformatted(str) : NULL;
    cJSON_Delete(str);
    char buf[512];
    switch (s) {
    case MVM_CHAT_HERMES:
    case MVM_CHAT_MISTRAL:
        snprintf(buf, sizeof buf, "{\"name\": %s, \"arguments\": ", json_name ? json_name : "");
        add_literal(t, buf);
        add(t, " t%zu-root \"}\"\n", i);
        break;
    case MVM_CHAT_DEEPSEEK_V31:
        snprintf(buf, sizeof buf, "%s<｜tool▁sep｜>", name);
        add_literal(t, buf);
        add(t, " t%zu-root\n", i);
        break;
    default: /* kimi-k2 */
        snprintf(buf, sizeof buf, "functions.%s:", name);
        add_literal(t, buf);
        add(t, " [0-9]{1,3} \"<|tool_call_argument_begin|>\" t%zu-root\n", i);
        break;
    }
    if (!json_name)
        t->nomem = 1;
    free(json_name);
}

/* root: the rest of the reasoning block the prompt opened, if it did, then the calls in the
 * syntax's block */
static void add_root(text *t, mvm_chat_syntax s, int parallel, int thinking_open)
{
    static const struct { const char *open, *call_open, *call_close, *sep, *close; } m[] = {
        [MVM_CHAT_HERMES] = {"", "<tool_call>\n", "\n</tool_call>", "\n", ""},
        [MVM_CHAT_DEEPSEEK_V31] = {"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>",
                                   "<｜tool▁call▁end｜>", "", "<｜tool▁calls▁end｜>"},
        [MVM_CHAT_KIMI_K2] = {"<|tool_calls_section_begin|>", "<|tool_call_begin|>",
                              "<|tool_call_end|>", "", "<|tool_calls_section_end|>"},
        [MVM_CHAT_MISTRAL] = {"[TOOL_CALLS][", "", "", ", ", "]"},
    };
    add(t, "root ::= %s", thinking_open ? "[^<]* \"</think>\" [ \\n]* " : "");
    add_literal(t, m[s].open);
    add(t, " one%s ", parallel ? " (sep one)*" : "");
    add_literal(t, m[s].close);
    add(t, "\n");
    add(t, "one ::= ");
    add_literal(t, m[s].call_open);
    add(t, " call ");
    add_literal(t, m[s].call_close);
    add(t, "\nsep ::= ");
    add_literal(t, m[s].sep);
    add(t, "\n");
}

int mvm_chat_tool_grammar(mvm_chat_syntax s, const cJSON *tool_list, const char *only,
                          int parallel, int thinking_open, char **gbnf, char *bad, size_t cap)
{
    *gbnf = NULL;
    if (!mvm_chat_syntax_forcible(s)) {
        snprintf(bad, cap, "this model's tool calls (%s syntax) cannot be forced: "
                 "tool_choice must be \"auto\" or \"none\"", mvm_chat_syntax_name(s));
        return -1;
    }
    text t = {0};
    add_root(&t, s, parallel, thinking_open);
    size_t n = 0;
    const cJSON *tool;
    cJSON_ArrayForEach(tool, tool_list)
    {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tool, "function");
        n += !only || !strcmp(cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring, only);
    }
    add(&t, "call ::= ");
    for (size_t i = 0; i < n; i++)
        add(&t, "%scall-%zu", i ? " | " : "", i);
    add(&t, "\n");
    if (!n) {
        snprintf(bad, cap, "tool_choice names the function '%s', which 'tools' does not have",
                 only);
        free(t.p);
        return -1;
    }
    size_t i = 0;
    cJSON_ArrayForEach(tool, tool_list)
    {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tool, "function");
        const char *name = cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring;
        if (only && strcmp(name, only))
            continue;
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        char *schema = params ? cJSON_PrintUnformatted(params) : strdup("{\"type\":\"object\"}");
        char *g = NULL, prefix[32];
        mvm_status st = schema ? mvm_json_schema_to_grammar(schema, strlen(schema), &g)
                               : MVM_ERR_NOMEM;
        free(schema);
        if (st != MVM_OK) {
            snprintf(bad, cap, "tools: the parameters of '%s': %s", name, mvm_last_error());
            free(t.p);
            return -1;
        }
        add_call_rule(&t, s, i, name);
        snprintf(prefix, sizeof prefix, "t%zu-", i++);
        add_renamed(&t, g, prefix);
        free(g);
    }
    if (t.nomem) {
        snprintf(bad, cap, "out of memory");
        free(t.p);
        return -1;
    }
    *gbnf = t.p;
    return 0;
}
