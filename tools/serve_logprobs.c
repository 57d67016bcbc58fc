/*
 * Generated tokens' log-probabilities in the JSON of each API that asks for them
 * (serve_api.h): OpenAI's chat (`logprobs.content`), llama.cpp's server's /completion
 * (`completion_probabilities`, the same entries with the ids) and OpenAI's legacy
 * completions (`tokens`, `token_logprobs`, `top_logprobs`, `text_offset`). The values are
 * the model's distribution before penalties, filters and temperature, as both servers
 * report them (mvm_sampler_logprobs; the scheduler keeps a row per token, serve.h); with
 * llama.cpp's post_sampling_probs, the probabilities of the distribution each token was
 * drawn from ("prob", "top_probs"; mvm_sampler_last_probs).
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"
#include "tools/serve_api.h"

size_t serve_api_piece(const serve_api *a, int32_t id, char *buf, size_t cap)
{
    size_t n = mvm_engine_token_piece(a->e, id, buf, cap);
    const char *text = n ? NULL : mvm_engine_token_text(a->e, id);
    if (text) {
        n = strlen(text);
        memcpy(buf, text, n < cap ? n : cap);
    }
    return n < cap ? n : cap;
}

/* A token's text for JSON (U+FFFD for bytes that are not whole UTF-8) into *text
 * (malloc'd), and its bytes as numbers. */
static cJSON *token_bytes(const serve_api *a, int32_t id, char **text)
{
    char buf[256];
    const size_t n = serve_api_piece(a, id, buf, sizeof buf);
    *text = mvm_cli_valid_utf8(buf, n);
    cJSON *bytes = cJSON_CreateArray();
    for (size_t i = 0; bytes && i < n; i++)
        cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)buf[i]));
    return bytes;
}

static cJSON *entry(const serve_api *a, serve_logprob p, int with_id, int post)
{
    cJSON *o = cJSON_CreateObject();
    char *text = NULL;
    cJSON *bytes = token_bytes(a, p.id, &text);
    if (with_id)
        cJSON_AddNumberToObject(o, "id", p.id);
    cJSON_AddStringToObject(o, "token", text ? text : "");
    cJSON_AddItemToObject(o, "bytes", bytes);
    cJSON_AddNumberToObject(o, post ? "prob" : "logprob", p.logprob);
    free(text);
    return o;
}

cJSON *serve_api_logprobs(const serve_api *a, const serve_req *r, uint32_t from, uint32_t to,
                          int with_id)
{
    const uint32_t width = 1 + r->top_logprobs;
    cJSON *arr = cJSON_CreateArray();
    for (uint32_t i = from; arr && i < to; i++) {
        const serve_logprob *row = r->probs + (size_t)i * width;
        cJSON *e = entry(a, row[0], with_id, r->post_sampling);
        cJSON *top = cJSON_AddArrayToObject(e, r->post_sampling ? "top_probs" : "top_logprobs");
        for (uint32_t j = 1; j < width && row[j].id >= 0; j++)
            cJSON_AddItemToArray(top, entry(a, row[j], with_id, r->post_sampling));
        cJSON_AddItemToArray(arr, e);
    }
    return arr;
}

/* Characters of UTF-8 text (its continuation bytes not counted). */
static size_t chars(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

cJSON *serve_api_logprobs_legacy(const serve_api *a, const serve_req *r, uint32_t from,
                                 uint32_t to)
{
    const uint32_t width = 1 + r->top_logprobs;
    cJSON *o = cJSON_CreateObject();
    cJSON *tokens = cJSON_AddArrayToObject(o, "tokens");
    cJSON *lps = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs");
    cJSON *offsets = cJSON_AddArrayToObject(o, "text_offset");
    /* each token's place in the reply, in characters of the tokens' texts before it: a
     * streamed chunk's first counts the chunks' before it */
    size_t offset = 0;
    char *text = NULL;
    for (uint32_t i = 0; i < to; i++, free(text), text = NULL) {
        const serve_logprob *row = r->probs + (size_t)i * width;
        cJSON_Delete(token_bytes(a, row[0].id, &text));
        if (i < from) {
            offset += text ? chars(text) : 0;
            continue;
        }
        cJSON_AddItemToArray(tokens, cJSON_CreateString(text ? text : ""));
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(row[0].logprob));
        cJSON_AddItemToArray(offsets, cJSON_CreateNumber((double)offset));
        offset += text ? chars(text) : 0;
        cJSON *top = cJSON_CreateObject();
        for (uint32_t j = 1; j < width && row[j].id >= 0; j++) {
            char *alt = NULL;
            cJSON_Delete(token_bytes(a, row[j].id, &alt));
            /* OpenAI's is an object: alternatives that read the same keep the first */
            if (alt && !cJSON_GetObjectItemCaseSensitive(top, alt))
                cJSON_AddNumberToObject(top, alt, row[j].logprob);
            free(alt);
        }
        cJSON_AddItemToArray(tops, top);
    }
    return o;
}
