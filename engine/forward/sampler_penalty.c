/*
 * The sampler's step 0 (sampler.h): the penalties llama.cpp's chain opens with, computed
 * as its src/llama-sampler.cpp computes them, over the previous tokens the caller passes
 * (the prompt's and those generated, as llama.cpp's server feeds them to its sampler):
 *
 *  - repetition, frequency and presence (llama_sampler_penalties): over the last
 *    repeat_last_n tokens, each token seen c times has its logit divided by repeat_penalty
 *    (multiplied when not positive), then c * frequency_penalty + presence_penalty taken
 *    from it;
 *  - DRY, "don't repeat yourself" (Weidmann, text-generation-webui #5677;
 *    llama_sampler_dry): over the last dry_last_n tokens, a token that would extend a
 *    sequence already seen, repeated for n >= dry_allowed_length tokens, loses
 *    dry_multiplier * dry_base^(n - dry_allowed_length). A repetition does not reach back
 *    over a sequence breaker, and a token that is a breaker on its own is never penalised.
 *    The repeats are found by llama.cpp's reverse Z-algorithm, its lengths capped as it
 *    caps them, so that the same history gives the same penalties.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/forward/sampler.h"
#include "vmm/error.h"

enum { BREAKER_MAX_BYTES = 40, BREAKER_MAX_TAIL = 20 }; /* llama.cpp's MAX_CHAR_LEN, _SEQ_LEN */

/* llama.cpp's Mirostat chain has no penalties */
int smp_penalties_on(const mvm_sampler_params *p)
{
    const int repeat = p->repeat_penalty != 0 && p->repeat_penalty != 1;
    return !p->mirostat && p->repeat_last_n &&
           (repeat || p->frequency_penalty != 0 || p->presence_penalty != 0);
}

int smp_dry_on(const mvm_sampler_params *p)
{
    return !p->mirostat && p->dry_multiplier > 0 && p->dry_last_n;
}

/* The repetition, frequency and presence penalties into out (a copy of logits, or logits
 * itself); count: n zeros, left zeros; NULL (out not logits) where only the repetition
 * penalty is on. */
static void penalties(const mvm_sampler_params *p, const float *logits, uint32_t n,
                      const int32_t *prev, uint32_t n_prev, float *out, uint32_t *count)
{
    const float rp = p->repeat_penalty == 0 ? 1 : p->repeat_penalty;
    const uint32_t first = n_prev > p->repeat_last_n ? n_prev - p->repeat_last_n : 0;
    for (uint32_t i = first; count && i < n_prev; i++)
        if (prev[i] >= 0 && (uint32_t)prev[i] < n)
            count[prev[i]]++;
    /* from logits, not out: a token seen twice is penalised once; its count is cleared
     * there, so the next sighting passes it over */
    for (uint32_t i = first; i < n_prev; i++) {
        const int32_t t = prev[i];
        if (t < 0 || (uint32_t)t >= n || (count && !count[t]))
            continue;
        float l = logits[t];
        if (rp != 1)
            l = l <= 0 ? l * rp : l / rp;
        if (count) {
            l -= (float)count[t] * p->frequency_penalty + p->presence_penalty;
            count[t] = 0;
        }
        out[t] = l;
    }
}

mvm_status mvm_sampler_penalize(const mvm_sampler_params *p, const float *logits, uint32_t n,
                                const int32_t *prev, uint32_t n_prev, float *out)
{
    memcpy(out, logits, (size_t)n * sizeof *out);
    if (!p->repeat_last_n)
        return MVM_OK;
    uint32_t *count = NULL;
    if ((p->frequency_penalty != 0 || p->presence_penalty != 0) &&
        !(count = calloc(n, sizeof *count)))
        return mvm_fail(MVM_ERR_NOMEM, "sampler: no memory to count %u tokens", n);
    penalties(p, logits, n, prev, n_prev, out, count);
    free(count);
    return MVM_OK;
}

/* The breakers whose head is t: [*lo, return). */
static uint32_t breakers_of(const mvm_dry_breakers *d, int32_t t, uint32_t *lo)
{
    uint32_t a = 0, b = d ? d->n : 0;
    while (a < b) {
        const uint32_t mid = a + (b - a) / 2;
        if (d->b[mid].head < t)
            a = mid + 1;
        else
            b = mid;
    }
    *lo = a;
    while (d && b < d->n && d->b[b].head == t)
        b++;
    return b;
}

/* Step 1 of llama.cpp's DRY: how far back a repetition may reach, the nearest breaker
 * (the longest that ends at the same token) bounding it; rat(i) is the token i from the
 * end. */
#define RAT(i) prev[n_prev - 1 - (uint32_t)(i)]
static int rep_limit(const mvm_dry_breakers *d, const int32_t *prev, uint32_t n_prev, int w)
{
    for (int i = 0; i < w; i++) {
        uint32_t at;
        const uint32_t end = breakers_of(d, RAT(i), &at);
        int longest = -1;
        for (; at < end; at++) {
            const int len = (int)d->b[at].len;
            const int32_t *tail = d->tails + d->b[at].off;
            int match = len > longest && len <= i;
            for (int o = 0; match && o < len; o++)
                match = tail[o] == RAT(i - o - 1);
            longest = match ? len : longest;
        }
        if (longest >= 0)
            return i - longest;
    }
    return w;
}

/* Step 2: run[w - 1 - k] = how many tokens before the one k from the end repeat the
 * history's last ones, capped at limit (llama.cpp's Z-algorithm, its caps included). */
static void repeats(int32_t *run, const int32_t *prev, uint32_t n_prev, int w, int limit)
{
    const int last = w - 1;
    int lt = 0, rt = 0;
    memset(run, 0, (size_t)w * sizeof *run);
    for (int k = 1; k < w; k++) {
        if (k > rt) {
            int n = 0;
            while (n + k < w && RAT(n) == RAT(n + k))
                n++;
            run[last - k] = n < limit ? n : limit;
            if (n > 0)
                lt = k, rt = k + n - 1;
        } else if (run[last - (k - lt)] < rt - k + 1) {
            const int n = run[last - (k - lt)];
            run[last - k] = n < limit ? n : limit;
        } else {
            int i = rt + 1;
            while (i < w && RAT(i) == RAT(i - k))
                i++;
            run[last - k] = i - k < limit ? i - k : limit;
            lt = k, rt = i - 1;
        }
    }
}

/* Whether t is a sequence breaker by itself. */
static int lone_breaker(const mvm_dry_breakers *d, int32_t t)
{
    uint32_t at;
    const uint32_t end = breakers_of(d, t, &at);
    for (; at < end; at++)
        if (d->b[at].len == 0)
            return 1;
    return 0;
}

void smp_dry(mvm_sampler *s, float *l, uint32_t n, const int32_t *prev, uint32_t n_prev)
{
    const mvm_sampler_params *p = &s->p;
    const int w = (int)(n_prev < p->dry_last_n ? n_prev : p->dry_last_n);
    const int allowed = (int)p->dry_allowed_length;
    if (w <= allowed)
        return;
    const int limit = rep_limit(s->breakers, prev, n_prev, w);
    if (limit < allowed)
        return;
    repeats(s->dry_run, prev, n_prev, w, limit);
    uint32_t touched = 0; /* step 3: the longest repeat each next token would extend */
    for (int i = 0; i < w - 1; i++) {
        const int32_t t = RAT(w - 2 - i);
        if (s->dry_run[i] < allowed || t < 0 || (uint32_t)t >= n)
            continue;
        if (s->dry_max[t] < 0)
            s->dry_touched[touched++] = t;
        if (s->dry_max[t] < s->dry_run[i])
            s->dry_max[t] = s->dry_run[i];
    }
    /* step 4; the exponent capped where base^exponent would overflow a float */
    const int cap = p->dry_base > 1.000001f ? (int)(88.7228391f / logf(p->dry_base)) : 0;
    for (uint32_t j = 0; j < touched; j++) {
        const int32_t t = s->dry_touched[j];
        int e = s->dry_max[t] - allowed;
        s->dry_max[t] = -1;
        if (lone_breaker(s->breakers, t))
            continue;
        e = cap > 0 && e > cap ? cap : e;
        l[t] -= p->dry_multiplier * powf(p->dry_base, (float)e);
    }
}
#undef RAT

void smp_penalties(mvm_sampler *s, float *l, uint32_t n, const int32_t *prev, uint32_t n_prev)
{
    penalties(&s->p, l, n, prev, n_prev, l, s->count);
}


/* ---- DRY's sequence breakers, found in the vocabulary ----------------------------------- */

typedef struct breaker_list {
    smp_breaker *b;
    uint32_t n, cap;
    int32_t *tails;
    uint32_t n_tails, cap_tails;
} breaker_list;

static int grow(void **p, uint32_t *cap, uint32_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    uint32_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, (size_t)c * size);
    if (!q)
        return -1;
    *p = q, *cap = c;
    return 0;
}

/* Adds (head, tail[0..len)) unless head has that tail already (llama.cpp keeps one). */
static int add(breaker_list *l, int32_t head, const int32_t *tail, uint32_t len)
{
    for (uint32_t i = l->n; i-- > 0 && l->b[i].head == head;)
        if (l->b[i].len == len &&
            (!len || !memcmp(l->tails + l->b[i].off, tail, len * sizeof *tail)))
            return 0;
    if (grow((void **)&l->b, &l->cap, l->n + 1, sizeof *l->b) ||
        grow((void **)&l->tails, &l->cap_tails, l->n_tails + len, sizeof *l->tails))
        return -1;
    if (len) /* (a breaker within one token has no tail, and there may be no tails yet) */
        memcpy(l->tails + l->n_tails, tail, len * sizeof *tail);
    l->b[l->n++] = (smp_breaker){head, l->n_tails, len};
    l->n_tails += len;
    return 0;
}

/* The tokens of brk's bytes from `from` on (at most BREAKER_MAX_TAIL), as llama.cpp
 * tokenizes the rest of a breaker that a token's end begins; cached by `from`. */
typedef struct tail_cache {
    int32_t tok[BREAKER_MAX_BYTES][BREAKER_MAX_TAIL];
    int32_t len[BREAKER_MAX_BYTES]; /* -1: not made yet */
} tail_cache;

static mvm_status tail_of(const mvm_engine *e, const char *brk, size_t from, tail_cache *c)
{
    if (c->len[from] >= 0)
        return MVM_OK;
    int32_t buf[2 * BREAKER_MAX_BYTES + 4]; /* a byte-level vocabulary's worst case, and BOS */
    size_t n = 0;
    mvm_status st = mvm_engine_tokenize(e, brk + from, strlen(brk + from), 0, 0, buf,
                                        sizeof buf / sizeof *buf, &n);
    if (st != MVM_OK)
        return st;
    n = n < BREAKER_MAX_TAIL ? n : BREAKER_MAX_TAIL;
    memcpy(c->tok[from], buf, n * sizeof *buf);
    c->len[from] = (int32_t)n;
    return MVM_OK;
}

/* The sequences a token's text begins of breaker brk: the token holds it (no tail), or
 * ends with its first bytes (the tail: the rest's tokens), at each place it could. */
static mvm_status scan_token(const mvm_engine *e, breaker_list *l, int32_t id, const char *w,
                             size_t wn, const char *brk, tail_cache *c)
{
    const size_t bn = strlen(brk);
    if (memmem(w, wn, brk, bn))
        return add(l, id, NULL, 0) ? MVM_ERR_NOMEM : MVM_OK;
    for (const char *at = w; (at = memchr(at, brk[0], wn - (size_t)(at - w))); at++) {
        const size_t room = wn - (size_t)(at - w);
        if (room >= bn || memcmp(at, brk, room))
            continue; /* not at the token's end, or not the breaker's start */
        mvm_status st = tail_of(e, brk, room, c);
        if (st != MVM_OK)
            return st;
        if (add(l, id, c->tok[room], (uint32_t)c->len[room]))
            return MVM_ERR_NOMEM;
    }
    return MVM_OK;
}

static int by_head(const void *a, const void *b)
{
    const smp_breaker *x = a, *y = b;
    if (x->head != y->head)
        return x->head < y->head ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

void mvm_dry_breakers_free(mvm_dry_breakers *d)
{
    if (!d)
        return;
    free(d->b);
    free(d->tails);
    free(d);
}

void mvm_sampler_set_dry_breakers(mvm_sampler *s, const mvm_dry_breakers *d)
{
    s->breakers = d;
}

mvm_status mvm_dry_breakers_create(const mvm_engine *e, const char *const *breakers, size_t n,
                                   mvm_dry_breakers **out)
{
    *out = NULL;
    char cut[16][BREAKER_MAX_BYTES + 1];
    if (n > 16)
        return mvm_fail(MVM_ERR_INVALID, "sampler: %zu DRY sequence breakers (16 at most)", n);
    for (size_t i = 0; i < n; i++) {
        if (!breakers[i] || !breakers[i][0])
            return mvm_fail(MVM_ERR_INVALID, "sampler: DRY sequence breaker %zu is empty", i);
        snprintf(cut[i], sizeof cut[i], "%s", breakers[i]); /* llama.cpp's 40 bytes */
    }
    if (n && !mvm_engine_token_text(e, 0)) /* a model without a vocabulary */
        return mvm_fail(MVM_ERR_INVALID, "sampler: DRY's sequence breakers need the model's "
                        "vocabulary, and this model has none");
    breaker_list l = {0};
    tail_cache *c = malloc(sizeof *c);
    size_t room = 256;
    char *piece = malloc(room);
    mvm_status st = c && piece ? MVM_OK : MVM_ERR_NOMEM;
    for (size_t i = 0; st == MVM_OK && i < n; i++) {
        memset(c->len, 0xff, sizeof c->len);
        for (uint32_t id = 0; st == MVM_OK && id < mvm_engine_n_vocab(e); id++) {
            size_t wn = mvm_engine_token_piece_special(e, (int32_t)id, piece, room);
            if (wn > room) { /* a long piece: read again whole */
                char *big = realloc(piece, wn);
                if (!big) {
                    st = MVM_ERR_NOMEM;
                    break;
                }
                piece = big, room = wn;
                mvm_engine_token_piece_special(e, (int32_t)id, piece, room);
            }
            st = scan_token(e, &l, (int32_t)id, piece, wn, cut[i], c);
        }
    }
    free(piece);
    free(c);
    if (st != MVM_OK) {
        free(l.b);
        free(l.tails);
        return st == MVM_ERR_NOMEM ? mvm_fail(st, "sampler: no memory for DRY's breakers") : st;
    }
    if (l.n)
        qsort(l.b, l.n, sizeof *l.b, by_head);
    if (!(*out = malloc(sizeof **out))) {
        free(l.b);
        free(l.tails);
        return mvm_fail(MVM_ERR_NOMEM, "sampler: no memory for DRY's breakers");
    }
    **out = (mvm_dry_breakers){l.b, l.n, l.tails};
    return MVM_OK;
}
