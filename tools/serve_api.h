/*
 * The JSON of `moevm serve` (docs/serve.md): requests of OpenAI's /v1/completions and
 * /v1/chat/completions and of llama.cpp's server's /completion read into serve_req, and
 * OpenAI's responses, stream chunks and error objects written (serve_api.c); llama.cpp's
 * server's own responses and routes (/tokenize, /detokenize, /apply-template, /props:
 * serve_llama.c). Pure functions of their arguments: the connection threads call them.
 */
#ifndef MVM_TOOLS_SERVE_API_H
#define MVM_TOOLS_SERVE_API_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "tools/serve.h"

typedef struct serve_api {
    mvm_engine *e;            /* tokenizer and chat template only (thread-safe reads) */
    const char *model_id;
    mvm_sampler_params defaults; /* the command line's sampling */
    int32_t default_max_tokens;  /* -1: until the reply ends */
    int default_ignore_eos;      /* --ignore-eos */
    uint32_t n_ctx;
    uint32_t n_seq, n_vocab;     /* the slots; the token ids a prompt may give */
    uint32_t n_batch;            /* tokens a forward pass: /infill's prefix and suffix */
    const char *model_path;      /* what /props says */
    const char *const *api_keys; /* a request must give one of them (but for /health) */
    uint32_t n_api_keys;         /* 0: no key is asked for */
    const char *default_grammar; /* --grammar's or --json-schema's GBNF; NULL: none */
    const mvm_dry_breakers *default_breakers; /* DRY's, of the command line; NULL: none */
    int32_t default_think_budget;     /* --reasoning-budget: -1 none */
    const char *default_think_message; /* --reasoning-budget-message, or NULL */
    int reasoning_none;          /* --reasoning-format none: a chat's reasoning stays content */
    const cJSON *default_kwargs; /* the template's variables of the command line (its
                                    --chat-template-kwargs, --reasoning...), under a chat
                                    request's chat_template_kwargs; NULL: none */
} serve_api;

/* A request of the given kind read from body[0..len), tokenized; NULL with the HTTP
 * status in *status and the error object's JSON in *error (malloc'd) when the body is not
 * a valid request or its prompt does not fit the context. */
serve_req *serve_api_request(const serve_api *a, enum serve_kind kind, const char *body,
                             size_t len, int *status, char **error);
/* The same for a completion whose "prompt" may list several prompts (OpenAI's and
 * llama.cpp's server's): a request for each, in order, into out[0..max), their count; 0
 * with *status and *error as above (more than max prompts, or several in a stream, among
 * the reasons). */
uint32_t serve_api_requests(const serve_api *a, enum serve_kind kind, const char *body,
                            size_t len, serve_req **out, uint32_t max, int *status,
                            char **error);

/* The body as a JSON object, nothing but white space after it; NULL with a message in bad. */
cJSON *serve_api_parse(const char *body, size_t len, char *bad, size_t cap);
/* A number field in [lo, hi] (a whole one where `whole`) into *out when present; else *out
 * stays. -1 with a message in bad. */
int serve_api_number(const cJSON *body, const char *key, double lo, double hi, int whole,
                     double *out, char *bad, size_t cap);
/* A boolean field into *out when present (else *out stays); -1 with a message in bad. */
int serve_api_flag(const cJSON *body, const char *key, int *out, char *bad, size_t cap);
/* The prompt text of a chat's `messages` (and `chat_template_kwargs`) in the model's
 * template (malloc'd); NULL with a message in bad, or without one when out of memory. */
char *serve_api_chat_text(const serve_api *a, cJSON *body, char *bad, size_t cap);
/* The tokens of p, a prompt in llama.cpp's server's shapes: a string, an array of token
 * ids, or an array of both; the BOS (add_special) only where it begins with a string, and
 * control-token texts parsed where parse_special. *out (malloc'd) of *n; -1 with a message
 * naming `field` (as it is shown: "'prompt'") in bad (*out NULL), or without one when out
 * of memory. */
int serve_api_tokens(const serve_api *a, const cJSON *p, const char *field, int add_special,
                     int parse_special, int32_t **out, size_t *n, char *bad, size_t cap);

/* The GBNF a request's body asks for (serve_grammar.c: `grammar`, `json_schema`,
 * `response_format`; else a->default_grammar) into *gbnf (malloc'd; NULL for none); -1
 * with a message in bad. */
int serve_grammar_text(const serve_api *a, const cJSON *body, char **gbnf, char *bad,
                       size_t cap);
/* r->grammar made from gbnf (NULL: none) for a's model; -1 with a message in bad. */
int serve_grammar_bind(const serve_api *a, const char *gbnf, serve_req *r, char *bad,
                       size_t cap);

/* ---- logit_bias (serve_bias.c) ---- */

/* The body's sampling fields into r->sp (serve_sampling.c; a's defaults where it has none),
 * its max_tokens into r->max_tokens, and the breakers its DRY reads into r->breakers (its
 * own dry_sequence_breakers made); -1 with a message in bad. */
int serve_sampling_read(const serve_api *a, const cJSON *body, serve_req *r, char *bad,
                        size_t cap);
/* A chat's reasoning budget (serve_sampling.c): the body's reasoning_budget_tokens (or
 * thinking_budget_tokens) and reasoning_budget_message over a's defaults, into r; -1 with
 * a message in bad. serve_think_bind then makes r's budget, its prompt known. */
int serve_think_read(const serve_api *a, const cJSON *body, serve_req *r, char *bad,
                     size_t cap);
int serve_think_bind(const serve_api *a, serve_req *r, char *bad, size_t cap);
/* The body's `logit_bias` into r; -1 with a message in bad (a shape it cannot be, a token
 * outside the vocabulary). */
int serve_bias_read(const serve_api *a, const cJSON *body, serve_req *r, char *bad,
                    size_t cap);
/* Those of `from` into `to` (a sibling request); -1 without memory. */
int serve_bias_copy(const serve_req *from, serve_req *to);

/* ---- a chat's tools and its reply's parts (serve_tools.c) ---- */

/* What a stream has sent of a chat's parsed reply: bytes of its reasoning and content, its
 * calls begun, and bytes of the last one's arguments. */
typedef struct serve_sent {
    size_t reasoning, content;
    int calls;
    size_t args;
} serve_sent;

/* A chat body's `tools`, `tool_choice`, `parallel_tool_calls` and `reasoning_format` into
 * r (r->parse_reply set, the syntax found from a's template); -1 with a message in bad. */
int serve_tools_read(const serve_api *a, const cJSON *body, serve_req *r, char *bad,
                     size_t cap);
/* Those of `from` into `to` (a sibling request); -1 without memory. */
int serve_tools_copy(const serve_req *from, serve_req *to);
/* The GBNF that forces r's call, or holds the one it may make (r->lazy_call), malloc'd,
 * once r->reply.thinking_open is known; NULL when r has neither, or with a message in bad
 * when it cannot be made. */
char *serve_tools_grammar(const serve_req *r, char *bad, size_t cap);
/* Makes r's grammar (serve_tools_grammar's, bound) lazy: it holds the reply from the
 * syntax's call on, a call begun outside the reasoning block (r->lazy_call). */
int serve_tools_lazy(serve_req *r, char *bad, size_t cap);
/* The template's variables (vars) for body: its `tools`; the string arguments of the calls
 * in its `messages` made objects in place. -1 without memory. */
int serve_tools_template_vars(cJSON *body, cJSON *vars);
/* r's whole reply text[0..n) as its message, the calls with ids. */
cJSON *serve_tools_message(const serve_req *r, const char *text, size_t n);
/* A done request's finish reason: "tool_calls" for a "stop" that made calls. */
const char *serve_tools_finish(const char *finish, int calls);
/* The delta of a stream's next chunk for the reply text[0..n) so far (final: all of it),
 * past what *sent says was sent (updated); NULL when there is nothing new to send. A call
 * comes first with its id, index, name and the arguments so far; where a grammar holds the
 * calls (r->reply.held) more of the last one's arguments may follow, each piece as
 * {"index", "function": {"arguments"}} (OpenAI's stream). */
cJSON *serve_tools_delta(const serve_req *r, const char *text, size_t n, int final,
                         serve_sent *sent);

/* The prompt tokens of a chat body (OpenAI's shape): {"object": object (where not NULL),
 * "input_tokens": N} (malloc'd, *status 200), or the error object of a request that does
 * not read (*status its HTTP status). */
char *serve_api_count(const serve_api *a, const char *chat, size_t len, const char *object,
                      int *status);
/* POST /v1/chat/completions/input_tokens: serve_api_count of the body. */
char *serve_api_chat_count(const serve_api *a, const char *body, size_t len, int *status);
/* Where a stream in another API's shape puts a chat chunk's delta: its reasoning (kind 1)
 * and content (kind 2) text, and each whole call, as events appended to *buf (malloc'd,
 * *len bytes); each 0, or -1 without memory. */
typedef struct serve_delta_sink {
    int (*text)(void *ctx, int kind, const char *text, char **buf, size_t *len);
    int (*call)(void *ctx, const cJSON *call, char **buf, size_t *len);
    void *ctx;
} serve_delta_sink;
/* The events of delta (serve_tools_delta's) through sink, in a reply's order: reasoning,
 * the rest of the call begun before, content, each new call (malloc'd); NULL when it makes
 * none, or without memory. */
char *serve_api_delta_events(const cJSON *delta, const serve_delta_sink *sink);
/* {"type": type}, the start of an event of the APIs whose events are named (Anthropic's,
 * OpenAI's Responses). */
cJSON *serve_api_typed(const char *type);
/* Appends the server-sent event "event: TYPE\ndata: JSON\n\n" of o (TYPE its "type"; o is
 * freed) to *buf, *len bytes (malloc'd, NUL-terminated); -1 without memory. */
int serve_api_typed_event(char **buf, size_t *len, cJSON *o);
/* message on one line (malloc'd): a control character in it (a field's name or value it
 * quotes) as an escape, \n or \x01, so that a client's log shows it and the line stays one. */
char *serve_api_one_line(const char *message);
/* {"error": {"message", "type", "param", "code"}} (malloc'd); type "invalid_request_error",
 * "not_found_error", "server_error", ... */
char *serve_api_error(const char *message, const char *type);

/* The whole response of a request that is done (non-streaming). */
char *serve_api_response(const serve_api *a, const serve_req *r);
/* That of a completion's several prompts, r[0..n) done: a choice each, by index; the
 * tokens summed. */
char *serve_api_response_list(const serve_api *a, const serve_req *const *r, uint32_t n);
/* One server-sent event "data: {...}\n\n" of a streamed request: the first (role, chat
 * only), a piece of text (the tokens r->gen[from..to) made it: their log-probabilities,
 * where asked for), or the last (finish_reason set, usage); malloc'd. */
char *serve_api_chunk(const serve_api *a, const serve_req *r, const char *text, size_t n,
                      uint32_t from, uint32_t to, int first, const char *finish);
/* A chat stream's event for a parsed reply's delta (serve_tools_delta; taken), the tokens
 * r->gen[from..to) with it. */
char *serve_api_chunk_delta(const serve_api *a, const serve_req *r, cJSON *delta,
                            uint32_t from, uint32_t to);

/* ---- log-probabilities (serve_logprobs.c) ---- */

/* The bytes of token id into buf[0..cap), control tokens as their texts (llama.cpp's
 * token_to_piece with special on, as its server shows prompts and tokens); the length. */
size_t serve_api_piece(const serve_api *a, int32_t id, char *buf, size_t cap);
/* Those of r->gen[from..to) (r->logprobs set) as OpenAI's chat gives them, an array of
 * {"token", "bytes", "logprob", "top_logprobs": [...]}, and with_id llama.cpp's server
 * ("id" in each). */
cJSON *serve_api_logprobs(const serve_api *a, const serve_req *r, uint32_t from, uint32_t to,
                          int with_id);
/* The same as OpenAI's completions give them: {"tokens", "token_logprobs", "top_logprobs"
 * (an object of token text to log-probability each), "text_offset"}. */
cJSON *serve_api_logprobs_legacy(const serve_api *a, const serve_req *r, uint32_t from,
                                 uint32_t to);

/* ---- llama.cpp's server's own API (serve_llama.c) ---- */

/* /completion's whole response of a request that is done; of several prompts' r[0..n), a
 * list of them by index (llama.cpp's server's). */
char *serve_llama_response(const serve_api *a, const serve_req *r);
char *serve_llama_response_list(const serve_api *a, const serve_req *const *r, uint32_t n);
/* One server-sent event of a streamed /completion: text[0..n) and the ids r->gen[from..to)
 * (those generated since the last event); `last`: the final one (stop true, statistics). */
char *serve_llama_chunk(const serve_api *a, const serve_req *r, const char *text, size_t n,
                        uint32_t from, uint32_t to, int last);
/* The answers of POST /tokenize, /detokenize and /apply-template to body[0..len), and of
 * GET /props: the JSON (malloc'd; an error object when the body is not valid, *status then
 * 400, else 200; NULL without memory). */
char *serve_llama_tokenize(const serve_api *a, const char *body, size_t len, int *status);
char *serve_llama_detokenize(const serve_api *a, const char *body, size_t len, int *status);
char *serve_llama_apply_template(const serve_api *a, const char *body, size_t len,
                                 int *status);
char *serve_llama_props(const serve_api *a);
/* /infill's prompt into r->prompt (*n tokens), from body's input_prefix, input_suffix,
 * input_extra and prompt, as llama.cpp's server lays it out; -1 with a message in bad (one
 * that starts with SERVE_NOT_SUPPORTED where the model has no FIM tokens), or without one
 * when out of memory. */
#define SERVE_NOT_SUPPORTED "infill is not supported by this model"
int serve_llama_infill(const serve_api *a, const cJSON *body, serve_req *r, size_t *n,
                       char *bad, size_t cap);
/* GET /slots: each slot's state, slots[0..n_seq) as serve_get_slots copies them. */
char *serve_llama_slots(const serve_api *a, const serve_slot_info *slots);

#endif
