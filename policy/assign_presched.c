/*
 * assign "presched": PreScope's prefetch-aware cross-layer scheduling, PreSched (§4.3,
 * Algorithm 1 and Eqs. 3-7). The PreScope text lost every equation; this follows a
 * reconstruction of them from its prose.
 *
 * Model (premises P1-P5): CPU time of an expert is linear in its tokens, T_cpu(n) = α·n + β
 * (Eq. 3, here mvm_cost_cpu); PCIe transfers form one serial queue (P4); GPU compute is
 * masked by the I/O (P5) and left out, resident experts' too. The current layer's missing
 * experts, sorted by pending tokens ascending (P1), split at a threshold (P2, on-demand
 * monotonicity): the light end runs on the CPU, the heavy end is loaded on demand:
 *     T_GPU(s) = T_delay + Σ_{j>=s} T_io(c_j),   T_CPU(s) = Σ_{j<s} T_cpu(n_{c_j}),
 * and the layer takes max(T_GPU, T_CPU) = est_time. The copy engine is then idle for
 *     T_gap = T_CPU - T_GPU  (Eq. 6, when positive) + T_attn of layer+1,
 * and that window is filled with prefetches of layer+1's predicted experts, best first,
 * each costing T_io of its missing pages. The first one that does not fit whole is the
 * critical prefetch (Eq. 7): issued only when its expected gain
 *     G = P_hit·T_io - (1 - P_hit)·C,   C = its overhang past the window,
 * is positive (ceil when G > 0, else floor). Every other prefetch ends inside the window;
 * the critical one overhangs it by less than its own load (so "never more prefetch time than
 * the window" holds exactly whenever P_hit is 0, the default until hits show).
 *
 * Readings where the paper is silent or ambiguous:
 * - Eq. 5's threshold: the literal reconstruction i* = min{i : T_GPU(i) <= T_CPU(i-1)}
 *   always sends the lightest expert to the CPU, even when a single load beats it. Both
 *   sides are monotone in the threshold, so the crossing i* or the one before it is the
 *   best threshold; PreSched takes whichever has the smaller max (ties: fewer loads, which
 *   leaves the link to prefetching). That is the minimum of max(T_GPU, T_CPU) over all
 *   thresholds, which is what the paper says it minimises.
 * - T_delay, the residual of in-flight prefetches (P3), is 0: the view carries no copy
 *   queue state (assign_common.h).
 * - The cross-layer merged list (the merge rule is not defined): only current-layer experts
 *   compute now, so only they enter T_CPU and the threshold; layer+1's experts enter as
 *   prefetches in the gap.
 * - T_attn of layer+1 in the window: the paper declares T_attn but its use is not visible;
 *   it is counted unless parameter attn leaves it out.
 * - Probabilities to token counts: next_scores is an [E] vector, not per token, so it
 *   orders the candidates; the predicted set is its n_tok·top_k best (all experts n_tok
 *   tokens could select), minus those resident or busy (in use, or a move in flight).
 * - P_hit: the running hit rate of this module's own earlier prefetches (a planned expert
 *   that its layer then used), 0 before any evidence, so no prefetch overhangs the window
 *   until the predictor has shown hits; parameter p_hit fixes it instead.
 * - Q4, lookahead: when the current layer has no on-demand loads, PreScope "extends the
 *   prediction window" to layer+2 with "the same trade-off logic" (its "two-layer
 *   lookahead"; the depth limit is not given, so it is a parameter, default 2). Here:
 *   once layer+1's predicted set is planned whole inside the window, and only when this
 *   layer loads nothing, layer+2's predicted experts are planned the same way in what is
 *   left of the window, which grows by layer+2's attention (the link is free until
 *   layer+2 routes). A critical prefetch or a full room ends the plan at any depth.
 * - The memory constraint (assign_common.h): the heavy end may only be as long as the room
 *   allows (the threshold search starts where its pages fit), and prefetches stop at the
 *   first candidate whose pages no longer fit.
 *
 * Parameters: p_hit in [0, 1] (default: the running estimate above); attn = 0 or 1
 * (default 1): whether layer+1's attention, attn_time·n_tok, is part of the window;
 * depth = 1 or 2 (default 2): the layers ahead that may be prefetched (Q4).
 */
#include <math.h>
#include <stdlib.h>

#include "policy/assign_common.h"
#include "policy/modules.h"
#include "vmm/error.h"

typedef struct presched {
    mvm_assign_base b;
    double p_hit;           /* NAN: use the running estimate */
    int attn;
    uint32_t depth;
    mvm_rank *next;         /* [E] a later layer's experts by predicted probability */
    uint32_t *planned;      /* [depth*E] ids planned for layers not yet seen, no repeats */
    uint32_t n_planned;
    uint64_t tried, hits;   /* the running P_hit */
} presched;

static void presched_destroy(void *self)
{
    presched *p = self;
    if (!p)
        return;
    mvm_assign_base_free(&p->b);
    free(p->next);
    free(p->planned);
    free(p);
}

static mvm_status presched_create(const mvm_pinit *init, void **self)
{
    static const char *const known[] = {"p_hit", "attn", "depth", NULL};
    const char *me = "assign presched";
    double p_hit, attn, depth;
    *self = NULL;
    mvm_status st = mvm_pparams_check(&init->params, known, me);
    if (st == MVM_OK)
        st = mvm_pparam_double(&init->params, "p_hit", NAN, &p_hit);
    if (st == MVM_OK)
        st = mvm_pparam_double(&init->params, "attn", 1, &attn);
    if (st == MVM_OK)
        st = mvm_pparam_double(&init->params, "depth", 2, &depth);
    if (st != MVM_OK)
        return st;
    if (!isnan(p_hit) && !(p_hit >= 0 && p_hit <= 1))
        return mvm_fail(MVM_ERR_INVALID, "%s: p_hit=%g is not in [0, 1]", me, p_hit);
    if (attn != 0 && attn != 1)
        return mvm_fail(MVM_ERR_INVALID, "%s: attn=%g is not 0 or 1", me, attn);
    if (depth != 1 && depth != 2)
        return mvm_fail(MVM_ERR_INVALID, "%s: depth=%g is not 1 or 2", me, depth);
    presched *p = calloc(1, sizeof *p);
    if (!p)
        return mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", me);
    st = mvm_assign_base_init(&p->b, init, me);
    if (st != MVM_OK) {
        free(p);
        return st;
    }
    p->p_hit = p_hit;
    p->attn = (int)attn;
    p->depth = (uint32_t)depth;
    p->next = calloc(init->shape->n_experts, sizeof *p->next);
    p->planned = calloc((size_t)p->depth * init->shape->n_experts, sizeof *p->planned);
    if (!p->next || !p->planned) {
        presched_destroy(p);
        return mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", me);
    }
    *self = p;
    return MVM_OK;
}

/* Scores the planned prefetches of this layer (the running P_hit) and forgets them with
 * those of earlier layers (a step the caller skipped); later layers' plans stay. */
static void score_plans(presched *p, const mvm_pstep *step)
{
    const uint32_t E = p->b.shape.n_experts;
    uint32_t keep = 0;
    for (uint32_t i = 0; i < p->n_planned; i++) {
        uint32_t x = p->planned[i], layer = x / E;
        if (layer == step->layer) {
            p->tried++;
            p->hits += step->counts[x % E] > 0;
        } else if (layer > step->layer) {
            p->planned[keep++] = x;
        }
    }
    p->n_planned = keep;
}

static void remember_plan(presched *p, uint32_t x)
{
    for (uint32_t i = 0; i < p->n_planned; i++)
        if (p->planned[i] == x)
            return;
    p->planned[p->n_planned++] = x;
}

/* The current layer: threshold split of the missing experts (Eqs. 4-5). Sets where[] and
 * returns T_GPU and T_CPU; *room shrinks by the loads. */
static void split_current(presched *p, const mvm_pview *v, const mvm_pstep *step,
                          mvm_assignment *out, uint64_t *room, double *t_gpu, double *t_cpu)
{
    mvm_assign_base *b = &p->b;
    uint32_t n = mvm_assign_scan(b, v, step, out), m = 0;
    double cpu_all = 0;

    for (uint32_t i = 0; i < n; i++) {
        const mvm_aexp *x = &b->ex[i];
        if (!x->pages) {
            out->where[x->e] = MVM_RUN_GPU;
        } else {
            b->rank[m++] = (mvm_rank){.key = -(double)x->n, .id = i}; /* ascending tokens */
            cpu_all += x->t_cpu;
        }
    }
    mvm_rank_sort(b->rank, m);

    /* Experts [0, s) of the list to the CPU, [s, m) loaded: scan s from m (no loads) down
     * while the heavy end's pages fit; keep the smallest max, ties to the larger s. */
    uint32_t best_s = m;
    double best = cpu_all, io = 0, cpu_suf = 0;
    uint64_t pages = 0;
    for (uint32_t s = m; s-- > 0;) {
        const mvm_aexp *x = &b->ex[b->rank[s].id];
        pages += x->pages;
        if (pages > *room)
            break;
        io += x->t_load;
        cpu_suf += x->t_cpu;
        double f = fmax(io, cpu_all - cpu_suf);
        if (f < best) {
            best = f;
            best_s = s;
        }
    }
    *t_gpu = 0;
    *t_cpu = 0;
    for (uint32_t j = 0; j < m; j++) {
        const mvm_aexp *x = &b->ex[b->rank[j].id];
        if (j < best_s) {
            out->where[x->e] = MVM_RUN_CPU;
            *t_cpu += x->t_cpu;
        } else {
            out->where[x->e] = MVM_RUN_GPU_LOAD;
            *room -= x->pages;
            *t_gpu += x->t_load;
        }
    }
}

/* Prefetches of layer `target`'s predicted experts in the copy engine's idle window
 * (Eqs. 6-7), after *t seconds of it are planned already; *t and *room advance. Returns 1
 * when the window or the room ran out (a critical prefetch, issued or not, or no room),
 * 0 when every predicted expert was planned or needs nothing. */
static int plan_prefetch(presched *p, const mvm_pview *v, const mvm_pstep *step,
                         uint32_t target, const float *scores, double window, double *t,
                         uint64_t *room, mvm_assignment *out)
{
    const mvm_pshape *sh = &p->b.shape;
    const uint32_t E = sh->n_experts, ppe = sh->pages_per_expert;
    const uint32_t *res = v->resident + (size_t)target * E;
    const uint8_t *busy = v->busy + (size_t)target * E;
    double p_hit = !isnan(p->p_hit) ? p->p_hit
                   : p->tried     ? (double)p->hits / (double)p->tried
                                  : 0;
    uint64_t predicted = (uint64_t)step->n_tok * sh->top_k;
    uint32_t n = 0;

    for (uint32_t e = 0; e < E; e++)
        if (scores[e] > 0)
            p->next[n++] = (mvm_rank){.key = scores[e], .id = e};
    mvm_rank_sort(p->next, n);
    if (n > predicted)
        n = (uint32_t)predicted;
    for (uint32_t r = 0; r < n; r++) {
        uint32_t e = p->next[r].id;
        uint32_t pages = res[e] >= ppe ? 0 : ppe - res[e];
        if (!pages || busy[e])
            continue; /* resident, or busy: a move in flight, or pinned */
        if (pages > *room || out->n_prefetch == out->cap_prefetch)
            return 1;
        double io = mvm_assign_load_time(&p->b, pages);
        int critical = *t + io > window;
        if (critical && p_hit * io - (1 - p_hit) * (*t + io - window) <= 0)
            return 1;
        *room -= pages;
        *t += io;
        out->prefetch[out->n_prefetch++] = target * E + e;
        remember_plan(p, target * E + e);
        if (critical)
            return 1;
    }
    return 0;
}

static void presched_assign(void *self, const mvm_pview *v, const mvm_pstep *step,
                            const float *ahead, uint32_t n_ahead, mvm_assignment *out)
{
    presched *p = self;
    const uint32_t E = p->b.shape.n_experts, L = p->b.shape.n_layers;
    uint64_t room = mvm_assign_room(v, step);
    double t_gpu, t_cpu, attn = p->attn ? p->b.cost.m.attn_time * step->n_tok : 0;

    score_plans(p, step);
    split_current(p, v, step, out, &room, &t_gpu, &t_cpu);
    out->est_time = fmax(t_gpu, t_cpu);
    double window = fmax(0, t_cpu - t_gpu) + attn, t = 0;
    /* Layer+1 always; layer+2 only when this layer loads nothing (Q4). */
    for (uint32_t d = 0; d < n_ahead && d < p->depth && step->layer + 1 + d < L; d++) {
        if (d > 0) {
            if (t_gpu > 0)
                break;
            window += attn; /* the link stays free through layer+2's attention */
        }
        if (plan_prefetch(p, v, step, step->layer + 1 + d, ahead + (size_t)d * E, window, &t,
                          &room, out))
            break;
    }
}

const mvm_assign_ops mvm_assign_presched = {
    .name = "presched",
    .about = "PreScope PreSched: ascending-token threshold split (light to CPU, heavy loaded), "
             "prefetches of layer+1 (and layer+2 when nothing loads) in the copy engine's idle "
             "window (a reading of §4.3)",
    .create = presched_create,
    .destroy = presched_destroy,
    .assign = presched_assign,
};
