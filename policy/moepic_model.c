/* MoEpic's exposed-time model and configuration search (moepic_model.h). */
#include "policy/moepic_model.h"

#include <math.h>
#include <stddef.h>

/* m for one cache size C with prefix p (θ = p/ppe); ph[y] holds PH's counts for this C. */
static double activated_in_vram(const mvm_moepic_model *md, const mvm_moepic_stats *s,
                                double hits, const double *ph, double theta, double t_wind)
{
    double m = s->activated > 0 ? s->k * (hits / s->activated) * theta : 0; /* A_cache */
    double t = 0;
    if (s->predicted > 0)
        for (uint32_t y = 0; y < md->n_experts; y++) {
            double uncached = 1 - ph[y] / s->predicted * theta;
            double tp = uncached * md->t_load;                     /* Eq. 9 */
            if (t + tp > t_wind)
                break;
            t += tp;
            m += uncached * (s->pred_act[y] / s->predicted);       /* Eq. 10 */
        }
    return m < s->k ? m : s->k;
}

void mvm_moepic_layer(const mvm_moepic_model *md, uint32_t i, uint64_t pages, double t_wind,
                      mvm_moepic_split *out)
{
    const mvm_moepic_stats *s = &md->layer[i];
    const uint32_t E = md->n_experts, ppe = md->pages_per_expert;
    double *ph = md->scratch;
    double hits = 0;

    for (uint32_t y = 0; y < E; y++)
        ph[y] = 0;
    out->cached = 0;
    out->prefix = ppe;
    out->m = activated_in_vram(md, s, 0, ph, 0, t_wind); /* V = 0: prefetch only */
    /* With a budget the cache is used, C in [N] as the paper searches, up to min(E, V) so
     * that each keeps a prefix of >= 1 page; H(C) and PH(y, C) (rank < C) accumulate as C
     * grows. */
    uint64_t c_hi = pages < E ? pages : E;
    for (uint32_t c = 1; c <= c_hi; c++) {
        hits += s->hit_rank[c - 1];
        for (uint32_t y = 0; y < E; y++)
            ph[y] += s->pred_rank[(size_t)y * E + c - 1];
        uint64_t p = pages / c < ppe ? pages / c : ppe;
        double m = activated_in_vram(md, s, hits, ph, (double)p / ppe, t_wind);
        if (out->cached == 0 || m > out->m) {
            out->cached = c;
            out->prefix = (uint32_t)p;
            out->m = m;
        }
    }
    out->t_hide = out->m * s->t_exp;
    out->t_miss = (s->k - out->m) * md->t_load;
    out->exposed = fmax(0, out->t_miss - out->t_hide);
}

double mvm_moepic_expert_split(const mvm_moepic_model *md, const uint64_t *pages,
                               mvm_moepic_split *out)
{
    double t_wind = md->t_head + md->layer[0].t_att, total = 0;
    for (uint32_t i = 0; i < md->n_layers; i++) {
        const mvm_moepic_stats *s = &md->layer[i];
        mvm_moepic_layer(md, i, pages[i], t_wind, &out[i]);
        total += out[i].exposed;
        if (i + 1 < md->n_layers)
            t_wind = s->k * s->t_exp - fmin(out[i].t_hide, out[i].t_miss) +
                     md->layer[i + 1].t_att;
    }
    return total;
}

uint32_t mvm_moepic_allocate(const mvm_moepic_model *md, uint64_t step, uint64_t *pages,
                             mvm_moepic_split *out, mvm_moepic_split *work, uint64_t *tmp)
{
    const uint32_t L = md->n_layers;
    const uint64_t full = (uint64_t)md->n_experts * md->pages_per_expert;
    mvm_moepic_split *more = work, *less = work + L, *after = work + 2 * L;
    uint32_t moves = 0;

    for (;;) {
        double t1 = mvm_moepic_expert_split(md, pages, out);
        for (uint32_t i = 0; i < L; i++)
            tmp[i] = pages[i] + step;
        mvm_moepic_expert_split(md, tmp, more);
        for (uint32_t i = 0; i < L; i++)
            tmp[i] = pages[i] >= step ? pages[i] - step : 0;
        mvm_moepic_expert_split(md, tmp, less);

        uint32_t i1 = L, i2 = L; /* the receiver: largest profit; the giver: smallest cost */
        for (uint32_t i = 0; i < L; i++)
            if (pages[i] + step <= full &&
                (i1 == L || out[i].exposed - more[i].exposed > out[i1].exposed - more[i1].exposed))
                i1 = i;
        for (uint32_t i = 0; i < L; i++)
            if (i != i1 && pages[i] >= step &&
                (i2 == L || less[i].exposed - out[i].exposed < less[i2].exposed - out[i2].exposed))
                i2 = i;
        if (i1 == L || i2 == L)
            return moves;
        pages[i1] += step;
        pages[i2] -= step;
        if (mvm_moepic_expert_split(md, pages, after) >= t1) {
            pages[i1] -= step; /* roll back: out still holds this allocation's split */
            pages[i2] += step;
            return moves;
        }
        moves++;
    }
}
