/*
 * place "prism": Prism's latency-optimised expert placement (§III-B and §III-C): entropy-guided
 * slot counts per server and layer (Algorithm 1), top-frequency assignment with a coverage
 * repair (Algorithm 2), and a cost-gated migration (Eqs. 3–4). Where the paper is silent or
 * wrong as printed, it is read or fixed as follows.
 *
 * Statistics (the paper gives no units or normalisation): f_n^l(e) is the raw token-weighted
 * count (token × selected expert pairs) of server n's home requests, accumulated over the
 * calls since the last placement change (§IV-A: "all executions between the last placement
 * change and the current moment"); Eq. 2 is then the expected number of remote token-expert
 * invocations. Entropy (log base 2) normalises per (n, l) as Algorithm 1 needs.
 *
 * Algorithm 1, fixed: a server has S_n = min(Σ_g ⌊mem_{n,g} / expert_bytes⌋, L·E) slots, its
 * GPUs' whole experts (mvm_cluster_slots: its bytes shared equally by its GPUs; the paper
 * pools them as M_n, which counts up to G_n − 1 experts that no GPU can hold).
 * q_l = S_n · v_{n,l} / Σ_l v_{n,l}, with v replaced by 1 in every layer when Σ_l v = 0 (no
 * traffic yet, or every layer one-hot: no divide-by-zero); N_{n,l} = min(E, ⌊q_l⌋); the slots flooring dropped go one at a time to the
 * layer with the largest q_l − N_{n,l} among those below E (largest remainder, then
 * water-filling), so every server uses all S_n slots and never more than E per layer. Coverage
 * Σ_n N_{n,l} ≥ E is then restored layer by layer by moving one slot at a time on one server
 * from the layer with the most slots in total (which has more than E, so it never drops below
 * E: no layer is uncovered again) to the short layer, on the first server in the order of most
 * slots that has a slot there and fewer than E in the short layer. Such a move always exists
 * when Σ_n S_n ≥ L·E, the feasibility condition, which place() checks.
 *
 * Algorithm 2, fixed: each server takes its N_{n,l} most-counted experts of layer l (ties: the
 * cluster's more-counted expert, then the lower id, so a server without traffic holds what the
 * others use most). While an expert of the layer is on no server, one replacement is made and
 * the uncovered set and the copy counts are updated at once (no stale U_l, no expert evicted
 * twice): over every server that holds a duplicate (an expert also on another server), the
 * replacement of its least-counted duplicate d by its most-counted uncovered expert u with the
 * largest f_n(u) − f_n(d), i.e. the smallest increase of Eq. 2; ties go to the server with
 * more duplicates, then the lower index. This replaces the paper's "fewest duplicates first"
 * order, which asks first the servers least able to give and has no case for a server without
 * duplicates; here such a server is never asked. u is uncovered, so it is on no server: no
 * duplicate on a server arises. A duplicate exists whenever an expert is uncovered, because
 * the layer has at least E slots in total.
 *
 * Migration (Eq. 4 in time units: Eq. 2's cost is a count while T_mig is in seconds, and the
 * paper gives no horizon; Eq. 3 counts deletions and sums the copies serially): the cost of a
 * placement over the statistics is C(P) = Σ_{n,x} f_n(x) · t_n(x; P), with t = mvm_cost_gpu(1)
 * for a local expert and, for a remote one, the remote call to its nearest holder r (the
 * smallest call time from n): mvm_cost_net for one token over the link n→r (rtt[n][r],
 * bw[n][r]; hidden states of n_embd elements of ACT_BYTES bytes each way) plus mvm_cost_gpu(1)
 * there. The candidate P' is adopted iff
 *     (C(P) − C(P')) · H / W  >  T_mig(P, P'),
 * W the tokens in the statistics (Σ f / (L·top_k)), H the horizon parameter in tokens:
 * the latency saved over the next H tokens must exceed the migration time. T_mig counts
 * additions only (a deletion copies nothing), each copied from its nearest holder in P
 * (smallest rtt[r][n] + expert_bytes / bw[r][n]); a server receives its copies one after
 * another on its link and servers receive in parallel, so T_mig is the largest per-server
 * sum. When the incoming placement does not cover every expert (the first call gets an
 * empty one) the candidate is adopted without a gate: there is nothing to keep. After an
 * adoption the statistics restart. place() returns the bytes the adopted placement adds
 * (additions × expert_bytes); 0 leaves `placement` as it came: the gate said no, nothing
 * would be added, no token was seen since the last change, or the cluster is infeasible
 * (Σ_n S_n < L·E, or more servers than the `servers` parameter).
 *
 * Links: a pair with bw 0 is unusable (mvm_cost_net is +∞); the cluster is expected to be
 * connected, as the simulator checks. Remote calls and copies use the link of their
 * direction (n→r for a call, both ways; r→n for a copy).
 *
 * A migration that lands (the paper moves to P' at once, however long the copies take; a
 * move of tens of GB over a 500 Mbit/s link then outlasts the workload it was for): with
 * `land` > 0 and the caller's period_s known, a migration copies for at most land ·
 * period_s seconds, about one period of the statistics. When T_mig(P, P') is longer, the
 * adopted placement is the part of the way to P' that fits: each server's additions in
 * order of what they save (f_n(x) times the remote call they replace, most first) while
 * its copies fit the bound; then a full server drops, least counted first, experts P'
 * drops there and another server keeps (holds in P' too, so no drop can uncover them,
 * whatever the order), and one that cannot drop enough gives back its least saving
 * additions. Every expert stays on some server, every server within its capacity. The
 * gate then weighs that part, and later calls take the rest as their statistics confirm it.
 *
 * Parameters: horizon (tokens served by the cluster over which a saving must repay its
 * migration, >= 0), default 10000 — about the paper's 5-minute re-plan period at its
 * arrival rates (3 servers, a request every 10 s each, a few hundred tokens per request);
 * 0 never migrates after the first placement. land (>= 0, default 1; 0: no bound, the
 * paper's all at once). servers (the largest cluster accepted,
 * whole, 1..65536), default 256 (the scratch is sized at create; Prism simulates up to 256
 * GPUs).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "policy/modules.h"
#include "policy/rank.h"
#include "vmm/error.h"

/* Bytes per hidden-state element on the wire: BF16, as the papers' models (Prism gives no
 * message sizes). */
#define ACT_BYTES 2

typedef struct prism {
    uint32_t L, E, K, max_servers;
    uint64_t expert_bytes;
    mvm_cost cost;
    double horizon, land;
    double *acc;          /* [max_servers][L*E] f_n(x) since the last placement change */
    uint8_t *cand;        /* [max_servers][L*E] the candidate placement P' */
    uint8_t *goal;        /* [max_servers][L*E] P' while cand holds the part that lands */
    uint32_t *keepers;    /* [L*E] servers that keep each expert through bound_move's drops */
    uint32_t *used;       /* [max_servers] experts each server holds in that part */
    uint32_t *last;       /* [L*E] the holder that keeps an expert nobody else keeps */
    mvm_rank *moves;      /* [L*E] one server's additions, most saving first */
    uint32_t *count;      /* [max_servers][L] Algorithm 1's N_{n,l} */
    uint32_t *slots;      /* [max_servers] S_n */
    mvm_rank *by_slots;   /* [max_servers] servers, most slots first */
    double *link;         /* [max_servers^2] remote call time n->r, one token, with compute */
    double *recv;         /* [max_servers] seconds of copies into each server */
    double *q;            /* [L] Algorithm 1's shares of one server */
    uint32_t *total;      /* [L] Σ_n N_{n,l} */
    mvm_rank *rank;       /* [E] */
    uint32_t *grank;      /* [E] position of each expert in the cluster's ranking of a layer */
    uint32_t *byg;        /* [E] the expert at each position of that ranking */
    uint32_t *held;       /* [E] servers holding each expert of a layer */
} prism;

static void prism_destroy(void *self)
{
    prism *p = self;
    if (!p)
        return;
    void *a[] = {p->acc,  p->cand,  p->goal,  p->keepers, p->used, p->last, p->moves, p->count,
                 p->slots, p->by_slots, p->link, p->recv, p->q, p->total,
                 p->rank, p->grank, p->byg, p->held};
    for (size_t i = 0; i < sizeof a / sizeof *a; i++)
        free(a[i]);
    free(p);
}

static mvm_status prism_create(const mvm_pinit *init, void **self)
{
    static const char *const known[] = {"horizon", "servers", "land", NULL};
    const char *me = "place prism";
    const mvm_pshape *sh = init->shape;
    double horizon, servers, land;
    *self = NULL;
    mvm_status st = mvm_pparams_check(&init->params, known, me);
    if (st == MVM_OK)
        st = mvm_pparam_double(&init->params, "horizon", 10000, &horizon);
    if (st == MVM_OK)
        st = mvm_pparam_double(&init->params, "servers", 256, &servers);
    if (st == MVM_OK)
        st = mvm_pparam_double(&init->params, "land", 1, &land);
    if (st != MVM_OK)
        return st;
    if (!(land >= 0 && isfinite(land)))
        return mvm_fail(MVM_ERR_INVALID, "%s: land=%g is not a multiple >= 0 of the period", me,
                        land);
    if (!(horizon >= 0))
        return mvm_fail(MVM_ERR_INVALID, "%s: horizon=%g is not a token count >= 0", me,
                        horizon);
    if (!(servers >= 1 && servers <= 65536 && servers == floor(servers)))
        return mvm_fail(MVM_ERR_INVALID, "%s: servers=%g is not a whole number in [1, 65536]",
                        me, servers);
    if (!sh->n_layers || !sh->n_experts || !sh->top_k || !sh->expert_bytes)
        return mvm_fail(MVM_ERR_INVALID,
                        "%s: a shape needs layers, experts, top_k and expert bytes", me);
    prism *p = calloc(1, sizeof *p);
    if (!p)
        return mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", me);
    const size_t S = (size_t)servers, L = sh->n_layers, E = sh->n_experts;
    p->L = sh->n_layers;
    p->E = sh->n_experts;
    p->K = sh->top_k;
    p->max_servers = (uint32_t)S;
    p->expert_bytes = sh->expert_bytes;
    p->cost = *init->cost;
    p->horizon = horizon;
    p->land = land;
    p->acc = calloc(S * L * E, sizeof *p->acc);
    p->cand = calloc(S * L * E, 1);
    p->goal = calloc(S * L * E, 1);
    p->keepers = calloc(L * E, sizeof *p->keepers);
    p->used = calloc(S, sizeof *p->used);
    p->last = calloc(L * E, sizeof *p->last);
    p->moves = calloc(L * E, sizeof *p->moves);
    p->count = calloc(S * L, sizeof *p->count);
    p->slots = calloc(S, sizeof *p->slots);
    p->by_slots = calloc(S, sizeof *p->by_slots);
    p->link = calloc(S * S, sizeof *p->link);
    p->recv = calloc(S, sizeof *p->recv);
    p->q = calloc(L, sizeof *p->q);
    p->total = calloc(L, sizeof *p->total);
    p->rank = calloc(E, sizeof *p->rank);
    p->grank = calloc(E, sizeof *p->grank);
    p->byg = calloc(E, sizeof *p->byg);
    p->held = calloc(E, sizeof *p->held);
    if (!p->acc || !p->cand || !p->goal || !p->keepers || !p->used || !p->last || !p->moves ||
        !p->count ||
        !p->slots || !p->by_slots || !p->link || !p->recv || !p->q || !p->total || !p->rank ||
        !p->grank || !p->byg || !p->held) {
        prism_destroy(p);
        return mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", me);
    }
    *self = p;
    return MVM_OK;
}

/* ---- Algorithm 1: slots per server and layer ------------------------------------------- */

/* Shannon entropy (bits) of the counts f[0..E); 0 without any count. */
static double entropy(const double *f, uint32_t E)
{
    double sum = 0, h = 0;
    for (uint32_t e = 0; e < E; e++)
        sum += f[e] > 0 ? f[e] : 0;
    if (!(sum > 0))
        return 0;
    for (uint32_t e = 0; e < E; e++)
        if (f[e] > 0)
            h -= f[e] / sum * log2(f[e] / sum);
    return h;
}

/* N_{n,l} for every layer of server n: entropy shares of its S_n slots, at most E each,
 * all slots used (S_n <= L·E). */
static void count_server(prism *p, uint32_t n)
{
    const uint32_t L = p->L, E = p->E, Sn = p->slots[n];
    const double *f = p->acc + (size_t)n * L * E;
    uint32_t *N = p->count + (size_t)n * L;
    double vsum = 0;
    for (uint32_t l = 0; l < L; l++) {
        p->q[l] = entropy(f + (size_t)l * E, E);
        vsum += p->q[l];
    }
    uint32_t used = 0;
    for (uint32_t l = 0; l < L; l++) {
        p->q[l] = vsum > 0 ? Sn * p->q[l] / vsum : (double)Sn / L;
        double fl = floor(p->q[l]);
        N[l] = fl < E ? (uint32_t)fl : E;
        if (used + N[l] > Sn) /* rounding may push Σ⌊q⌋ past S_n by a hair */
            N[l] = Sn - used;
        used += N[l];
    }
    for (; used < Sn; used++) { /* largest remainder, then water-filling */
        uint32_t best = L;
        for (uint32_t l = 0; l < L; l++)
            if (N[l] < E && (best == L || p->q[l] - N[l] > p->q[best] - N[best]))
                best = l;
        N[best]++; /* some layer is below E: Sn <= L·E */
    }
}

/* Coverage: Σ_n N_{n,l} >= E in every layer. 0, or -1 if no move exists (impossible when
 * Σ_n S_n >= L·E; a broken invariant stops here instead of looping). */
static int cover_layers(prism *p, uint32_t S)
{
    const uint32_t L = p->L, E = p->E;
    for (uint32_t l = 0; l < L; l++) {
        p->total[l] = 0;
        for (uint32_t n = 0; n < S; n++)
            p->total[l] += p->count[(size_t)n * L + l];
    }
    for (uint32_t l = 0; l < L; l++)
        while (p->total[l] < E) {
            uint32_t from = 0; /* the layer with the most slots: more than E */
            for (uint32_t k = 1; k < L; k++)
                if (p->total[k] > p->total[from])
                    from = k;
            uint32_t i = 0, n = 0;
            for (; i < S; i++) {
                n = p->by_slots[i].id;
                if (p->count[(size_t)n * L + from] > 0 && p->count[(size_t)n * L + l] < E)
                    break;
            }
            if (i == S || p->total[from] <= E)
                return -1;
            p->count[(size_t)n * L + from]--;
            p->count[(size_t)n * L + l]++;
            p->total[from]--;
            p->total[l]++;
        }
    return 0;
}

/* ---- Algorithm 2: which experts ------------------------------------------------------- */

/* grank[e]: e's position in the cluster's ranking of layer l (most counted first); byg
 * the inverse. */
static void rank_layer(prism *p, uint32_t S, uint32_t l)
{
    const uint32_t E = p->E, LE = p->L * p->E;
    for (uint32_t e = 0; e < E; e++) {
        double g = 0;
        for (uint32_t n = 0; n < S; n++)
            g += p->acc[(size_t)n * LE + (size_t)l * E + e];
        p->rank[e] = (mvm_rank){.key = g, .id = e};
    }
    mvm_rank_sort(p->rank, E);
    for (uint32_t i = 0; i < E; i++) {
        p->grank[p->rank[i].id] = i;
        p->byg[i] = p->rank[i].id;
    }
}

/* True when expert a (count fa, cluster position ga) comes before b on a server's list. */
static int before(double fa, uint32_t ga, double fb, uint32_t gb)
{
    return fa > fb || (fa == fb && ga < gb);
}

/* Each server's top N_{n,l} experts of layer l into cand; held[] counts the copies. */
static void take_top(prism *p, uint32_t S, uint32_t l)
{
    const uint32_t E = p->E, LE = p->L * p->E;
    for (uint32_t e = 0; e < E; e++)
        p->held[e] = 0;
    for (uint32_t n = 0; n < S; n++) {
        const double *f = p->acc + (size_t)n * LE + (size_t)l * E;
        uint8_t *a = p->cand + (size_t)n * LE + (size_t)l * E;
        /* Keyed by count; id = cluster position, so ties go to the cluster's favourites. */
        for (uint32_t e = 0; e < E; e++)
            p->rank[e] = (mvm_rank){.key = f[e], .id = p->grank[e]};
        mvm_rank_sort(p->rank, E);
        for (uint32_t e = 0; e < E; e++)
            a[e] = 0;
        for (uint32_t i = 0; i < p->count[(size_t)n * p->L + l]; i++) {
            uint32_t e = p->byg[p->rank[i].id];
            a[e] = 1;
            p->held[e]++;
        }
    }
}

/* The coverage repair of layer l: one best replacement at a time until every expert is
 * on some server. */
static void repair_layer(prism *p, uint32_t S, uint32_t l)
{
    const uint32_t E = p->E, LE = p->L * p->E;
    uint32_t uncovered = 0;
    for (uint32_t e = 0; e < E; e++)
        uncovered += p->held[e] == 0;
    while (uncovered) {
        uint32_t bn = S, bu = 0, bd = 0, bdups = 0;
        double bscore = 0;
        for (uint32_t n = 0; n < S; n++) {
            const double *f = p->acc + (size_t)n * LE + (size_t)l * E;
            const uint8_t *a = p->cand + (size_t)n * LE + (size_t)l * E;
            uint32_t u = E, d = E, dups = 0;
            for (uint32_t e = 0; e < E; e++) {
                if (p->held[e] == 0 && (u == E || before(f[e], p->grank[e], f[u], p->grank[u])))
                    u = e;
                if (a[e] && p->held[e] >= 2) {
                    dups++;
                    if (d == E || before(f[d], p->grank[d], f[e], p->grank[e]))
                        d = e; /* the last in the server's order: least counted */
                }
            }
            if (d == E)
                continue; /* no duplicate to give up */
            double score = f[u] - f[d];
            if (bn == S || score > bscore || (score == bscore && dups > bdups)) {
                bn = n, bu = u, bd = d, bdups = dups;
                bscore = score;
            }
        }
        /* bn < S: the layer has >= E slots, so with an expert uncovered one is doubled. */
        uint8_t *a = p->cand + (size_t)bn * LE + (size_t)l * E;
        a[bd] = 0;
        p->held[bd]--;
        a[bu] = 1;
        p->held[bu] = 1;
        uncovered--;
    }
}

/* ---- the migration gate ---------------------------------------------------------------- */

/* Remote call times n->r for one token, compute at r included. */
static void fill_links(prism *p, const mvm_cluster *c)
{
    const uint32_t S = c->n_servers;
    mvm_cost link = p->cost;
    for (uint32_t n = 0; n < S; n++)
        for (uint32_t r = 0; r < S; r++) {
            link.m.net_rtt = c->rtt[(size_t)n * S + r];
            link.m.net_bw = c->bw[(size_t)n * S + r];
            p->link[(size_t)n * S + r] = r == n ? 0
                                                : mvm_cost_net(&link, 1, ACT_BYTES) +
                                                      mvm_cost_gpu(&p->cost, 1);
        }
}

static int covers(const uint8_t *placement, uint32_t S, uint32_t LE)
{
    for (uint32_t x = 0; x < LE; x++) {
        uint32_t n = 0;
        while (n < S && !placement[(size_t)n * LE + x])
            n++;
        if (n == S)
            return 0;
    }
    return 1;
}

/* One call of expert x from home n under placement P: local, or to its nearest holder. */
static double call_time(const prism *p, uint32_t S, const uint8_t *P, uint32_t n, uint32_t x)
{
    const uint32_t LE = p->L * p->E;
    if (P[(size_t)n * LE + x])
        return mvm_cost_gpu(&p->cost, 1);
    double t = INFINITY;
    for (uint32_t r = 0; r < S; r++)
        if (P[(size_t)r * LE + x] && p->link[(size_t)n * S + r] < t)
            t = p->link[(size_t)n * S + r];
    return t;
}

/* C(P): the statistics' token-expert calls under placement P, in seconds. */
static double call_cost(const prism *p, uint32_t S, const uint8_t *P)
{
    const uint32_t LE = p->L * p->E;
    double sum = 0;
    for (uint32_t n = 0; n < S; n++)
        for (uint32_t x = 0; x < LE; x++) {
            double f = p->acc[(size_t)n * LE + x];
            if (f > 0)
                sum += f * call_time(p, S, P, n, x);
        }
    return sum;
}

/* The copy of x into server n from its nearest holder in P, seconds. */
static double copy_time(const prism *p, const mvm_cluster *c, const uint8_t *P, uint32_t n,
                        uint32_t x)
{
    const uint32_t S = c->n_servers, LE = p->L * p->E;
    double best = INFINITY;
    for (uint32_t r = 0; r < S; r++)
        if (P[(size_t)r * LE + x]) {
            double t = c->rtt[(size_t)r * S + n] +
                       (double)p->expert_bytes / c->bw[(size_t)r * S + n];
            best = t < best ? t : best;
        }
    return best;
}

/* T_mig(P, P') in seconds, additions copied from their nearest holder in P (which covers
 * every expert); *added counts them. */
static double migration_time(prism *p, const mvm_cluster *c, const uint8_t *P, uint64_t *added)
{
    const uint32_t S = c->n_servers, LE = p->L * p->E;
    double worst = 0;
    *added = 0;
    for (uint32_t n = 0; n < S; n++) {
        p->recv[n] = 0;
        for (uint32_t x = 0; x < LE; x++)
            if (p->cand[(size_t)n * LE + x] && !P[(size_t)n * LE + x]) {
                p->recv[n] += copy_time(p, c, P, n, x);
                (*added)++;
            }
        worst = p->recv[n] > worst ? p->recv[n] : worst;
    }
    return worst;
}

/* What adding x (not on n in P) to server n saves per the statistics: its calls from n,
 * each the remote call to its nearest holder in P made local. */
static double saving(const prism *p, uint32_t S, const uint8_t *P, uint32_t n, uint32_t x)
{
    return p->acc[(size_t)n * p->L * p->E + x] *
           (call_time(p, S, P, n, x) - mvm_cost_gpu(&p->cost, 1));
}

/* Experts on server n in cand that the goal does not keep there and another server keeps
 * (p->keepers, p->last: see count_keepers): what n may drop without uncovering anything. With
 * `pick`, the least counted of them (LE: none); else their number. */
static uint32_t droppable(const prism *p, uint32_t n, int pick)
{
    const uint32_t LE = p->L * p->E;
    const uint8_t *have = p->cand + (size_t)n * LE, *want = p->goal + (size_t)n * LE;
    const double *f = p->acc + (size_t)n * LE;
    uint32_t best = LE, count = 0;
    for (uint32_t x = 0; x < LE; x++)
        if (have[x] && !want[x] && (p->keepers[x] > 0 || p->last[x] != n)) {
            count++;
            if (best == LE || f[x] < f[best])
                best = x;
        }
    return pick ? best : count;
}

/* p->used[n] for every server, and p->keepers[x]: the servers whose holding of x in cand no
 * drop will take, because the goal keeps it there or the server has room (drops nothing).
 * Where x has no keeper, p->last[x] is the holder that must keep it, the one that calls it
 * most (then the lower index): the others may drop it. */
static void count_keepers(prism *p, uint32_t S)
{
    const uint32_t LE = p->L * p->E;
    for (uint32_t n = 0; n < S; n++) {
        p->used[n] = 0;
        for (uint32_t x = 0; x < LE; x++)
            p->used[n] += p->cand[(size_t)n * LE + x];
    }
    for (uint32_t x = 0; x < LE; x++) {
        p->keepers[x] = 0;
        p->last[x] = S;
        for (uint32_t n = 0; n < S; n++) {
            if (!p->cand[(size_t)n * LE + x])
                continue;
            p->keepers[x] += p->goal[(size_t)n * LE + x] || p->used[n] <= p->slots[n];
            if (p->last[x] == S ||
                p->acc[(size_t)n * LE + x] > p->acc[(size_t)p->last[x] * LE + x])
                p->last[x] = n;
        }
    }
}

/* cand := the part of the way from P to the goal P' (in cand on entry) whose copies into
 * each server take at most `limit` seconds (the header's "migration that lands"). First
 * each server's additions, most saving first, while they fit the bound. Then room on the
 * servers over their slots: such a server may drop an expert the goal does not keep there
 * when another server keeps it, holding it in the goal too or having room, or, where none
 * does, when it is not the holder named to keep it (a server with room drops nothing, no
 * drop takes a holding the goal keeps, and the named holder keeps its own, so what is
 * dropped stays covered whatever the order); one that cannot drop enough gives back its
 * least saving additions, and the counts are made again until every server can. */
static void bound_move(prism *p, const mvm_cluster *c, const uint8_t *P, double limit)
{
    const uint32_t S = c->n_servers, LE = p->L * p->E;
    memcpy(p->goal, p->cand, (size_t)S * LE);
    memcpy(p->cand, P, (size_t)S * LE);
    for (uint32_t n = 0; n < S; n++) {
        uint32_t n_moves = 0;
        for (uint32_t x = 0; x < LE; x++)
            if (p->goal[(size_t)n * LE + x] && !P[(size_t)n * LE + x])
                p->moves[n_moves++] = (mvm_rank){.key = saving(p, S, P, n, x), .id = x};
        mvm_rank_sort(p->moves, n_moves);
        double recv = 0;
        for (uint32_t i = 0; i < n_moves; i++) {
            uint32_t x = p->moves[i].id;
            double t = copy_time(p, c, P, n, x);
            if (recv + t <= limit) {
                p->cand[(size_t)n * LE + x] = 1;
                recv += t;
            }
        }
    }
    /* Rounds until every full server can drop enough: each gives back, least saving first,
     * as many additions as it lacks droppable experts. A give-back can take a keeper away
     * from another server's drop, which the next round's counts see; each round gives
     * something back until none has to, so it ends. */
    for (int again = 1; again;) {
        again = 0;
        count_keepers(p, S);
        for (uint32_t n = 0; n < S; n++) {
            uint32_t can = droppable(p, n, 0), n_add = 0;
            if (p->used[n] <= p->slots[n] + can)
                continue;
            for (uint32_t x = 0; x < LE; x++)
                if (p->cand[(size_t)n * LE + x] && !P[(size_t)n * LE + x])
                    p->moves[n_add++] = (mvm_rank){.key = -saving(p, S, P, n, x), .id = x};
            mvm_rank_sort(p->moves, n_add); /* least saving first */
            for (uint32_t i = 0; i < p->used[n] - p->slots[n] - can && i < n_add; i++)
                p->cand[(size_t)n * LE + p->moves[i].id] = 0;
            again = 1;
        }
    }
    for (uint32_t n = 0; n < S; n++)
        for (uint32_t u = p->used[n]; u > p->slots[n]; u--)
            p->cand[(size_t)n * LE + droppable(p, n, 1)] = 0;
}

static uint64_t adopt(prism *p, uint32_t S, uint8_t *placement, uint64_t added)
{
    const size_t n = (size_t)S * p->L * p->E;
    memcpy(placement, p->cand, n);
    memset(p->acc, 0, n * sizeof *p->acc);
    return added * p->expert_bytes;
}

static uint64_t prism_place(void *self, const mvm_cluster *c, const double *freq,
                            uint8_t *placement)
{
    prism *p = self;
    const uint32_t S = c->n_servers, L = p->L, LE = p->L * p->E;
    if (S == 0 || S > p->max_servers)
        return 0;
    for (size_t i = 0; i < (size_t)S * LE; i++)
        p->acc[i] += freq[i];
    uint64_t total = 0;
    for (uint32_t n = 0; n < S; n++) {
        uint64_t s = mvm_cluster_slots(c, n, p->expert_bytes);
        p->slots[n] = (uint32_t)(s < LE ? s : LE);
        p->by_slots[n] = (mvm_rank){.key = (double)p->slots[n], .id = n};
        total += p->slots[n];
    }
    if (total < LE)
        return 0; /* infeasible: some expert could be on no server */
    mvm_rank_sort(p->by_slots, S);

    for (uint32_t n = 0; n < S; n++)
        count_server(p, n);
    if (cover_layers(p, S) != 0)
        return 0;
    for (uint32_t l = 0; l < L; l++) {
        rank_layer(p, S, l);
        take_top(p, S, l);
        repair_layer(p, S, l);
    }

    fill_links(p, c);
    if (!covers(placement, S, LE)) { /* the first call, or a broken one: nothing to keep */
        uint64_t added = 0;
        for (size_t i = 0; i < (size_t)S * LE; i++)
            added += p->cand[i] && !placement[i];
        return adopt(p, S, placement, added);
    }
    uint64_t added;
    double t_mig = migration_time(p, c, placement, &added);
    const double limit = p->land > 0 && c->period_s > 0 ? p->land * c->period_s : INFINITY;
    if (t_mig > limit) {
        bound_move(p, c, placement, limit);
        t_mig = migration_time(p, c, placement, &added);
    }
    double tokens = 0;
    for (size_t i = 0; i < (size_t)S * LE; i++)
        tokens += p->acc[i];
    tokens /= (double)L * p->K;
    if (added == 0 || !(tokens > 0))
        return 0;
    double saved = (call_cost(p, S, placement) - call_cost(p, S, p->cand)) * p->horizon / tokens;
    if (!(saved > t_mig))
        return 0;
    return adopt(p, S, placement, added);
}

const mvm_place_ops mvm_place_prism = {
    .name = "prism",
    .about = "Prism: entropy slot counts (Alg. 1) + top-frequency assignment with "
             "coverage repair (Alg. 2), both fixed; migrates when the latency "
             "saved over `horizon` tokens exceeds the copy time",
    .create = prism_create,
    .destroy = prism_destroy,
    .place = prism_place,
};
