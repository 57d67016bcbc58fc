/* A request of `moevm serve` (tools/serve.h): made by its connection, shared with the engine
 * thread, freed by the last to let go; the reply's text appended as it is released. A file
 * of its own so that the API's JSON (serve_api.c) links without the engine thread: the
 * server's fuzz target does (tests/fuzz/fuzz_serve.c). */
#include <stdlib.h>
#include <string.h>

#include "tools/serve.h"

serve_req *serve_req_new(void)
{
    serve_req *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->refs = 1;
    r->max_tokens = -1;
    r->cache_prompt = 1;
    r->id_slot = -1;
    r->stop_word = -1;
    return r;
}

void serve_req_release(serve_req *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    int last = --r->refs == 0;
    pthread_mutex_unlock(&r->mu);
    if (!last)
        return;
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    for (uint32_t i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    free(r->prompt), free(r->text), free(r->error), free(r->gen), free(r->probs);
    mvm_grammar_free(r->grammar);
    mvm_dry_breakers_free(r->own_breakers);
    serve_req_release(r->owner);
    cJSON_Delete(r->tools);
    free(r->force_name);
    free(r->think_message);
    free(r->bias);
    free(r);
}

int serve_req_append(serve_req *r, const char *s, size_t n)
{
    if (r->len + n + 1 > r->cap) {
        size_t cap = 2 * r->cap + n + 64;
        char *t = realloc(r->text, cap);
        if (!t)
            return -1;
        r->text = t, r->cap = cap;
    }
    memcpy(r->text + r->len, s, n);
    r->len += n;
    r->text[r->len] = '\0';
    return 0;
}

int serve_req_add_token(serve_req *r, int32_t id, const serve_logprob *row)
{
    const size_t width = 1 + (size_t)r->top_logprobs;
    if (r->n_gen == r->gen_cap) {
        uint32_t cap = 2 * r->gen_cap + 64;
        int32_t *g = realloc(r->gen, cap * sizeof *g);
        if (g)
            r->gen = g;
        serve_logprob *p = g && r->logprobs ? realloc(r->probs, cap * width * sizeof *p) : NULL;
        if (p)
            r->probs = p;
        if (!g || (r->logprobs && !p))
            return -1;
        r->gen_cap = cap;
    }
    r->gen[r->n_gen] = id;
    if (r->logprobs)
        memcpy(r->probs + r->n_gen * width, row, width * sizeof *row);
    return 0;
}
