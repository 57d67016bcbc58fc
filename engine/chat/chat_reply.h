/*
 * A chat model's reply read back into its parts, as llama.cpp's server reads it
 * (common/chat.cpp): its reasoning (<think>...</think>, or gpt-oss's analysis channel), its
 * answer, and the tool calls it wrote in its family's markup, found from the chat template's
 * source as llama.cpp finds them. The result is an OpenAI assistant message.
 *
 * The syntaxes, and the templates that select them (the first that matches):
 *   harmony       gpt-oss: <|channel|>analysis / final / commentary to=functions.NAME
 *   minimax-m2    <minimax:tool_call><invoke name="N"><parameter name="K">V</parameter>...
 *   glm-4.5       <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>
 *   qwen3-coder   <tool_call><function=N><parameter=K>V</parameter>...</function></tool_call>
 *   hermes        <tool_call>{"name": N, "arguments": {...}}</tool_call> (Qwen3, Qwen2.5)
 *   deepseek-r1   <｜tool▁call▁begin｜>function<｜tool▁sep｜>N ```json ARGS```<｜tool▁call▁end｜>
 *   deepseek-v3.1 <｜tool▁call▁begin｜>N<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>
 *   kimi-k2       <|tool_call_begin|>functions.N:I<|tool_call_argument_begin|>ARGS<|tool_call_end|>
 *   mistral       [TOOL_CALLS][{"name": N, "arguments": {...}}, ...]
 *   plain         none: reasoning only (a template without tools, ChatML, Mixtral's)
 *
 * Where llama.cpp is lenient and this reading is stricter or differs (said here, chosen as
 * a client would expect):
 *   - a call that does not parse (its JSON broken, a closing tag missing before more
 *     markup) is not a call: its text stays in the content, so nothing the model wrote is lost;
 *   - an XML-style argument (qwen3-coder, glm-4.5, minimax-m2) is a string when the tool's
 *     schema says so, else the JSON it reads as, else a string;
 *   - a reasoning block left open at the reply's end is reasoning (the length ran out while
 *     the model thought), as llama.cpp's reasoning parser has it.
 *
 * Streaming: parsed with `partial`, the text may go on. Then whatever could still become
 * markup or be trimmed (a prefix of a marker at the end, trailing whitespace, an
 * unfinished UTF-8 character) is held back, and a call is reported only once it is whole,
 * so that each partial message's content and reasoning are prefixes of the next one's and
 * its calls the first of the next one's: a stream sends the differences.
 *
 * Where a grammar holds the calls to their markup (`held`: serve's tool grammars, forced or
 * lazy), a call is reported as soon as its name is whole, with its arguments as far as
 * they are certain (engine/chat/json_prefix.h; an XML syntax's whole parameters and a
 * string parameter's text so far), as llama.cpp's server streams them: each partial
 * message's calls are then the next one's but for the last, whose arguments are a prefix
 * of the next one's. A call the reply's end cuts off (its length, a stop string) keeps the
 * arguments it has, as OpenAI's API returns them (a JSON text not yet whole; the finish
 * reason says "length"). Unheld, a call that does not parse could turn out to be content,
 * so calls stay whole.
 */
#ifndef MVM_ENGINE_CHAT_CHAT_REPLY_H
#define MVM_ENGINE_CHAT_CHAT_REPLY_H

#include <stddef.h>

#include <cjson/cJSON.h>

typedef enum mvm_chat_syntax {
    MVM_CHAT_PLAIN,
    MVM_CHAT_HARMONY,
    MVM_CHAT_MINIMAX_M2,
    MVM_CHAT_GLM45,
    MVM_CHAT_QWEN3_CODER,
    MVM_CHAT_HERMES,
    MVM_CHAT_DEEPSEEK_R1,
    MVM_CHAT_DEEPSEEK_V31,
    MVM_CHAT_KIMI_K2,
    MVM_CHAT_MISTRAL,
} mvm_chat_syntax;

/* The syntax a chat template's Jinja source writes tool calls in. */
mvm_chat_syntax mvm_chat_syntax_of(const char *template_src);
/* Its name above ("hermes", ...). */
const char *mvm_chat_syntax_name(mvm_chat_syntax s);
/* The texts of the markup the reader must see in the reply, NULL-terminated: a decoder that
 * drops control tokens' texts must keep these (llama.cpp's preserved tokens). */
const char *const *mvm_chat_syntax_markers(mvm_chat_syntax s);
/* Whether the syntax's tool calls can be forced by mvm_chat_tool_grammar: all but plain. */
int mvm_chat_syntax_forcible(mvm_chat_syntax s);

typedef struct mvm_chat_reply_opts {
    mvm_chat_syntax syntax;
    int tools;            /* tool calls are read (0: the markup is content) */
    int reasoning;        /* reasoning goes to reasoning_content (0: it stays in content, as
                             llama.cpp's --reasoning-format none) */
    int thinking_open;    /* the prompt opened the reasoning block (mvm_chat_prompt_thinks) */
    const cJSON *tool_list; /* the request's tools (OpenAI's array), for argument types; may
                               be NULL */
    int held;             /* a grammar holds the calls to their markup: they are reported
                             while written (above) */
} mvm_chat_reply_opts;

/* 1 when a prompt leaves the reply inside <think> (it ends with an opened block, as
 * DeepSeek-R1's and MiniMax-M2's generation prompts do). */
int mvm_chat_prompt_thinks(const char *prompt);

/* text[0..len) as an assistant message: {"role", "content" (null when empty and there are
 * calls), "reasoning_content" (when any), "tool_calls" (when any: each {"type": "function",
 * "function": {"name", "arguments" (a JSON text)}}, no "id")}. NULL when out of memory. */
cJSON *mvm_chat_reply_parse(const mvm_chat_reply_opts *o, const char *text, size_t len,
                            int partial);

/* A GBNF grammar that makes the reply one tool call (several when `parallel`, but in
 * gpt-oss's channels, where a call ends the reply) of the tools in `tool_list` (checked:
 * each {"function": {"name": string, ...}}; only the one named `only` when not NULL) in the
 * syntax's markup, each call's arguments valid for its tool's parameters schema, after the
 * rest of a reasoning block the prompt opened (`thinking_open`); into *gbnf (malloc'd).
 * -1 with bad[0..cap) saying why (an unknown name, a schema the converter refuses, a name
 * that would break the markup, a syntax that cannot be forced). */
int mvm_chat_tool_grammar(mvm_chat_syntax s, const cJSON *tool_list, const char *only,
                          int parallel, int thinking_open, char **gbnf, char *bad,
                          size_t cap);
/* The word a forcible syntax's calls begin with ("<tool_call>"; gpt-oss's "to=functions.",
 * within its message's header), NULL for the others:
 * made a lazy grammar's trigger (mvm_grammar_set_lazy), the grammar above (without an
 * opened reasoning block) holds a reply to its tools once the model starts a call on its
 * own, as llama.cpp does under tool_choice "auto". */
const char *mvm_chat_tool_trigger(mvm_chat_syntax s);
/* The marks around the syntax's reasoning (<think> and </think>; gpt-oss's analysis
 * channel's header and its <|end|>): a lazy grammar's quiet block. */
void mvm_chat_reasoning_marks(mvm_chat_syntax s, const char **open, const char **close);

#endif
