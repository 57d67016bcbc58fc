/*
 * `moevm serve`'s HTTP front (serve.h) on GNU libmicrohttpd: a small, long-maintained C
 * library found in every distribution (libmicrohttpd-dev), with HTTP/1.1 parsing,
 * keep-alive, chunked responses and connection threads done right — nothing of which is
 * this project's core. One thread per connection, so a connection may block while its
 * request waits for the engine thread: streamed replies come from a content callback that
 * waits for the next piece of text; a non-streamed one waits in the handler, watching its
 * socket so that a client who leaves frees its slot either way.
 *
 * Routes: OpenAI's POST /v1/chat/completions and /v1/completions, GET /v1/models;
 * llama.cpp's server's own POST /completion, /tokenize, /detokenize, /apply-template and
 * GET /props, /slots; GET /health, GET /metrics (Prometheus text). Bodies over 8 MiB are refused
 * (413).
 *
 * Access as llama.cpp's server grants it: with API keys (--api-key), every route but
 * /health wants one, as "Authorization: Bearer KEY" (or X-Api-Key), compared in constant
 * time; CORS for browser clients, each response naming the request's Origin as allowed,
 * and an OPTIONS preflight answered before any key is asked for (browsers send none).
 */
#include <microhttpd.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <time.h>

#include "tools/cli.h"
#include "tools/serve.h"
#include "tools/serve_anthropic.h"
#include "tools/serve_api.h"
#include "tools/serve_responses.h"

#define MAX_BODY (8u << 20)

struct serve_http {
    serve *s;
    serve_api api;
    struct MHD_Daemon *d;
    const char *prefix; /* --api-prefix: every route under it; NULL: at the root */
};

/* url under h's prefix: the route's path ("/" for the prefix alone), or NULL when url is
 * not under it. */
static const char *unprefixed(const struct serve_http *h, const char *url)
{
    const size_t n = h->prefix ? strlen(h->prefix) : 0;
    if (!n)
        return url;
    if (strncmp(url, h->prefix, n) || (url[n] && url[n] != '/'))
        return NULL;
    return url[n] ? url + n : "/";
}

/* One connection's request: its body as it arrives, then its stream's state. */
struct conn {
    char *body;
    size_t len;
    int too_large;
};

struct stream {
    struct serve_http *h;
    serve_req *r;
    size_t sent;       /* bytes of r->text already in events */
    uint32_t sent_tokens; /* of r->gen, those already in events */
    int started, ended;
    serve_sent parts;  /* a chat read into its parts (r->parse_reply): what was sent */
    serve_anthropic_stream anth; /* Anthropic's shape: the blocks sent */
    serve_responses_stream resp; /* the Responses shape: the items sent */
    int read_whole;    /* the whole reply has been read */
    char *out;         /* the event being written */
    size_t out_len, out_off;
};

/* The CORS header of every response: the request's Origin allowed (llama.cpp's server's
 * default, which lets a browser's page on any origin call it, keys and all), or any. */
static void cors(struct MHD_Response *resp, struct MHD_Connection *c)
{
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", origin ? origin : "*");
    if (origin)
        MHD_add_response_header(resp, "Access-Control-Allow-Credentials", "true");
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type,
                             char *body /* taken */)
{
    if (!body)
        body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\"}}"),
        status = 500;
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        body ? strlen(body) : 0, body, MHD_RESPMEM_MUST_FREE);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", type);
    cors(resp, c);
    enum MHD_Result ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result error(struct MHD_Connection *c, unsigned status, const char *message,
                             const char *type)
{
    return reply(c, status, "application/json", serve_api_error(message, type));
}

/* ---- GET routes -------------------------------------------------------------------------- */

static enum MHD_Result models(struct serve_http *h, struct MHD_Connection *c)
{
    char *body = malloc(512 + strlen(h->api.model_id));
    if (body)
        sprintf(body, "{\"object\":\"list\",\"data\":[{\"id\":\"%s\",\"object\":\"model\","
                "\"created\":%ld,\"owned_by\":\"moevm\"}]}", h->api.model_id, (long)time(NULL));
    return reply(c, MHD_HTTP_OK, "application/json", body);
}

static enum MHD_Result metrics(struct serve_http *h, struct MHD_Connection *c)
{
    serve_metrics m;
    serve_get_metrics(h->s, &m);
    const mvm_engine_stats *e = &m.engine;
    char *body = malloc(8192);
    if (body)
        snprintf(body, 8192,
                 "# HELP moevm_expert_accesses_total Experts the MoE steps asked for.\n"
                 "# TYPE moevm_expert_accesses_total counter\nmoevm_expert_accesses_total %llu\n"
                 "# HELP moevm_expert_hits_total Of them, resident on the device.\n"
                 "# TYPE moevm_expert_hits_total counter\nmoevm_expert_hits_total %llu\n"
                 "# TYPE moevm_expert_hit_ratio gauge\nmoevm_expert_hit_ratio %.6f\n"
                 "# TYPE moevm_expert_evictions_total counter\nmoevm_expert_evictions_total %llu\n"
                 "# TYPE moevm_expert_prefetches_total counter\nmoevm_expert_prefetches_total %llu\n"
                 "# HELP moevm_bytes_moved_total Expert bytes copied host to device.\n"
                 "# TYPE moevm_bytes_moved_total counter\nmoevm_bytes_moved_total %llu\n"
                 "# HELP moevm_budget_bytes Device memory for experts (0: read at their homes).\n"
                 "# TYPE moevm_budget_bytes gauge\nmoevm_budget_bytes %llu\n"
                 "# TYPE moevm_resident_bytes gauge\nmoevm_resident_bytes %llu\n"
                 "# TYPE moevm_tokens_evaluated_total counter\nmoevm_tokens_evaluated_total %llu\n"
                 "# TYPE moevm_prompt_tokens_total counter\nmoevm_prompt_tokens_total %llu\n"
                 "# TYPE moevm_prompt_tokens_reused_total counter\n"
                 "moevm_prompt_tokens_reused_total %llu\n"
                 "# TYPE moevm_generated_tokens_total counter\nmoevm_generated_tokens_total %llu\n"
                 "# HELP moevm_batches_total Forward passes, each of every active request's "
                 "tokens.\n"
                 "# TYPE moevm_batches_total counter\nmoevm_batches_total %llu\n"
                 "# TYPE moevm_batch_tokens_total counter\nmoevm_batch_tokens_total %llu\n"
                 "# HELP moevm_batch_requests_total The requests in each batch, summed.\n"
                 "# TYPE moevm_batch_requests_total counter\nmoevm_batch_requests_total %llu\n"
                 "# TYPE moevm_requests_total counter\nmoevm_requests_total %llu\n"
                 "# TYPE moevm_requests_completed_total counter\n"
                 "moevm_requests_completed_total %llu\n"
                 "# TYPE moevm_requests_cancelled_total counter\n"
                 "moevm_requests_cancelled_total %llu\n"
                 "# TYPE moevm_requests_failed_total counter\nmoevm_requests_failed_total %llu\n"
                 "# TYPE moevm_requests_active gauge\nmoevm_requests_active %u\n"
                 "# TYPE moevm_requests_queued gauge\nmoevm_requests_queued %u\n",
                 (unsigned long long)e->accesses, (unsigned long long)e->hits,
                 e->accesses ? (double)e->hits / (double)e->accesses : 0.0,
                 (unsigned long long)e->evictions, (unsigned long long)e->prefetches,
                 (unsigned long long)e->bytes_moved, (unsigned long long)e->budget_bytes,
                 (unsigned long long)e->resident_bytes, (unsigned long long)e->tokens,
                 (unsigned long long)m.prompt_tokens, (unsigned long long)m.reused_tokens,
                 (unsigned long long)m.generated_tokens, (unsigned long long)m.batches,
                 (unsigned long long)m.batch_tokens, (unsigned long long)m.batch_requests,
                 (unsigned long long)m.requests,
                 (unsigned long long)m.completed, (unsigned long long)m.cancelled,
                 (unsigned long long)m.failed, m.active, m.queued);
    return reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4", body);
}

/* GET /slots (llama.cpp's server's): the slots as of the engine's last round; with
 * ?fail_on_no_slot=1, a 503 when none is free, as there. */
static enum MHD_Result slots(struct serve_http *h, struct MHD_Connection *c)
{
    serve_slot_info *sl = calloc(h->api.n_seq, sizeof *sl);
    if (!sl)
        return error(c, 500, "out of memory", "server_error");
    serve_get_slots(h->s, sl);
    const char *fail = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "fail_on_no_slot");
    int idle = 0;
    for (uint32_t i = 0; i < h->api.n_seq; i++)
        idle += !sl[i].busy;
    const int refuse = fail && strcmp(fail, "0") && !idle;
    char *body = refuse ? NULL : serve_llama_slots(&h->api, sl);
    free(sl);
    return refuse ? error(c, 503, "no slot available", "unavailable_error")
                  : reply(c, MHD_HTTP_OK, "application/json", body);
}

/* ---- streamed replies ---------------------------------------------------------------------- */

/* The end of a stream: OpenAI's last chunk and [DONE], or llama.cpp's final event (its
 * server sends no [DONE]); a failure's error object as an event in their place. */
static char *last_event(struct stream *st)
{
    serve_req *r = st->r;
    const serve_api *a = &st->h->api;
    if (r->shape == SERVE_ANTHROPIC)
        return serve_anthropic_end(&st->anth, r);
    if (r->shape == SERVE_RESPONSES)
        return serve_responses_end(a, r, &st->resp);
    const int llama = r->kind == SERVE_LLAMA;
    char *last = r->error ? NULL
                 : llama  ? serve_llama_chunk(a, r, NULL, 0, st->sent_tokens, r->n_gen, 1)
                          : serve_api_chunk(a, r, NULL, 0, st->sent_tokens, r->n_gen, 0,
                                            serve_tools_finish(r->finish, st->parts.calls));
    char *err = r->error ? serve_api_error(r->error, "server_error") : NULL;
    const char *body = last ? last : err ? err : "";
    size_t n = strlen(body) + 32;
    char *ev = malloc(n);
    if (ev)
        snprintf(ev, n, "%s%s%s%s", last ? "" : "data: ", body, last ? "" : "\n\n",
                 llama ? "" : "data: [DONE]\n\n");
    free(last), free(err);
    return ev;
}

/* A chat read into its parts: the event of what is new since st->parts, once there is
 * some; NULL once the reply is done and read whole (its last event is next). Under r->mu. */
static char *parts_event(struct stream *st)
{
    serve_req *r = st->r;
    char *ev = NULL;
    while (!ev && !(r->done && st->read_whole)) {
        /* a wake-up need not bring text (a token without any, or the token counted before
         * its text is out): only the reply's end or new text is worth a reading */
        if (r->len == st->sent && !r->done) {
            pthread_cond_wait(&r->cv, &r->mu);
            continue;
        }
        char *t = mvm_cli_valid_utf8(r->text, r->len);
        cJSON *d = t ? serve_tools_delta(r, t, strlen(t), r->done, &st->parts) : NULL;
        free(t);
        st->sent = r->len, st->read_whole = r->done;
        if (d && r->shape != SERVE_OPENAI) {
            ev = r->shape == SERVE_ANTHROPIC ? serve_anthropic_delta(&st->anth, d)
                                             : serve_responses_delta(r, &st->resp, d);
            cJSON_Delete(d);
        } else if (d) {
            ev = serve_api_chunk_delta(&st->h->api, r, d, st->sent_tokens, r->n_gen);
        }
        st->sent_tokens = d ? r->n_gen : st->sent_tokens;
    }
    return ev;
}

/* The next event of st into st->out: the role, new text, or the end; 0 when one was made,
 * 1 when the stream is over. Waits (under r->mu) for the engine thread. */
static int next_event(struct stream *st)
{
    serve_req *r = st->r;
    const serve_api *a = &st->h->api;
    pthread_mutex_lock(&r->mu);
    /* the first event of a chat needs no text */
    const int role = !st->started && r->kind == SERVE_CHAT;
    while (!role && r->len == st->sent && !r->done)
        pthread_cond_wait(&r->cv, &r->mu);
    char *ev = NULL;
    if (role) {
        ev = r->shape == SERVE_ANTHROPIC   ? serve_anthropic_start(a, r)
             : r->shape == SERVE_RESPONSES ? serve_responses_start(a, r, &st->resp)
                                           : serve_api_chunk(a, r, NULL, 0, 0, 0, 1, NULL);
    } else if (r->parse_reply && (ev = parts_event(st))) {
        /* made */
    } else if (r->len > st->sent) {
        const char *text = r->text + st->sent;
        const size_t n = r->len - st->sent;
        ev = r->kind == SERVE_LLAMA
                 ? serve_llama_chunk(a, r, text, n, st->sent_tokens, r->n_gen, 0)
                 : serve_api_chunk(a, r, text, n, st->sent_tokens, r->n_gen, 0, NULL);
        st->sent = r->len, st->sent_tokens = r->n_gen;
    } else if (r->done && !st->ended) {
        st->ended = 1;
        ev = last_event(st);
    }
    st->started = 1;
    pthread_mutex_unlock(&r->mu);
    if (!ev)
        return 1;
    free(st->out);
    st->out = ev, st->out_len = strlen(ev), st->out_off = 0;
    return 0;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct stream *st = cls;
    if (st->out_off == st->out_len && next_event(st))
        return MHD_CONTENT_READER_END_OF_STREAM;
    size_t n = st->out_len - st->out_off < max ? st->out_len - st->out_off : max;
    memcpy(buf, st->out + st->out_off, n);
    st->out_off += n;
    return (ssize_t)n;
}

/* The response is done with: sent whole, or its client gone (then the slot is freed). */
static void stream_free(void *cls)
{
    struct stream *st = cls;
    pthread_mutex_lock(&st->r->mu);
    st->r->cancelled = !st->r->done;
    pthread_mutex_unlock(&st->r->mu);
    serve_req_release(st->r);
    serve_responses_stream_free(&st->resp);
    free(st->out);
    free(st);
}

static enum MHD_Result stream(struct serve_http *h, struct MHD_Connection *c, serve_req *r)
{
    struct stream *st = calloc(1, sizeof *st);
    struct MHD_Response *resp = st ? MHD_create_response_from_callback(
                                         MHD_SIZE_UNKNOWN, 4096, stream_read, st, stream_free)
                                   : NULL;
    if (!resp) {
        free(st);
        serve_req_release(r);
        return error(c, 500, "out of memory", "server_error");
    }
    st->h = h, st->r = r;
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    cors(resp, c);
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* ---- whole replies ------------------------------------------------------------------------- */

/* Whether the client closed its end (a half-closed socket reads as such). */
static int client_gone(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return 0;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Waits (under r->mu, taken and kept) until the engine thread is done with r, watching
 * the socket: a client that leaves cancels it. */
static void wait_done(struct MHD_Connection *c, serve_req *r)
{
    pthread_mutex_lock(&r->mu);
    while (!r->done) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += 100000000;
        t.tv_sec += t.tv_nsec / 1000000000, t.tv_nsec %= 1000000000;
        pthread_cond_timedwait(&r->cv, &r->mu, &t);
        if (!r->done && !r->cancelled && client_gone(c))
            r->cancelled = 1; /* the engine thread frees the slot and says done */
    }
}

/* The reply of requests r[0..n) (a completion's prompts), once all are done: the first
 * failure's error, or the whole list's response. */
static enum MHD_Result whole(struct serve_http *h, struct MHD_Connection *c, serve_req **r,
                             uint32_t n)
{
    const serve_req *failed = NULL, *gone = NULL;
    for (uint32_t i = 0; i < n; i++) {
        wait_done(c, r[i]);
        /* Cancelled because the client closed its end: gone, most likely, but a client that
         * only shut down its sending side still reads, and must not take the text cut
         * short for a whole reply. (A socket's half-close and its close look the same from
         * here.) The rest are cancelled with it. */
        if (r[i]->error && !failed)
            failed = r[i];
        else if (r[i]->cancelled && !r[i]->error && !gone)
            gone = r[i];
        pthread_mutex_unlock(&r[i]->mu);
        for (uint32_t j = i + 1; (failed || gone) && j < n; j++) {
            pthread_mutex_lock(&r[j]->mu);
            r[j]->cancelled = 1;
            pthread_mutex_unlock(&r[j]->mu);
        }
    }
    static const char *const gone_why = "the client closed its end of the connection before "
                                        "the reply, so the request was cancelled (keep the "
                                        "sending side open until the reply comes)";
    const int anthropic = r[0]->shape == SERVE_ANTHROPIC;
    char *body = failed && anthropic ? serve_anthropic_error(failed->error, 500)
                 : gone && anthropic ? serve_anthropic_error(gone_why, 499)
                 : failed ? serve_api_error(failed->error, "server_error")
                 : gone ? serve_api_error(gone_why, "invalid_request_error")
                 : anthropic ? serve_anthropic_response(&h->api, r[0])
                 : r[0]->shape == SERVE_RESPONSES ? serve_responses_response(&h->api, r[0])
                 : r[0]->kind == SERVE_LLAMA
                     ? (n > 1 ? serve_llama_response_list(&h->api, (const serve_req *const *)r, n)
                              : serve_llama_response(&h->api, r[0]))
                     : serve_api_response_list(&h->api, (const serve_req *const *)r, n);
    unsigned status = failed ? 500 : gone ? 499 : MHD_HTTP_OK;
    for (uint32_t i = 0; i < n; i++)
        serve_req_release(r[i]);
    return reply(c, status, "application/json", body);
}

/* ---- the handler ------------------------------------------------------------------------- */

static enum MHD_Result completion(struct serve_http *h, struct MHD_Connection *c,
                                  enum serve_kind kind, enum serve_shape shape, struct conn *cn)
{
    int status = 400;
    char *err, bad[512] = "";
    serve_req *r[SERVE_MAX_PROMPTS];
    const int anthropic = shape == SERVE_ANTHROPIC;
    /* Anthropic's Messages and OpenAI's Responses: read into a chat first, answered in their
     * own shapes */
    const char *in = cn->body ? cn->body : "";
    char *chat = anthropic                 ? serve_anthropic_body(in, cn->len, bad, sizeof bad)
                 : shape == SERVE_RESPONSES ? serve_responses_body(in, cn->len, bad, sizeof bad)
                                            : NULL;
    const unsigned refused = strcmp(bad, "out of memory") ? 400 : 500;
    if (shape != SERVE_OPENAI && !chat)
        return reply(c, refused, "application/json",
                     anthropic ? serve_anthropic_error(bad, refused)
                               : serve_api_error(bad, refused == 400 ? "invalid_request_error"
                                                                     : "server_error"));
    const char *body = chat ? chat : cn->body ? cn->body : "";
    const uint32_t n = serve_api_requests(&h->api, kind, body, chat ? strlen(chat) : cn->len, r,
                                          SERVE_MAX_PROMPTS, &status, &err);
    free(chat);
    if (!n)
        return reply(c, (unsigned)status, "application/json",
                     anthropic ? serve_anthropic_rewrap(err, (unsigned)status) : err);
    for (uint32_t i = 0; i < n; i++)
        r[i]->shape = shape;
    for (uint32_t i = 0; i < n; i++)
        if (serve_submit(h->s, r[i])) { /* those queued are cancelled: the slots free */
            for (uint32_t j = 0; j < n; j++) {
                pthread_mutex_lock(&r[j]->mu);
                r[j]->cancelled = 1;
                pthread_mutex_unlock(&r[j]->mu);
                serve_req_release(r[j]);
            }
            static const char *const busy = "the server is busy: every slot and the queue are "
                                            "taken; try again later";
            return anthropic ? reply(c, 503, "application/json", serve_anthropic_error(busy, 503))
                             : error(c, 503, busy, "server_error");
        }
    return r[0]->stream ? stream(h, c, r[0]) : whole(h, c, r, n);
}

/* llama.cpp's server's routes that answer at once from the tokenizer and template. */
static enum MHD_Result utility(struct serve_http *h, struct MHD_Connection *c,
                               char *(*answer)(const serve_api *, const char *, size_t, int *),
                               struct conn *cn)
{
    int status = 500;
    char *body = answer(&h->api, cn->body ? cn->body : "", cn->len, &status);
    return reply(c, (unsigned)status, "application/json", body);
}

/* The POST routes: a completion of its kind, or an answer from the tokenizer and template. */
static const struct {
    const char *url;
    enum serve_kind kind;
    char *(*answer)(const serve_api *, const char *, size_t, int *);
    enum serve_shape shape; /* the API a chat comes in */
} posts[] = {
    {"/v1/chat/completions", SERVE_CHAT, NULL, SERVE_OPENAI},
    {"/chat/completions", SERVE_CHAT, NULL, SERVE_OPENAI},
    {"/v1/completions", SERVE_COMPLETION, NULL, SERVE_OPENAI},
    /* llama.cpp's server's own, whose /completions is its too (not OpenAI's) */
    {"/completion", SERVE_LLAMA, NULL, SERVE_OPENAI},
    {"/completions", SERVE_LLAMA, NULL, SERVE_OPENAI},
    {"/infill", SERVE_INFILL, NULL, SERVE_OPENAI},
    {"/tokenize", 0, serve_llama_tokenize, SERVE_OPENAI},
    {"/detokenize", 0, serve_llama_detokenize, SERVE_OPENAI},
    {"/apply-template", 0, serve_llama_apply_template, SERVE_OPENAI},
    {"/v1/messages", SERVE_CHAT, NULL, SERVE_ANTHROPIC},
    {"/v1/messages/count_tokens", 0, serve_anthropic_count, SERVE_ANTHROPIC},
    {"/v1/responses", SERVE_CHAT, NULL, SERVE_RESPONSES},
    {"/responses", SERVE_CHAT, NULL, SERVE_RESPONSES},
    {"/v1/responses/input_tokens", 0, serve_responses_count, SERVE_RESPONSES},
    {"/responses/input_tokens", 0, serve_responses_count, SERVE_RESPONSES},
    {"/v1/chat/completions/input_tokens", 0, serve_api_chat_count, SERVE_OPENAI},
    {"/chat/completions/input_tokens", 0, serve_api_chat_count, SERVE_OPENAI},
};

static enum MHD_Result route(struct serve_http *h, struct MHD_Connection *c, const char *url,
                             const char *method, struct conn *cn)
{
    int get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
    if (!strcmp(url, "/health") || !strcmp(url, "/v1/health"))
        return get ? reply(c, 200, "application/json", strdup("{\"status\":\"ok\"}"))
                   : error(c, 405, "use GET", "invalid_request_error");
    if (!strcmp(url, "/v1/models") || !strcmp(url, "/models"))
        return get ? models(h, c) : error(c, 405, "use GET", "invalid_request_error");
    if (!strcmp(url, "/metrics"))
        return get ? metrics(h, c) : error(c, 405, "use GET", "invalid_request_error");
    if (!strcmp(url, "/slots"))
        return get ? slots(h, c) : error(c, 405, "use GET", "invalid_request_error");
    if (!strcmp(url, "/props"))
        return get ? reply(c, 200, "application/json", serve_llama_props(&h->api))
                   : error(c, 405, "use GET (moevm serve's properties are set by its command "
                           "line)", "invalid_request_error");
    for (size_t i = 0; i < sizeof posts / sizeof *posts; i++)
        if (!strcmp(url, posts[i].url))
            return !post ? error(c, 405, "use POST", "invalid_request_error")
                   : cn->too_large ? error(c, 413, "the request body is over 8 MiB",
                                           "invalid_request_error")
                   : posts[i].answer ? utility(h, c, posts[i].answer, cn)
                                     : completion(h, c, posts[i].kind, posts[i].shape, cn);
    char msg[300];
    snprintf(msg, sizeof msg, "no route %s %.200s", method, url);
    return error(c, 404, msg, "not_found_error");
}

/* What the framing headers say of a request, gathered by framing_header(). */
struct framing {
    const char *length;    /* the first Content-Length */
    int conflict;          /* another Content-Length differs from it */
    const char *encoding;  /* a Transfer-Encoding other than chunked, or NULL */
};

static enum MHD_Result framing_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                      const char *value)
{
    (void)kind;
    struct framing *fr = cls;
    value = value ? value : "";
    if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        if (!fr->length)
            fr->length = value;
        else if (strcmp(fr->length, value) != 0)
            fr->conflict = 1;
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) &&
               strcasecmp(value, "chunked") != 0) {
        fr->encoding = value;
    }
    return MHD_YES;
}

/* A request whose body cannot be read for sure is answered at its headers, before MHD
 * reads (or waits for) the body: two Content-Lengths that differ (which one a proxy in
 * front used is unknown: request smuggling), or a transfer coding MHD does not decode (it
 * would wait for a body it never delimits). MHD_YES when the request may go on. */
static enum MHD_Result check_framing(struct MHD_Connection *c, int *refused)
{
    struct framing fr = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, framing_header, &fr);
    char msg[200];
    *refused = 1;
    if (fr.conflict) {
        snprintf(msg, sizeof msg, "conflicting Content-Length headers (%.40s and another): "
                 "send one", fr.length);
        return error(c, 400, msg, "invalid_request_error");
    }
    if (fr.encoding) {
        snprintf(msg, sizeof msg, "Transfer-Encoding %.60s is not supported: send the body "
                 "as it is, with a Content-Length, or chunked", fr.encoding);
        return error(c, 501, msg, "invalid_request_error");
    }
    *refused = 0;
    return MHD_YES;
}

/* ---- access ------------------------------------------------------------------------------ */

/* A browser's CORS preflight: what it may send (before any key: it sends none). */
static enum MHD_Result preflight(struct MHD_Connection *c)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    const char *asked = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                    "Access-Control-Request-Headers");
    cors(resp, c);
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    MHD_add_response_header(resp, "Access-Control-Allow-Headers", asked ? asked : "*");
    MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_NO_CONTENT, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* Equal strings, in a time that does not tell how much of a guess was right. */
static int same_key(const char *a, const char *b)
{
    const size_t na = strlen(a), nb = strlen(b);
    unsigned char diff = na != nb;
    for (size_t i = 0; i < nb; i++)
        diff |= (unsigned char)(a[i < na ? i : 0] ^ b[i]);
    return diff == 0;
}

/* Whether the request may go on: no keys, a public route, or one of the keys given. */
static int authorized(const struct serve_http *h, struct MHD_Connection *c, const char *url)
{
    if (!h->api.n_api_keys || !strcmp(url, "/health") || !strcmp(url, "/v1/health"))
        return 1;
    const char *key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!key)
        key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Api-Key");
    if (!key)
        return 0;
    if (!strncmp(key, "Bearer ", 7))
        key += 7;
    int ok = 0;
    for (uint32_t i = 0; i < h->api.n_api_keys; i++) /* all of them: the same time whichever */
        ok |= same_key(key, h->api.api_keys[i]);
    return ok;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls)
{
    (void)version;
    struct conn *cn = *con_cls;
    const char *path = unprefixed(cls, url);
    if (!path) {
        char msg[300];
        snprintf(msg, sizeof msg, "no route %s %.200s (the routes are under %s)", method, url,
                 ((struct serve_http *)cls)->prefix);
        return error(c, 404, msg, "not_found_error");
    }
    url = path;
    if (!cn) { /* the headers: the body (if any) comes in the next calls */
        if (!strcmp(method, "OPTIONS"))
            return preflight(c);
        static const char *const no_key = "Invalid API Key: send one of the server's keys as "
                                          "'Authorization: Bearer KEY' (or 'x-api-key: KEY')";
        if (!authorized(cls, c, url))
            return !strncmp(url, "/v1/messages", 12)
                       ? reply(c, 401, "application/json", serve_anthropic_error(no_key, 401))
                       : error(c, 401, no_key, "authentication_error");
        int refused;
        enum MHD_Result framed = check_framing(c, &refused);
        if (refused)
            return framed;
        if (!(cn = calloc(1, sizeof *cn)))
            return MHD_NO;
        *con_cls = cn;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cn->too_large && cn->len + *upload_size <= MAX_BODY) {
            char *b = realloc(cn->body, cn->len + *upload_size + 1);
            if (!b)
                return MHD_NO;
            memcpy(b + cn->len, upload, *upload_size);
            cn->body = b, cn->len += *upload_size, b[cn->len] = '\0';
        } else {
            cn->too_large = 1;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    return route(cls, c, url, method, cn);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)c, (void)toe;
    struct conn *cn = *con_cls;
    if (cn)
        free(cn->body), free(cn);
    *con_cls = NULL;
}

serve_http *serve_http_start(serve *s, const char *host, uint16_t port, unsigned timeout_s,
                             const char *prefix, const struct serve_api *api, uint16_t *bound)
{
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) /* cmd_serve.c checked it */
        return NULL;
    struct serve_http *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    mvm_engine_info in;
    mvm_engine_get_info(serve_engine(s), &in);
    h->s = s;
    h->prefix = prefix;
    h->api = *api;
    h->api.e = serve_engine(s);
    h->api.n_ctx = in.n_ctx, h->api.n_seq = in.n_seq, h->api.n_vocab = in.n_vocab;
    h->api.n_batch = in.n_batch;
    struct MHD_Daemon *d = h->d = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD, port, NULL, NULL,
        handle, h, MHD_OPTION_NOTIFY_COMPLETED, completed, h, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&addr, MHD_OPTION_CONNECTION_TIMEOUT, timeout_s, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "moevm serve: cannot listen on %s:%u (in use, or not allowed)\n", host,
                port);
        free(h);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    *bound = di ? di->port : port;
    return h;
}

void serve_http_stop(serve_http *h)
{
    if (!h)
        return;
    MHD_stop_daemon(h->d); /* joins the connection threads: their requests must be done */
    free(h);
}
