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

#include "engine/forward/sampler.h"
#include "moevm/engine.h"

#define SERVE_MAX_STOP 4 /* stop strings a request may give (OpenAI's limit) */

typedef struct serve_req {
    /* set by the connection before submitting; read-only after */
    int chat;                 /* /v1/chat/completions (else /v1/completions) */
    int stream;               /* server-sent events */
    int32_t *prompt;
    uint32_t n_prompt;
    int32_t max_tokens;       /* -1: until the model ends or the context is full */
    int ignore_eos;           /* llama.cpp's: end-of-generation tokens are never sampled */
    mvm_sampler_params sp;
    char *stop[SERVE_MAX_STOP];
    uint32_t n_stop;
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

typedef struct serve_metrics {
    mvm_engine_stats engine;
    uint64_t requests, completed, cancelled, failed, prompt_tokens, reused_tokens,
        generated_tokens;
    /* the rounds' forward passes, their tokens, and the requests in each, summed */
    uint64_t batches, batch_tokens, batch_requests;
    uint32_t active, queued;
} serve_metrics;

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
mvm_engine *serve_engine(serve *s);

/* The HTTP front on host:port (port 0: any free one); *bound: the port it listens on.
 * model_id: what /v1/models lists. NULL after a one-line error on stderr. */
typedef struct serve_http serve_http;
serve_http *serve_http_start(serve *s, const char *host, uint16_t port, const char *model_id,
                             const mvm_sampler_params *defaults, int32_t default_max_tokens,
                             int default_ignore_eos, uint16_t *bound);
/* Stops listening and joins the connections (the engine thread must have finished their
 * requests: serve_run returns only after it has). */
void serve_http_stop(serve_http *h);

#endif
