/*
 * A home's side of the distributed mode (dist_impl.h): the steps of its request stream,
 * whose experts held elsewhere are sent to their holders and gathered back, and the
 * placement rounds at the end of each period.
 *
 * A home other than the leader, at the end of a period, sends its counts and serves until
 * the round's OP_MIGRATE. The leader, at the end of its own, waits (serving) until every
 * home still running has reported, then decides. A home whose stream has ended sends its
 * last counts and serves until every home's has; the leader then stops every rank.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/compute/clock.h"
#include "engine/dist/dist_impl.h"
#include "vmm/error.h"

/* The rank that computes remote expert x: the holder nearest this home, then the one with
 * the fewest rows of the step so far. S when none holds it. */
static uint32_t holder(const mvm_dist *d, uint32_t x)
{
    const uint32_t S = (uint32_t)d->size, me = (uint32_t)d->rank;
    const double *rtt = d->rtt + (size_t)me * S;
    uint32_t best = S;
    for (uint32_t s = 0; s < S; s++) {
        if (s == me || !d->placement[(size_t)s * d->LE + x])
            continue;
        if (best == S || rtt[s] < rtt[best] || (rtt[s] == rtt[best] && d->load[s] < d->load[best]))
            best = s;
    }
    return best;
}

/* Packs the request for holder p of the step's remote experts chosen for it. */
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
    size_t len = 20 + 8 * (size_t)q->n_exp + 8 * (size_t)q->rows + 4 * (size_t)q->n_tok * d->D;
    size_t back = 8 + 4 * (size_t)q->n_tok * d->D;
    if (!mvm_dist_fits_int(len) || !mvm_dist_grow(&q->req, &q->req_cap, len) ||
        !mvm_dist_grow(&q->rep, &q->rep_cap, back)) {
        q->rows = 0; /* nothing posted */
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for a request to rank %u", p);
    }
    uint32_t hdr[5] = {OP_EXPERTS, s->step.layer, q->n_tok, q->n_exp, d->epoch};
    memcpy(q->req, hdr, sizeof hdr);
    uint8_t *w = q->req + 20, *rw = w + 8 * (size_t)q->n_exp;
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

/* Room in the per-holder token maps for steps of n_batch tokens. */
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
    double *freq = d->freq + (size_t)d->rank * d->LE; /* this home's row */
    for (uint32_t i = 0; i < s->n_active + s->n_remote; i++) {
        uint32_t e = (uint32_t)s->active[i];
        freq[(size_t)layer * d->E + e] += s->cnt[e];
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
        if (p == (uint32_t)d->size)
            return mvm_fail(MVM_ERR_INVALID, "expert %u of layer %u is on no rank", e, layer);
        d->choice[e] = p;
        d->load[p] += s->cnt[e];
        d->stats.remote_rows += s->cnt[e];
    }
    for (uint32_t p = 0; p < (uint32_t)d->size; p++) {
        d->peer[p].rows = 0;
        if (d->load[p] && (st = pack(d, s, p, xn, n)) != MVM_OK)
            return st; /* requests already posted are completed by gather */
    }
    return MVM_OK;
}

/* Holder p's reply to the step of `layer`, added into x. */
static mvm_status add_reply(mvm_dist *d, uint32_t layer, uint32_t p, float *x)
{
    struct peer *q = &d->peer[p];
    uint32_t hdr[2];
    memcpy(hdr, q->rep, 8);
    if (hdr[0] != MVM_OK || hdr[1] != q->n_tok)
        return mvm_fail(MVM_ERR_BACKEND, "rank %u could not compute experts of layer %u "
                        "(status %u)", p, layer, hdr[0]);
    const float *y = (const float *)(q->rep + 8);
    for (uint32_t j = 0; j < q->n_tok; j++) {
        float *xt = x + (size_t)q->toks[j] * d->D;
        for (uint32_t k = 0; k < d->D; k++)
            xt[k] += y[(size_t)j * d->D + k];
    }
    return MVM_OK;
}

/* A home among several: other homes' requests may come while it waits for its replies
 * (theirs may wait for its own), so it polls both. `spins`: polls that found nothing. */
static void idle(uint32_t *spins)
{
    if (++*spins < 64) {
        sched_yield();
        return;
    }
    struct timespec t = {0, 20000}; /* a decode step is milliseconds */
    nanosleep(&t, NULL);
}

static mvm_status gather_rows(void *self, mvm_moe *s, float *x, uint32_t n)
{
    mvm_dist *d = self;
    (void)n;
    if (!s->n_remote)
        return MVM_OK;
    /* on a GPU the other homes' rows served meanwhile go through s (forward.h): only the
     * peers' state is read from here on */
    const uint32_t layer = s->step.layer;
    double t0 = mvm_now_s();
    mvm_status st = MVM_OK;
    for (uint32_t spins = 0;;) {
        int waiting = 0;
        for (uint32_t p = 0; p < (uint32_t)d->size; p++) {
            struct peer *q = &d->peer[p];
            int flag = 1;
            if (!q->rows)
                continue;
            if (d->homes > 1)
                MPI_Testall(2, q->r, &flag, MPI_STATUSES_IGNORE);
            else /* no rank asks this one anything */
                MPI_Waitall(2, q->r, MPI_STATUSES_IGNORE);
            if (!flag) {
                waiting = 1;
                continue;
            }
            q->rows = 0;
            mvm_status r = add_reply(d, layer, p, x);
            st = st != MVM_OK ? st : r;
        }
        if (!waiting)
            break;
        uint32_t op;
        mvm_status r = mvm_dist_take(d, 0, &op);
        st = st != MVM_OK ? st : r;
        if (!op)
            idle(&spins);
    }
    d->stats.waited_s += mvm_now_s() - t0;
    return st;
}

/* The leader: whether every home still running has reported, and one has. */
static int round_ready(const mvm_dist *d)
{
    int any = 0;
    for (uint32_t h = 0; h < d->homes; h++) {
        if (!d->reported[h] && !d->done[h])
            return 0;
        any |= d->reported[h];
    }
    return any;
}

/* A home other than the leader: its counts to the leader (OP_COUNTS, OP_DONE). */
static mvm_status send_counts(mvm_dist *d, uint32_t op)
{
    const size_t len = 16 + 8 * (size_t)d->LE;
    struct server *v = d->srv; /* its buffer is free between messages */
    if (!mvm_dist_grow(&v->msg, &v->msg_cap, len))
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for a home's counts");
    uint8_t *msg = v->msg;
    uint32_t hdr[4] = {op, d->LE, 0, 0};
    double *row = d->freq + (size_t)d->rank * d->LE;
    memcpy(msg, hdr, 16);
    memcpy(msg + 16, row, 8 * (size_t)d->LE);
    memset(row, 0, 8 * (size_t)d->LE);
    MPI_Send(msg, (int)len, MPI_BYTE, 0, TAG_OP, MPI_COMM_WORLD);
    return MVM_OK;
}

static mvm_status on_tokens(void *self, const mvm_model *m, uint32_t n)
{
    mvm_dist *d = self;
    if (!d->period || d->ended)
        return MVM_OK;
    d->since += n;
    if (d->since < d->period)
        return MVM_OK;
    d->since = 0;
    mvm_status st = MVM_OK;
    uint32_t op;
    if (d->rank == 0) {
        d->reported[0] = 1;
        while (st == MVM_OK && !round_ready(d))
            st = mvm_dist_take(d, 1, &op);
        return st == MVM_OK ? mvm_dist_round(d, m) : st;
    }
    st = send_counts(d, OP_COUNTS);
    for (d->released = 0; st == MVM_OK && !d->released;)
        st = mvm_dist_take(d, 1, &op);
    return st;
}

mvm_status mvm_dist_attach(mvm_dist *d, mvm_ctx *c, mvm_model *m, mvm_pool *pool,
                           uint32_t n_batch)
{
    mvm_status st = alloc_peers(d, n_batch);
    /* a home among several answers the others; the leader alone is never asked */
    if (st == MVM_OK && d->homes > 1)
        st = mvm_dist_server(d, m, pool, c);
    if (st != MVM_OK)
        return st;
    d->model = m;
    d->elsewhere = (mvm_elsewhere){.self = d, .remote = d->remote, .send = send_rows,
                                   .gather = gather_rows, .tokens = on_tokens};
    return mvm_ctx_set_elsewhere(c, &d->elsewhere);
}

mvm_status mvm_dist_stop(mvm_dist *d)
{
    if (d->ended || (uint32_t)d->rank >= d->homes)
        return MVM_OK;
    d->ended = 1;
    if (!d->model && d->homes > 1) /* the others may wait for what it never began */
        return mvm_fail(MVM_ERR_INVALID, "home %d stopped before it could serve", d->rank);
    mvm_status st = MVM_OK;
    uint32_t op;
    if (d->rank != 0) { /* until every home's stream has ended */
        st = send_counts(d, OP_DONE);
        while (st == MVM_OK && !d->stop)
            st = mvm_dist_take(d, 1, &op);
        return st;
    }
    d->done[0] = 1;
    for (;;) {
        if (st == MVM_OK && round_ready(d))
            st = mvm_dist_round(d, d->model);
        uint32_t h = 0;
        while (h < d->homes && d->done[h])
            h++;
        if (h == d->homes || st != MVM_OK)
            break;
        st = mvm_dist_take(d, 1, &op);
    }
    uint32_t hdr[4] = {OP_STOP, 0, 0, 0};
    for (int s = 1; st == MVM_OK && s < d->size; s++)
        MPI_Send(hdr, sizeof hdr, MPI_BYTE, s, TAG_OP, MPI_COMM_WORLD);
    return st;
}
