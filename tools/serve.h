/*
 * `moevm serve`'s parts (docs/serve.md): an OpenAI-compatible HTTP front (serve_http.c, on
 * GNU libmicrohttpd, one thread per connection) hands requests to one engine thread
 * (serve_sched.c) that owns the engine and serves up to n_slots of them at once, each in a
 * sequence of its own (moevm/engine.h: its own KV cache), all of them in each batch the
 * forward pass evaluates; the text flows back to the connection's thread through the
 * request.
 *
 * A request is shared by its connection and the engine thread: both hold a reference, the
 * last to let go frees it. Everything under "shared" is read and written under its mutex.
 */
#ifndef MVM_TOOLS_SERVE_H
#define MVM_TOOLS_SERVE_H

#include <pthread.h>
#include <stdint.h>

#include "engine/chat/chat_reply.h"
#include "engine/chat/think_budget.h"
#include "engine/forward/sampler.h"
#include "moevm/engine.h"

/* stop strings a request may give: OpenAI's limit is 4, llama.cpp's server has none, and
 * front ends written for it (SillyTavern) send a dozen */
#define SERVE_MAX_STOP 32
/* the prompts one completion request may list (a request each, served side by side) */
#define SERVE_MAX_PROMPTS 64

/* The alternatives a generated token may report with its log-probability (OpenAI's
 * top_logprobs limit; llama.cpp's n_probs). */
#define SERVE_MAX_LOGPROBS 20

/* The control tokens a chat's reply shows as text (its syntax's markup, chat_reply.h). */
#define SERVE_MAX_KEEP 16

/* A logit_bias entry (serve_bias.c). */
typedef struct serve_bias {
    int32_t id;
    float bias;       /* added to the logit; -infinity: never sampled */
} serve_bias;

typedef struct serve_logprob {
    int32_t id;
    float logprob;    /* of the model's distribution (mvm_sampler_logprobs), or with
                         post_sampling the probability after the steps */
} serve_logprob;

/* The API a request came by (docs/serve.md): OpenAI's text or chat completions, or
 * llama.cpp's server's own /completion (and /infill, whose prompt is a code model's
 * fill-in-the-middle: read as SERVE_INFILL, served and answered as SERVE_LLAMA). */
enum serve_kind { SERVE_COMPLETION, SERVE_CHAT, SERVE_LLAMA, SERVE_INFILL };
/* The API a chat came in (serve_anthropic.c, serve_responses.c read theirs into a chat). */
enum serve_shape { SERVE_OPENAI, SERVE_ANTHROPIC, SERVE_RESPONSES };

typedef struct serve_req {
    /* set by the connection before submitting; read-only after */
    enum serve_kind kind;
    enum serve_shape shape;   /* SERVE_CHAT: the API it came in, whose shape its answer takes
                                 (OpenAI's chat, Anthropic's Messages, OpenAI's Responses) */
    int stream;               /* server-sent events */
    int32_t *prompt;
    uint32_t n_prompt;
    int32_t max_tokens;       /* -1: until the model ends or the context is full */
    double t_max_predict;     /* llama.cpp's t_max_predict_ms, in seconds (0: none): the reply
                                 ends once it has taken this long and made a new line */
    int ignore_eos;           /* llama.cpp's: end-of-generation tokens are never sampled */
    int cache_prompt;         /* a slot's cached prefix may be reused (llama.cpp's) */
    int return_tokens;        /* SERVE_LLAMA: the whole reply gives its token ids */
    int logprobs;             /* each generated token's log-probability is reported */
    uint32_t top_logprobs;    /* and that of its most probable alternatives */
    int post_sampling;        /* llama.cpp's post_sampling_probs: the probabilities (not
                                 logs) of the distribution each draw was made from */
    int32_t id_slot;          /* the slot it must have; -1: any */
    mvm_sampler_params sp;
    const mvm_dry_breakers *breakers; /* DRY's: own_breakers, the server's, or NULL */
    mvm_dry_breakers *own_breakers;   /* the request's dry_sequence_breakers, or NULL */
    struct serve_req *owner;  /* the request whose own_breakers a sibling reads (a
                                 reference held), or NULL */
    mvm_grammar *grammar;     /* the replies' constraint (its own), or NULL */
    char *stop[SERVE_MAX_STOP];
    uint32_t n_stop;
    serve_bias *bias;         /* logit_bias's entries, n_bias of them */
    uint32_t n_bias, cap_bias;
    /* a chat's reply read back into reasoning, content and tool calls (serve_tools.c) */
    int parse_reply;
    mvm_chat_reply_opts reply; /* its tool_list is `tools` */
    cJSON *tools;             /* the request's (its own copy); NULL: none */
    int force_call;           /* tool_choice "required" or a function: a grammar makes one */
    int lazy_call;            /* "auto": a lazy grammar holds a call the model starts */
    char *force_name;         /* that function; NULL: any of the tools */
    int parallel_calls;       /* parallel_tool_calls: a forced reply may make several */
    int32_t think_tokens;     /* a chat's reasoning budget (llama.cpp's): -1 none */
    char *think_message;      /* forced before the block's end mark, or NULL */
    int thinking;             /* think holds the budget, made for the prompt */
    mvm_think_budget think;
    int32_t keep[SERVE_MAX_KEEP]; /* control tokens whose texts the reply keeps: the syntax's */
    uint32_t n_keep;          /* markup, which the reader must see */
    char id[48];
    long created;
    /* shared */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *text;               /* the reply released so far (stop strings cut out) */
    size_t len, cap;
    int done;                 /* the engine thread has finished with it */
    const char *finish;       /* "stop" or "length" once done without an error */
    char *error;              /* why it failed, once done */
    uint32_t n_gen;           /* tokens generated */
    int32_t *gen;             /* their ids, [n_gen] of [gen_cap] */
    serve_logprob *probs;     /* with logprobs: [gen_cap][1 + top_logprobs], each token's
                                 own then its alternatives', most probable first */
    uint32_t gen_cap;
    int stop_word;            /* the stop string that ended it; -1: none did */
    int truncated;            /* it ended at the context's end */
    uint32_t slot, n_cached;  /* its slot, and the prompt's tokens that slot had cached */
    double t_start, t_prompt, t_end; /* seconds (mvm_now_s): its prompt's first token read,
                                        its last read (the first token's logits), done */
    int cancelled;            /* the client went away: the engine thread drops it */
    int refs;
    struct serve_req *next;   /* the queue (under the server's mutex) */
} serve_req;

/* A request with one reference (the connection's), or NULL without memory. */
serve_req *serve_req_new(void);
/* Lets go of one reference; the last frees it. */
void serve_req_release(serve_req *r);
/* Appends s[0..n) to r->text; 0, or -1 without memory. Under r->mu. */
int serve_req_append(serve_req *r, const char *s, size_t n);
/* Puts a generated token's id at r->gen[r->n_gen] (and with r->logprobs, its row of
 * 1 + top_logprobs log-probabilities), which the caller then counts; 0, or -1 without
 * memory. Under r->mu. */
int serve_req_add_token(serve_req *r, int32_t id, const serve_logprob *row);

typedef struct serve_metrics {
    mvm_engine_stats engine;
    uint64_t requests, completed, cancelled, failed, prompt_tokens, reused_tokens,
        generated_tokens;
    /* the rounds' forward passes, their tokens, and the requests in each, summed */
    uint64_t batches, batch_tokens, batch_requests;
    uint32_t active, queued;
} serve_metrics;

/* A slot as the engine thread last left it (GET /slots). */
typedef struct serve_slot_info {
    int busy;                 /* serving a request */
    char id[48];              /* that request's */
    uint32_t n_cached;        /* tokens in its cache (kept for the next request when idle) */
    uint32_t n_gen;           /* the request's tokens generated so far */
    int32_t max_tokens;       /* its limit; -1: none */
    mvm_sampler_params sp;    /* its sampling */
} serve_slot_info;

typedef struct serve serve;

/* The engine thread's state over engine e (its n_seq sequences are the slots);
 * max_queue: requests that may wait for a slot. NULL without memory. */
serve *serve_create(mvm_engine *e, uint32_t max_queue);
void serve_free(serve *s);
/* Queues r (taking a reference for the engine thread). -1 when the queue is full. */
int serve_submit(serve *s, serve_req *r);
/* The engine thread: serves requests until serve_stop. */
void serve_run(serve *s);
void serve_stop(serve *s);
/* A consistent copy of the counters (taken between steps). */
void serve_get_metrics(serve *s, serve_metrics *out);
/* A consistent copy of the slots, as of the last round, into out[0..n_seq). */
void serve_get_slots(serve *s, serve_slot_info *out);
mvm_engine *serve_engine(serve *s);

/* The HTTP front on host:port (port 0: any free one); *bound: the port it listens on. A
 * connection idle for timeout_s seconds is closed (llama-server's --timeout; 0: never);
 * prefix (llama-server's --api-prefix, "/api": /api/v1/models...; NULL: none) is the path
 * every route is under.
 * api: what the routes answer with (its model_id, model_path and defaults; the engine and
 * its sizes are filled in from s). NULL after a one-line error on stderr. */
typedef struct serve_http serve_http;
struct serve_api;
serve_http *serve_http_start(serve *s, const char *host, uint16_t port, unsigned timeout_s,
                             const char *prefix, const struct serve_api *api, uint16_t *bound);
/* Stops listening and joins the connections (the engine thread must have finished their
 * requests: serve_run returns only after it has). */
void serve_http_stop(serve_http *h);

#endif
