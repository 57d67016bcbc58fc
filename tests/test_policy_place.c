/*
 * The place modules (policy/place_uniform.c, policy/place_prism.c) and the cluster simulation
 * (tools/sim_cluster.c). Hand-worked cases of Prism's Algorithms 1 and 2 as fixed in
 * policy/place_prism.c, each with its arithmetic in the comment; the migration gate (Eqs. 3–4
 * in time units) at its break-even horizon, worked out by hand; the contract and the
 * invariants (every expert on some server, capacity kept, Prism uses every slot, 0 leaves the
 * placement alone, the bytes returned are the additions, a bounded migration copies within
 * its bound) on random instances; a migration bounded to land within a period, worked out by
 * hand; the simulation
 * against closed forms, and Prism against Uniform on a workload whose servers each have their
 * own hot experts.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "policy/modules.h"
#include "tools/sim_cluster.h"

#define MAXS 8

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)((rng >> 11) % n);
}

/* A cluster of S servers with `slots[n]` experts of eb bytes each, every link rtt / bw. */
typedef struct cluster_buf {
    uint64_t cap[MAXS];
    double rtt[MAXS * MAXS], bw[MAXS * MAXS];
    mvm_cluster c;
} cluster_buf;

static const mvm_cluster *cluster(cluster_buf *b, uint32_t S, const uint32_t *slots,
                                  uint64_t eb, double rtt, double bw)
{
    for (uint32_t n = 0; n < S; n++) {
        b->cap[n] = slots[n] * eb + eb / 2; /* a part-expert of room is no slot */
        for (uint32_t r = 0; r < S; r++) {
            b->rtt[n * S + r] = r == n ? 0 : rtt;
            b->bw[n * S + r] = r == n ? 0 : bw;
        }
    }
    b->c = (mvm_cluster){.n_servers = S, .capacity_bytes = b->cap, .rtt = b->rtt, .bw = b->bw};
    return &b->c;
}

static mvm_cost test_cost(uint64_t eb)
{
    mvm_cost cost;
    mvm_cost_init(&cost, mvm_machine_preset("a100"), eb, 2048, 768);
    return cost;
}

static void *make(const mvm_place_ops *ops, const mvm_pshape *sh, const mvm_cost *cost,
                  const char *params)
{
    mvm_pinit in = {.shape = sh, .cost = cost, .params = {params}};
    void *self = NULL;
    CHECK_ST(ops->create(&in, &self), MVM_OK);
    return self;
}

/* 1 when server n holds exactly the experts of layer l listed in want[0..k). */
static int holds(const uint8_t *P, const mvm_pshape *sh, uint32_t n, uint32_t l,
                 const uint32_t *want, uint32_t k)
{
    const uint32_t E = sh->n_experts, LE = sh->n_layers * E;
    uint8_t row[64] = {0};
    for (uint32_t i = 0; i < k; i++)
        row[want[i]] = 1;
    for (uint32_t e = 0; e < E; e++)
        if (P[(size_t)n * LE + l * E + e] != row[e])
            return 0;
    return 1;
}

static uint32_t held_by(const uint8_t *P, uint32_t S, uint32_t LE, uint32_t x)
{
    uint32_t h = 0;
    for (uint32_t n = 0; n < S; n++)
        h += P[(size_t)n * LE + x];
    return h;
}

static uint32_t layer_count(const uint8_t *P, const mvm_pshape *sh, uint32_t n, uint32_t l)
{
    const uint32_t E = sh->n_experts, LE = sh->n_layers * E;
    uint32_t k = 0;
    for (uint32_t e = 0; e < E; e++)
        k += P[(size_t)n * LE + l * E + e];
    return k;
}

/* ---- Algorithms 1 and 2 by hand ----------------------------------------------------------
 * 2 servers, 2 layers of 4 experts; server 0 has 5 slots, server 1 has 4 (L·E = 8 <= 9).
 * Counts f_n^l(e):   server 0: layer 0 (8,0,0,0)  layer 1 (1,1,1,1)
 *                    server 1: layer 0 (4,4,0,0)  layer 1 (6,2,0,0)
 * Algorithm 1. Entropies (bits): server 0: v = (0, 2); server 1: v = (1, 0.8113).
 *   server 0: q = 5·(0, 2)/2 = (0, 5); ⌊q⌋ capped at E = 4: (0, 4); the slot left goes to
 *             the layer below E with the largest q − N: layer 0 (0) -> N = (1, 4).
 *             (The paper's formula alone gives (0, 5): 5 > E slots in layer 1.)
 *   server 1: q = 4·(1, .8113)/1.8113 = (2.2084, 1.7916); ⌊q⌋ = (2, 1); the slot left:
 *             remainders .2084 < .7916 -> layer 1: N = (2, 2).
 *   Coverage: totals (3, 6); layer 0 is short of E = 4 by one. The donor layer is the one
 *   with the most slots, layer 1 (6 > 4); the first server by slots (server 0, 5) has a
 *   layer-1 slot and fewer than 4 in layer 0: server 0 becomes (2, 3). Totals (4, 5).
 * Algorithm 2. Cluster counts: layer 0 (12,4,0,0), layer 1 (7,3,1,1): tie order 0,1,2,3.
 *   layer 0: top-2 of server 0 {0,1} (f 8, then ties by cluster order), server 1 {0,1}.
 *     Uncovered {2,3}. Server 0: gives up its least-counted duplicate 1 (f 0) for 2 (f 0):
 *     Δ = 0 − 0 = 0; server 1: gives up 1 (f 4, the later of the tie 4 = 4) for 2: Δ = −4.
 *     Server 0 -> {0,2}. Now only 0 is doubled. Server 0: 0 (f 8) for 3: Δ = −8; server
 *     1: 0 (f 4) for 3: Δ = −4 -> server 1 becomes {1,3}.
 *   layer 1: top-3 of server 0 {0,1,2} (all f 1: cluster order), server 1 {0,1}.
 *     Uncovered {3}. Server 0: duplicates 0, 1 (f 1 each: gives up the later, 1) for 3
 *     (f 1): Δ = 0; server 1: 1 (f 2) for 3 (f 0): Δ = −2 -> server 0 becomes {0,2,3}.
 * Result: server 0 holds layer 0 {0,2}, layer 1 {0,2,3}; server 1 layer 0 {1,3}, layer 1
 * {0,1}. 9 experts added to an empty placement: 9 · expert_bytes returned. */
static void test_prism_hand(void)
{
    const mvm_pshape sh = {.n_layers = 2, .n_experts = 4, .top_k = 1, .n_embd = 2048,
                           .n_ff = 768, .pages_per_expert = 1, .expert_bytes = 1000};
    const mvm_cost cost = test_cost(sh.expert_bytes);
    cluster_buf cb;
    const mvm_cluster *c = cluster(&cb, 2, (const uint32_t[]){5, 4}, 1000, 1e-4, 1e9);
    const double freq[2 * 8] = {8, 0, 0, 0, 1, 1, 1, 1, /* server 0 */
                                4, 4, 0, 0, 6, 2, 0, 0}; /* server 1 */
    uint8_t P[16] = {0};
    void *p = make(&mvm_place_prism, &sh, &cost, NULL);
    if (!p)
        return;
    CHECK(mvm_place_prism.place(p, c, freq, P) == 9 * 1000);
    CHECK(holds(P, &sh, 0, 0, (const uint32_t[]){0, 2}, 2));
    CHECK(holds(P, &sh, 0, 1, (const uint32_t[]){0, 2, 3}, 3));
    CHECK(holds(P, &sh, 1, 0, (const uint32_t[]){1, 3}, 2));
    CHECK(holds(P, &sh, 1, 1, (const uint32_t[]){0, 1}, 2));
    mvm_place_prism.destroy(p);
}

/* No statistics at all (the first call of a run): every entropy is 0, so every layer
 * weighs the same (no 0/0). 3 servers × 4 slots, 3 layers of 4 experts (L·E = 12, no room
 * to spare).
 *   Algorithm 1, each server: q = 4/3 per layer, ⌊q⌋ = (1,1,1), the slot left goes to the
 *   first of the equal remainders: (2,1,1). Totals (6,3,3).
 *   Layer 1 short by one: donor layer 0 (6); servers tie on slots, so server 0 first:
 *   (1,2,1), totals (5,4,3). Layer 2 short: donor layer 0 (5), server 0 again: (0,2,2).
 *   Totals (4,4,4): each expert exactly once; the paper's loop could also have taken
 *   from layer 1 once it was done, uncovering it again.
 *   Algorithm 2, layer 0 (all counts 0, cluster order = ids): servers 1 and 2 both take
 *   {0,1}; uncovered {2,3}. Both would give up 1 for 2 at Δ = 0 with 2 duplicates: the tie
 *   goes to server 1 -> {0,2}. Then both give up 0 for 3 at Δ = 0, one duplicate each:
 *   server 1 -> {2,3}; server 2 keeps {0,1}. */
static void test_prism_no_statistics(void)
{
    const mvm_pshape sh = {.n_layers = 3, .n_experts = 4, .top_k = 2, .n_embd = 2048,
                           .n_ff = 768, .pages_per_expert = 1, .expert_bytes = 1000};
    const mvm_cost cost = test_cost(sh.expert_bytes);
    cluster_buf cb;
    const mvm_cluster *c = cluster(&cb, 3, (const uint32_t[]){4, 4, 4}, 1000, 1e-4, 1e9);
    double freq[3 * 12] = {0};
    uint8_t P[36] = {0};
    void *p = make(&mvm_place_prism, &sh, &cost, NULL);
    if (!p)
        return;
    CHECK(mvm_place_prism.place(p, c, freq, P) == 12 * 1000);
    const uint32_t want[3][3] = {{0, 2, 2}, {2, 1, 1}, {2, 1, 1}};
    for (uint32_t n = 0; n < 3; n++)
        for (uint32_t l = 0; l < 3; l++)
            CHECK(layer_count(P, &sh, n, l) == want[n][l]);
    for (uint32_t x = 0; x < 12; x++)
        CHECK(held_by(P, 3, 12, x) == 1);
    CHECK(holds(P, &sh, 1, 0, (const uint32_t[]){2, 3}, 2));
    CHECK(holds(P, &sh, 2, 0, (const uint32_t[]){0, 1}, 2));
    mvm_place_prism.destroy(p);

    /* The tie between servers goes to the one with more duplicates. One layer of 4, slots
     * (1, 3, 2), no statistics: tops {0}, {0,1,2}, {0,1}; copies (3,2,1,0), 3 uncovered.
     * Every replacement has Δ = 0; server 0 has one duplicate (0), servers 1 and 2 two
     * each (0 and 1): server 1 (the lower index of the two) gives up its last duplicate in
     * cluster order, 1, for 3. Server 0 keeps {0}. */
    const mvm_pshape sh1 = {.n_layers = 1, .n_experts = 4, .top_k = 1, .n_embd = 2048,
                            .n_ff = 768, .pages_per_expert = 1, .expert_bytes = 1000};
    c = cluster(&cb, 3, (const uint32_t[]){1, 3, 2}, 1000, 1e-4, 1e9);
    memset(P, 0, sizeof P);
    p = make(&mvm_place_prism, &sh1, &cost, NULL);
    if (!p)
        return;
    CHECK(mvm_place_prism.place(p, c, freq, P) == 6 * 1000);
    CHECK(holds(P, &sh1, 0, 0, (const uint32_t[]){0}, 1));
    CHECK(holds(P, &sh1, 1, 0, (const uint32_t[]){0, 2, 3}, 3));
    CHECK(holds(P, &sh1, 2, 0, (const uint32_t[]){0, 1}, 2));
    mvm_place_prism.destroy(p);
}

/* The N <= E cap: one server with room for the whole model and all its traffic in layer
 * 0 (entropy 2 bits; layer 1 has none): q = 8·(2, 0)/2 = (8, 0), capped to (4, 0), and the
 * 4 slots left go to layer 1: it holds everything, 4 per layer. Server 1's single slot
 * (one-hot traffic everywhere: Σ v = 0, uniform weights q = (.5, .5) -> (1, 0)) holds its
 * hot expert 2 of layer 0. A server without slots holds nothing. */
static void test_prism_cap(void)
{
    const mvm_pshape sh = {.n_layers = 2, .n_experts = 4, .top_k = 1, .n_embd = 2048,
                           .n_ff = 768, .pages_per_expert = 1, .expert_bytes = 1000};
    const mvm_cost cost = test_cost(sh.expert_bytes);
    cluster_buf cb;
    const mvm_cluster *c = cluster(&cb, 3, (const uint32_t[]){8, 1, 0}, 1000, 1e-4, 1e9);
    const double freq[3 * 8] = {5, 5, 5, 5, 0, 0, 0, 0,  /* server 0 */
                                0, 0, 7, 0, 0, 3, 0, 0,  /* server 1 */
                                1, 2, 3, 4, 4, 3, 2, 1}; /* server 2: no room */
    uint8_t P[24] = {0};
    void *p = make(&mvm_place_prism, &sh, &cost, NULL);
    if (!p)
        return;
    CHECK(mvm_place_prism.place(p, c, freq, P) == 9 * 1000);
    CHECK(layer_count(P, &sh, 0, 0) == 4 && layer_count(P, &sh, 0, 1) == 4);
    CHECK(holds(P, &sh, 1, 0, (const uint32_t[]){2}, 1));
    CHECK(layer_count(P, &sh, 1, 1) == 0);
    CHECK(layer_count(P, &sh, 2, 0) == 0 && layer_count(P, &sh, 2, 1) == 0);
    mvm_place_prism.destroy(p);
}

/* ---- the migration gate ---------------------------------------------------------------------
 * 2 servers × 2 slots, 1 layer of 4 experts, top-1; links rtt 100 µs, 1 GB/s; experts of
 * 100 MB; hidden size 2048.
 *   Workload A: server 0 counts (9,8,1,0), server 1 (0,1,8,9): Prism places {0,1} on
 *   server 0 and {2,3} on server 1 (each its top two; together they cover).
 *   The same A again (any scale): the candidate is the placement itself -> 0, untouched.
 *   Workload B, the servers swapped: candidate {2,3} on 0, {0,1} on 1. Per token-expert
 *   call, a remote call costs t_r = 100e-6 + 2·2048·2 B / 1e9 = 108.192 µs more than a
 *   local one. Under the current placement 34 of B's 36 calls are remote, under the
 *   candidate 2: C(P) − C(P') = 32 · t_r = 3.462144 ms over W = 36 tokens.
 *   T_mig: each server receives 2 experts from the other, one after another, 2 · (100e-6 +
 *   1e8 / 1e9) = 0.2002 s; the servers in parallel: 0.2002 s.
 *   Break-even horizon H = 0.2002 / (3.462144e-3 / 36) = 2081.7 tokens: H = 2000 keeps the
 *   placement, H = 2200 migrates (4 experts added: 400 MB); H = 1 keeps it. */
/* The gate's cluster and workloads, which test_prism_land moves over too. */
static const mvm_pshape gate_sh = {.n_layers = 1, .n_experts = 4, .top_k = 1, .n_embd = 2048,
                                   .n_ff = 768, .pages_per_expert = 1,
                                   .expert_bytes = 100000000};
static const double gate_A[8] = {9, 8, 1, 0, 0, 1, 8, 9}, gate_B[8] = {0, 1, 8, 9, 9, 8, 1, 0};
static const uint8_t gate_PA[8] = {1, 1, 0, 0, 0, 0, 1, 1}, gate_PB[8] = {0, 0, 1, 1, 1, 1, 0, 0};

static const mvm_cluster *gate_cluster(cluster_buf *cb)
{
    return cluster(cb, 2, (const uint32_t[]){2, 2}, gate_sh.expert_bytes, 1e-4, 1e9);
}

/* A prism placing gate_A over an empty cluster (PA), for a second call to judge. */
static void *gate_first(const mvm_cost *cost, const mvm_cluster *c, const char *params,
                        uint8_t *P)
{
    void *p = make(&mvm_place_prism, &gate_sh, cost, params);
    if (!p)
        return NULL;
    memset(P, 0, 8);
    CHECK(mvm_place_prism.place(p, c, gate_A, P) == 4 * gate_sh.expert_bytes);
    CHECK(memcmp(P, gate_PA, 8) == 0);
    return p;
}

static void test_prism_gate(void)
{
    const mvm_cost cost = test_cost(gate_sh.expert_bytes);
    cluster_buf cb;
    const mvm_cluster *c = gate_cluster(&cb);
    const double *A = gate_A, *B = gate_B, A3[8] = {27, 24, 3, 0, 0, 3, 24, 27}, none[8] = {0};
    const uint8_t *PA = gate_PA, *PB = gate_PB;
    const struct {
        const char *params;
        const double *second;
        uint64_t ret;
        const uint8_t *after;
    } cases[] = {
        {"horizon=1000000", A, 0, PA},      /* unchanged workload */
        {"horizon=1000000", A3, 0, PA},     /* the same distribution, 3× the tokens */
        {"horizon=1000000", none, 0, PA},   /* no token since the last change */
        {"horizon=1", B, 0, PA},            /* the shift does not pay back in 1 token */
        {"horizon=2000", B, 0, PA},         /* nor in 2000 (break-even 2081.7) */
        {"horizon=2200", B, 400000000, PB}, /* but in 2200 */
        {"horizon=0", B, 0, PA},            /* horizon 0: never migrates */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint8_t P[8];
        void *p = gate_first(&cost, c, cases[i].params, P);
        if (!p)
            return;
        CHECK(mvm_place_prism.place(p, c, cases[i].second, P) == cases[i].ret);
        CHECK(memcmp(P, cases[i].after, 8) == 0);
        if (cases[i].ret) { /* statistics restart at a change: B again is no change */
            CHECK(mvm_place_prism.place(p, c, B, P) == 0);
            CHECK(memcmp(P, PB, 8) == 0);
        }
        mvm_place_prism.destroy(p);
    }
}

/* Copies come from the nearest holder. 3 servers with 1, 2, 2 slots, 1 layer of 3 experts;
 * the incoming placement is s0 {0}, s1 {1,2}, s2 {1,2}; only server 0 has traffic, 9
 * calls of expert 1. Candidate: N = (1,2,2); tops s0 {1}, s1 and s2 {1,0} (cluster order
 * 1, 0, 2); 2 is uncovered; s0 would give up 1 (Δ = −9), s1 and s2 their 0 (Δ = 0, two
 * duplicates each): s1 -> {1,2}. So s0 {1}, s1 {1,2}, s2 {0,1}: expert 1 is added on s0,
 * expert 0 on s2. Links: 100 µs, 1 GB/s, except the copy direction 2 -> 0, rtt 1 s; 100 MB
 * experts. s0 copies 1 from s1: 1e-4 + 0.1 s (from s2 it would take 1.1 s); s2 copies 0
 * from s0: the same; T_mig = 0.1001 s. Saving: 9 remote calls become local, t_r = 108.192
 * µs each, over W = 9 tokens: break-even H = 0.1001 / 108.192e-6 = 925.2 tokens (with the
 * far copy 10167): H = 1000 migrates, 2 experts added. */
static void test_prism_nearest_copy(void)
{
    const mvm_pshape sh = {.n_layers = 1, .n_experts = 3, .top_k = 1, .n_embd = 2048,
                           .n_ff = 768, .pages_per_expert = 1, .expert_bytes = 100000000};
    const mvm_cost cost = test_cost(sh.expert_bytes);
    cluster_buf cb;
    const mvm_cluster *c = cluster(&cb, 3, (const uint32_t[]){1, 2, 2}, sh.expert_bytes, 1e-4,
                                   1e9);
    cb.rtt[2 * 3 + 0] = 1;
    const double freq[9] = {0, 9, 0, 0, 0, 0, 0, 0, 0};
    const uint8_t want[9] = {0, 1, 0, 0, 1, 1, 1, 1, 0};
    const char *params[2] = {"horizon=900", "horizon=1000"};
    for (int i = 0; i < 2; i++) {
        uint8_t P[9] = {1, 0, 0, 0, 1, 1, 0, 1, 1}, before[9];
        memcpy(before, P, sizeof P);
        void *p = make(&mvm_place_prism, &sh, &cost, params[i]);
        if (!p)
            return;
        CHECK(mvm_place_prism.place(p, c, freq, P) == (i ? 2 * sh.expert_bytes : 0));
        CHECK(memcmp(P, i ? want : before, sizeof P) == 0);
        mvm_place_prism.destroy(p);
    }
}

/* The copies from `from` to `to` into each server, from the nearest holder in `from`, one
 * after another: the longest server's sum (T_mig). */
static double move_time(const mvm_cluster *c, const uint8_t *from, const uint8_t *to,
                        uint32_t LE, uint64_t eb)
{
    const uint32_t S = c->n_servers;
    double worst = 0;
    for (uint32_t n = 0; n < S; n++) {
        double sum = 0;
        for (uint32_t x = 0; x < LE; x++) {
            if (!to[(size_t)n * LE + x] || from[(size_t)n * LE + x])
                continue;
            double best = INFINITY;
            for (uint32_t r = 0; r < S; r++)
                if (from[(size_t)r * LE + x])
                    best = fmin(best, c->rtt[(size_t)r * S + n] +
                                          (double)eb / c->bw[(size_t)r * S + n]);
            sum += best;
        }
        worst = fmax(worst, sum);
    }
    return worst;
}

/* A migration that lands: test_prism_gate's cluster (2 servers of 2 slots, 100 MB experts,
 * each copy 1e-4 + 0.1 s) moving from PA = s0 {0,1}, s1 {2,3} toward PB = s0 {2,3},
 * s1 {0,1} on workload B (W = 36 tokens; a remote call costs t_r = 108.192 µs more than a
 * local one). The whole move: 4 copies, T_mig = 0.2002 s, 32 calls made local; break-even
 * H = 0.2002 / (32 · t_r / 36) = 2081.7. Bounded to 0.15 s (period 0.15 s, land 1), each
 * server copies once, its most saving addition: s0 expert 3 (9 calls), s1 expert 0 (9).
 * Both are then over their 2 slots. Keepers: 0 by s1 and 3 by s0 (PB keeps them there); 1
 * and 2 have none, so their holders keep them. s0 may drop 0 only, s1 3 only: the part is
 * s0 {1,3}, s1 {0,2}, covering all four. T_mig = 0.1001 s, 18 calls made local and none
 * made remote (s0 calls 0 and s1 calls 3 zero times): break-even 0.1001 / (18 · t_r / 36) =
 * 1850.4. So at H = 2000 the bounded part migrates where the whole move does not, at 1800
 * neither does; a bound that the whole move fits (0.25 s) changes nothing, and land=0.5
 * halves it back to the part. */
static void test_prism_land(void)
{
    const mvm_cost cost = test_cost(gate_sh.expert_bytes);
    cluster_buf cb;
    const mvm_cluster *c = gate_cluster(&cb);
    const uint8_t *PA = gate_PA, *PB = gate_PB, part[8] = {0, 1, 0, 1, 1, 0, 1, 0};
    const struct {
        const char *params;
        double period_s;
        uint64_t ret;
        const uint8_t *after;
    } cases[] = {
        {"horizon=2000", 0, 0, PA},                   /* no period known: unbounded */
        {"horizon=2000", 0.15, 2 * 100000000ull, part},
        {"horizon=1800", 0.15, 0, PA},
        {"horizon=2000,land=0", 0.15, 0, PA},         /* bound off: the whole move */
        {"horizon=2200", 0.25, 4 * 100000000ull, PB}, /* the whole move fits */
        {"horizon=2200,land=0.5", 0.25, 2 * 100000000ull, part},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint8_t P[8];
        cb.c.period_s = 0;
        void *p = gate_first(&cost, c, cases[i].params, P);
        if (!p)
            return;
        cb.c.period_s = cases[i].period_s;
        CHECK(mvm_place_prism.place(p, c, gate_B, P) == cases[i].ret);
        CHECK(memcmp(P, cases[i].after, 8) == 0);
        mvm_place_prism.destroy(p);
    }
    cb.c.period_s = 0;
}

/* Several GPUs per server (Prism's per-GPU memory): server 0 has 3.5 experts' bytes on 2
 * GPUs, 1.75 each, so 1 expert each: 2 slots, where its bytes pooled would hold 3; server 1
 * 2.5 on one GPU: 2. One layer of 4 experts: exactly room for each once. Prism fills
 * server 0's 2 slots with its two GPUs (3 with one); Uniform, which places each expert
 * once, never holds more there than the slots. */
static void test_gpus(void)
{
    const mvm_pshape sh = {.n_layers = 1, .n_experts = 4, .top_k = 1, .n_embd = 2048,
                           .n_ff = 768, .pages_per_expert = 1, .expert_bytes = 1000};
    const mvm_cost cost = test_cost(sh.expert_bytes);
    cluster_buf cb;
    cluster(&cb, 2, (const uint32_t[]){3, 2}, 1000, 1e-4, 1e9); /* 3500 and 2500 bytes */
    const uint32_t two[2] = {2, 1};
    const double freq[8] = {9, 8, 7, 6, 1, 1, 1, 1};
    const mvm_place_ops *ops[2] = {&mvm_place_prism, &mvm_place_uniform};
    for (int m = 0; m < 2; m++)
        for (int g = 0; g < 2; g++) {
            cb.c.gpus = g ? two : NULL;
            CHECK(mvm_cluster_slots(&cb.c, 0, 1000) == (g ? 2u : 3u));
            void *p = make(ops[m], &sh, &cost, NULL);
            if (!p)
                return;
            uint8_t P[8] = {0};
            CHECK(ops[m]->place(p, &cb.c, freq, P) > 0);
            CHECK(held_by(P, 2, 4, 0) + held_by(P, 2, 4, 1) + held_by(P, 2, 4, 2) +
                  held_by(P, 2, 4, 3) >= 4);
            uint32_t on0 = layer_count(P, &sh, 0, 0);
            CHECK(m == 0 ? on0 == (g ? 2u : 3u) : on0 <= (g ? 2u : 3u)); /* prism fills */
            ops[m]->destroy(p);
        }
    cb.c.gpus = NULL;
}

/* ---- Uniform -------------------------------------------------------------------------- */

/* Round-robin: expert x = l·E + e on server x mod S. 3 servers with room, 2 layers of 4:
 * x = 0..7 -> servers 0 1 2 0 1 2 0 1. With server 0 holding one expert only (2 servers,
 * 1 layer of 4): x0 -> 0; x1 -> 1; x2's turn is server 0, full -> 1; x3 -> 1. Static:
 * later calls return 0 and change nothing, whatever the workload. */
static void test_uniform(void)
{
    const mvm_pshape sh = {.n_layers = 2, .n_experts = 4, .top_k = 1, .n_embd = 2048,
                           .n_ff = 768, .pages_per_expert = 1, .expert_bytes = 1000};
    const mvm_cost cost = test_cost(sh.expert_bytes);
    cluster_buf cb;
    const mvm_cluster *c = cluster(&cb, 3, (const uint32_t[]){8, 8, 8}, 1000, 1e-4, 1e9);
    double freq[24] = {0};
    uint8_t P[24] = {0};
    void *u = make(&mvm_place_uniform, &sh, &cost, NULL);
    if (!u)
        return;
    CHECK(mvm_place_uniform.place(u, c, freq, P) == 8 * 1000);
    for (uint32_t x = 0; x < 8; x++)
        for (uint32_t n = 0; n < 3; n++)
            CHECK(P[n * 8 + x] == (x % 3 == n));
    uint8_t before[24];
    memcpy(before, P, sizeof P);
    for (uint32_t i = 0; i < 24; i++)
        freq[i] = i % 5;
    CHECK(mvm_place_uniform.place(u, c, freq, P) == 0);
    CHECK(memcmp(P, before, sizeof P) == 0);
    mvm_place_uniform.destroy(u);

    const mvm_pshape sh1 = {.n_layers = 1, .n_experts = 4, .top_k = 1, .n_embd = 2048,
                            .n_ff = 768, .pages_per_expert = 1, .expert_bytes = 1000};
    c = cluster(&cb, 2, (const uint32_t[]){1, 10}, 1000, 1e-4, 1e9);
    uint8_t Q[8] = {0};
    u = make(&mvm_place_uniform, &sh1, &cost, NULL);
    if (!u)
        return;
    CHECK(mvm_place_uniform.place(u, c, freq, Q) == 4 * 1000);
    CHECK(holds(Q, &sh1, 0, 0, (const uint32_t[]){0}, 1));
    CHECK(holds(Q, &sh1, 1, 0, (const uint32_t[]){1, 2, 3}, 3));
    mvm_place_uniform.destroy(u);
}

static void test_params(void)
{
    const mvm_pshape sh = {.n_layers = 2, .n_experts = 4, .top_k = 1, .n_embd = 2048,
                           .n_ff = 768, .pages_per_expert = 1, .expert_bytes = 1000};
    const mvm_cost cost = test_cost(sh.expert_bytes);
    const char *bad[] = {"horizon=-1", "servers=0", "servers=2.5", "replicas=2", "horizon=x"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        mvm_pinit in = {.shape = &sh, .cost = &cost, .params = {bad[i]}};
        void *self = (void *)&in;
        CHECK_ST(mvm_place_prism.create(&in, &self), MVM_ERR_INVALID);
        CHECK(self == NULL);
    }
    mvm_pinit in = {.shape = &sh, .cost = &cost, .params = {"horizon=5"}};
    void *self = NULL;
    CHECK_ST(mvm_place_uniform.create(&in, &self), MVM_ERR_INVALID);
    mvm_pshape no_bytes = sh;
    no_bytes.expert_bytes = 0;
    in = (mvm_pinit){.shape = &no_bytes, .cost = &cost};
    CHECK_ST(mvm_place_prism.create(&in, &self), MVM_ERR_INVALID);
    CHECK_ST(mvm_place_uniform.create(&in, &self), MVM_ERR_INVALID);

    /* More servers than `servers`, or too little room: no placement, nothing written. */
    in = (mvm_pinit){.shape = &sh, .cost = &cost, .params = {"servers=2"}};
    cluster_buf cb;
    const mvm_cluster *c = cluster(&cb, 3, (const uint32_t[]){8, 8, 8}, 1000, 1e-4, 1e9);
    double freq[24] = {0};
    uint8_t P[24] = {0}, zero[24] = {0};
    const mvm_place_ops *ops[] = {&mvm_place_prism, &mvm_place_uniform};
    for (int m = 0; m < 2; m++) {
        CHECK_ST(ops[m]->create(&in, &self), MVM_OK);
        CHECK(ops[m]->place(self, c, freq, P) == 0);
        CHECK(memcmp(P, zero, sizeof P) == 0);
        c = cluster(&cb, 2, (const uint32_t[]){4, 3}, 1000, 1e-4, 1e9); /* 7 < 8 */
        CHECK(ops[m]->place(self, c, freq, P) == 0);
        CHECK(memcmp(P, zero, sizeof P) == 0);
        c = cluster(&cb, 3, (const uint32_t[]){8, 8, 8}, 1000, 1e-4, 1e9);
        ops[m]->destroy(self);
    }
}

/* ---- invariants on random instances ---------------------------------------------------- */

/* Random counts for one (server, layer): none, one-hot, or skewed. */
static void random_counts(double *f, uint32_t E)
{
    uint32_t kind = rnd(4), hot = rnd(E);
    for (uint32_t e = 0; e < E; e++)
        f[e] = kind == 0 ? 0 : kind == 1 ? (e == hot) * 10.0 : (double)(rnd(20) * rnd(3));
}

static void test_random(void)
{
    static uint8_t P[MAXS * 256], before[MAXS * 256];
    static double freq[MAXS * 256];
    for (int it = 0; it < 400; it++) {
        const uint32_t S = 1 + rnd(5), L = 1 + rnd(5), E = 1 + rnd(12), LE = L * E;
        const mvm_pshape sh = {.n_layers = L, .n_experts = E, .top_k = 1 + rnd(E < 3 ? E : 3),
                               .n_embd = 64, .n_ff = 32, .pages_per_expert = 1,
                               .expert_bytes = 1 + rnd(1000)};
        const mvm_cost cost = test_cost(sh.expert_bytes);
        uint32_t slots[MAXS], total = 0;
        for (uint32_t n = 0; n < S; n++) {
            slots[n] = rnd(LE + 3);
            total += slots[n] < LE ? slots[n] : LE;
        }
        cluster_buf cb;
        const mvm_cluster *c = cluster(&cb, S, slots, sh.expert_bytes, 1e-5 * rnd(10),
                                       1e6 * (1 + rnd(1000)));
        for (uint32_t n = 0; n < S * S; n++) /* heterogeneous links */
            cb.rtt[n] *= 1 + rnd(3), cb.bw[n] *= 1 + rnd(3);
        char params[64];
        const uint32_t land = rnd(3); /* 0: unbounded */
        snprintf(params, sizeof params, "horizon=%u,land=%u", rnd(3) ? rnd(100000) : 0, land);
        const mvm_place_ops *ops = rnd(4) ? &mvm_place_prism : &mvm_place_uniform;
        void *p = make(ops, &sh, &cost, ops == &mvm_place_prism ? params : NULL);
        if (!p)
            return;
        memset(P, 0, (size_t)S * LE);
        for (int call = 0; call < 4; call++) {
            for (uint32_t i = 0; i < S * L; i++)
                random_counts(freq + (size_t)i * E, E);
            memcpy(before, P, (size_t)S * LE);
            cb.c.period_s = call && rnd(2) ? 1e-6 * rnd(5000) : 0;
            uint64_t ret = ops->place(p, c, freq, P), added = 0;
            for (uint32_t i = 0; i < S * LE; i++)
                added += P[i] && !before[i];
            if (ret == 0) { /* kept: untouched */
                CHECK(memcmp(P, before, (size_t)S * LE) == 0);
            } else {
                CHECK(ret == added * sh.expert_bytes);
                int covered = 1; /* else nothing was kept: no gate, no bound */
                for (uint32_t x = 0; x < LE; x++)
                    covered &= held_by(before, S, LE, x) >= 1;
                if (ops == &mvm_place_prism && covered && land && cb.c.period_s > 0)
                    CHECK(move_time(c, before, P, LE, sh.expert_bytes) <=
                          land * cb.c.period_s * (1 + 1e-12));
            }
            if (total < LE) { /* infeasible: never any placement */
                CHECK(ret == 0);
                continue;
            }
            for (uint32_t x = 0; x < LE; x++)
                CHECK(held_by(P, S, LE, x) >= 1);
            for (uint32_t n = 0; n < S; n++) {
                uint32_t held = 0;
                for (uint32_t l = 0; l < L; l++)
                    held += layer_count(P, &sh, n, l);
                CHECK(held <= slots[n]);
                /* Prism uses every useful slot; Uniform holds each expert exactly once. */
                if (ops == &mvm_place_prism)
                    CHECK(held == (slots[n] < LE ? slots[n] : LE));
            }
            if (ops == &mvm_place_uniform)
                for (uint32_t x = 0; x < LE; x++)
                    CHECK(held_by(P, S, LE, x) == 1);
        }
        ops->destroy(p);
    }
}

/* ---- the cluster simulation ------------------------------------------------------------ */

static mvm_trace *new_trace(uint32_t n_tok, uint32_t L, uint32_t E, uint32_t K, uint64_t eb)
{
    mvm_trace_header h = {.model = "test", .arch = "test", .n_layers = L, .n_experts = E,
                          .top_k = K, .expert_bytes = eb, .n_embd = 2048, .n_ff_exp = 768,
                          .weights_renormalised = 1};
    mvm_trace *t = NULL;
    CHECK_ST(mvm_trace_new(&h, n_tok, 0, &t), MVM_OK);
    return t;
}

/* Token i of request req picks experts ex[0..K) at layer l (weights even, scores to
 * match). */
static void set_token(mvm_trace *t, uint32_t i, uint32_t req, uint32_t l, const uint32_t *ex)
{
    const uint32_t E = t->hdr.n_experts, K = t->hdr.top_k;
    t->req[i] = req;
    float *s = mvm_trace_scores(t, i, l);
    for (uint32_t e = 0; e < E; e++)
        s[e] = 0;
    for (uint32_t k = 0; k < K; k++) {
        mvm_trace_experts(t, i, l)[k] = (int32_t)ex[k];
        mvm_trace_weights(t, i, l)[k] = 1.0f / (float)K;
        s[ex[k]] = 1.0f / (float)K;
    }
}

/* 2 servers, 1 layer of 2 experts, top-1; Uniform puts expert 0 on server 0 and expert 1
 * on server 1. Tokens (home, expert): (0, e0) local; (1, e0) twice, remote on server 0;
 * (1, e1) local. Local token: ll = attn + g(1); remote: lr = ll + t_r, t_r = 100 µs +
 * 2·2048·2 B / 1 GB/s. Local share 1/2, mean latency ll + t_r / 2; server 0 runs 3 calls,
 * server 1 one. Time: tokens 0 and 1 start at 0 on their servers; token 2 waits for server
 * 1 (start lr), token 3 too (start 2·lr) and ends last, at 2·lr + ll. Server 1's tokens
 * average (2·lr + ll) / 3. */
static void test_sim_closed_form(void)
{
    const uint64_t eb = 1u << 20;
    mvm_trace *t = new_trace(4, 1, 2, 1, eb);
    if (!t)
        return;
    const uint32_t req[4] = {0, 1, 1, 1}, ex[4] = {0, 0, 0, 1};
    for (uint32_t i = 0; i < 4; i++)
        set_token(t, i, req[i], 0, &ex[i]);
    mvm_cost cost = test_cost(eb);
    cluster_buf cb;
    const mvm_cluster *c = cluster(&cb, 2, (const uint32_t[]){1, 1}, eb, 1e-4, 1e9);
    mvm_sim_cluster_result r;
    CHECK_ST(mvm_sim_cluster_run(t, &cost, c, "uniform", NULL, 1, &r), MVM_OK);
    const double g = mvm_cost_gpu(&cost, 1), tr = 1e-4 + 2.0 * 2048 * 2 / 1e9;
    const double ll = cost.m.attn_time + g, lr = ll + tr;
    CHECK(r.tokens == 4 && r.calls == 4 && r.local_calls == 2);
    CHECK(fabs(r.local_share - 0.5) < 1e-15);
    CHECK(fabs(r.mean_latency - (ll + tr / 2)) < 1e-15);
    CHECK(fabs(r.time - (2 * lr + ll)) < 1e-15);
    CHECK(r.served[0] == 3 && r.served[1] == 1);
    CHECK(r.home_tokens[0] == 1 && r.home_tokens[1] == 3);
    CHECK(fabs(r.home_latency[0] - ll) < 1e-15);
    CHECK(fabs(r.home_latency[1] - (2 * lr + ll) / 3) < 1e-15);
    CHECK(r.placements == 4 && r.migrations == 0 && r.bytes_migrated == 0);
    mvm_sim_cluster_result_free(&r);
    CHECK(r.served == NULL);
    mvm_trace_free(t);
}

/* A workload with a task per server: 30 requests at a time, their tokens in turn, 7 each,
 * then 30 new ones; request r is homed on server r mod 3; a token of server
 * s picks, at layer l, each of its top_k experts from the 3 "hot" experts (3s + l + j) mod
 * E (j = 0..2) with probability .9, else from all. */
static mvm_trace *skewed_trace(uint32_t n_tok, uint32_t L, uint32_t E, uint64_t eb)
{
    mvm_trace *t = new_trace(n_tok, L, E, 2, eb);
    if (!t)
        return NULL;
    for (uint32_t i = 0; i < n_tok; i++) {
        uint32_t req = i % 30 + 30 * (i / 210), s = req % 3;
        for (uint32_t l = 0; l < L; l++) {
            uint32_t ex[2];
            for (uint32_t k = 0; k < 2;) {
                uint32_t e = rnd(10) < 9 ? (3 * s + l + rnd(3)) % E : rnd(E);
                if (k == 0 || ex[0] != e)
                    ex[k++] = e;
            }
            set_token(t, i, req, l, ex);
        }
    }
    return t;
}

static void test_sim_prism_vs_uniform(void)
{
    const uint64_t eb = 4000000; /* 4 MB: a copy of 4 ms at 1 GB/s */
    const uint32_t L = 4, E = 8;
    mvm_trace *t = skewed_trace(3000, L, E, eb);
    if (!t)
        return;
    mvm_cost cost = test_cost(eb);
    cluster_buf cb;
    const mvm_cluster *c = cluster(&cb, 3, (const uint32_t[]){12, 12, 12}, eb, 50e-6, 1e9);
    mvm_sim_cluster_result u, p, p0;
    CHECK_ST(mvm_sim_cluster_run(t, &cost, c, "uniform", NULL, 300, &u), MVM_OK);
    CHECK_ST(mvm_sim_cluster_run(t, &cost, c, "prism", "horizon=100000", 300, &p), MVM_OK);
    CHECK_ST(mvm_sim_cluster_run(t, &cost, c, "prism", "horizon=0", 300, &p0), MVM_OK);
    fprintf(stderr, "  uniform: local %.3f, %.1f us/token; prism: local %.3f, %.1f us/token, "
            "%u migrations, %llu bytes\n", u.local_share, u.mean_latency * 1e6, p.local_share,
            p.mean_latency * 1e6, p.migrations, (unsigned long long)p.bytes_migrated);
    CHECK(p.local_share > u.local_share + 0.2);
    CHECK(p.mean_latency < u.mean_latency);
    CHECK(p.migrations >= 1 && p.bytes_migrated > 0 && p.bytes_migrated % eb == 0);
    CHECK(p.t_migration > 0);
    CHECK(u.migrations == 0 && u.bytes_migrated == 0 && u.placements == 10);
    CHECK(p0.migrations == 0 && p0.bytes_migrated == 0);
    CHECK(p.local_share > p0.local_share);
    uint64_t served = 0, homed = 0;
    for (uint32_t n = 0; n < 3; n++)
        served += p.served[n], homed += p.home_tokens[n];
    CHECK(served == p.calls && homed == p.tokens && p.calls == 3000ull * L * 2);
    mvm_sim_cluster_result_free(&u);
    mvm_sim_cluster_result_free(&p);
    mvm_sim_cluster_result_free(&p0);

    /* Room for the whole model on every server: Prism holds everything everywhere from the
     * first call, every call is local and a token costs L · (attn + g(1)). */
    c = cluster(&cb, 3, (const uint32_t[]){L * E, L * E + 5, L * E}, eb, 50e-6, 1e9);
    CHECK_ST(mvm_sim_cluster_run(t, &cost, c, "prism", NULL, 300, &p), MVM_OK);
    CHECK(p.local_calls == p.calls && p.local_share == 1.0);
    CHECK(fabs(p.mean_latency - L * (cost.m.attn_time + mvm_cost_gpu(&cost, 1))) < 1e-12);
    CHECK(p.migrations == 0 && p.bytes_migrated == 0);
    mvm_sim_cluster_result_free(&p);
    mvm_trace_free(t);
}

/* The workload of the migration tests: 400 tokens of 1 layer of 4 experts of eb bytes,
 * top-1, alternating between the homes (request i mod 2); server 0's pick experts 0 and 1
 * in turn, server 1's 2 and 3. */
static mvm_trace *alternating_trace(uint64_t eb)
{
    mvm_trace *t = new_trace(400, 1, 4, 1, eb);
    for (uint32_t i = 0; t && i < 400; i++)
        set_token(t, i, i % 2, 0, (const uint32_t[]){(i % 2) * 2 + (i / 2) % 2});
    return t;
}

/* A migration takes effect only when its copies are done. 2 servers × 2 slots, 1 layer
 * of 4 experts, top-1; tokens alternate between the homes (request i mod 2); server 0's
 * pick experts 0 and 1 in turn, server 1's 2 and 3. With no statistics Prism's first
 * placement is server 0 {2,3}, server 1 {0,1} (tops {0,1} on both; then ties at Δ = 0
 * and equal duplicates go to server 0: 1 -> 2, then 0 -> 3): every call is remote.
 * Token i starts at ⌊i/2⌋ · lr (the two servers in parallel, lr = attn + g + t_r). At
 * token P = 100 (t0 = 50·lr) the statistics ask for the swap; each server receives 2
 * experts from the other: T_mig = 2 · (rtt + expert_bytes / bw). Tokens i >= P with
 * start ⌊(i−P)/2⌋·lr < T_mig are still remote: 2·⌈T_mig/lr⌉ of them (T_mig/lr is kept
 * away from a whole number). Every later call keeps the placement. */
static void test_sim_migration_delay(void)
{
    const uint64_t eb = 909000;
    const uint32_t n_tok = 400, P = 100;
    mvm_trace *t = alternating_trace(eb);
    if (!t)
        return;
    mvm_cost cost = test_cost(eb);
    cluster_buf cb;
    const mvm_cluster *c = cluster(&cb, 2, (const uint32_t[]){2, 2}, eb, 1e-4, 1e9);
    const double g = mvm_cost_gpu(&cost, 1), tr = 1e-4 + 2.0 * 2048 * 2 / 1e9;
    const double ll = cost.m.attn_time + g, lr = ll + tr, t_mig = 2 * (1e-4 + eb / 1e9);
    const double m = t_mig / lr;
    CHECK(m - floor(m) > 0.2 && m - floor(m) < 0.8 && m < P / 2 - 1);
    const uint32_t remote = P + 2 * (uint32_t)ceil(m);
    mvm_sim_cluster_result r;
    CHECK_ST(mvm_sim_cluster_run(t, &cost, c, "prism", "horizon=1000000000", P, &r), MVM_OK);
    CHECK(r.placements == 4 && r.migrations == 1 && r.bytes_migrated == 4 * eb);
    CHECK(fabs(r.t_migration - t_mig) < 1e-15);
    CHECK(r.calls == n_tok && r.local_calls == n_tok - remote);
    CHECK(fabs(r.mean_latency - (remote * lr + (n_tok - remote) * ll) / n_tok) < 1e-15);
    mvm_sim_cluster_result_free(&r);
    mvm_trace_free(t);
}

/* The simulator tells the module the simulated seconds since its last call, so prism's
 * bound applies there too: test_sim_migration_delay's workload with 8 MB experts, each copy
 * 8.1 ms, a period of 100 tokens about 8–11 ms. Unbounded (land=0), one migration copies
 * all four (2 into each server, 16.2 ms, landing late); bounded, each migration copies one
 * expert into each server, which lands within the next period, and more calls are local
 * (0.375 against 0.335). */
static void test_sim_migration_bounded(void)
{
    const uint64_t eb = 8000000;
    const uint32_t P = 100;
    mvm_trace *t = alternating_trace(eb);
    if (!t)
        return;
    mvm_cost cost = test_cost(eb);
    cluster_buf cb;
    const mvm_cluster *c = cluster(&cb, 2, (const uint32_t[]){2, 2}, eb, 1e-4, 1e9);
    const double one = 1e-4 + eb / 1e9;
    mvm_sim_cluster_result whole, part;
    CHECK_ST(mvm_sim_cluster_run(t, &cost, c, "prism", "horizon=1000000000,land=0", P, &whole),
             MVM_OK);
    CHECK(whole.migrations == 1 && whole.bytes_migrated == 4 * eb);
    CHECK(fabs(whole.t_migration - 2 * one) < 1e-12);
    CHECK_ST(mvm_sim_cluster_run(t, &cost, c, "prism", "horizon=1000000000", P, &part), MVM_OK);
    CHECK(part.migrations >= 1 && part.bytes_migrated >= 2 * eb);
    CHECK(fabs(part.t_migration - part.migrations * one) < 1e-12); /* one copy a server */
    CHECK(part.local_share > whole.local_share);
    fprintf(stderr, "  local share: whole move %.3f, bounded %.3f (%u migrations)\n",
            whole.local_share, part.local_share, part.migrations);
    mvm_sim_cluster_result_free(&whole);
    mvm_sim_cluster_result_free(&part);
    mvm_trace_free(t);
}

/* A remote call goes to the nearest holder. 3 servers, server 0 without room; 1 layer of
 * 2 experts, both on servers 1 and 2 (Prism fills their 2 slots each). Every token is
 * homed on server 0 and runs remotely on server 2, whose link is faster (rtt 100 µs
 * against 1 ms): attn + g(1) + 100 µs + 2·2048·2 B / 1 GB/s per token. period 0: one
 * placement only. */
static void test_sim_nearest(void)
{
    const uint64_t eb = 1000;
    mvm_trace *t = new_trace(10, 1, 2, 1, eb);
    if (!t)
        return;
    for (uint32_t i = 0; i < 10; i++)
        set_token(t, i, 3 * i, 0, (const uint32_t[]){i % 2});
    mvm_cost cost = test_cost(eb);
    cluster_buf cb;
    const mvm_cluster *c = cluster(&cb, 3, (const uint32_t[]){0, 2, 2}, eb, 1e-4, 1e9);
    cb.rtt[0 * 3 + 1] = 1e-3;
    mvm_sim_cluster_result r;
    CHECK_ST(mvm_sim_cluster_run(t, &cost, c, "prism", NULL, 0, &r), MVM_OK);
    const double want = cost.m.attn_time + mvm_cost_gpu(&cost, 1) + 1e-4 + 2.0 * 2048 * 2 / 1e9;
    CHECK(r.placements == 1 && r.local_calls == 0);
    CHECK(r.served[0] == 0 && r.served[1] == 0 && r.served[2] == 10);
    CHECK(fabs(r.mean_latency - want) < 1e-15);
    mvm_sim_cluster_result_free(&r);
    mvm_trace_free(t);
}

static void test_sim_errors(void)
{
    const uint64_t eb = 1000;
    mvm_trace *t = new_trace(4, 1, 2, 1, eb);
    if (!t)
        return;
    for (uint32_t i = 0; i < 4; i++)
        set_token(t, i, i, 0, (const uint32_t[]){i % 2});
    mvm_cost cost = test_cost(eb);
    cluster_buf cb;
    const mvm_cluster *c = cluster(&cb, 2, (const uint32_t[]){1, 1}, eb, 1e-4, 1e9);
    mvm_sim_cluster_result r;
    CHECK_ST(mvm_sim_cluster_run(t, &cost, c, "nosuch", NULL, 1, &r), MVM_ERR_INVALID);
    CHECK_ST(mvm_sim_cluster_run(t, &cost, c, "prism", "horizon=-2", 1, &r), MVM_ERR_INVALID);
    CHECK(r.served == NULL && r.tokens == 0);
    /* More servers than the module accepts: its first placement is empty. */
    CHECK_ST(mvm_sim_cluster_run(t, &cost, c, "uniform", "servers=1", 1, &r), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "servers") != NULL);
    c = cluster(&cb, 2, (const uint32_t[]){1, 0}, eb, 1e-4, 1e9); /* 1 slot, 2 experts */
    CHECK_ST(mvm_sim_cluster_run(t, &cost, c, "prism", NULL, 1, &r), MVM_ERR_INVALID);
    /* 1.5 experts' bytes each: room for both experts, but not once server 0's are split
     * over 2 GPUs (0.75 each: none). */
    c = cluster(&cb, 2, (const uint32_t[]){1, 1}, eb, 1e-4, 1e9);
    CHECK_ST(mvm_sim_cluster_run(t, &cost, c, "prism", NULL, 1, &r), MVM_OK);
    mvm_sim_cluster_result_free(&r);
    cb.c.gpus = (const uint32_t[]){2, 1};
    CHECK_ST(mvm_sim_cluster_run(t, &cost, c, "prism", NULL, 1, &r), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "room for 1 experts in all") != NULL);
    cb.c.gpus = NULL;
    c = cluster(&cb, 2, (const uint32_t[]){1, 1}, eb, 1e-4, 0); /* no bandwidth */
    CHECK_ST(mvm_sim_cluster_run(t, &cost, c, "prism", NULL, 1, &r), MVM_ERR_INVALID);
    mvm_trace_free(t);
}

int main(void)
{
    RUN(test_prism_hand);
    RUN(test_prism_no_statistics);
    RUN(test_prism_cap);
    RUN(test_prism_gate);
    RUN(test_prism_nearest_copy);
    RUN(test_prism_land);
    RUN(test_gpus);
    RUN(test_uniform);
    RUN(test_params);
    RUN(test_random);
    RUN(test_sim_closed_form);
    RUN(test_sim_prism_vs_uniform);
    RUN(test_sim_migration_delay);
    RUN(test_sim_migration_bounded);
    RUN(test_sim_nearest);
    RUN(test_sim_errors);
    TEST_END();
}
