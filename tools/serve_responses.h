/*
 * OpenAI's Responses API on moevm serve (tools/serve_responses.c): its request read into a
 * chat request, its reply written back as a response, whole or as its stream of events.
 */
#ifndef MVM_TOOLS_SERVE_RESPONSES_H
#define MVM_TOOLS_SERVE_RESPONSES_H

#include "tools/serve_api.h"

/* The Responses request body[0..len) as an OpenAI chat body's JSON (malloc'd); NULL with
 * the fault in bad. */
char *serve_responses_body(const char *body, size_t len, char *bad, size_t cap);
/* The whole reply of a done request, as a response object. */
char *serve_responses_response(const serve_api *a, const serve_req *r);

/* What a stream has sent: the item being written and the text sent into it. */
typedef struct serve_responses_stream {
    int open;          /* the item being written: 0 none, 1 reasoning, 2 message, 3 call */
    uint32_t items;    /* output items added and done (the open one's output_index) */
    uint32_t seq;      /* the next event's sequence_number */
    char *text;        /* the open item's text (a call's arguments) so far (malloc'd) */
    size_t len;
    cJSON *call;       /* the open call (serve_tools_delta's first piece of it) */
} serve_responses_stream;

/* The events of a stream (malloc'd; NULL without memory or, for a delta, when it has
 * nothing to say): response.created and response.in_progress; the output items a chunk's
 * delta (serve_tools_delta's) adds, fills and finishes; then the open item done and
 * response.completed (response.incomplete at the length limit), or for a failed request
 * an error event. serve_responses_stream_free frees what the stream holds. */
char *serve_responses_start(const serve_api *a, const serve_req *r, serve_responses_stream *s);
char *serve_responses_delta(const serve_req *r, serve_responses_stream *s, const cJSON *delta);
char *serve_responses_end(const serve_api *a, const serve_req *r, serve_responses_stream *s);
void serve_responses_stream_free(serve_responses_stream *s);

/* POST /v1/responses/input_tokens: {"object": "response.input_tokens", "input_tokens": N},
 * the prompt the request renders to. */
char *serve_responses_count(const serve_api *a, const char *body, size_t len, int *status);

#endif
