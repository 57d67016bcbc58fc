/*
 * A request's `logit_bias`, as llama.cpp's server reads it (tools/server's
 * params_from_json_cmpl), in both of its shapes:
 *   - OpenAI's object {"15043": 2.5, ...}: a key that is a token id, or else a text whose
 *     tokens all get the bias;
 *   - llama.cpp's array [[15043, 2.5], ["Hello", -1], [13, false], ...]: a token id or a
 *     text, and the bias or false (never sampled).
 * The engine thread (serve_sched.c) adds the bias to the token's logit before sampling,
 * after the log-probabilities a reply reports, which are the model's, as llama.cpp's are. Where llama.cpp passes over
 * a token outside the vocabulary in silence, this is a 400 naming it: a bias that does
 * nothing would look like one that did.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/serve_api.h"

/* Appends (id, bias) to r; -1 with a message in bad. */
static int add(const serve_api *a, serve_req *r, double id, float bias, char *bad, size_t cap)
{
    const uint32_t n_vocab = mvm_engine_n_vocab(a->e);
    if (!(id >= 0 && id < n_vocab && id == floor(id))) {
        snprintf(bad, cap, "'logit_bias': token %.17g is not in the vocabulary (0..%u)", id,
                 n_vocab ? n_vocab - 1 : 0);
        return -1;
    }
    if (r->n_bias == r->cap_bias) {
        const uint32_t want = r->cap_bias ? 2 * r->cap_bias : 8;
        serve_bias *b = want <= n_vocab * 4u + 8 ? realloc(r->bias, want * sizeof *b) : NULL;
        if (!b) {
            snprintf(bad, cap, "'logit_bias': too many entries");
            return -1;
        }
        r->bias = b, r->cap_bias = want;
    }
    r->bias[r->n_bias++] = (serve_bias){(int32_t)id, bias};
    return 0;
}

/* Each token of text gets the bias. */
static int add_text(const serve_api *a, serve_req *r, const char *text, float bias, char *bad,
                    size_t cap)
{
    const size_t len = strlen(text);
    int32_t *ids = malloc((len + 16) * sizeof *ids);
    size_t n = 0;
    int rc = ids && mvm_engine_tokenize(a->e, text, len, 0, 0, ids, len + 16, &n) == MVM_OK
                 ? 0 : -1;
    if (rc)
        snprintf(bad, cap, "'logit_bias': cannot tokenize \"%.40s\"", text);
    for (size_t i = 0; !rc && i < n; i++)
        rc = add(a, r, ids[i], bias, bad, cap);
    free(ids);
    return rc;
}

/* A bias value: a finite number, or false (-infinity). */
static int bias_of(const cJSON *v, float *out)
{
    if (cJSON_IsFalse(v)) {
        *out = -INFINITY;
        return 0;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return -1;
    *out = (float)v->valuedouble;
    return 0;
}

int serve_bias_read(const serve_api *a, const cJSON *body, serve_req *r, char *bad, size_t cap)
{
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(body, "logit_bias"), *it;
    if (!lb || cJSON_IsNull(lb))
        return 0;
    if (!cJSON_IsObject(lb) && !cJSON_IsArray(lb))
        goto shape;
    cJSON_ArrayForEach(it, lb)
    {
        float bias;
        const cJSON *key = cJSON_IsArray(lb) ? cJSON_GetArrayItem(it, 0) : NULL;
        const cJSON *v = cJSON_IsArray(lb) ? cJSON_GetArrayItem(it, 1) : it;
        if (bias_of(v, &bias) || (cJSON_IsArray(lb) && (!cJSON_IsArray(it) ||
                                  cJSON_GetArraySize(it) != 2)))
            goto shape;
        int rc;
        if (key && cJSON_IsNumber(key)) {
            rc = add(a, r, key->valuedouble, bias, bad, cap);
        } else if (key && !cJSON_IsString(key)) {
            goto shape;
        } else {
            const char *text = key ? key->valuestring : it->string;
            char *end = NULL;
            const long id = !key && *text ? strtol(text, &end, 10) : 0;
            rc = end && !*end ? add(a, r, (double)id, bias, bad, cap)
                              : add_text(a, r, text, bias, bad, cap);
        }
        if (rc)
            return -1;
    }
    return 0;
shape:
    snprintf(bad, cap, "'logit_bias' must be {\"token id or text\": bias, ...} or [[token id "
             "or text, bias or false], ...]");
    return -1;
}

int serve_bias_copy(const serve_req *from, serve_req *to)
{
    if (!from->n_bias)
        return 0;
    if (!(to->bias = malloc(from->n_bias * sizeof *to->bias)))
        return -1;
    memcpy(to->bias, from->bias, from->n_bias * sizeof *to->bias);
    to->n_bias = to->cap_bias = from->n_bias;
    return 0;
}
