/*
 * The engine thread of `moevm serve` (serve.h): requests queue for slots, the engine's
 * sequences, and every round evaluates one batch of all of them (continuous batching): the
 * next token of each slot that is generating, and a chunk of the prompts still being read,
 * up to n_batch prompt tokens a round so that a long prompt does not stall the replies
 * running beside it (as vLLM's chunked prefill). The forward pass then reads each weight
 * once for the batch, and the MoE steps place and run each expert its tokens share once
 * (mvm_engine_eval_batch). A slot keeps its tokens when its request ends, and a new request
 * goes to the free slot whose cache shares the longest prefix with its prompt: a
 * conversation's next turn evaluates only what is new, as llama.cpp's server reuses its
 * slots.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/compute/clock.h"
#include "tools/cli_engine.h"
#include "tools/cli_think.h"
#include "tools/serve.h"

struct slot {
    serve_req *req;           /* NULL: free */
    int started;              /* its cached prefix is reused: its prompt is being read */
    uint32_t fed;             /* the prompt's tokens in the cache */
    int32_t *cached;          /* [n_ctx] the sequence's tokens in the cache */
    uint32_t n_cached;
    mvm_sampler *sampler;
    mvm_think_budget think;   /* the request's reasoning budget, followed; where it has one */
    const float *logits;      /* the next token's logits (a row of the last batch's), or
                                 NULL while the prompt is being read */
    int new_line;             /* the reply has made a new line (t_max_predict's condition) */
    char *pending;            /* [n_ctx * 8 + 64] generated text not yet released: a stop
                                 string's possible start, or a character's first bytes */
    size_t n_pending;
};

struct serve {
    mvm_engine *e;
    mvm_engine_info info;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    serve_req *head, *tail;
    uint32_t queued, max_queue;
    int stopping;
    struct slot *slots;
    /* a round's batch: at most a token of each slot and n_batch of prompts */
    mvm_engine_token *batch;
    float *rows;              /* [n_seq][n_vocab] its logits: a row for each slot at most */
    uint32_t first_prompt;    /* the slot whose prompt is read first, in turns */
    serve_metrics metrics;    /* under mu */
    serve_slot_info *snap;    /* [n_seq] the slots as of the last round; under mu */
};

serve *serve_create(mvm_engine *e, uint32_t max_queue)
{
    serve *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->e = e;
    s->max_queue = max_queue;
    mvm_engine_get_info(e, &s->info);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    const uint32_t n_seq = s->info.n_seq;
    int ok = (s->slots = calloc(n_seq, sizeof *s->slots)) &&
             (s->snap = calloc(n_seq, sizeof *s->snap)) &&
             (s->batch = malloc((n_seq + s->info.n_batch) * sizeof *s->batch)) &&
             (s->rows = malloc((size_t)n_seq * s->info.n_vocab * sizeof *s->rows));
    for (uint32_t i = 0; ok && i < n_seq; i++) {
        struct slot *sl = &s->slots[i];
        ok = (sl->cached = malloc(s->info.n_ctx * sizeof *sl->cached)) &&
             (sl->pending = malloc((size_t)s->info.n_ctx * 8 + 64));
    }
    if (!ok) {
        serve_free(s);
        return NULL;
    }
    return s;
}

void serve_free(serve *s)
{
    if (!s)
        return;
    for (uint32_t i = 0; s->slots && i < s->info.n_seq; i++) {
        struct slot *sl = &s->slots[i];
        serve_req_release(sl->req);
        mvm_sampler_free(sl->sampler);
        free(sl->cached), free(sl->pending);
    }
    for (serve_req *r = s->head, *next; r; r = next) {
        next = r->next;
        serve_req_release(r);
    }
    free(s->slots), free(s->snap), free(s->batch), free(s->rows);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

mvm_engine *serve_engine(serve *s) { return s->e; }

int serve_submit(serve *s, serve_req *r)
{
    pthread_mutex_lock(&s->mu);
    int full = s->queued >= s->max_queue || s->stopping;
    if (!full) {
        pthread_mutex_lock(&r->mu);
        r->refs++;
        pthread_mutex_unlock(&r->mu);
        if (s->tail)
            s->tail->next = r;
        else
            s->head = r;
        s->tail = r;
        s->queued++;
        s->metrics.requests++;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return full ? -1 : 0;
}

void serve_stop(serve *s)
{
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void serve_get_metrics(serve *s, serve_metrics *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->metrics;
    pthread_mutex_unlock(&s->mu);
}

void serve_get_slots(serve *s, serve_slot_info *out)
{
    pthread_mutex_lock(&s->mu);
    memcpy(out, s->snap, s->info.n_seq * sizeof *out);
    pthread_mutex_unlock(&s->mu);
}

/* The slots copied for GET /slots (under s->mu; the engine thread alone writes what the
 * slots and their requests' counts hold, so it reads them unlocked). */
static void snapshot(serve *s)
{
    for (uint32_t i = 0; i < s->info.n_seq; i++) {
        const struct slot *sl = &s->slots[i];
        serve_slot_info *o = &s->snap[i];
        *o = (serve_slot_info){.busy = sl->req != NULL, .n_cached = sl->n_cached,
                               .max_tokens = -1};
        if (sl->req) {
            memcpy(o->id, sl->req->id, sizeof o->id);
            o->n_gen = sl->req->n_gen;
            o->max_tokens = sl->req->max_tokens, o->sp = sl->req->sp;
        }
    }
}

/* ---- a request's end ------------------------------------------------------------------- */

static void finish(serve *s, struct slot *sl, const char *reason, const char *error)
{
    serve_req *r = sl->req;
    pthread_mutex_lock(&r->mu);
    if (!error && sl->n_pending && serve_req_append(r, sl->pending, sl->n_pending))
        error = "out of memory for the reply";
    r->done = 1;
    r->t_end = mvm_now_s();
    r->finish = error ? NULL : reason;
    if (error)
        r->error = strdup(error);
    int cancelled = r->cancelled;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_lock(&s->mu);
    s->metrics.completed += !error && !cancelled;
    s->metrics.cancelled += cancelled;
    s->metrics.failed += error && !cancelled;
    pthread_mutex_unlock(&s->mu);
    serve_req_release(r);
    mvm_sampler_free(sl->sampler);
    sl->sampler = NULL;
    sl->req = NULL;
    sl->logits = NULL;
    sl->n_pending = 0;
}

/* ---- text released as it comes ------------------------------------------------------------ */

/* Bytes at the end of s[0..n) that begin a UTF-8 character not yet complete. */
static size_t utf8_incomplete(const char *s, size_t n)
{
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = (unsigned char)s[n - back];
        if ((c & 0xC0) != 0x80) { /* a lead byte: does its character fit? */
            size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
            return need > back ? back : 0;
        }
    }
    return 0;
}

/* Adds a piece to the slot's pending text; releases what can no longer be part of a stop
 * string or an unfinished character. 1 when a stop string completed (the text before it
 * is released, the rest dropped), -1 without memory, else 0. */
static int release(struct slot *sl, const char *piece, size_t np)
{
    serve_req *r = sl->req;
    memcpy(sl->pending + sl->n_pending, piece, np);
    sl->n_pending += np;
    size_t keep = 0, cut = sl->n_pending;
    int stopped = 0, word = -1;
    for (uint32_t i = 0; i < r->n_stop; i++) {
        const char *hit = memmem(sl->pending, sl->n_pending, r->stop[i], strlen(r->stop[i]));
        if (hit && (size_t)(hit - sl->pending) < cut)
            cut = (size_t)(hit - sl->pending), stopped = 1, word = (int)i;
        /* the longest end of the pending text that starts this stop string */
        for (size_t k = strlen(r->stop[i]) - 1; k > keep; k--)
            if (k <= sl->n_pending && !memcmp(sl->pending + sl->n_pending - k, r->stop[i], k)) {
                keep = k;
                break;
            }
    }
    size_t out = stopped ? cut : sl->n_pending - keep;
    if (!stopped)
        out -= utf8_incomplete(sl->pending, out);
    pthread_mutex_lock(&r->mu);
    int bad = serve_req_append(r, sl->pending, out);
    r->stop_word = word;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (bad)
        return -1;
    sl->n_pending = stopped ? 0 : sl->n_pending - out;
    memmove(sl->pending, sl->pending + out, sl->n_pending);
    return stopped;
}

/* ---- a round ------------------------------------------------------------------------------ */

/* A new request's slot: what its cache shares with the prompt is kept (all but the last
 * token, whose logits are needed; nothing when the request says cache_prompt false), the
 * rest is read in the rounds to come. */
static void start(serve *s, struct slot *sl, uint32_t seq)
{
    serve_req *r = sl->req;
    const uint32_t k = mvm_cli_keep_prefix(s->e, seq, r->prompt, r->n_prompt, sl->cached,
                                           r->cache_prompt ? sl->n_cached : 0);
    pthread_mutex_lock(&r->mu);
    r->slot = seq, r->n_cached = k, r->t_start = r->t_prompt = mvm_now_s();
    pthread_mutex_unlock(&r->mu);
    sl->n_cached = sl->fed = k;
    sl->logits = NULL;
    sl->started = 1;
    pthread_mutex_lock(&s->mu);
    s->metrics.prompt_tokens += r->n_prompt - k;
    s->metrics.reused_tokens += k;
    pthread_mutex_unlock(&s->mu);
}

/* A generating slot's next token from its logits, its text released; the token to
 * evaluate, or -1 when the request has ended. */
static int32_t next_token(serve *s, struct slot *sl)
{
    serve_req *r = sl->req;
    pthread_mutex_lock(&r->mu);
    const int n_gen = (int)r->n_gen;
    pthread_mutex_unlock(&r->mu);
    if (r->max_tokens >= 0 && n_gen >= r->max_tokens)
        return finish(s, sl, "length", NULL), -1;
    float *logits = (float *)sl->logits; /* the slot's row: its own to change */
    /* the model's distribution, as llama.cpp's server reports it: before the mask */
    serve_logprob row[1 + SERVE_MAX_LOGPROBS];
    int32_t top_id[SERVE_MAX_LOGPROBS];
    float top_lp[SERVE_MAX_LOGPROBS], lse = 0;
    if (r->logprobs)
        lse = mvm_sampler_logprobs(logits, s->info.n_vocab, r->top_logprobs, top_id, top_lp);
    for (uint32_t i = 0; i < r->n_bias; i++) /* logit_bias, after the model's logprobs */
        logits[r->bias[i].id] += r->bias[i].bias;
    if (r->ignore_eos)
        mvm_engine_mask_eog(s->e, logits);
    int forced;
    int32_t next = mvm_cli_think_next(r->thinking ? &sl->think : NULL, sl->sampler, r->grammar,
                                      logits, s->info.n_vocab, sl->cached, sl->n_cached,
                                      &forced);
    if (next < 0 && r->grammar && mvm_grammar_finished(r->grammar))
        return finish(s, sl, "stop", NULL), -1; /* ignore_eos: the grammar's sentence whole */
    if (next < 0 || mvm_engine_is_eog(s->e, next))
        return finish(s, sl, "stop", next >= 0 ? NULL : r->grammar
                      ? "no token that the grammar allows could be sampled"
                      : "no token could be sampled (NaN logits)"), -1;
    mvm_cli_think_took(s->e, r->thinking ? &sl->think : NULL, next);
    if (r->post_sampling) {
        int32_t ids[SERVE_MAX_LOGPROBS];
        float p[SERVE_MAX_LOGPROBS], chosen = 1;
        const uint32_t got = forced ? (ids[0] = next, p[0] = 1, 1) /* certain */
                                    : mvm_sampler_last_probs(sl->sampler, r->top_logprobs,
                                                             ids, p, &chosen);
        row[0] = (serve_logprob){next, chosen};
        for (uint32_t j = 0; j < r->top_logprobs; j++)
            row[1 + j] = (serve_logprob){j < got ? ids[j] : -1, j < got ? p[j] : 0};
    } else {
        float raw = logits[next]; /* the model's: logit_bias taken off again */
        for (uint32_t i = 0; i < r->n_bias; i++)
            raw -= r->bias[i].id == next ? r->bias[i].bias : 0;
        row[0] = (serve_logprob){next, raw - lse};
        for (uint32_t j = 0; r->logprobs && j < r->top_logprobs; j++)
            row[1 + j] = (serve_logprob){top_id[j], top_lp[j]};
    }
    /* the id first: a stream's event for the text carries the tokens counted by then */
    pthread_mutex_lock(&r->mu);
    int stopped = serve_req_add_token(r, next, row) ? -1 : 0;
    r->n_gen++;
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_lock(&s->mu);
    s->metrics.generated_tokens++;
    pthread_mutex_unlock(&s->mu);
    char piece[256];
    size_t np = mvm_cli_reply_piece(s->e, next, r->keep, r->n_keep, piece, sizeof piece);
    if (!stopped)
        stopped = release(sl, piece, np < sizeof piece ? np : sizeof piece);
    if (stopped)
        return finish(s, sl, "stop", stopped < 0 ? "out of memory for the reply" : NULL), -1;
    if (sl->n_cached + 1 >= s->info.n_ctx) {
        pthread_mutex_lock(&r->mu);
        r->truncated = 1;
        pthread_mutex_unlock(&r->mu);
        return finish(s, sl, "length", NULL), -1;
    }
    /* llama.cpp's t_max_predict_ms (editors' completions): time is up once a line is made */
    sl->new_line |= memchr(piece, '\n', np < sizeof piece ? np : sizeof piece) != NULL;
    if (r->t_max_predict > 0 && sl->new_line && mvm_now_s() - r->t_prompt > r->t_max_predict)
        return finish(s, sl, "length", NULL), -1;
    return next;
}

/* Adds slot i's part of the round to the batch at *n: its next token when it is generating,
 * else up to *room of its prompt's tokens (the last one's logits wanted). */
static void add_tokens(serve *s, uint32_t i, uint32_t *n, uint32_t *room)
{
    struct slot *sl = &s->slots[i];
    serve_req *r = sl->req;
    if (sl->logits) {
        int32_t next = next_token(s, sl);
        if (next >= 0)
            s->batch[(*n)++] = (mvm_engine_token){next, i, 1};
        return;
    }
    uint32_t k = r->n_prompt - sl->fed < *room ? r->n_prompt - sl->fed : *room;
    for (uint32_t j = sl->fed; j < sl->fed + k; j++)
        s->batch[(*n)++] = (mvm_engine_token){r->prompt[j], i, j + 1 == r->n_prompt};
    *room -= k;
}

/* One batch of every active slot's tokens (those generating first, then the prompts, whose
 * turn to be read first goes round), evaluated; each slot's logits row handed back. A
 * failure ends every request in the batch with it (the caches are as before). */
static void round_run(serve *s)
{
    const uint32_t n_seq = s->info.n_seq;
    uint32_t n = 0, room = s->info.n_batch, n_req = 0;
    for (uint32_t i = 0; i < n_seq; i++) {
        struct slot *sl = &s->slots[i];
        if (!sl->req)
            continue;
        pthread_mutex_lock(&sl->req->mu);
        const int cancelled = sl->req->cancelled;
        pthread_mutex_unlock(&sl->req->mu);
        if (cancelled)
            finish(s, sl, NULL, NULL);
        else if (!sl->started)
            start(s, sl, i);
        else if (sl->logits)
            add_tokens(s, i, &n, &room);
    }
    for (uint32_t k = 0; k < n_seq && room; k++) {
        const uint32_t i = (s->first_prompt + k) % n_seq;
        if (s->slots[i].req && s->slots[i].started && !s->slots[i].logits)
            add_tokens(s, i, &n, &room);
    }
    s->first_prompt = (s->first_prompt + 1) % n_seq;
    if (!n)
        return;
    const mvm_status st = mvm_engine_eval_batch(s->e, s->batch, n, s->rows);
    const char *why = st != MVM_OK ? mvm_last_error() : NULL;
    uint32_t row = 0;
    for (uint32_t k = 0; k < n; k++) {
        struct slot *sl = &s->slots[s->batch[k].seq];
        n_req += k == 0 || s->batch[k].seq != s->batch[k - 1].seq;
        if (!sl->req) /* a failure's second token of the slot */
            continue;
        if (why) {
            finish(s, sl, NULL, why);
            continue;
        }
        sl->cached[sl->n_cached++] = s->batch[k].id;
        if (!sl->logits)
            sl->fed++;
        if (!sl->logits && s->batch[k].logits) { /* the prompt read: its time ends here */
            pthread_mutex_lock(&sl->req->mu);
            sl->req->t_prompt = mvm_now_s();
            pthread_mutex_unlock(&sl->req->mu);
        }
        if (s->batch[k].logits)
            sl->logits = s->rows + (size_t)row++ * s->info.n_vocab;
    }
    pthread_mutex_lock(&s->mu);
    s->metrics.batches++;
    s->metrics.batch_tokens += n;
    s->metrics.batch_requests += n_req;
    pthread_mutex_unlock(&s->mu);
}

/* ---- the loop ---------------------------------------------------------------------------- */

/* The free slot whose cache shares the longest prefix with r's prompt (the one it asked
 * for, id_slot, if that is free); -1 when none is. */
static int pick_slot(const serve *s, const serve_req *r)
{
    int best = -1;
    uint32_t best_k = 0;
    for (uint32_t i = 0; i < s->info.n_seq; i++) {
        const struct slot *sl = &s->slots[i];
        if (sl->req || (r->id_slot >= 0 && (uint32_t)r->id_slot != i))
            continue;
        uint32_t k = mvm_cli_common_prefix(r->prompt, r->n_prompt, sl->cached, sl->n_cached);
        if (best < 0 || k > best_k)
            best = (int)i, best_k = k;
    }
    return best;
}

/* Moves queued requests into free slots, in their order (under s->mu); one that waits for
 * the slot it asked for lets those behind it pass. The number of active slots. */
static uint32_t admit(serve *s)
{
    for (serve_req **at = &s->head, *prev = NULL; *at;) {
        int i = pick_slot(s, *at);
        if (i < 0) {
            prev = *at, at = &(*at)->next;
            continue;
        }
        struct slot *sl = &s->slots[i];
        serve_req *r = *at;
        if (!(*at = r->next))
            s->tail = prev;
        s->queued--;
        r->next = NULL;
        sl->req = r;
        sl->started = 0;
        sl->n_pending = 0, sl->new_line = 0;
        if (mvm_sampler_create(&r->sp, s->info.n_vocab, &sl->sampler) != MVM_OK ||
            mvm_sampler_set_grammar(sl->sampler, r->grammar) != MVM_OK) {
            pthread_mutex_unlock(&s->mu);
            finish(s, sl, NULL, mvm_last_error());
            pthread_mutex_lock(&s->mu);
        } else {
            mvm_sampler_set_dry_breakers(sl->sampler, r->breakers);
            sl->think = r->think; /* its own copy: the state moves with the reply */
        }
    }
    uint32_t active = 0;
    for (uint32_t i = 0; i < s->info.n_seq; i++)
        active += s->slots[i].req != NULL;
    s->metrics.active = active;
    s->metrics.queued = s->queued;
    snapshot(s);
    return active;
}

void serve_run(serve *s)
{
    pthread_mutex_lock(&s->mu);
    for (;;) {
        uint32_t active = admit(s);
        if (s->stopping)
            break;
        if (!active) {
            pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        round_run(s);
        mvm_engine_stats es;
        mvm_engine_get_stats(s->e, &es);
        pthread_mutex_lock(&s->mu);
        s->metrics.engine = es;
        snapshot(s);
    }
    serve_req *queued = s->head;
    s->head = s->tail = NULL;
    s->queued = 0;
    pthread_mutex_unlock(&s->mu);
    /* what is still running or queued ends with an error its client sees */
    static const char bye[] = "the server is shutting down";
    for (uint32_t i = 0; i < s->info.n_seq; i++)
        if (s->slots[i].req)
            finish(s, &s->slots[i], NULL, bye);
    for (serve_req *r = queued, *next; r; r = next) {
        next = r->next;
        pthread_mutex_lock(&r->mu);
        r->done = 1;
        r->error = strdup(bye);
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        serve_req_release(r);
    }
}
