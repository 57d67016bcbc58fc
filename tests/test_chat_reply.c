/*
 * Chat replies read into reasoning, content and tool calls (engine/chat/chat_reply.h):
 *   - each syntax found from its template (the presets' templates, argv[1], and snippets);
 *   - round trips: an assistant turn with reasoning and two tool calls rendered by each
 *     preset's template (written apart from the reader, after the families' own) reads back
 *     as the same calls, arguments typed by the tools' schemas;
 *   - hand cases of every syntax, and what is not a call staying content;
 *   - streaming: every prefix of every case, read as partial, gives content and reasoning
 *     that are prefixes of the whole reply's, and calls that are its first ones; held by a
 *     grammar, calls while they are written, each reading extending the one before, a
 *     reply cut anywhere ending as its stream went, the arguments in several pieces;
 *   - the grammars that force a call accept the calls the reader reads and refuse others.
 */
#include "check.h"

#include "engine/chat/chat_reply.h"
#include "engine/chat/jinja.h"
#include "engine/grammar/grammar.h"
#include "moevm/engine.h"
#include "vmm/error.h"

static const char *tmpl_dir = "engine/synth/templates";

static const char tools_json[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"w\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
    "\"days\":{\"type\":\"integer\"},\"code\":{\"type\":\"string\"}},"
    "\"required\":[\"city\",\"days\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"search\",\"parameters\":{\"type\":"
    "\"object\",\"properties\":{\"q\":{\"type\":\"string\"},\"n\":{\"type\":\"number\"}}}}}]";

static mvm_chat_reply_opts opts(mvm_chat_syntax s, const cJSON *tools)
{
    return (mvm_chat_reply_opts){.syntax = s, .tools = 1, .reasoning = 1, .tool_list = tools};
}

static const char *str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int same_json(const char *a, const char *b)
{
    cJSON *x = cJSON_Parse(a), *y = cJSON_Parse(b);
    const int same = x && y && cJSON_Compare(x, y, 1);
    cJSON_Delete(x), cJSON_Delete(y);
    return same;
}

/* The calls of msg equal want: [[name, arguments JSON], ...]. */
static int calls_are(const cJSON *msg, const char *const want[][2], int n)
{
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
    if (cJSON_GetArraySize(calls) != n)
        return n == 0 && !calls;
    for (int i = 0; i < n; i++) {
        const cJSON *c = cJSON_GetArrayItem(calls, i);
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
        if (!str(c, "type") || strcmp(str(c, "type"), "function") || !str(fn, "name") ||
            strcmp(str(fn, "name"), want[i][0]) || !str(fn, "arguments") ||
            !same_json(str(fn, "arguments"), want[i][1]))
            return 0;
    }
    return 1;
}

static void dump(const char *what, const cJSON *m)
{
    char *s = cJSON_Print(m);
    fprintf(stderr, "%s: %s\n", what, s ? s : "(null)");
    free(s);
}

/* ---- syntaxes ------------------------------------------------------------------------- */

static void test_syntax_of(void)
{
    static const struct { const char *file; mvm_chat_syntax want; } presets[] = {
        {"qwen3", MVM_CHAT_HERMES},       {"glm45", MVM_CHAT_GLM45},
        {"minimax-m2", MVM_CHAT_MINIMAX_M2}, {"deepseek3", MVM_CHAT_DEEPSEEK_R1},
        {"gpt-oss", MVM_CHAT_HARMONY},    {"mixtral", MVM_CHAT_PLAIN},
        {"olmoe", MVM_CHAT_PLAIN},
    };
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s.jinja", tmpl_dir, presets[i].file);
        char *src = check_read_text(path);
        CHECK(src && mvm_chat_syntax_of(src) == presets[i].want);
        free(src);
    }
    CHECK(mvm_chat_syntax_of("{{ '<tool_call>\\n<function=' + n + '>\\n<parameter=' }}") ==
          MVM_CHAT_QWEN3_CODER);
    CHECK(mvm_chat_syntax_of("'<｜tool▁call▁begin｜>' + name + '<｜tool▁sep｜>' + args") ==
          MVM_CHAT_DEEPSEEK_V31);
    CHECK(mvm_chat_syntax_of("<|tool_calls_section_begin|><|tool_call_begin|>") ==
          MVM_CHAT_KIMI_K2);
    CHECK(mvm_chat_syntax_of("[AVAILABLE_TOOLS] [TOOL_CALLS]") == MVM_CHAT_MISTRAL);
    CHECK(mvm_chat_syntax_of(NULL) == MVM_CHAT_PLAIN);
    CHECK(!strcmp(mvm_chat_syntax_name(MVM_CHAT_GLM45), "glm-4.5"));
    const char *const *m = mvm_chat_syntax_markers(MVM_CHAT_HARMONY);
    CHECK(m && m[0] && !strcmp(m[0], "<|channel|>"));
    CHECK(mvm_chat_prompt_thinks("<｜Assistant｜><think>\n"));
    CHECK(!mvm_chat_prompt_thinks("<|im_start|>assistant\n"));
    CHECK(!mvm_chat_prompt_thinks(NULL));
}

/* ---- round trips through the presets' templates ------------------------------------- */

static const char *const trip_calls[][2] = {
    {"get_weather", "{\"city\":\"Paris\",\"days\":3,\"code\":\"007\"}"},
    {"search", "{\"q\":\"Paris 42\",\"n\":2.5}"},
};

static char *render(const char *src, const char *messages, const cJSON *tools, int gen)
{
    mvm_jinja *t = NULL;
    char *out = NULL;
    cJSON *v = cJSON_CreateObject();
    cJSON_AddItemToObject(v, "messages", cJSON_Parse(messages));
    cJSON_AddItemToObject(v, "tools", cJSON_Duplicate(tools, 1));
    cJSON_AddBoolToObject(v, "add_generation_prompt", gen);
    cJSON_AddStringToObject(v, "bos_token", "<s>");
    cJSON_AddStringToObject(v, "eos_token", "</s>");
    if (mvm_jinja_parse(src, strlen(src), &t) != MVM_OK ||
        mvm_jinja_render(t, v, &out, NULL) != MVM_OK)
        fprintf(stderr, "render: %s\n", mvm_last_error());
    mvm_jinja_free(t);
    cJSON_Delete(v);
    return out;
}

/* The reply a template renders for the assistant turn: after the generation prompt, to the
 * turn's end. */
static char *rendered_reply(const char *src, const cJSON *tools, int *thinks)
{
    static const char user[] = "{\"role\":\"user\",\"content\":\"Weather in Paris?\"}";
    char turn[1024];
    snprintf(turn, sizeof turn,
             "[%s,{\"role\":\"assistant\",\"content\":\"\",\"reasoning_content\":"
             "\"The user wants weather.\",\"tool_calls\":["
             "{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"%s\",\"arguments\":%s}},"
             "{\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"%s\",\"arguments\":%s}}"
             "]}]",
             user, trip_calls[0][0], trip_calls[0][1], trip_calls[1][0], trip_calls[1][1]);
    char one[256];
    snprintf(one, sizeof one, "[%s]", user);
    char *prompt = render(src, one, tools, 1), *whole = render(src, turn, tools, 0);
    char *reply = NULL;
    size_t k = 0;
    while (prompt && whole && prompt[k] && prompt[k] == whole[k])
        k++;
    /* where the history's turn and the generation prompt part, at a markup boundary (one
     * may open a reasoning block the other does not have) */
    while (whole && prompt && prompt[k] && k && whole[k - 1] != '>' && whole[k - 1] != '\n')
        k--;
    if (prompt && whole) {
        *thinks = mvm_chat_prompt_thinks(prompt);
        /* a model given an opened block closes it before it calls */
        const char *close = *thinks && !strstr(whole + k, "</think>") ? "</think>" : "";
        reply = malloc(strlen(close) + strlen(whole + k) + 1);
        if (reply)
            strcat(strcpy(reply, close), whole + k);
        static const char *const ends[] = {"<|im_end|>", "<｜end▁of▁sentence｜>", "<|call|>",
                                           "[e~[", "<|user|>", "<|observation|>"};
        for (size_t i = 0; i < sizeof ends / sizeof *ends; i++) {
            char *e = strstr(reply, ends[i]);
            if (e)
                *e = '\0';
        }
    }
    free(prompt), free(whole);
    return reply;
}

static void test_template_round_trips(void)
{
    static const char *const files[] = {"qwen3", "glm45", "minimax-m2", "deepseek3", "gpt-oss"};
    cJSON *tools = cJSON_Parse(tools_json);
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s.jinja", tmpl_dir, files[i]);
        char *src = check_read_text(path);
        int thinks = 0;
        char *reply = src ? rendered_reply(src, tools, &thinks) : NULL;
        CHECK(reply != NULL);
        if (!reply) {
            free(src);
            continue;
        }
        mvm_chat_reply_opts o = opts(mvm_chat_syntax_of(src), tools);
        o.thinking_open = thinks;
        cJSON *m = mvm_chat_reply_parse(&o, reply, strlen(reply), 0);
        /* harmony's turn holds one call (the template writes the first) */
        const int ok = calls_are(m, trip_calls, o.syntax == MVM_CHAT_HARMONY ? 1 : 2);
        CHECK(ok);
        /* the reasoning, where the template keeps it in the turn */
        const char *r = str(m, "reasoning_content");
        const int kept = strstr(reply, "The user wants weather.") != NULL;
        CHECK(kept ? r && !strcmp(r, "The user wants weather.") : !r);
        CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(m, "content")));
        if (!ok || (kept && !r))
            fprintf(stderr, "%s rendered: [%s]\n", files[i], reply), dump(files[i], m);
        cJSON_Delete(m);
        /* the calls as the template writes them are the tool grammar's, made lazy on the
         * syntax's word: what a model trained on the template writes, the grammar lets be */
        const char *word = mvm_chat_tool_trigger(o.syntax);
        char *gbnf = NULL, bad[256];
        mvm_grammar *g = NULL;
        if (word &&
            mvm_chat_tool_grammar(o.syntax, tools, NULL, 1, 0, &gbnf, bad, sizeof bad) == 0 &&
            mvm_grammar_parse(gbnf, &g) == MVM_OK) {
            const char *open, *close;
            mvm_chat_reasoning_marks(o.syntax, &open, &close);
            const mvm_grammar_triggers t = {&word, 1, open, close, thinks};
            CHECK(mvm_grammar_set_lazy(g, &t) == MVM_OK);
            const int taken = mvm_grammar_accept_text(g, reply, strlen(reply)) &&
                              mvm_grammar_complete(g) && !mvm_grammar_accept_text(g, "x", 1);
            CHECK(taken);
            if (!taken)
                fprintf(stderr, "%s: its calls are not the grammar's:\n%s\n%s\n", files[i], reply,
                        gbnf);
        } else {
            CHECK(!word); /* a syntax with a word has a grammar */
        }
        mvm_grammar_free(g);
        free(gbnf);
        free(reply), free(src);
    }
    cJSON_Delete(tools);
}

/* ---- hand cases ------------------------------------------------------------------------ */

typedef struct reply_case {
    mvm_chat_syntax syntax;
    int thinking_open;
    const char *text;
    const char *content;   /* NULL: null */
    const char *reasoning; /* NULL: none */
    int n_calls;
    const char *calls[2][2];
} reply_case;

#define W "{\"city\":\"Oslo\",\"days\":2}"
static const reply_case cases[] = {
    /* reasoning, content, plain */
    {MVM_CHAT_PLAIN, 0, "<think>\nhm\n</think>\n\nHello there.", "Hello there.", "hm", 0, {{0}}},
    {MVM_CHAT_PLAIN, 1, "still thinking\n</think>Yes", "Yes", "still thinking", 0, {{0}}},
    {MVM_CHAT_PLAIN, 0, "  no tags at all  ", "  no tags at all  ", NULL, 0, {{0}}},
    {MVM_CHAT_PLAIN, 0, "<think>cut off by the length", "", "cut off by the length", 0, {{0}}},
    {MVM_CHAT_PLAIN, 0, "a <tool_call>{\"name\":\"x\"}</tool_call>",
     "a <tool_call>{\"name\":\"x\"}</tool_call>", NULL, 0, {{0}}},
    /* hermes */
    {MVM_CHAT_HERMES, 0,
     "<think>plan</think>\n\nLet me look.\n<tool_call>\n{\"name\": \"get_weather\", "
     "\"arguments\": " W "}\n</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": "
     "\"{\\\"q\\\": \\\"x\\\"}\"}\n</tool_call>",
     "Let me look.", "plan", 2, {{"get_weather", W}, {"search", "{\"q\":\"x\"}"}}},
    {MVM_CHAT_HERMES, 0, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " W "}",
     NULL, NULL, 1, {{"get_weather", W}}},
    {MVM_CHAT_HERMES, 0, "ok <tool_call>{\"name\": \"x\", \"arguments\": [1]}</tool_call> done",
     "ok <tool_call>{\"name\": \"x\", \"arguments\": [1]}</tool_call> done", NULL, 0, {{0}}},
    {MVM_CHAT_HERMES, 0, "Before <tool_call>{not json</tool_call>",
     "Before <tool_call>{not json</tool_call>", NULL, 0, {{0}}},
    {MVM_CHAT_HERMES, 0,
     "<tool_call>{\"name\":\"search\",\"arguments\":{}}</tool_call>\nThat was it.",
     "That was it.", NULL, 1, {{"search", "{}"}}},
    /* qwen3-coder */
    {MVM_CHAT_QWEN3_CODER, 0,
     "Sure.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
     "<parameter=days>\n2\n</parameter>\n<parameter=code>\n0042\n</parameter>\n</function>\n"
     "</tool_call>",
     "Sure.", NULL, 1, {{"get_weather", "{\"city\":\"Oslo\",\"days\":2,\"code\":\"0042\"}"}}},
    {MVM_CHAT_QWEN3_CODER, 0, "<tool_call>\n<function=search>\n<parameter=q>\na\n</function>",
     "<tool_call>\n<function=search>\n<parameter=q>\na\n</function>", NULL, 0, {{0}}},
    /* glm-4.5 */
    {MVM_CHAT_GLM45, 0,
     "<think>go</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo"
     "</arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
     NULL, "go", 1, {{"get_weather", W}}},
    {MVM_CHAT_GLM45, 0, "<tool_call>search\n{\"q\": \"z\"}\n</tool_call>", NULL, NULL, 1,
     {{"search", "{\"q\":\"z\"}"}}},
    /* minimax-m2 */
    {MVM_CHAT_MINIMAX_M2, 1,
     "why\n</think>\n\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\""
     "city\">Oslo</parameter>\n<parameter name=\"days\">2</parameter>\n</invoke>\n<invoke "
     "name=\"search\">\n<parameter name=\"q\">[1, 2]</parameter>\n</invoke>\n"
     "</minimax:tool_call>",
     NULL, "why", 2, {{"get_weather", W}, {"search", "{\"q\":\"[1, 2]\"}"}}},
    /* a block whose second call is broken: none of its calls, all of its text */
    {MVM_CHAT_MINIMAX_M2, 0,
     "<minimax:tool_call><invoke name=\"search\"><parameter name=\"q\">a</parameter></invoke>"
     "<invoke name=search></invoke></minimax:tool_call>",
     "<minimax:tool_call><invoke name=\"search\"><parameter name=\"q\">a</parameter></invoke>"
     "<invoke name=search></invoke></minimax:tool_call>",
     NULL, 0, {{0}}},
    /* deepseek */
    {MVM_CHAT_DEEPSEEK_R1, 1,
     "think\n</think>\n\nCalling.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
     "get_weather\n```json\n" W "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
     "Calling.", "think", 1, {{"get_weather", W}}},
    {MVM_CHAT_DEEPSEEK_V31, 0,
     "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>" W
     "<｜tool▁call▁end｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{}<｜tool▁call▁end｜>"
     "<｜tool▁calls▁end｜>",
     NULL, NULL, 2, {{"get_weather", W}, {"search", "{}"}}},
    /* kimi-k2 */
    {MVM_CHAT_KIMI_K2, 0,
     "Checking.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
     "<|tool_call_argument_begin|>" W "<|tool_call_end|><|tool_calls_section_end|>",
     "Checking.", NULL, 1, {{"get_weather", W}}},
    /* mistral */
    {MVM_CHAT_MISTRAL, 0,
     "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": " W "}, {\"name\": \"search\", "
     "\"arguments\": {}}]",
     NULL, NULL, 2, {{"get_weather", W}, {"search", "{}"}}},
    {MVM_CHAT_MISTRAL, 0, "[TOOL_CALLS]search[ARGS]{\"q\": \"m\"}", NULL, NULL, 1,
     {{"search", "{\"q\":\"m\"}"}}},
    /* harmony */
    {MVM_CHAT_HARMONY, 0,
     "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>"
     "commentary to=functions.get_weather <|constrain|>json<|message|>" W,
     NULL, "Need weather.", 1, {{"get_weather", W}}},
    {MVM_CHAT_HARMONY, 0,
     "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final"
     "<|message|>It is 4.",
     "It is 4.", "Easy.", 0, {{0}}},
    {MVM_CHAT_HARMONY, 0, "plain words", "plain words", NULL, 0, {{0}}},
    /* a message without a header, closed by the next: content, streamed or not (fuzzed) */
    {MVM_CHAT_HARMONY, 0, "<|start|x\"}<|start|>x<|message|>{}", "<|start|x\"}{}", NULL, 0,
     {{0}}},
};
#undef W

static int case_ok(const reply_case *c, const cJSON *m)
{
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    const char *r = str(m, "reasoning_content");
    return m && (c->content ? cJSON_IsString(content) && !strcmp(content->valuestring, c->content)
                            : cJSON_IsNull(content)) &&
           (c->reasoning ? r && !strcmp(r, c->reasoning) : !r) &&
           calls_are(m, (const char *const(*)[2])c->calls, c->n_calls) &&
           !strcmp(str(m, "role"), "assistant");
}

static void test_cases(void)
{
    cJSON *tools = cJSON_Parse(tools_json);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const reply_case *c = &cases[i];
        mvm_chat_reply_opts o = opts(c->syntax, tools);
        o.thinking_open = c->thinking_open;
        cJSON *m = mvm_chat_reply_parse(&o, c->text, strlen(c->text), 0);
        const int ok = case_ok(c, m);
        CHECK(ok);
        if (!ok)
            fprintf(stderr, "case %zu (%s)\n", i, mvm_chat_syntax_name(c->syntax)), dump("got", m);
        cJSON_Delete(m);
    }
    cJSON_Delete(tools);
}

/* ---- streaming --------------------------------------------------------------------------- */

static int prefix_of(const char *part, const char *whole)
{
    return strncmp(part ? part : "", whole ? whole : "", strlen(part ? part : "")) == 0;
}

static const char *content_of(const cJSON *m)
{
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
    return cJSON_IsString(c) ? c->valuestring : "";
}

/* Every prefix of every case read as partial says no more than the whole reply does. */
static void test_partial_prefixes(void)
{
    cJSON *tools = cJSON_Parse(tools_json);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const reply_case *c = &cases[i];
        mvm_chat_reply_opts o = opts(c->syntax, tools);
        o.thinking_open = c->thinking_open;
        const size_t len = strlen(c->text);
        cJSON *whole = mvm_chat_reply_parse(&o, c->text, len, 0);
        const cJSON *calls = cJSON_GetObjectItemCaseSensitive(whole, "tool_calls");
        int bad = 0;
        for (size_t n = 0; n <= len && !bad; n++) {
            cJSON *m = mvm_chat_reply_parse(&o, c->text, n, 1);
            const cJSON *got = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
            bad = !m || !prefix_of(content_of(m), content_of(whole)) ||
                  !prefix_of(str(m, "reasoning_content"), str(whole, "reasoning_content")) ||
                  cJSON_GetArraySize(got) > cJSON_GetArraySize(calls);
            for (int k = 0; !bad && k < cJSON_GetArraySize(got); k++)
                bad = !cJSON_Compare(cJSON_GetArrayItem(got, k), cJSON_GetArrayItem(calls, k), 1);
            if (bad)
                fprintf(stderr, "case %zu, %zu of %zu bytes\n", i, n, len), dump("partial", m);
            cJSON_Delete(m);
        }
        CHECK(!bad);
        cJSON_Delete(whole);
    }
    cJSON_Delete(tools);
}

/* A stream's invariant between two readings (held: chat_reply.h): content and reasoning
 * grow, the calls before the last are the same, the last keeps its name and its arguments
 * grow, new calls only after it. */
static int extends(const cJSON *before, const cJSON *after)
{
    const cJSON *bc = cJSON_GetObjectItemCaseSensitive(before, "tool_calls");
    const cJSON *ac = cJSON_GetObjectItemCaseSensitive(after, "tool_calls");
    const int nb = cJSON_GetArraySize(bc);
    if (!before || !after || !prefix_of(content_of(before), content_of(after)) ||
        !prefix_of(str(before, "reasoning_content"), str(after, "reasoning_content")) ||
        nb > cJSON_GetArraySize(ac))
        return 0;
    for (int k = 0; k < nb; k++) {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(bc, k), "function");
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(ac, k), "function");
        if (strcmp(str(b, "name"), str(a, "name")) ||
            (k < nb - 1 ? strcmp(str(b, "arguments"), str(a, "arguments"))
                        : !prefix_of(str(b, "arguments"), str(a, "arguments"))))
            return 0;
    }
    return 1;
}

/* Held by a grammar, every case that makes calls streams them while they are written:
 * each prefix's reading extends the one before and the whole reply's, a reply cut at any
 * byte ends (read whole) as its stream went on, the whole text reads as unheld, and each
 * case's arguments come in several pieces. */
static void test_held_stream(void)
{
    cJSON *tools = cJSON_Parse(tools_json);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const reply_case *c = &cases[i];
        if (!c->n_calls)
            continue; /* not calls: no grammar would have let them be written */
        mvm_chat_reply_opts o = opts(c->syntax, tools);
        o.thinking_open = c->thinking_open, o.held = 1;
        const size_t len = strlen(c->text);
        cJSON *whole = mvm_chat_reply_parse(&o, c->text, len, 0), *last = NULL;
        o.held = 0;
        cJSON *unheld = mvm_chat_reply_parse(&o, c->text, len, 0);
        o.held = 1;
        CHECK(cJSON_Compare(whole, unheld, 1));
        const char *longest = str(cJSON_GetObjectItemCaseSensitive(
            cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(whole, "tool_calls"), 0),
            "function"), "arguments");
        int bad = 0, pieces = 0;
        for (size_t n = 0; n <= len && !bad; n++) {
            cJSON *m = mvm_chat_reply_parse(&o, c->text, n, 1);
            cJSON *cut = mvm_chat_reply_parse(&o, c->text, n, 0);
            const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
            const char *args = str(cJSON_GetObjectItemCaseSensitive(
                                       cJSON_GetArrayItem(calls, cJSON_GetArraySize(calls) - 1),
                                       "function"), "arguments");
            const char *before = str(cJSON_GetObjectItemCaseSensitive(
                cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(last, "tool_calls"),
                                   cJSON_GetArraySize(calls) - 1), "function"), "arguments");
            pieces += args && args[0] && (!before || strcmp(args, before));
            bad = !extends(last ? last : m, m) || !extends(m, whole) || !extends(m, cut);
            if (bad)
                fprintf(stderr, "held case %zu, %zu of %zu bytes\n", i, n, len),
                    dump("before", last), dump("partial", m), dump("cut there", cut);
            cJSON_Delete(last), cJSON_Delete(cut);
            last = m;
        }
        CHECK(!bad && (pieces >= 3 || strlen(longest) < 8)); /* "{}" comes in two */
        if (pieces < 3 && strlen(longest) >= 8)
            fprintf(stderr, "held case %zu: arguments in %d pieces\n", i, pieces);
        cJSON_Delete(last), cJSON_Delete(whole), cJSON_Delete(unheld);
    }
    cJSON_Delete(tools);
}

/* What a held reading says of a call still being written, syntax by syntax. */
static void test_held_cases(void)
{
    static const struct {
        mvm_chat_syntax syntax;
        int partial;
        const char *text, *name, *args; /* name NULL: no call */
    } held[] = {
        {MVM_CHAT_HERMES, 1, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
         "\"Os", "get_weather", "{\"city\":\"Os"},
        {MVM_CHAT_HERMES, 1, "<tool_call>\n{\"name\": \"get_wea", NULL, NULL},
        {MVM_CHAT_HERMES, 1, "<tool_call>\n{\"name\": \"search\", \"arg", "search", ""},
        {MVM_CHAT_HERMES, 0, "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"n\": 1",
         "search", "{"},
        {MVM_CHAT_QWEN3_CODER, 1, "<tool_call>\n<function=get_weather>\n<parameter=city>\nOs",
         "get_weather", "{\"city\":\"Os"},
        {MVM_CHAT_QWEN3_CODER, 1, "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo"
         "\n</param", "get_weather", "{\"city\":\"Oslo"},
        {MVM_CHAT_QWEN3_CODER, 1, "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo"
         "\n</parameter>\n<parameter=days>\n1", "get_weather", "{\"city\":\"Oslo\""},
        {MVM_CHAT_QWEN3_CODER, 1, "<tool_call>\n<function=get_wea", NULL, NULL},
        {MVM_CHAT_GLM45, 1, "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>O",
         "get_weather", "{\"city\":\"O"},
        {MVM_CHAT_GLM45, 1, "<tool_call>get_wea", NULL, NULL},
        {MVM_CHAT_MINIMAX_M2, 1, "<minimax:tool_call>\n<invoke name=\"search\">\n<parameter "
         "name=\"q\">a b", "search", "{\"q\":\"a b"},
        {MVM_CHAT_DEEPSEEK_V31, 1, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>"
         "{\"q\": \"x\", \"n\": 2", "search", "{\"q\":\"x\""},
        {MVM_CHAT_DEEPSEEK_R1, 0, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
         "search\n```json\n{\"q\": \"x\\u00", "search", "{\"q\":\"x"},
        {MVM_CHAT_KIMI_K2, 1, "<|tool_calls_section_begin|><|tool_call_begin|>functions.search:0"
         "<|tool_call_argument_begin|>{\"q\": [", "search", "{\"q\":["},
        {MVM_CHAT_MISTRAL, 1, "[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {}}, {\"name\":"
         " \"get_weather\", \"arguments\": {\"city\": \"B", "get_weather", "{\"city\":\"B"},
        {MVM_CHAT_MISTRAL, 1, "[TOOL_CALLS]search[ARGS]{\"q\": \"m", "search", "{\"q\":\"m"},
        {MVM_CHAT_HARMONY, 1, "<|start|>assistant<|channel|>commentary to=functions.search "
         "<|constrain|>json<|message|>{\"q\": \"wh", "search", "{\"q\":\"wh"},
    };
    cJSON *tools = cJSON_Parse(tools_json);
    for (size_t i = 0; i < sizeof held / sizeof *held; i++) {
        mvm_chat_reply_opts o = opts(held[i].syntax, tools);
        o.held = 1;
        cJSON *m = mvm_chat_reply_parse(&o, held[i].text, strlen(held[i].text), held[i].partial);
        const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetArrayItem(calls, cJSON_GetArraySize(calls) - 1), "function");
        const int ok = held[i].name ? fn && !strcmp(str(fn, "name"), held[i].name) &&
                                          !strcmp(str(fn, "arguments"), held[i].args)
                                    : !calls;
        CHECK(ok);
        if (!ok)
            fprintf(stderr, "held case %zu\n", i), dump("got", m);
        cJSON_Delete(m);
    }
    cJSON_Delete(tools);
}

/* Reading with tools or reasoning off leaves their markup in the content. */
static void test_options_off(void)
{
    static const char text[] = "<think>a</think>b<tool_call>{\"name\":\"s\",\"arguments\":{}}"
                               "</tool_call>";
    mvm_chat_reply_opts o = opts(MVM_CHAT_HERMES, NULL);
    o.tools = 0;
    cJSON *m = mvm_chat_reply_parse(&o, text, strlen(text), 0);
    CHECK(!strcmp(content_of(m), "b<tool_call>{\"name\":\"s\",\"arguments\":{}}</tool_call>"));
    CHECK(!strcmp(str(m, "reasoning_content"), "a"));
    cJSON_Delete(m);
    o.tools = 1, o.reasoning = 0;
    m = mvm_chat_reply_parse(&o, text, strlen(text), 0);
    CHECK(!strcmp(content_of(m), "<think>a</think>b"));
    CHECK(!str(m, "reasoning_content") && calls_are(m, (const char *const[][2]){{"s", "{}"}}, 1));
    cJSON_Delete(m);
    /* harmony without reasoning: the text as it came */
    o.syntax = MVM_CHAT_HARMONY;
    static const char h[] = "<|channel|>final<|message|>x";
    m = mvm_chat_reply_parse(&o, h, strlen(h), 0);
    CHECK(!strcmp(content_of(m), h));
    cJSON_Delete(m);
    /* a character cut in two is held back while streaming */
    o = opts(MVM_CHAT_PLAIN, NULL);
    m = mvm_chat_reply_parse(&o, "caf\xc3", 4, 1);
    CHECK(!strcmp(content_of(m), "caf"));
    cJSON_Delete(m);
}

/* ---- forcing a call ---------------------------------------------------------------------- */

static int accepts(const char *gbnf, const char *text)
{
    mvm_grammar *g = NULL;
    if (mvm_grammar_parse(gbnf, &g) != MVM_OK) {
        fprintf(stderr, "grammar: %s\n%s\n", mvm_last_error(), gbnf);
        return -1;
    }
    const int ok = mvm_grammar_accept_text(g, text, strlen(text)) && mvm_grammar_complete(g);
    mvm_grammar_free(g);
    return ok;
}

/* Whether gbnf made lazy on s's trigger takes some text, then call (after a closed
 * reasoning block when `closed`, else inside one still open), whole. */
static int lazy_accepts(const char *gbnf, mvm_chat_syntax s, const char *call, int closed)
{
    mvm_grammar *g = NULL;
    if (mvm_grammar_parse(gbnf, &g) != MVM_OK)
        return -1;
    const char *word = mvm_chat_tool_trigger(s), *open, *close;
    mvm_chat_reasoning_marks(s, &open, &close);
    const mvm_grammar_triggers t = {&word, 1, open, close, 0};
    char before[256];
    snprintf(before, sizeof before, "%s%s", open,
             closed ? "I'll call <tool_call>, to=functions.f then" : "");
    if (closed)
        strcat(strcat(before, close), "Sure: ");
    int ok = word && mvm_grammar_set_lazy(g, &t) == MVM_OK &&
             mvm_grammar_accept_text(g, before, strlen(before)) &&
             mvm_grammar_accept_text(g, call, strlen(call)) && mvm_grammar_finished(g);
    mvm_grammar_free(g);
    return ok;
}

static void test_tool_grammar(void)
{
    cJSON *tools = cJSON_Parse(tools_json);
    static const struct { mvm_chat_syntax s; const char *one, *two, *wrong; } forms[] = {
        {MVM_CHAT_HERMES,
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": "
         "2}}\n</tool_call>",
         "<tool_call>\n{\"name\": \"search\", \"arguments\": {}}\n</tool_call>\n"
         "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"a\"}}\n</tool_call>",
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n"
         "</tool_call>"},
        {MVM_CHAT_DEEPSEEK_V31,
         "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"O\", "
         "\"days\": 1}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
         "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{}<｜tool▁call▁end｜>"
         "<｜tool▁call▁begin｜>search<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
         "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>nope<｜tool▁sep｜>{}<｜tool▁call▁end｜>"
         "<｜tool▁calls▁end｜>"},
        {MVM_CHAT_KIMI_K2,
         "<|tool_calls_section_begin|><|tool_call_begin|>functions.search:0"
         "<|tool_call_argument_begin|>{\"n\": 1.5}<|tool_call_end|><|tool_calls_section_end|>",
         NULL, "<|tool_calls_section_begin|><|tool_calls_section_end|>"},
        {MVM_CHAT_QWEN3_CODER,
         "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew <York> & co\n</parameter>\n"
         "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>",
         "<tool_call>\n<function=search>\n</function>\n</tool_call>\n<tool_call>\n"
         "<function=search>\n<parameter=q>\nx\n</parameter>\n<parameter=n>\n1.5\n</parameter>\n"
         "</function>\n</tool_call>",
         "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
         "<parameter=days>\ntwo\n</parameter>\n</function>\n</tool_call>"},
        {MVM_CHAT_GLM45,
         "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n"
         "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n<arg_key>code</arg_key>\n"
         "<arg_value>a</b</arg_value>\n</tool_call>",
         "<tool_call>search\n</tool_call>\n<tool_call>search\n<arg_key>n</arg_key>\n"
         "<arg_value>2</arg_value>\n</tool_call>",
         "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n"
         "</tool_call>"},
        {MVM_CHAT_MINIMAX_M2,
         "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Oslo"
         "</parameter>\n<parameter name=\"days\">1</parameter>\n</invoke>\n</minimax:tool_call>",
         "<minimax:tool_call>\n<invoke name=\"search\">\n</invoke>\n<invoke name=\"search\">\n"
         "<parameter name=\"q\">a\"b</parameter>\n</invoke>\n</minimax:tool_call>",
         "<minimax:tool_call>\n<invoke name=\"nope\">\n</invoke>\n</minimax:tool_call>"},
        {MVM_CHAT_DEEPSEEK_R1,
         "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
         "{\"city\": \"O\", \"days\": 1}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
         "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>search\n```json\n{}\n```"
         "<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>search\n```json\n{}\n```"
         "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
         "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n{}"
         "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
        {MVM_CHAT_HARMONY,
         "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": "
         "\"O\", \"days\": 4}",
         NULL, "<|channel|>commentary to=functions.nope <|constrain|>json<|message|>{}"},
        {MVM_CHAT_MISTRAL, "[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {\"q\": \"m\"}}]",
         "[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {}}, {\"name\": \"get_weather\", "
         "\"arguments\": {\"city\": \"a\", \"days\": 0}}]",
         "[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {\"q\": 3}}]"},
    };
    char bad[256], *g = NULL;
    for (size_t i = 0; i < sizeof forms / sizeof *forms; i++) {
        CHECK(mvm_chat_tool_grammar(forms[i].s, tools, NULL, 0, 0, &g, bad, sizeof bad) == 0);
        CHECK(g && accepts(g, forms[i].one) == 1);
        CHECK(g && accepts(g, forms[i].wrong) == 0);
        if (forms[i].two)
            CHECK(g && accepts(g, forms[i].two) == 0); /* two calls: not without parallel */
        free(g), g = NULL;
        CHECK(mvm_chat_tool_grammar(forms[i].s, tools, NULL, 1, 0, &g, bad, sizeof bad) == 0);
        if (forms[i].two)
            CHECK(g && accepts(g, forms[i].two) == 1);
        free(g), g = NULL;
        /* lazy on the syntax's word: free text, then the call held to the tools */
        CHECK(mvm_chat_tool_grammar(forms[i].s, tools, NULL, 0, 0, &g, bad, sizeof bad) == 0);
        CHECK(lazy_accepts(g, forms[i].s, forms[i].one, 1) == 1);
        CHECK(lazy_accepts(g, forms[i].s, forms[i].wrong, 1) == 0);
        CHECK(lazy_accepts(g, forms[i].s, forms[i].one, 0) == 0); /* its word in the think */
        free(g), g = NULL;
        /* what the grammar makes, the reader reads */
        mvm_chat_reply_opts o = opts(forms[i].s, tools);
        cJSON *m = mvm_chat_reply_parse(&o, forms[i].one, strlen(forms[i].one), 0);
        CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(m, "tool_calls")) == 1);
        cJSON_Delete(m);
    }
    /* one named function only; a prompt that opened the reasoning */
    CHECK(mvm_chat_tool_grammar(MVM_CHAT_HERMES, tools, "search", 0, 1, &g, bad, sizeof bad) == 0);
    CHECK(g && accepts(g, "hmm</think>\n\n<tool_call>\n{\"name\": \"search\", \"arguments\": "
                          "{}}\n</tool_call>") == 1);
    CHECK(g && accepts(g, "hmm</think><tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                          "{\"city\": \"a\", \"days\": 1}}\n</tool_call>") == 0);
    free(g), g = NULL;
    /* without an opened block the call comes first: no reasoning of its own */
    CHECK(mvm_chat_tool_grammar(MVM_CHAT_HERMES, tools, NULL, 0, 0, &g, bad, sizeof bad) == 0);
    CHECK(g && accepts(g, "<think>x</think><tool_call>\n{\"name\": \"search\", \"arguments\": "
                          "{}}\n</tool_call>") == 0);
    free(g), g = NULL;
    CHECK(mvm_chat_tool_grammar(MVM_CHAT_HERMES, tools, "nope", 0, 0, &g, bad, sizeof bad) < 0);
    CHECK(!g && strstr(bad, "nope"));
    CHECK(mvm_chat_tool_grammar(MVM_CHAT_PLAIN, tools, NULL, 0, 0, &g, bad, sizeof bad) < 0);
    CHECK(!g && strstr(bad, "plain"));
    /* an XML call's values typed as the reader types them: raw strings, JSON else */
    CHECK(mvm_chat_tool_grammar(MVM_CHAT_QWEN3_CODER, tools, NULL, 0, 0, &g, bad, sizeof bad) ==
          0);
    static const char raw[] = "<tool_call>\n<function=get_weather>\n<parameter=city>\n"
                              "</paramete\n</parameter>\n<parameter=days>\n-7\n</parameter>\n"
                              "<parameter=code>\n\n</parameter>\n</function>\n</tool_call>";
    CHECK(g && accepts(g, raw) == 1);
    mvm_chat_reply_opts q = opts(MVM_CHAT_QWEN3_CODER, tools);
    cJSON *m = mvm_chat_reply_parse(&q, raw, strlen(raw), 0);
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), 0);
    const char *args = str(cJSON_GetObjectItemCaseSensitive(c, "function"), "arguments");
    CHECK(args && !strcmp(args, "{\"city\":\"</paramete\",\"days\":-7,\"code\":\"\"}"));
    if (!args || strcmp(args, "{\"city\":\"</paramete\",\"days\":-7,\"code\":\"\"}"))
        dump("typed XML arguments", m);
    cJSON_Delete(m);
    /* a raw value may not hold its closing tag: the call ends there */
    CHECK(g && accepts(g, "<tool_call>\n<function=search>\n<parameter=q>\na</parameter>b\n"
                          "</parameter>\n</function>\n</tool_call>") == 0);
    /* parameters in any order, each once */
    CHECK(g && accepts(g, "<tool_call>\n<function=get_weather>\n<parameter=days>\n1\n"
                          "</parameter>\n<parameter=city>\nA\n</parameter>\n</function>\n"
                          "</tool_call>") == 1);
    CHECK(g && accepts(g, "<tool_call>\n<function=get_weather>\n<parameter=city>\nA\n"
                          "</parameter>\n<parameter=days>\n1\n</parameter>\n<parameter=city>\n"
                          "B\n</parameter>\n</function>\n</tool_call>") == 0);
    free(g), g = NULL;
    /* a bounded string: its length, without '<'; beyond XML_ANY_ORDER parameters, the
     * schema's order */
    cJSON *many = cJSON_Parse("[{\"type\":\"function\",\"function\":{\"name\":\"f\","
                              "\"parameters\":{\"type\":\"object\",\"properties\":{"
                              "\"s\":{\"type\":\"string\",\"maxLength\":3},\"a\":{},\"b\":{},"
                              "\"c\":{},\"d\":{},\"e\":{},\"f\":{},\"g\":{},\"h\":{}}}}}]");
    CHECK(mvm_chat_tool_grammar(MVM_CHAT_GLM45, many, NULL, 0, 0, &g, bad, sizeof bad) == 0);
#define GLM_ARG(k, v) "<arg_key>" k "</arg_key>\n<arg_value>" v "</arg_value>\n"
    CHECK(g && accepts(g, "<tool_call>f\n" GLM_ARG("s", "ab") GLM_ARG("b", "[1]") "</tool_call>"));
    CHECK(g && !accepts(g, "<tool_call>f\n" GLM_ARG("s", "abcd") "</tool_call>"));
    CHECK(g && !accepts(g, "<tool_call>f\n" GLM_ARG("s", "a<b") "</tool_call>"));
    CHECK(g && !accepts(g, "<tool_call>f\n" GLM_ARG("b", "1") GLM_ARG("s", "x") "</tool_call>"));
#undef GLM_ARG
    free(g), g = NULL;
    cJSON_Delete(many);
    cJSON *marked = cJSON_Parse("[{\"type\":\"function\",\"function\":{\"name\":\"f\","
                                "\"parameters\":{\"type\":\"object\",\"properties\":"
                                "{\"a>b\":{\"type\":\"string\"}}}}}]");
    CHECK(mvm_chat_tool_grammar(MVM_CHAT_GLM45, marked, NULL, 0, 0, &g, bad, sizeof bad) < 0);
    CHECK(!g && strstr(bad, "'a>b'"));
    cJSON_Delete(marked);
    cJSON *odd = cJSON_Parse("[{\"type\":\"function\",\"function\":{\"name\":\"f\","
                             "\"parameters\":{\"type\":\"object\",\"not\":{}}}}]");
    CHECK(mvm_chat_tool_grammar(MVM_CHAT_HERMES, odd, NULL, 0, 0, &g, bad, sizeof bad) < 0);
    CHECK(!g && strstr(bad, "'f'"));
    cJSON_Delete(odd);
    cJSON_Delete(tools);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        tmpl_dir = argv[1];
    RUN(test_syntax_of);
    RUN(test_template_round_trips);
    RUN(test_cases);
    RUN(test_partial_prefixes);
    RUN(test_held_stream);
    RUN(test_held_cases);
    RUN(test_options_off);
    RUN(test_tool_grammar);
    TEST_END();
}
