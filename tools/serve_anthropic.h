/*
 * Anthropic's Messages API on moevm serve (tools/serve_anthropic.c): its request read into
 * an OpenAI chat request, its reply written back in Anthropic's shape, whole or as events.
 */
#ifndef MVM_TOOLS_SERVE_ANTHROPIC_H
#define MVM_TOOLS_SERVE_ANTHROPIC_H

#include "tools/serve_api.h"

/* The Messages request body[0..len) as an OpenAI chat body's JSON (malloc'd); NULL with
 * the fault in bad. */
char *serve_anthropic_body(const char *body, size_t len, char *bad, size_t cap);
/* {"type": "error", "error": {"type", "message"}} (malloc'd), the type from the HTTP
 * status; the second takes (and frees) an OpenAI error object for its message. */
char *serve_anthropic_error(const char *message, unsigned status);
char *serve_anthropic_rewrap(char *openai_error, unsigned status);
/* The whole reply of a done request, as a message. */
char *serve_anthropic_response(const serve_api *a, const serve_req *r);

/* What a stream has opened and sent of its content blocks. */
typedef struct serve_anthropic_stream {
    int open;        /* the block being written: 0 none, 1 thinking, 2 text, 3 tool_use */
    uint32_t blocks; /* blocks started and stopped (the open one's index) */
    int calls;       /* tool_use blocks sent */
} serve_anthropic_stream;

/* The events of a stream (malloc'd; NULL without memory): message_start and a ping; the
 * blocks a chunk's delta (serve_tools_delta's) opens, fills and closes (NULL when it has
 * nothing to say); then the open block closed, message_delta and message_stop, or for a
 * failed request an error event. */
char *serve_anthropic_start(const serve_api *a, const serve_req *r);
char *serve_anthropic_delta(serve_anthropic_stream *s, const cJSON *delta);
char *serve_anthropic_end(serve_anthropic_stream *s, const serve_req *r);

/* POST /v1/messages/count_tokens: {"input_tokens": N}, the prompt the request renders to. */
char *serve_anthropic_count(const serve_api *a, const char *body, size_t len, int *status);

#endif
