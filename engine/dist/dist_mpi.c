/*
 * The distributed mode over MPI (dist.h; the messages in dist_impl.h): joining the job,
 * agreeing on failures, the links measured, the placements and the migrations that carry
 * them out. A home's steps are dist_home.c's, the serving dist_serve.c's.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/compute/clock.h"
#include "engine/dist/dist_impl.h"
#include "vmm/error.h"

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
    MPI_Comm node; /* the ranks on this machine */
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL,
                            &node) == MPI_SUCCESS) {
        MPI_Comm_rank(node, &d->local_rank);
        MPI_Comm_free(&node);
    }
    d->stats.ranks = (uint32_t)d->size;
    d->stats.rank = (uint32_t)d->rank;
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
    mvm_dist_server_free(d);
    void *a[] = {d->cap, d->rtt, d->bw, d->placement, d->next, d->remote, d->freq, d->peer,
                 d->load, d->choice, d->held_count, d->reported, d->done};
    for (size_t i = 0; i < sizeof a / sizeof *a; i++)
        free(a[i]);
    free(d);
    MPI_Finalize();
}

uint32_t mvm_dist_rank(const mvm_dist *d) { return (uint32_t)d->rank; }
uint32_t mvm_dist_size(const mvm_dist *d) { return (uint32_t)d->size; }
uint32_t mvm_dist_local_rank(const mvm_dist *d) { return (uint32_t)d->local_rank; }
uint32_t mvm_dist_serve_batch(const mvm_dist *d) { return d->serve_batch; }

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
        d->remote[x] = !d->placement[(size_t)d->rank * d->LE + x];
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
    d->homes = p->homes ? p->homes : 1;
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
    d->reported = calloc(S, 1);
    d->done = calloc(S, 1);
    if (!d->cap || !d->rtt || !d->bw || !d->placement || !d->next || !d->remote || !d->freq ||
        !d->peer || !d->load || !d->choice || !d->held_count || !d->reported || !d->done)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the distributed mode");
    if (d->homes > S)
        return mvm_fail(MVM_ERR_INVALID, "--homes %u: the job has %u ranks", d->homes, S);
    d->stats.held = d->held_count;
    d->stats.homes = d->homes;
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

/* Ranks may be started with different arguments (mpirun's MPMD form, `-n 1 moevm run -p A
 * : -n 1 moevm run -p B`, gives each home its prompt): what the exchange rests on must
 * agree; a server answers the largest batch of any home. Collective. */
static mvm_status check_same(mvm_dist *d, uint32_t n_batch)
{
    /* --period too: a home that never reports would hold every round until its end */
    static const char *const what[] = {"--homes", "--period", "the model's layers",
                                       "the model's experts", "the model's n_embd",
                                       "the model's expert bytes"};
    enum { N = sizeof what / sizeof *what };
    long v[N] = {(long)d->homes, (long)d->period, (long)d->L, (long)d->E, (long)d->D,
                 (long)d->slot_bytes};
    long lo[N], hi[N], batch = n_batch, most;
    MPI_Allreduce(v, lo, N, MPI_LONG, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(v, hi, N, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&batch, &most, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
    d->serve_batch = (uint32_t)most;
    for (int i = 0; i < N; i++)
        if (lo[i] != hi[i])
            return mvm_fail(MVM_ERR_INVALID, "the ranks disagree on %s (%ld to %ld): give "
                            "every rank the same model, --homes and --period", what[i], lo[i],
                            hi[i]);
    return MVM_OK;
}

mvm_status mvm_dist_plan(mvm_dist *d, const mvm_model *probe, const mvm_dist_params *p,
                         const uint8_t **held)
{
    /* Every rank checks the same arguments, so all agree on the cluster before the links
     * are measured; the placement is the leader's alone. */
    mvm_status st = mvm_dist_agree(d, setup(d, probe, p));
    if (st != MVM_OK)
        return st;
    if ((st = check_same(d, p->n_batch)) != MVM_OK || (st = measure_links(d)) != MVM_OK)
        return st;
    if (d->rank == 0 && choose_placement(d, &st))
        memcpy(d->placement, d->next, (size_t)d->size * d->LE);
    else if (d->rank == 0 && st == MVM_OK)
        st = mvm_fail(MVM_ERR_INVALID, "place %s: made no placement", d->ops->name);
    if ((st = mvm_dist_agree(d, st)) != MVM_OK)
        return st;
    MPI_Bcast(d->placement, d->size * (int)d->LE, MPI_BYTE, 0, MPI_COMM_WORLD);
    d->stats.placements = 1; /* the first, the leader's module call */
    count_held(d);
    *held = d->placement + (size_t)d->rank * d->LE;
    return MVM_OK;
}

/* ---- migration: every rank, the leader's OP_MIGRATE in hand ------------------------------ */

/* Releases a dropped expert's home memory (host homes are shared memfd pages; on a home
 * that cannot be released the memory only stays). Not while a copy of it is on the device
 * or on its way there: a copy still reading the home would take zeros, and a device copy
 * kept by the budget is what a later migration back would compute from. */
static void release_home(const mvm_model *m, uint32_t x)
{
    const uint32_t l = x / m->hp.n_expert, e = x % m->hp.n_expert;
    uint8_t *home = mvm_expert_home(m->space, l, e);
    size_t page = (size_t)sysconf(_SC_PAGESIZE), n = m->expert_bytes / page * page;
    mvm_residency r;
    if (home && n && mvm_expert_residency(m->space, l, e, &r) == MVM_OK && !r.resident &&
        !r.loading)
        (void)madvise(home, n, MADV_REMOVE);
}

mvm_status mvm_dist_migrate(mvm_dist *d, const mvm_model *m, const uint32_t *moves,
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
    const int changed = memcmp(next, d->placement, (size_t)d->size * d->LE) != 0;
    d->stats.migrations += changed;
    d->epoch += changed;
    for (uint32_t x = 0; x < d->LE; x++)
        if (d->placement[(size_t)d->rank * d->LE + x] && !mine[x])
            release_home(m, x);
    memcpy(d->placement, next, (size_t)d->size * d->LE);
    count_held(d);
    return MVM_OK;
}

/* The leader: carries out d->next (changed: every rank is told; unchanged: only the homes
 * waiting for the round), each added expert sent by the holder nearest to its new rank
 * (the smallest rtt + bytes / bw). */
static mvm_status start_migration(mvm_dist *d, const mvm_model *m, int changed)
{
    const uint32_t S = (uint32_t)d->size, LE = d->LE;
    uint32_t n_moves = 0;
    for (size_t i = 0; i < (size_t)S * LE; i++)
        n_moves += d->next[i] && !d->placement[i];
    size_t len = 16 + (size_t)n_moves * 12 + (size_t)S * LE;
    uint8_t *msg = malloc(len);
    if (!msg || !mvm_dist_fits_int(len)) {
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
        if (changed || d->reported[s])
            MPI_Send(msg, (int)len, MPI_BYTE, s, TAG_OP, MPI_COMM_WORLD);
    mvm_status st = mvm_dist_migrate(d, m, moves, n_moves, d->next);
    free(msg);
    return st;
}

/* The round's rows per home, in the log (MOEVM_LOG=info): what the module was given. */
static void log_round(const mvm_dist *d)
{
    char rows[256];
    size_t o = 0;
    for (uint32_t h = 0; h < d->homes && o < sizeof rows - 32; h++) {
        double n = 0;
        for (uint32_t x = 0; x < d->LE; x++)
            n += d->freq[(size_t)h * d->LE + x];
        o += (size_t)snprintf(rows + o, sizeof rows - o, "%s%.0f", h ? "/" : "", n);
    }
    mvm_log(MVM_LOG_INFO, "distributed: placement %u from %s expert rows at the %u homes",
            d->stats.placements + 1, rows, d->homes);
}

mvm_status mvm_dist_round(mvm_dist *d, const mvm_model *m)
{
    mvm_status st;
    log_round(d);
    int changed = choose_placement(d, &st), waiting = 0;
    for (uint32_t h = 1; h < d->homes; h++)
        waiting |= d->reported[h];
    if (st == MVM_OK && !changed)
        memcpy(d->next, d->placement, (size_t)d->size * d->LE);
    if (st == MVM_OK && (changed || waiting))
        st = start_migration(d, m, changed);
    memset(d->reported, 0, (size_t)d->size);
    return st;
}


void mvm_dist_get_stats(const mvm_dist *d, mvm_dist_stats *out)
{
    *out = d->stats;
}
