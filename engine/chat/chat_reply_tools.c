/* The grammars that force a tool call (mvm_chat_tool_grammar, chat_reply.h): each tool's
 * arguments by its parameters schema (mvm_json_schema_to_grammar), its rules renamed apart,
 * in its syntax's markup.
 *
 * Forcible: every syntax but plain: those whose arguments are a JSON object (hermes,
 * deepseek-r1, deepseek-v3.1, kimi-k2, mistral, harmony) and the XML ones (qwen3-coder,
 * glm-4.5, minimax-m2: chat_reply_xml.c). The reply begins with the call: a reasoning
 * block of its own is not allowed first (llama.cpp's grammars allow one where thinking is
 * on; an unbounded block let a model think to its length limit and never call). Where the
 * prompt opened the block, its rest comes first, any text without a '<', closed by
 * </think>. */
#include "engine/chat/chat_reply_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moevm/engine.h"
#include "vmm/error.h"

/* The JSON syntaxes: a call's arguments are one JSON object. */
static int json_syntax(mvm_chat_syntax s)
{
    return s == MVM_CHAT_HERMES || s == MVM_CHAT_DEEPSEEK_R1 || s == MVM_CHAT_DEEPSEEK_V31 ||
           s == MVM_CHAT_KIMI_K2 || s == MVM_CHAT_MISTRAL || s == MVM_CHAT_HARMONY;
}

int mvm_chat_syntax_forcible(mvm_chat_syntax s)
{
    return json_syntax(s) || s == MVM_CHAT_QWEN3_CODER || s == MVM_CHAT_GLM45 ||
           s == MVM_CHAT_MINIMAX_M2;
}

void mvm_chat_reasoning_marks(mvm_chat_syntax s, const char **open, const char **close)
{
    const int h = s == MVM_CHAT_HARMONY;
    *open = h ? "<|channel|>analysis" : "<think>";
    *close = h ? "<|end|>" : "</think>";
}

const char *mvm_chat_tool_trigger(mvm_chat_syntax s)
{
    switch (s) {
    case MVM_CHAT_HERMES:
    case MVM_CHAT_QWEN3_CODER:
    case MVM_CHAT_GLM45: return "<tool_call>";
    case MVM_CHAT_MINIMAX_M2: return "<minimax:tool_call>";
    case MVM_CHAT_DEEPSEEK_R1:
    case MVM_CHAT_DEEPSEEK_V31: return "<｜tool▁calls▁begin｜>";
    case MVM_CHAT_HARMONY: return "to=functions.";
    case MVM_CHAT_KIMI_K2: return "<|tool_calls_section_begin|>";
    case MVM_CHAT_MISTRAL: return "[TOOL_CALLS]";
    default: return NULL;
    }
}

void cr_add(cr_text *t, const char *fmt, ...)
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
static void add_renamed(cr_text *t, const char *g, const char *prefix)
{
    for (const char *p = g; *p;) {
        if (*p == '"' || *p == '[' || *p == '{') {
            const char close = *p == '"' ? '"' : *p == '[' ? ']' : '}';
            const char *q = p + 1;
            while (*q && *q != close)
                q += q[0] == '\\' && q[1] ? 2 : 1;
            q += *q != '\0';
            cr_add(t, "%.*s", (int)(q - p), p);
            p = q;
        } else if (name_char(*p)) {
            const char *q = p;
            while (name_char(*q))
                q++;
            cr_add(t, "%s%.*s", prefix, (int)(q - p), p);
            p = q;
        } else {
            cr_add(t, "%c", *p++);
        }
    }
}

int cr_add_schema(cr_text *t, const cJSON *schema, const char *prefix, const char *what,
                  char *bad, size_t cap)
{
    char *json = schema ? cJSON_PrintUnformatted(schema) : NULL, *g = NULL;
    mvm_status st = json ? mvm_json_schema_to_grammar(json, strlen(json), &g)
                         : mvm_fail(MVM_ERR_NOMEM, "out of memory");
    free(json);
    if (st != MVM_OK) {
        snprintf(bad, cap, "tools: %s: %s", what, mvm_last_error());
        return -1;
    }
    add_renamed(t, g, prefix);
    free(g);
    return 0;
}

void cr_add_literal(cr_text *t, const char *s)
{
    cr_add(t, "\"");
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            cr_add(t, "\\%c", c);
        else if (c < 0x20)
            cr_add(t, "\\x%02X", c);
        else
            cr_add(t, "%c", c);
    }
    cr_add(t, "\"");
}

/* call-<i> ::= the syntax's text around t<i>-root, the arguments */
static void add_call_rule(cr_text *t, mvm_chat_syntax s, size_t i, const char *name)
{
    cr_add(t, "call-%zu ::= ", i);
    cJSON *str = cJSON_CreateString(name);
    char *json_name = str ? cJSON_PrintUnformatted(str) : NULL;
    cJSON_Delete(str);
    char buf[512];
    switch (s) {
    case MVM_CHAT_HERMES:
    case MVM_CHAT_MISTRAL:
        snprintf(buf, sizeof buf, "{\"name\": %s, \"arguments\": ", json_name ? json_name : "");
        cr_add_literal(t, buf);
        cr_add(t, " t%zu-root \"}\"\n", i);
        break;
    case MVM_CHAT_DEEPSEEK_V31:
        snprintf(buf, sizeof buf, "%s<｜tool▁sep｜>", name);
        cr_add_literal(t, buf);
        cr_add(t, " t%zu-root\n", i);
        break;
    case MVM_CHAT_DEEPSEEK_R1:
        snprintf(buf, sizeof buf, "function<｜tool▁sep｜>%s\n```json\n", name);
        cr_add_literal(t, buf);
        cr_add(t, " t%zu-root \"\\n```\"\n", i);
        break;
    case MVM_CHAT_HARMONY: /* after "to=functions." */
        cr_add_literal(t, name);
        cr_add(t, " htail t%zu-root\n", i);
        break;
    default: /* kimi-k2 */
        snprintf(buf, sizeof buf, "functions.%s:", name);
        cr_add_literal(t, buf);
        cr_add(t, " [0-9]{1,3} \"<|tool_call_argument_begin|>\" t%zu-root\n", i);
        break;
    }
    if (!json_name)
        t->nomem = 1;
    free(json_name);
}

/* root: the rest of the reasoning block the prompt opened, if it did, then the calls in the
 * syntax's block */
static void add_root(cr_text *t, mvm_chat_syntax s, int parallel, int thinking_open)
{
    static const struct { const char *open, *call_open, *call_close, *sep, *close; } m[] = {
        [MVM_CHAT_HERMES] = {"", "<tool_call>\n", "\n</tool_call>", "\n", ""},
        [MVM_CHAT_DEEPSEEK_V31] = {"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>",
                                   "<｜tool▁call▁end｜>", "", "<｜tool▁calls▁end｜>"},
        [MVM_CHAT_DEEPSEEK_R1] = {"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>",
                                  "<｜tool▁call▁end｜>", "\n", "<｜tool▁calls▁end｜>"},
        [MVM_CHAT_KIMI_K2] = {"<|tool_calls_section_begin|>", "<|tool_call_begin|>",
                              "<|tool_call_end|>", "", "<|tool_calls_section_end|>"},
        [MVM_CHAT_MISTRAL] = {"[TOOL_CALLS][", "", "", ", ", "]"},
        [MVM_CHAT_QWEN3_CODER] = {"", "<tool_call>\n", "</tool_call>", "\n", ""},
        [MVM_CHAT_GLM45] = {"", "<tool_call>", "</tool_call>", "\n", ""},
        [MVM_CHAT_MINIMAX_M2] = {"<minimax:tool_call>\n", "", "", "", "</minimax:tool_call>"},
    };
    if (s == MVM_CHAT_HARMONY) {
        /* a commentary message's header, whose end a lazy grammar's text begins at ("to="),
         * the recipient after the channel (as models write it) or before it (as the
         * template does: "<|start|>assistant to=functions.f<|channel|>commentary json");
         * one call: each ends the reply (<|call|>) */
        cr_add(t, "root ::= \"<|channel|>commentary \"? \"to=functions.\" call\n"
                  "htail ::= \" <|constrain|>json<|message|>\" | \"<|channel|>commentary\" "
                  "(\" \" \"<|constrain|>\"? \"json\")? \"<|message|>\"\n");
        return;
    }
    cr_add(t, "root ::= %s", thinking_open ? "[^<]* \"</think>\" [ \\n]* " : "");
    cr_add_literal(t, m[s].open);
    cr_add(t, " one%s ", parallel ? " (sep one)*" : "");
    cr_add_literal(t, m[s].close);
    cr_add(t, "\n");
    cr_add(t, "one ::= ");
    cr_add_literal(t, m[s].call_open);
    cr_add(t, " call ");
    cr_add_literal(t, m[s].call_close);
    cr_add(t, "\nsep ::= ");
    cr_add_literal(t, m[s].sep);
    cr_add(t, "\n");
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
    cr_text t = {0};
    add_root(&t, s, parallel, thinking_open);
    size_t n = 0;
    const cJSON *tool;
    cJSON_ArrayForEach(tool, tool_list)
    {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tool, "function");
        n += !only || !strcmp(cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring, only);
    }
    cr_add(&t, "call ::= ");
    for (size_t i = 0; i < n; i++)
        cr_add(&t, "%scall-%zu", i ? " | " : "", i);
    cr_add(&t, "\n");
    if (!n) {
        snprintf(bad, cap, "tool_choice names the function '%s', which 'tools' does not have",
                 only);
        free(t.p);
        return -1;
    }
    size_t i = 0;
    int rc = 0;
    cJSON_ArrayForEach(tool, tool_list)
    {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tool, "function");
        const char *name = cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring;
        if (rc || (only && strcmp(name, only)))
            continue;
        if (!json_syntax(s)) {
            rc = cr_xml_call(&t, s, i++, fn, bad, cap);
            continue;
        }
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        char prefix[32], what[300];
        snprintf(prefix, sizeof prefix, "t%zu-", i);
        snprintf(what, sizeof what, "the parameters of '%s'", name);
        add_call_rule(&t, s, i++, name);
        cJSON *any = params ? NULL : cJSON_Parse("{\"type\":\"object\"}");
        rc = cr_add_schema(&t, params ? params : any, prefix, what, bad, cap);
        cJSON_Delete(any);
    }
    if (rc) {
        free(t.p);
        return -1;
    }
    if (t.nomem) {
        snprintf(bad, cap, "out of memory");
        free(t.p);
        return -1;
    }
    *gbnf = t.p;
    return 0;
}
