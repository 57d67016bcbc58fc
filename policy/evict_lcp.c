/*
 * evict "lcp": MoEpic's Least Cache Priority (§3.3, Eq. 4). The victim has the lowest priority
 *
 *   P = μ · ρ^(ν/ω)
 *
 * μ: activation frequency, ν: activation interval (tokens since the expert was last
 * activated), ω: the observation window, ρ: the balance between frequency and recency.
 * With the defaults a priority halves every 64 idle tokens (0.25^(64/128) = 1/2), so LCP is
 * LFU that forgets: a hot expert that goes idle loses its place.
 *
 * Readings where the paper is ambiguous: μ counts all history ("accumulated"; ω appears only
 * as the exponent's scale), token-weighted (each token of a batch that selects the expert adds
 * 1); ν is measured on the policies' clock v->tokens and is reset when any token of a step
 * activates the expert; an expert never activated has μ = 0, the lowest priority. This is
 * online whole-expert replacement, the mode of the paper's Table 1; the periodic
 * reconfiguration of the split cache is the config role's. Ties go to the first candidate.
 *
 * Parameters: omega (tokens, > 0), default 128; rho in (0, 1], default 0.25 (§4.1).
 */
#include <math.h>
#include <stdlib.h>

#include "policy/modules.h"
#include "vmm/error.h"

typedef struct lcp {
    uint32_t n_experts;
    double omega, rho;
    uint64_t *mu;   /* [L*E] activations, token-weighted */
    uint64_t *last; /* [L*E] v->tokens at the last activation */
} lcp;

static void lcp_destroy(void *self)
{
    lcp *s = self;
    if (!s)
        return;
    free(s->mu);
    free(s->last);
    free(s);
}

static mvm_status lcp_create(const mvm_pinit *init, void **self)
{
    static const char *const known[] = {"omega", "rho", NULL};
    double omega, rho;
    mvm_status st = mvm_pparams_check(&init->params, known, "evict lcp");
    if (st == MVM_OK)
        st = mvm_pparam_double(&init->params, "omega", 128, &omega);
    if (st == MVM_OK)
        st = mvm_pparam_double(&init->params, "rho", 0.25, &rho);
    if (st != MVM_OK)
        return st;
    if (!(omega > 0 && isfinite(omega)))
        return mvm_fail(MVM_ERR_INVALID, "evict lcp: omega=%g is not a positive number", omega);
    if (!(rho > 0 && rho <= 1))
        return mvm_fail(MVM_ERR_INVALID, "evict lcp: rho=%g is not in (0, 1]", rho);
    size_t n = (size_t)init->shape->n_layers * init->shape->n_experts;
    lcp *s = calloc(1, sizeof *s);
    if (!s)
        return mvm_fail(MVM_ERR_NOMEM, "evict lcp: out of memory");
    s->n_experts = init->shape->n_experts;
    s->omega = omega;
    s->rho = rho;
    s->mu = calloc(n ? n : 1, sizeof *s->mu);
    s->last = calloc(n ? n : 1, sizeof *s->last);
    if (!s->mu || !s->last) {
        lcp_destroy(s);
        return mvm_fail(MVM_ERR_NOMEM, "evict lcp: out of memory");
    }
    *self = s;
    return MVM_OK;
}

static void lcp_observe(void *self, const mvm_pview *v, const mvm_pstep *step)
{
    lcp *s = self;
    size_t base = (size_t)step->layer * s->n_experts;
    for (uint32_t e = 0; e < s->n_experts; e++)
        if (step->counts[e]) {
            s->mu[base + e] += step->counts[e];
            s->last[base + e] = v->tokens;
        }
}

static double priority(const lcp *s, const mvm_pview *v, uint32_t x)
{
    double nu = v->tokens > s->last[x] ? (double)(v->tokens - s->last[x]) : 0;
    return (double)s->mu[x] * pow(s->rho, nu / s->omega);
}

static uint32_t lcp_victim(void *self, const mvm_pview *v, uint32_t for_layer,
                           const uint32_t *cand, uint32_t n)
{
    const lcp *s = self;
    (void)for_layer;
    uint32_t best = 0;
    double pb = priority(s, v, cand[0]);
    for (uint32_t i = 1; i < n; i++) {
        double p = priority(s, v, cand[i]);
        if (p < pb) {
            pb = p;
            best = i;
        }
    }
    return best;
}

const mvm_evict_ops mvm_evict_lcp = {
    .name = "lcp",
    .about = "MoEpic Eq. 4: lowest mu*rho^(nu/omega), mu token-weighted "
             "activations, nu idle tokens; omega=128, rho=0.25",
    .create = lcp_create,
    .destroy = lcp_destroy,
    .observe = lcp_observe,
    .victim = lcp_victim,
    .want = NULL,
};
