/*
 * MoEpic's exposed-loading-time model and its cache configuration search (§3.4, Eqs. 5-11 and
 * Algorithm 1's ExpertSplit / VramAllocation). Pure functions over a layer's statistics;
 * config_fixedpoint.c gathers the statistics and calls them every τ tokens.
 *
 * Per layer i, with m_i the activated experts already in VRAM when the router runs:
 *   A_cache(θ, C)  = K · H(C) · θ
 *   T_pref(y, C)   = [1 - PH(y, C)·θ] · T_load                                    (9)
 *   A_pref(y, C)   = [1 - PH(y, C)·θ] · P(y)                                     (10)
 *   m = A_cache + Σ_{y<=Y} A_pref(y),  Y the most prefetches with Σ T_pref <= T_wind (11)
 *   T_hide = m·T_exp,  T_miss = (K - m)·T_load,  𝒯 = max(0, T_miss - T_hide)     (5, 6)
 *   T_wind of layer i+1 = K·T_exp - min(T_hide, T_miss) + T_att of layer i+1      (7)
 *
 * Readings: Eq. 10's P(y, C) is P(y); m is clamped to K; Y is an
 * integer (a partial last prefetch earns nothing);
 * H and PH are counterfactual for every C under the inclusion property: the cache of size
 * C is the C experts of highest LCP priority, so H(C) counts activated experts whose
 * priority rank was < C and PH(y, C) counts steps where the y-th predicted expert's rank
 * was < C (PH means "is cached", which is what Eq. 9's transfer depends on).
 * Budgets are in pages, not in fractional experts: a cached expert keeps a prefix of
 * p = min(ppe, floor(V / C)) pages (θ = p / ppe, realisable because a split is a page
 * prefix), so p >= 1 bounds C by V, and the layer really uses C·p <= V pages. The paper's
 * θ = V / C (all of V used, hence C >= V) is the continuous form of this; on whole pages
 * C ranges over 1..min(E, V), the pages C·p leaves over going back to the load buffer, so
 * that more budget never lowers m (with C >= V/ppe forced, 9 pages at 2 a page could not
 * keep the 4 whole experts that 8 pages keep).
 */
#ifndef MVM_POLICY_MOEPIC_MODEL_H
#define MVM_POLICY_MOEPIC_MODEL_H

#include <stdint.h>

/* One layer's statistics (§3.4.2), as counts. Ranks and predicted positions are 0-based. */
typedef struct mvm_moepic_stats {
    const uint32_t *hit_rank;  /* [E] activated experts that were at LCP rank r */
    const uint32_t *pred_act;  /* [E] steps in which the y-th predicted expert was activated */
    const uint32_t *pred_rank; /* [E][E] steps in which the y-th predicted was at rank r */
    double activated;          /* Σ over steps of the experts activated: H's denominator */
    double predicted;          /* steps with a prediction: P's and PH's denominator */
    double k;                  /* K: experts activated per step (the mean, for batches) */
    double t_exp;              /* T_comp^exp: GPU compute of one activated expert, s */
    double t_att;              /* T_comp^att of this layer, s */
} mvm_moepic_stats;

typedef struct mvm_moepic_model {
    uint32_t n_layers, n_experts, pages_per_expert;
    double t_load;                  /* T_load^exp: one whole expert, s */
    double t_head;                  /* T_comp^head: T_wind^1 = t_head + layer 0's t_att */
    const mvm_moepic_stats *layer;  /* [L] */
    double *scratch;                /* [E] */
} mvm_moepic_model;

/* One layer's answer to sub-problem (11) and its times. */
typedef struct mvm_moepic_split {
    uint32_t cached;       /* C: experts whose prefix is cached (0 with no budget) */
    uint32_t prefix;       /* p: pages of each; θ = p / pages_per_expert */
    double m;              /* activated experts in VRAM at router time */
    double t_hide, t_miss; /* Eq. 5 */
    double exposed;        /* 𝒯, Eq. 6 */
} mvm_moepic_split;

/* Sub-problem (11) for layer i with a budget of `pages` and a prefetch window t_wind: the
 * C (and prefix) that maximises m (ties: the smaller C), with Eqs. 5-6's times. */
void mvm_moepic_layer(const mvm_moepic_model *md, uint32_t i, uint64_t pages, double t_wind,
                      mvm_moepic_split *out);

/* ExpertSplit: every layer in order, each window from its predecessor by Eq. 7. Writes
 * out[L]; returns Σ 𝒯^i. */
double mvm_moepic_expert_split(const mvm_moepic_model *md, const uint64_t *pages,
                               mvm_moepic_split *out);

/* VramAllocation: from budgets pages[L] (updated in place), repeatedly move `step` pages
 * from the layer whose loss from losing them is smallest to the layer whose gain from
 * getting them is largest (both estimated by probing all layers at once, Algorithm 1
 * lines 16-20), while the total exposed time strictly falls; the last move that does not
 * lower it is rolled back. A layer takes part only where the move is feasible: a receiver
 * stays within all its experts (V + step <= E·ppe), a giver keeps V - step >= 0. The total
 * falls strictly at every kept move, so no allocation repeats and the search ends.
 * out[L] gets the final ExpertSplit; work must hold 3·L splits, tmp L budgets. Returns the
 * number of moves kept. */
uint32_t mvm_moepic_allocate(const mvm_moepic_model *md, uint64_t step, uint64_t *pages,
                             mvm_moepic_split *out, mvm_moepic_split *work, uint64_t *tmp);

#endif
