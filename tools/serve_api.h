/*
 * The OpenAI API's JSON for `moevm serve` (docs/serve.md): requests of /v1/completions and
 * /v1/chat/completions read into serve_req, and the responses, stream chunks and error
 * objects written. Pure functions of their arguments: the connection threads call them.
 */
#ifndef MVM_TOOLS_SERVE_API_H
#define MVM_TOOLS_SERVE_API_H

#include <stddef.h>

#include "tools/serve.h"

typedef struct serve_api {
    mvm_engine *e;            /* tokenizer and chat template only (thread-safe reads) */
    const char *model_id;
    mvm_sampler_params defaults; /* the command line's sampling */
    int32_t default_max_tokens;  /* -1: until the reply ends */
    int default_ignore_eos;      /* --ignore-eos */
    uint32_t n_ctx;
} serve_api;

/* A request read from body[0..len) (chat: /v1/chat/completions), tokenized; NULL with the
 * HTTP status in *status and the error object's JSON in *error (malloc'd) when the body is
 * not a valid request or its prompt does not fit the context. */
serve_req *serve_api_request(const serve_api *a, int chat, const char *body, size_t len,
                             int *status, char **error);

/* {"error": {"message", "type", "param", "code"}} (malloc'd); type "invalid_request_error",
 * "not_found_error", "server_error", ... */
char *serve_api_error(const char *message, const char *type);

/* The whole response of a request that is done (non-streaming). */
char *serve_api_response(const serve_api *a, const serve_req *r);
/* One server-sent event "data: {...}\n\n" of a streamed request: the first (role, chat
 * only), a piece of text, or the last (finish_reason set, usage); malloc'd. */
char *serve_api_chunk(const serve_api *a, const serve_req *r, const char *text, size_t n,
                      int first, const char *finish);

#endif
