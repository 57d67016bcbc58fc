/*
 * The distributed mode's serving side (dist_impl.h): computing the experts this rank holds
 * for the homes that ask, and every rank's handling of the messages that come to it. A pure
 * server does nothing else; a home serves while it waits for its own replies, for a
 * placement round, and after its stream has ended.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dist/dist_impl.h"
#include "vmm/error.h"

int mvm_dist_grow(uint8_t **p, size_t *cap, size_t n)
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

int mvm_dist_fits_int(size_t n) { return n <= (size_t)0x7fffffff; }

/* Checks and computes one OP_EXPERTS request of `len` bytes into v->reply. */
static mvm_status compute(mvm_dist *d, const uint8_t *msg, size_t len, uint32_t *n_tok)
{
    struct server *v = d->srv;
    uint32_t hdr[4];
    memcpy(hdr, msg, 16);
    uint32_t layer = hdr[1], n = hdr[2], n_exp = hdr[3];
    *n_tok = 0;
    if (layer >= d->L || n == 0 || n > v->n_batch || n_exp == 0 || n_exp > d->E)
        return mvm_fail(MVM_ERR_INVALID, "a request for %u experts of layer %u, %u tokens",
                        n_exp, layer, n);
    if (len < 20 + 8 * (size_t)n_exp)
        return mvm_fail(MVM_ERR_INVALID, "a request of %zu bytes for %u experts", len, n_exp);
    const uint8_t *p = msg + 20, *rows = p + 8 * (size_t)n_exp;
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
    if (len != 20 + 8 * (size_t)n_exp + 8 * (size_t)total + 4 * (size_t)n * d->D)
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
    *n_tok = n;
    if (v->ctx) {
        mvm_expert_rows r = {.layer = layer, .n_tok = n, .n_exp = n_exp,
                             .experts = v->experts, .cnt = v->s.cnt, .off = v->s.off,
                             .row_tok = v->s.row_tok, .row_w = v->s.row_w, .hidden = hidden};
        return mvm_ctx_expert_rows(v->ctx, &r, v->out);
    }
    v->s.step.layer = layer;
    mvm_cpu_experts_run(v->xcpu, &v->s, hidden, n, v->experts, n_exp, 1);
    memset(v->out, 0, (size_t)n * d->D * sizeof *v->out);
    mvm_cpu_experts_add(v->xcpu, &v->s, v->out, n);
    return MVM_OK;
}

static void server_free(struct server *v)
{
    if (!v)
        return;
    mvm_cpu_experts_free(v->xcpu);
    void *a[] = {v->s.cnt, v->s.off, v->s.row_tok, v->s.row_w, v->experts, v->reply, v->msg,
                 v->held, v};
    for (size_t i = 0; i < sizeof a / sizeof *a; i++)
        free(a[i]);
}

mvm_status mvm_dist_server(mvm_dist *d, mvm_model *m, mvm_pool *pool, mvm_ctx *c)
{
    if (d->srv)
        return MVM_OK;
    const uint32_t n_batch = d->serve_batch;
    struct server *v = calloc(1, sizeof *v);
    if (!v)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for an expert server");
    const uint32_t E = d->E, rows = n_batch * m->hp.n_expert_used;
    /* a context that computes on a GPU serves there; else the CPU threads do, from the homes */
    *v = (struct server){.m = m, .ctx = c && mvm_ctx_serves_rows(c) ? c : NULL,
                         .n_batch = n_batch, .K = m->hp.n_expert_used};
    v->s.cnt = calloc(E, sizeof *v->s.cnt);
    v->s.off = calloc(E, sizeof *v->s.off);
    v->s.row_tok = calloc(rows, sizeof *v->s.row_tok);
    v->s.row_w = calloc(rows, sizeof *v->s.row_w);
    v->experts = calloc(E, sizeof *v->experts);
    v->reply = malloc(8 + (size_t)n_batch * d->D * sizeof(float));
    v->out = (float *)(v->reply + 8);
    mvm_status st = !(v->s.cnt && v->s.off && v->s.row_tok && v->s.row_w && v->experts &&
                      v->reply) ? mvm_fail(MVM_ERR_NOMEM, "out of memory for an expert server")
        : v->ctx ? MVM_OK : mvm_cpu_experts_create(m, pool, n_batch, &v->xcpu);
    if (st != MVM_OK) {
        server_free(v);
        return st;
    }
    d->srv = v;
    return MVM_OK;
}

void mvm_dist_server_free(mvm_dist *d)
{
    server_free(d->srv);
    d->srv = NULL;
}

/* A home's counts (OP_COUNTS, OP_DONE) on the leader: added to the home's row. */
static mvm_status take_counts(mvm_dist *d, int src, uint32_t op, const uint8_t *msg, size_t len)
{
    if (d->rank != 0 || src <= 0 || (uint32_t)src >= d->homes || len != 16 + 8 * (size_t)d->LE)
        return mvm_fail(MVM_ERR_INVALID, "counts of %zu bytes from rank %d, not a home's", len,
                        src);
    double *row = d->freq + (size_t)src * d->LE;
    for (uint32_t x = 0; x < d->LE; x++) {
        double f;
        memcpy(&f, msg + 16 + 8 * (size_t)x, 8);
        row[x] += f;
    }
    if (op == OP_DONE)
        d->done[src] = 1;
    else
        d->reported[src] = 1;
    return MVM_OK;
}

/* Receives into v->msg the TAG_OP message that the probe found. */
static mvm_status receive(mvm_dist *d, const MPI_Status *ms, int *len)
{
    struct server *v = d->srv;
    MPI_Get_count(ms, MPI_BYTE, len);
    if (*len < 16 || !mvm_dist_grow(&v->msg, &v->msg_cap, (size_t)*len))
        return mvm_fail(MVM_ERR_NOMEM, "a message of %d bytes from rank %d", *len,
                        ms->MPI_SOURCE);
    MPI_Recv(v->msg, *len, MPI_BYTE, ms->MPI_SOURCE, TAG_OP, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    return MVM_OK;
}

/* Whether the message in v->msg is the leader's well-formed OP_MIGRATE. */
static int is_migrate(const mvm_dist *d, int src, const uint32_t *hdr, int len)
{
    return hdr[0] == OP_MIGRATE && src == 0 &&
           (size_t)len == 16 + (size_t)hdr[1] * 12 + (size_t)d->size * d->LE;
}

/* Carries out the leader's OP_MIGRATE in v->msg. */
static mvm_status migrate(mvm_dist *d, const uint32_t *hdr)
{
    struct server *v = d->srv;
    d->released = 1;
    d->stats.placements += d->rank != 0 && (uint32_t)d->rank < d->homes;
    return mvm_dist_migrate(d, v->m, (const uint32_t *)(v->msg + 16), hdr[1],
                            v->msg + 16 + (size_t)hdr[1] * 12);
}

/* A request from src made under placement epoch, which this rank has not applied yet: the
 * home applied the leader's OP_MIGRATE before this rank received its own. Those OP_MIGRATEs
 * are the leader's next messages to this rank (it sends nothing else before them), so they
 * are received and applied first, the request kept aside meanwhile. */
static mvm_status catch_up(mvm_dist *d, int src, uint32_t epoch)
{
    struct server *v = d->srv;
    if (d->rank == 0) /* the leader makes the epochs: no request can be ahead of it */
        return mvm_fail(MVM_ERR_INVALID, "a request of rank %d under placement epoch %u, "
                        "ahead of the leader's %u", src, epoch, d->epoch);
    mvm_log(MVM_LOG_INFO, "distributed: rank %d: a request of rank %d under placement epoch "
            "%u came before the leader's move to it; applying that first", d->rank, src, epoch);
    uint8_t *req = v->msg;
    size_t req_cap = v->msg_cap;
    v->msg = v->held, v->msg_cap = v->held_cap;
    mvm_status st = MVM_OK;
    while (st == MVM_OK && d->epoch < epoch) {
        MPI_Status ms;
        int len;
        uint32_t hdr[4];
        MPI_Probe(0, TAG_OP, MPI_COMM_WORLD, &ms);
        if ((st = receive(d, &ms, &len)) != MVM_OK)
            break;
        memcpy(hdr, v->msg, 16);
        st = is_migrate(d, 0, hdr, len) ? migrate(d, hdr) : mvm_fail(MVM_ERR_INVALID, "a request of rank %d under placement epoch %u, "
                          "and the leader's next message is op %u, not the move to it", src,
                          epoch, hdr[0]);
    }
    v->held = v->msg, v->held_cap = v->msg_cap;
    v->msg = req, v->msg_cap = req_cap;
    return st;
}

/* Answers the OP_EXPERTS request in v->msg: the rows' sums, or the status it failed with. */
static void answer(mvm_dist *d, int src, int len)
{
    struct server *v = d->srv;
    uint32_t n_tok = 0, epoch;
    memcpy(&epoch, v->msg + 16, 4);
    mvm_status st = len < 20 ? mvm_fail(MVM_ERR_INVALID, "a request of %d bytes", len)
        : epoch > d->epoch ? catch_up(d, src, epoch)
        : epoch < d->epoch ? mvm_fail(MVM_ERR_INVALID, "a request of rank %d under placement "
                                      "epoch %u, behind this rank's %u", src, epoch, d->epoch)
        : MVM_OK;
    if (st == MVM_OK)
        st = compute(d, v->msg, (size_t)len, &n_tok);
    if (st != MVM_OK)
        fprintf(stderr, "moevm (rank %d): %s\n", d->rank, mvm_last_error());
    uint32_t rep[2] = {(uint32_t)st, n_tok};
    memcpy(v->reply, rep, 8);
    MPI_Send(v->reply, (int)(8 + (size_t)n_tok * d->D * 4), MPI_BYTE, src, TAG_REPLY,
             MPI_COMM_WORLD);
}

mvm_status mvm_dist_take(mvm_dist *d, int block, uint32_t *op)
{
    struct server *v = d->srv;
    MPI_Status ms;
    int flag = 1, len;
    *op = 0;
    if (block)
        MPI_Probe(MPI_ANY_SOURCE, TAG_OP, MPI_COMM_WORLD, &ms);
    else
        MPI_Iprobe(MPI_ANY_SOURCE, TAG_OP, MPI_COMM_WORLD, &flag, &ms);
    if (!flag)
        return MVM_OK;
    const int src = ms.MPI_SOURCE;
    mvm_status st = receive(d, &ms, &len);
    if (st != MVM_OK)
        return st;
    uint32_t hdr[4];
    memcpy(hdr, v->msg, 16);
    *op = hdr[0];
    switch (hdr[0]) {
    case OP_EXPERTS:
        answer(d, src, len);
        return MVM_OK;
    case OP_MIGRATE:
        if (!is_migrate(d, src, hdr, len))
            break;
        return migrate(d, hdr);
    case OP_STOP:
        if (src != 0)
            break;
        d->stop = 1;
        return MVM_OK;
    case OP_COUNTS:
    case OP_DONE:
        return take_counts(d, src, hdr[0], v->msg, (size_t)len);
    }
    return mvm_fail(MVM_ERR_INVALID, "a message of op %u, %d bytes, from rank %d", hdr[0], len,
                    src);
}

mvm_status mvm_dist_serve(mvm_dist *d, mvm_model *m, mvm_pool *pool, mvm_ctx *c)
{
    /* the context's residency keeps to this rank's experts (it runs no steps of its own) */
    d->elsewhere = (mvm_elsewhere){.self = d, .remote = d->remote};
    mvm_status st = c ? mvm_ctx_set_elsewhere(c, &d->elsewhere) : MVM_OK;
    if (st == MVM_OK)
        st = mvm_dist_server(d, m, pool, c);
    uint32_t op;
    while (st == MVM_OK && !d->stop)
        st = mvm_dist_take(d, 1, &op);
    return st;
}
