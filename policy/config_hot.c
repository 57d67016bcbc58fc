/*
 * config "hot": PreScope's hot-expert table (§5 "Counter" and initialisation). All (layer,
 * expert) pairs are ranked by the tokens they processed, one global ranking across layers,
 * and the device memory left after the buffers is filled with the top of the ranking, whole
 * experts (θ = 1): (capacity_pages - buffer·pages_per_expert) / pages_per_expert of them.
 * Layers get unequal shares. The table is static: its experts are held resident (`hold`),
 * loaded at init and never offered to the evict module, which caches in the pages left (the
 * buffer) whatever on-demand loads and prefetches bring. A global ranking restricted to one
 * layer is that layer's own ranking, so the table is, in every layer, its most-counted
 * experts.
 *
 * The profile: the paper profiles offline (128 batches × 512 tokens) and then keeps the
 * table fixed. Given an offline profile (init->profile: `--hot-profile TRACE`, the tokens each
 * expert processed in a recorded run), the table is built from it and held from the first
 * token. Without one the profile is the run's first `profile` tokens (Σ n_tok of layer 0's
 * steps): counting stops at the first layer-0 step after them, so a token counts in every
 * layer or in none, and the table is held from then on. While that profile runs, nothing is
 * held yet: the module gives each layer the budget its share of the table-to-be would have
 * (layer_pages[l] = pages_per_expert · its experts in the ranking so far), which an evict
 * module that counts the same activations (lfu without ageing) fills with those experts.
 * Once held, no layer has a budget of its own (UINT64_MAX): the held experts are the table.
 * Ties go to the expert with the lower index within its layer, then to the lower layer, so
 * with no counts at all the table is spread evenly over the layers rather than piled into
 * the first ones.
 *
 * The buffer: PreScope sizes the table "after accounting for ... buffer pools" (its
 * on-demand double buffer and prefetch groups, sizes not given); here `buffer` whole
 * experts, by default top_k, the most one token's layer can need to load (U_b = K in MoEpic
 * §4.1). The paper's buffers hold no cache; here the evict module keeps what the buffer's
 * pages last loaded until it needs them again (an LRU over `buffer` experts by default),
 * which can only add hits.
 *
 * Parameters: profile (tokens of the online profile, >= 0; 0 = never stop counting, so
 * nothing is ever held), default 65536, the paper's 128 × 512-token profile; not used with
 * an offline profile; buffer (whole experts, >= 0), default top_k.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "policy/config_common.h"
#include "policy/modules.h"
#include "policy/rank.h"
#include "vmm/error.h"

typedef struct hot {
    mvm_config_last last;
    uint32_t L, E, ppe;
    uint64_t buffer;          /* pages kept out of the table for loads */
    double profile, profiled; /* tokens to count; tokens counted through layer 0 */
    int frozen;               /* the profile is over (decided at layer 0, for whole tokens) */
    uint64_t *count;          /* [L*E] tokens processed */
    mvm_rank *order;          /* [L*E] each layer's experts, most tokens first */
    uint32_t *taken;          /* [L] experts of each layer in the table */
    uint64_t held;            /* experts in the table the last configure held (frozen) */
    uint64_t capacity;        /* the capacity_pages that table was made for */
    int made;                 /* a table was made since the profile ended */
} hot;

static void hot_destroy(void *self)
{
    hot *h = self;
    if (!h)
        return;
    mvm_config_last_free(&h->last);
    free(h->count);
    free(h->order);
    free(h->taken);
    free(h);
}

static mvm_status hot_create(const mvm_pinit *init, void **self)
{
    static const char *const known[] = {"profile", "buffer", NULL};
    const char *me = "config hot";
    const mvm_pshape *sh = init->shape;
    double profile, buffer;
    *self = NULL;
    mvm_status st = mvm_pparams_check(&init->params, known, me);
    if (st == MVM_OK)
        st = mvm_pparam_double(&init->params, "profile", 65536, &profile);
    if (st == MVM_OK)
        st = mvm_pparam_double(&init->params, "buffer", sh->top_k, &buffer);
    if (st != MVM_OK)
        return st;
    if (!(profile >= 0 && isfinite(profile)))
        return mvm_fail(MVM_ERR_INVALID, "%s: profile=%g is not a token count", me, profile);
    if (!(buffer >= 0 && buffer == floor(buffer) && buffer < 1e9))
        return mvm_fail(MVM_ERR_INVALID, "%s: buffer=%g is not a whole number of experts", me,
                        buffer);
    if (!sh->n_experts || !sh->pages_per_expert)
        return mvm_fail(MVM_ERR_INVALID, "%s: a shape needs experts and pages", me);
    const mvm_pprofile *pr = init->profile;
    if (pr && (pr->n_layers != sh->n_layers || pr->n_experts != sh->n_experts))
        return mvm_fail(MVM_ERR_INVALID,
                        "%s: the profile has %u layers of %u experts, the model %u of %u", me,
                        pr->n_layers, pr->n_experts, sh->n_layers, sh->n_experts);
    hot *h = calloc(1, sizeof *h);
    if (!h)
        return mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", me);
    st = mvm_config_last_init(&h->last, sh->n_layers, me);
    if (st != MVM_OK) {
        free(h);
        return st;
    }
    size_t n = (size_t)sh->n_layers * sh->n_experts;
    h->L = sh->n_layers;
    h->E = sh->n_experts;
    h->ppe = sh->pages_per_expert;
    h->profile = profile;
    h->buffer = (uint64_t)buffer * sh->pages_per_expert;
    h->count = calloc(n, sizeof *h->count);
    h->order = calloc(n, sizeof *h->order);
    h->taken = calloc(h->L, sizeof *h->taken);
    if (!h->count || !h->order || !h->taken) {
        hot_destroy(h);
        return mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", me);
    }
    if (pr) { /* the offline profile: the table is final before the first token */
        memcpy(h->count, pr->counts, n * sizeof *h->count);
        h->profiled = (double)pr->n_tokens;
        h->frozen = 1;
    }
    *self = h;
    return MVM_OK;
}

static void hot_observe(void *self, const mvm_pview *v, const mvm_pstep *step)
{
    hot *h = self;
    (void)v;
    if (step->layer == 0 && !h->frozen) {
        h->frozen = h->profile && h->profiled >= h->profile;
        h->profiled += step->n_tok;
    }
    if (h->frozen)
        return; /* the profile is over: the table is static */
    for (uint32_t e = 0; e < h->E; e++)
        h->count[(size_t)step->layer * h->E + e] += step->counts[e];
}

static int hot_configure(void *self, const mvm_pview *v, uint64_t *layer_pages, float *theta)
{
    hot *h = self;
    if (h->made && v->capacity_pages == h->capacity) {
        mvm_config_last_copy(&h->last, layer_pages, theta); /* static: nothing to redo */
        return 0;
    }
    h->capacity = v->capacity_pages;
    h->made = h->frozen;
    uint64_t table = v->capacity_pages > h->buffer ? (v->capacity_pages - h->buffer) / h->ppe : 0;
    if (table > (uint64_t)h->L * h->E)
        table = (uint64_t)h->L * h->E;

    for (uint32_t l = 0; l < h->L; l++) {
        mvm_rank *o = h->order + (size_t)l * h->E;
        for (uint32_t e = 0; e < h->E; e++)
            o[e] = (mvm_rank){.key = (double)h->count[(size_t)l * h->E + e], .id = e};
        mvm_rank_sort(o, h->E);
        h->taken[l] = 0;
    }
    /* Merge the layers' rankings: the next table entry is the best head among the layers
     * (most tokens, then the lower position within its layer, then the lower layer). */
    for (uint64_t t = 0; t < table; t++) {
        uint32_t best = h->L;
        for (uint32_t l = 0; l < h->L; l++) {
            if (h->taken[l] == h->E)
                continue;
            if (best == h->L)
                best = l;
            double kb = h->order[(size_t)best * h->E + h->taken[best]].key;
            double kl = h->order[(size_t)l * h->E + h->taken[l]].key;
            if (kl > kb || (kl == kb && h->taken[l] < h->taken[best]))
                best = l;
        }
        h->taken[best]++;
    }
    for (uint32_t l = 0; l < h->L; l++) {
        layer_pages[l] = h->frozen ? UINT64_MAX : (uint64_t)h->taken[l] * h->ppe;
        theta[l] = 1;
    }
    /* Once frozen the ranking is fixed, so the table changes only with its size. */
    int resized = h->frozen && table != h->held;
    h->held = h->frozen ? table : 0;
    return mvm_config_last_update(&h->last, layer_pages, theta) | resized;
}

static uint32_t hot_hold(void *self, uint8_t *held)
{
    hot *h = self;
    memset(held, 0, (size_t)h->L * h->E);
    uint32_t n = 0;
    for (uint32_t l = 0; h->held && l < h->L; l++)
        for (uint32_t i = 0; i < h->taken[l]; i++, n++)
            held[(size_t)l * h->E + h->order[(size_t)l * h->E + i].id] = 1;
    return n;
}

const mvm_config_ops mvm_config_hot = {
    .name = "hot",
    .about = "PreScope hot-expert table: one global ranking by tokens processed (an offline "
             "profile, or the run's first tokens), filled to the budget and held resident",
    .create = hot_create,
    .destroy = hot_destroy,
    .observe = hot_observe,
    .configure = hot_configure,
    .hold = hot_hold,
};
