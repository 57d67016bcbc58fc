/*
 * The distributed mode over MPI (dist.h). Every message is bytes on MPI_COMM_WORLD:
 *
 *   leader -> server, TAG_OP:  u32 {op, a, b, c} and the op's body
 *     OP_EXPERTS  a = layer, b = n_tok, c = n_exp; {u32 expert, u32 rows} x n_exp;
 *                 {u32 token, f32 weight} x rows, grouped by expert in that order;
 *                 f32 hidden[n_tok][n_embd]
 *     OP_MIGRATE  a = n_moves; {u32 expert (l*E+e), u32 from, u32 to} x n_moves;
 *                 u8 placement[ranks][L*E], the new one
 *     OP_STOP
 *   server -> leader, TAG_REPLY (to OP_EXPERTS): u32 {status, n_tok}; f32 [n_tok][n_embd],
 *                 each token's weighted sum of its rows there
 *   holder -> receiver, TAG_WEIGHTS: an expert's packed weights, home to home
 *
 * MPI's order between a pair of ranks keeps it simple: a migration is over on a server
 * before it reads the next request. Only the main thread calls MPI (MPI_THREAD_FUNNELED).
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/compute/clock.h"
#include "engine/dist/dist.h"
#include "engine/forward/experts_cpu.h"
#include "engine/forward/moe_step.h"
#include "policy/policy.h"
#include "vmm/error.h"

enum { TAG_OP = 1, TAG_REPLY, TAG_WEIGHTS, TAG_PING };
enum { OP_EXPERTS = 1, OP_MIGRATE, OP_STOP };

/* A server's part of the leader's step under way. */
struct peer {
    uint8_t *req, *rep;
    size_t req_cap, rep_cap;
    uint32_t n_tok, n_exp, rows;
    int32_t *tok_of;            /* [n_batch] the token's index in the request, or -1 */
    uint32_t *toks;             /* [n_batch] the request's tokens */
    MPI_Request r[2];           /* the request's send, the reply's receive */
};

struct mvm_dist {
    int rank, size;
    uint32_t L, E, D, LE, n_batch;
    uint64_t slot_bytes;        /* the model's expert_bytes: one slot of a rank's memory */
    uint64_t *cap;              /* [S] bytes of experts per rank */
    double *rtt, *bw;           /* [S][S] measured */
    uint8_t *placement;         /* [S][L*E] */
    uint8_t *next;              /* [S][L*E] a candidate */
    uint8_t *remote;            /* [L*E] the leader's: held elsewhere */
    double *freq;               /* [S][L*E] the step counts since the module's last call */
    const mvm_place_ops *ops;
    void *self;
    mvm_cost cost;
    uint32_t period, since;
    double last_place;          /* mvm_now_s() of the module's last call */
    struct peer *peer;          /* [S] */
    uint32_t *load;             /* [S] rows of the step so far */
    uint32_t *choice;           /* [E] the rank computing each remote expert of the step */
    uint32_t *held_count;       /* [S] */
    int stopped;
    mvm_dist_stats stats;
    mvm_elsewhere elsewhere;    /* the leader's context computes remote experts through it */
};

/* The buffer *p of *cap bytes grown to hold n. */
static int grow(uint8_t **p, size_t *cap, size_t n)
{
    if (n <= *cap)
        return 1;
    uint8_t *q = realloc(*p, n);
    if (!q)
        return 0;
    *p = q;
    *cap = n;
    return 1;
}

static int fits_int(size_t n) { return n <= (size_t)0x7fffffff; }

/* ---- joining and agreeing ---------------------------------------------------------------- */

mvm_status mvm_dist_init(mvm_dist **out)
{
    *out = NULL;
    if (!mvm_dist_launched())
        return MVM_OK;
    int provided, inited;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return mvm_fail(MVM_ERR_BACKEND, "MPI_Init_thread failed");
    mvm_dist *d = calloc(1, sizeof *d);
    if (!d)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the distributed mode");
    MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &d->size);
    d->stats.ranks = (uint32_t)d->size;
    *out = d;
    return MVM_OK;
}

void mvm_dist_finish(mvm_dist *d, int abort_job)
{
    if (!d)
        return;
    if (abort_job) /* a rank that fails alone: the others may be waiting for it */
        MPI_Abort(MPI_COMM_WORLD, 1);
    if (d->self)
        d->ops->destroy(d->self);
    for (int p = 0; d->peer && p < d->size; p++) {
        free(d->peer[p].req);
        free(d->peer[p].rep);
        free(d->peer[p].tok_of);
        free(d->peer[p].toks);
    }
    void *a[] = {d->cap, d->rtt, d->bw, d->placement, d->next, d->remote, d->freq, d->peer,
                 d->load, d->choice, d->held_count};
    for (size_t i = 0; i < sizeof a / sizeof *a; i++)
        free(a[i]);
    free(d);
    MPI_Finalize();
}

uint32_t mvm_dist_rank(const mvm_dist *d) { return (uint32_t)d->rank; }
uint32_t mvm_dist_size(const mvm_dist *d) { return (uint32_t)d->size; }

int mvm_dist_agree_rc(mvm_dist *d, int rc)
{
    (void)d; /* the job is MPI_COMM_WORLD */
    int worst;
    MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return worst;
}

mvm_status mvm_dist_agree(mvm_dist *d, mvm_status mine)
{
    int bad = mine != MVM_OK ? d->rank : d->size, first;
    MPI_Allreduce(&bad, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first == d->size)
        return MVM_OK;
    char msg[400] = "";
    int code = (int)mine;
    if (d->rank == first)
        snprintf(msg, sizeof msg, "%s", mvm_last_error());
    MPI_Bcast(msg, sizeof msg, MPI_CHAR, first, MPI_COMM_WORLD);
    MPI_Bcast(&code, 1, MPI_INT, first, MPI_COMM_WORLD);
    msg[sizeof msg - 1] = 0;
    if (first == 0) /* the leader's: what a single process would have said */
        return mvm_fail((mvm_status)code, "%s", msg);
    return mvm_fail((mvm_status)code, "rank %d: %s", first, msg);
}

/* ---- the cluster: links, capacities, placements ----------------------------------------- */

/* One ping-pong: the leading side sends n bytes and gets one back; the other the reverse. */
static void exchange(int lead, int other, uint8_t *buf, int n)
{
    uint8_t ack = 0;
    if (lead) {
        MPI_Send(buf, n, MPI_BYTE, other, TAG_PING, MPI_COMM_WORLD);
        MPI_Recv(&ack, 1, MPI_BYTE, other, TAG_PING, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(buf, n, MPI_BYTE, other, TAG_PING, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(&ack, 1, MPI_BYTE, other, TAG_PING, MPI_COMM_WORLD);
    }
}

/* Ping-pong between every pair, every rank taking its pairs in the same order: the round
 * trip is the best of 8 one-byte exchanges, the bandwidth the best of 3 one-way MiB sends,
 * each acknowledged by one byte. Symmetric: measured once per pair. Collective. */
static mvm_status measure_links(mvm_dist *d)
{
    const int S = d->size, MiB = 1 << 20;
    double *rtt = calloc((size_t)S * S, sizeof *rtt), *bw = calloc((size_t)S * S, sizeof *bw);
    uint8_t *buf = calloc(MiB, 1), one = 0;
    mvm_status st = rtt && bw && buf ? MVM_OK
                                     : mvm_fail(MVM_ERR_NOMEM, "out of memory to measure links");
    st = mvm_dist_agree(d, st); /* a rank missing here would leave its pairs waiting */
    for (int i = 0; i < (st == MVM_OK ? S : 0); i++)
        for (int j = i + 1; j < S; j++) {
            if (d->rank != i && d->rank != j)
                continue;
            int other = d->rank == i ? j : i, lead = d->rank == i;
            double best = INFINITY, fast = INFINITY;
            for (int k = 0; k < 10; k++) { /* the first two warm the path up */
                double t0 = mvm_now_s();
                exchange(lead, other, &one, 1);
                if (k >= 2 && mvm_now_s() - t0 < best)
                    best = mvm_now_s() - t0;
            }
            for (int k = 0; k < 3; k++) {
                double t0 = mvm_now_s();
                exchange(lead, other, buf, MiB);
                double t = mvm_now_s() - t0 - best / 2;
                fast = t > 0 && t < fast ? t : fast;
            }
            if (lead) {
                rtt[(size_t)i * S + j] = rtt[(size_t)j * S + i] = best;
                bw[(size_t)i * S + j] = bw[(size_t)j * S + i] = isfinite(fast) ? MiB / fast : 1e12;
            }
        }
    if (st == MVM_OK) {
        MPI_Allreduce(rtt, d->rtt, S * S, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(bw, d->bw, S * S, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    }
    free(rtt);
    free(bw);
    free(buf);
    return st;
}

/* Whether placement p covers every expert within every rank's capacity. */
static mvm_status check_placement(const mvm_dist *d, const uint8_t *p, const char *who)
{
    for (uint32_t x = 0; x < d->LE; x++) {
        int on = 0;
        for (int s = 0; s < d->size; s++)
            on |= p[(size_t)s * d->LE + x];
        if (!on)
            return mvm_fail(MVM_ERR_INVALID, "place %s: expert %u of layer %u is on no rank",
                            who, x % d->E, x / d->E);
    }
    for (int s = 0; s < d->size; s++) {
        uint64_t n = 0;
        for (uint32_t x = 0; x < d->LE; x++)
            n += p[(size_t)s * d->LE + x];
        if (n * d->slot_bytes > d->cap[s])
            return mvm_fail(MVM_ERR_INVALID, "place %s: rank %d holds %llu experts, room for "
                            "%llu", who, s, (unsigned long long)n,
                            (unsigned long long)(d->cap[s] / d->slot_bytes));
    }
    return MVM_OK;
}

static void count_held(mvm_dist *d)
{
    for (int s = 0; s < d->size; s++) {
        d->held_count[s] = 0;
        for (uint32_t x = 0; x < d->LE; x++)
            d->held_count[s] += d->placement[(size_t)s * d->LE + x];
    }
    for (uint32_t x = 0; x < d->LE; x++)
        d->remote[x] = !d->placement[x];
}

/* The leader: asks the module for a placement into d->next. 1 when it differs from the
 * current one (the first call always adopts: nothing was placed). */
static int choose_placement(mvm_dist *d, mvm_status *st)
{
    const double now = mvm_now_s();
    mvm_cluster c = {.n_servers = (uint32_t)d->size, .capacity_bytes = d->cap, .rtt = d->rtt,
                     .bw = d->bw, .period_s = d->stats.placements ? now - d->last_place : 0};
    d->last_place = now;
    size_t n = (size_t)d->size * d->LE;
    memcpy(d->next, d->placement, n);
    uint64_t added = d->ops->place(d->self, &c, d->freq, d->next);
    memset(d->freq, 0, n * sizeof *d->freq);
    d->stats.placements++;
    *st = MVM_OK;
    if (!added)
        return 0;
    if ((*st = check_placement(d, d->next, d->ops->name)) != MVM_OK)
        return 0;
    return memcmp(d->next, d->placement, n) != 0;
}

static mvm_status setup(mvm_dist *d, const mvm_model *m, const mvm_dist_params *p)
{
    const uint32_t S = (uint32_t)d->size;
    d->L = m->hp.n_layer;
    d->E = m->hp.n_expert;
    d->D = m->hp.n_embd;
    d->LE = d->L * d->E;
    d->slot_bytes = m->expert_bytes;
    d->period = p->period;
    size_t n = (size_t)S * d->LE;
    d->cap = calloc(S, sizeof *d->cap);
    d->rtt = calloc((size_t)S * S, sizeof *d->rtt);
    d->bw = calloc((size_t)S * S, sizeof *d->bw);
    d->placement = calloc(n, 1);
    d->next = calloc(n, 1);
    d->remote = calloc(d->LE, 1);
    d->freq = calloc(n, sizeof *d->freq);
    d->peer = calloc(S, sizeof *d->peer);
    d->load = calloc(S, sizeof *d->load);
    d->choice = calloc(d->E, sizeof *d->choice);
    d->held_count = calloc(S, sizeof *d->held_count);
    if (!d->cap || !d->rtt || !d->bw || !d->placement || !d->next || !d->remote || !d->freq ||
        !d->peer || !d->load || !d->choice || !d->held_count)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the distributed mode");
    d->stats.held = d->held_count;
    memcpy(d->cap, p->capacity_bytes, S * sizeof *d->cap);
    uint64_t slots = 0;
    for (uint32_t s = 0; s < S; s++)
        slots += d->cap[s] / d->slot_bytes;
    if (slots < d->LE)
        return mvm_fail(MVM_ERR_INVALID, "--server-mem: the %u ranks have room for %llu "
                        "experts of %.2f MiB, the model has %u: every expert must be on some "
                        "rank", S, (unsigned long long)slots, (double)d->slot_bytes / 1048576.0,
                        d->LE);
    const char *name = p->place ? p->place : "prism";
    if (!(d->ops = mvm_policy_find(MVM_ROLE_PLACE, name))) {
        char names[256];
        mvm_policy_names(MVM_ROLE_PLACE, names, sizeof names);
        return mvm_fail(MVM_ERR_INVALID, "no place policy '%s' (available: %s)", name, names);
    }
    mvm_cost_init(&d->cost, p->machine, d->slot_bytes, d->D, m->hp.n_ff_exp);
    mvm_pshape shape = {.n_layers = d->L, .n_experts = d->E, .top_k = m->hp.n_expert_used,
                        .n_embd = d->D, .n_ff = m->hp.n_ff_exp, .pages_per_expert = 1,
                        .expert_bytes = d->slot_bytes};
    mvm_pinit init = {.shape = &shape, .cost = &d->cost, .params = {p->place_args}};
    return d->ops->create(&init, &d->self);
}

mvm_status mvm_dist_plan(mvm_dist *d, const mvm_model *probe, const mvm_dist_params *p,
                         const uint8_t **held)
{
    /* Every rank checks the same arguments, so all agree on the cluster before the links
     * are measured; the placement is the leader's alone. */
    mvm_status st = mvm_dist_agree(d, setup(d, probe, p));
    if (st != MVM_OK)
        return st;
    if ((st = measure_links(d)) != MVM_OK)
        return st;
    if (d->rank == 0 && choose_placement(d, &st))
        memcpy(d->placement, d->next, (size_t)d->size * d->LE);
    else if (d->rank == 0 && st == MVM_OK)
        st = mvm_fail(MVM_ERR_INVALID, "place %s: made no placement", d->ops->name);
    if ((st = mvm_dist_agree(d, st)) != MVM_OK)
        return st;
    MPI_Bcast(d->placement, d->size * (int)d->LE, MPI_BYTE, 0, MPI_COMM_WORLD);
    count_held(d);
    *held = d->placement + (size_t)d->rank * d->LE;
    return MVM_OK;
}

/* ---- migration: every rank, the leader's OP_MIGRATE in hand ------------------------------ */

/* Releases a dropped expert's home memory (host homes are shared memfd pages; on a home
 * that cannot be released the memory only stays). */
static void release_home(const mvm_model *m, uint32_t x)
{
    uint8_t *home = mvm_expert_home(m->space, x / m->hp.n_expert, x % m->hp.n_expert);
    size_t page = (size_t)sysconf(_SC_PAGESIZE), n = m->expert_bytes / page * page;
    if (home && n)
        (void)madvise(home, n, MADV_REMOVE);
}

static mvm_status migrate(mvm_dist *d, const mvm_model *m, const uint32_t *moves,
                          uint32_t n_moves, const uint8_t *next)
{
    MPI_Request *r = malloc(((size_t)n_moves + 1) * sizeof *r);
    if (!r)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for a migration");
    int n_req = 0;
    for (uint32_t i = 0; i < n_moves; i++) {
        uint32_t x = moves[3 * i], from = moves[3 * i + 1], to = moves[3 * i + 2];
        uint32_t l = x / d->E;
        void *home = mvm_expert_home(m->space, l, x % d->E);
        int bytes = (int)mvm_layer_expert_bytes(&m->layers[l], d->D);
        if (from == (uint32_t)d->rank)
            MPI_Isend(home, bytes, MPI_BYTE, (int)to, TAG_WEIGHTS, MPI_COMM_WORLD, &r[n_req++]);
        else if (to == (uint32_t)d->rank)
            MPI_Irecv(home, bytes, MPI_BYTE, (int)from, TAG_WEIGHTS, MPI_COMM_WORLD,
                      &r[n_req++]);
        d->stats.migrated_bytes += (uint64_t)bytes;
    }
    MPI_Waitall(n_req, r, MPI_STATUSES_IGNORE);
    free(r);
    const uint8_t *mine = next + (size_t)d->rank * d->LE;
    for (uint32_t x = 0; x < d->LE; x++)
        if (d->placement[(size_t)d->rank * d->LE + x] && !mine[x])
            release_home(m, x);
    memcpy(d->placement, next, (size_t)d->size * d->LE);
    count_held(d);
    return MVM_OK;
}

/* The leader: carries out d->next, each added expert sent by the holder nearest to its new
 * rank (the smallest rtt + bytes / bw). */
static mvm_status start_migration(mvm_dist *d, const mvm_model *m)
{
    const uint32_t S = (uint32_t)d->size, LE = d->LE;
    uint32_t n_moves = 0;
    for (size_t i = 0; i < (size_t)S * LE; i++)
        n_moves += d->next[i] && !d->placement[i];
    size_t len = 16 + (size_t)n_moves * 12 + (size_t)S * LE;
    uint8_t *msg = malloc(len);
    if (!msg || !fits_int(len)) {
        free(msg);
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for a migration of %u experts", n_moves);
    }
    uint32_t hdr[4] = {OP_MIGRATE, n_moves, 0, 0}, *moves = (uint32_t *)(msg + 16), k = 0;
    memcpy(msg, hdr, sizeof hdr);
    for (uint32_t to = 0; to < S; to++)
        for (uint32_t x = 0; x < LE; x++) {
            if (!d->next[(size_t)to * LE + x] || d->placement[(size_t)to * LE + x])
                continue;
            uint32_t from = 0;
            double best = INFINITY;
            for (uint32_t s = 0; s < S; s++) {
                double t = d->rtt[(size_t)s * S + to] + (double)d->slot_bytes / d->bw[s * S + to];
                if (d->placement[(size_t)s * LE + x] && t < best)
                    best = t, from = s;
            }
            moves[3 * k] = x, moves[3 * k + 1] = from, moves[3 * k + 2] = to, k++;
        }
    memcpy(msg + 16 + (size_t)n_moves * 12, d->next, (size_t)S * LE);
    for (int s = 1; s < d->size; s++)
        MPI_Send(msg, (int)len, MPI_BYTE, s, TAG_OP, MPI_COMM_WORLD);
    mvm_status st = migrate(d, m, moves, n_moves, d->next);
    free(msg);
    d->stats.migrations++;
    return st;
}

static mvm_status on_tokens(void *self, const mvm_model *m, uint32_t n)
{
    mvm_dist *d = self;
    if (d->rank != 0 || !d->period || d->stopped)
        return MVM_OK;
    d->since += n;
    if (d->since < d->period)
        return MVM_OK;
    d->since = 0;
    mvm_status st;
    if (!choose_placement(d, &st))
        return st;
    return start_migration(d, m);
}

/* ---- the leader's steps ------------------------------------------------------------------ */

/* The rank that computes remote expert x: the holder nearest the leader, then the one with
 * the fewest rows of the step so far. */
static uint32_t holder(const mvm_dist *d, uint32_t x)
{
    uint32_t best = 0;
    for (uint32_t s = 1; s < (uint32_t)d->size; s++) {
        if (!d->placement[(size_t)s * d->LE + x])
            continue;
        if (!best || d->rtt[s] < d->rtt[best] ||
            (d->rtt[s] == d->rtt[best] && d->load[s] < d->load[best]))
            best = s;
    }
    return best;
}

/* Packs the request for server p of the step's remote experts chosen for it. */
static mvm_status pack(mvm_dist *d, const mvm_moe *s, uint32_t p, const float *xn, uint32_t n)
{
    struct peer *q = &d->peer[p];
    const int32_t *far = s->active + s->n_active;
    q->n_tok = q->n_exp = q->rows = 0;
    for (uint32_t i = 0; i < n; i++)
        q->tok_of[i] = -1;
    for (uint32_t i = 0; i < s->n_remote; i++) {
        uint32_t e = (uint32_t)far[i];
        if (d->choice[e] != p)
            continue;
        q->n_exp++;
        q->rows += s->cnt[e];
        for (uint32_t r = s->off[e]; r < s->off[e] + s->cnt[e]; r++)
            if (q->tok_of[s->row_tok[r]] < 0) {
                q->tok_of[s->row_tok[r]] = (int32_t)q->n_tok;
                q->toks[q->n_tok++] = s->row_tok[r];
            }
    }
    size_t len = 16 + 8 * (size_t)q->n_exp + 8 * (size_t)q->rows + 4 * (size_t)q->n_tok * d->D;
    size_t back = 8 + 4 * (size_t)q->n_tok * d->D;
    if (!fits_int(len) || !grow(&q->req, &q->req_cap, len) || !grow(&q->rep, &q->rep_cap, back))
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for a request to rank %u", p);
    uint32_t hdr[4] = {OP_EXPERTS, s->step.layer, q->n_tok, q->n_exp};
    memcpy(q->req, hdr, sizeof hdr);
    uint8_t *w = q->req + 16, *rw = w + 8 * (size_t)q->n_exp;
    for (uint32_t i = 0; i < s->n_remote; i++) {
        uint32_t e = (uint32_t)far[i];
        if (d->choice[e] != p)
            continue;
        uint32_t pair[2] = {e, s->cnt[e]};
        memcpy(w, pair, 8);
        w += 8;
        for (uint32_t r = s->off[e]; r < s->off[e] + s->cnt[e]; r++) {
            uint32_t t = (uint32_t)q->tok_of[s->row_tok[r]];
            memcpy(rw, &t, 4);
            memcpy(rw + 4, &s->row_w[r], 4);
            rw += 8;
        }
    }
    for (uint32_t j = 0; j < q->n_tok; j++)
        memcpy(rw + 4 * (size_t)j * d->D, xn + (size_t)q->toks[j] * d->D, 4 * (size_t)d->D);
    MPI_Irecv(q->rep, (int)back, MPI_BYTE, (int)p, TAG_REPLY, MPI_COMM_WORLD, &q->r[1]);
    MPI_Isend(q->req, (int)len, MPI_BYTE, (int)p, TAG_OP, MPI_COMM_WORLD, &q->r[0]);
    d->stats.messages++;
    d->stats.bytes_sent += len;
    d->stats.bytes_back += back;
    return MVM_OK;
}

/* Room in the per-server token maps for steps of n_batch tokens. */
static mvm_status alloc_peers(mvm_dist *d, uint32_t n_batch)
{
    d->n_batch = n_batch;
    for (int p = 0; p < d->size; p++) {
        free(d->peer[p].tok_of);
        free(d->peer[p].toks);
        d->peer[p].tok_of = malloc(n_batch * sizeof *d->peer[p].tok_of);
        d->peer[p].toks = malloc(n_batch * sizeof *d->peer[p].toks);
        if (!d->peer[p].tok_of || !d->peer[p].toks)
            return mvm_fail(MVM_ERR_NOMEM, "out of memory for the distributed mode");
    }
    return MVM_OK;
}

static mvm_status send_rows(void *self, mvm_moe *s, const float *xn, uint32_t n)
{
    mvm_dist *d = self;
    const uint32_t layer = s->step.layer;
    for (uint32_t i = 0; i < s->n_active + s->n_remote; i++) {
        uint32_t e = (uint32_t)s->active[i];
        d->freq[(size_t)layer * d->E + e] += s->cnt[e]; /* the leader's row: it is home */
        d->stats.rows += s->cnt[e];
    }
    if (!s->n_remote)
        return MVM_OK;
    mvm_status st = n > d->n_batch ? alloc_peers(d, n) : MVM_OK;
    if (st != MVM_OK)
        return st;
    memset(d->load, 0, (size_t)d->size * sizeof *d->load);
    for (uint32_t i = 0; i < s->n_remote; i++) {
        uint32_t e = (uint32_t)s->active[s->n_active + i], p = holder(d, layer * d->E + e);
        if (!p)
            return mvm_fail(MVM_ERR_INVALID, "expert %u of layer %u is on no rank", e, layer);
        d->choice[e] = p;
        d->load[p] += s->cnt[e];
        d->stats.remote_rows += s->cnt[e];
    }
    for (uint32_t p = 1; p < (uint32_t)d->size; p++) {
        d->peer[p].rows = 0;
        if (d->load[p] && (st = pack(d, s, p, xn, n)) != MVM_OK)
            return st; /* requests already posted are completed by gather */
    }
    return MVM_OK;
}

static mvm_status gather_rows(void *self, mvm_moe *s, float *x, uint32_t n)
{
    mvm_dist *d = self;
    (void)n;
    if (!s->n_remote)
        return MVM_OK;
    double t0 = mvm_now_s();
    mvm_status st = MVM_OK;
    for (uint32_t p = 1; p < (uint32_t)d->size; p++) {
        struct peer *q = &d->peer[p];
        if (!q->rows)
            continue;
        MPI_Waitall(2, q->r, MPI_STATUSES_IGNORE);
        q->rows = 0;
        uint32_t hdr[2];
        memcpy(hdr, q->rep, 8);
        if (hdr[0] != MVM_OK || hdr[1] != q->n_tok) {
            if (st == MVM_OK)
                st = mvm_fail(MVM_ERR_BACKEND, "rank %u could not compute experts of layer %u "
                              "(status %u)", p, s->step.layer, hdr[0]);
            continue;
        }
        const float *y = (const float *)(q->rep + 8);
        for (uint32_t j = 0; j < q->n_tok; j++) {
            float *xt = x + (size_t)q->toks[j] * d->D;
            for (uint32_t k = 0; k < d->D; k++)
                xt[k] += y[(size_t)j * d->D + k];
        }
    }
    d->stats.waited_s += mvm_now_s() - t0;
    return st;
}

mvm_status mvm_dist_attach(mvm_dist *d, mvm_ctx *c)
{
    d->elsewhere = (mvm_elsewhere){.self = d, .remote = d->remote, .send = send_rows,
                                   .gather = gather_rows, .tokens = on_tokens};
    return mvm_ctx_set_elsewhere(c, &d->elsewhere);
}

void mvm_dist_stop(mvm_dist *d)
{
    if (d->rank != 0 || d->stopped)
        return;
    d->stopped = 1;
    uint32_t hdr[4] = {OP_STOP, 0, 0, 0};
    for (int s = 1; s < d->size; s++)
        MPI_Send(hdr, sizeof hdr, MPI_BYTE, s, TAG_OP, MPI_COMM_WORLD);
}

void mvm_dist_get_stats(const mvm_dist *d, mvm_dist_stats *out)
{
    *out = d->stats;
}

/* ---- the servers ------------------------------------------------------------------------- */

struct server {
    mvm_dist *d;
    mvm_cpu_experts *xcpu;
    mvm_moe s;                  /* only the rows: what mvm_cpu_experts reads */
    int32_t *experts;
    float *out;
    uint8_t *reply;
    uint32_t n_batch, K;
};

/* Checks and computes one OP_EXPERTS request of `len` bytes into v->reply. */
static mvm_status compute(struct server *v, const uint8_t *msg, size_t len, uint32_t *n_tok)
{
    mvm_dist *d = v->d;
    uint32_t hdr[4];
    memcpy(hdr, msg, 16);
    uint32_t layer = hdr[1], n = hdr[2], n_exp = hdr[3];
    *n_tok = 0;
    if (layer >= d->L || n == 0 || n > v->n_batch || n_exp == 0 || n_exp > d->E)
        return mvm_fail(MVM_ERR_INVALID, "a request for %u experts of layer %u, %u tokens",
                        n_exp, layer, n);
    const uint8_t *p = msg + 16, *rows = p + 8 * (size_t)n_exp;
    uint32_t total = 0;
    memset(v->s.cnt, 0, d->E * sizeof *v->s.cnt);
    for (uint32_t i = 0; i < n_exp; i++) {
        uint32_t pair[2];
        memcpy(pair, p + 8 * (size_t)i, 8);
        if (pair[0] >= d->E || !d->placement[(size_t)d->rank * d->LE + layer * d->E + pair[0]] ||
            pair[1] == 0 || v->s.cnt[pair[0]] || total + pair[1] > n * v->K)
            return mvm_fail(MVM_ERR_INVALID, "a request for expert %u of layer %u, which this "
                            "rank does not hold, or a malformed one", pair[0], layer);
        v->experts[i] = (int32_t)pair[0];
        v->s.off[pair[0]] = total;
        v->s.cnt[pair[0]] = pair[1];
        total += pair[1];
    }
    if (len != 16 + 8 * (size_t)n_exp + 8 * (size_t)total + 4 * (size_t)n * d->D)
        return mvm_fail(MVM_ERR_INVALID, "a request of %zu bytes does not match its header",
                        len);
    for (uint32_t r = 0; r < n * v->K; r++) {
        v->s.row_tok[r] = 0; /* rows past `total` are never computed, so never added */
        if (r < total) {
            memcpy(&v->s.row_tok[r], rows + 8 * (size_t)r, 4);
            memcpy(&v->s.row_w[r], rows + 8 * (size_t)r + 4, 4);
            if (v->s.row_tok[r] >= n)
                return mvm_fail(MVM_ERR_INVALID, "a request row names token %u of %u",
                                v->s.row_tok[r], n);
        }
    }
    const float *hidden = (const float *)(rows + 8 * (size_t)total);
    v->s.step.layer = layer;
    mvm_cpu_experts_run(v->xcpu, &v->s, hidden, n, v->experts, n_exp, 1);
    memset(v->out, 0, (size_t)n * d->D * sizeof *v->out);
    mvm_cpu_experts_add(v->xcpu, &v->s, v->out, n);
    *n_tok = n;
    return MVM_OK;
}

static mvm_status serve_alloc(struct server *v)
{
    const uint32_t E = v->d->E, rows = v->n_batch * v->K;
    v->s.cnt = calloc(E, sizeof *v->s.cnt);
    v->s.off = calloc(E, sizeof *v->s.off);
    v->s.row_tok = calloc(rows, sizeof *v->s.row_tok);
    v->s.row_w = calloc(rows, sizeof *v->s.row_w);
    v->experts = calloc(E, sizeof *v->experts);
    v->reply = malloc(8 + (size_t)v->n_batch * v->d->D * sizeof(float));
    v->out = (float *)(v->reply + 8);
    if (!v->s.cnt || !v->s.off || !v->s.row_tok || !v->s.row_w || !v->experts || !v->reply)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for an expert server");
    return MVM_OK;
}

static void serve_free(struct server *v)
{
    mvm_cpu_experts_free(v->xcpu);
    void *a[] = {v->s.cnt, v->s.off, v->s.row_tok, v->s.row_w, v->experts, v->reply};
    for (size_t i = 0; i < sizeof a / sizeof *a; i++)
        free(a[i]);
}

mvm_status mvm_dist_serve(mvm_dist *d, mvm_model *m, mvm_pool *pool, uint32_t n_batch)
{
    struct server v = {.d = d, .n_batch = n_batch, .K = m->hp.n_expert_used};
    mvm_status st = serve_alloc(&v);
    if (st == MVM_OK)
        st = mvm_cpu_experts_create(m, pool, n_batch, &v.xcpu);
    uint8_t *msg = NULL;
    size_t cap = 0;
    for (int stop = 0; st == MVM_OK && !stop;) {
        MPI_Status ms;
        int len;
        MPI_Probe(0, TAG_OP, MPI_COMM_WORLD, &ms);
        MPI_Get_count(&ms, MPI_BYTE, &len);
        if (len < 16 || !grow(&msg, &cap, (size_t)len)) {
            st = mvm_fail(MVM_ERR_NOMEM, "a leader's message of %d bytes", len);
            break;
        }
        MPI_Recv(msg, len, MPI_BYTE, 0, TAG_OP, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        uint32_t hdr[4];
        memcpy(hdr, msg, 16);
        if (hdr[0] == OP_STOP) {
            stop = 1;
        } else if (hdr[0] == OP_EXPERTS) {
            uint32_t n_tok;
            uint32_t rep[2] = {(uint32_t)compute(&v, msg, (size_t)len, &n_tok), 0};
            if (rep[0] != MVM_OK)
                fprintf(stderr, "moevm (rank %d): %s\n", d->rank, mvm_last_error());
            rep[1] = n_tok;
            memcpy(v.reply, rep, 8);
            MPI_Send(v.reply, (int)(8 + (size_t)n_tok * d->D * 4), MPI_BYTE, 0, TAG_REPLY,
                     MPI_COMM_WORLD);
        } else if (hdr[0] == OP_MIGRATE &&
                   (size_t)len == 16 + (size_t)hdr[1] * 12 + (size_t)d->size * d->LE) {
            st = migrate(d, m, (const uint32_t *)(msg + 16), hdr[1],
                         msg + 16 + (size_t)hdr[1] * 12);
        } else {
            st = mvm_fail(MVM_ERR_INVALID, "a leader's message of op %u, %d bytes", hdr[0], len);
        }
    }
    free(msg);
    serve_free(&v);
    return st;
}
