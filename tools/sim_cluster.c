/* The multi-server placement simulation (sim_cluster.h). */
#include "tools/sim_cluster.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/error.h"

/* Bytes per hidden-state element on the wire: BF16, as place "prism" assumes. */
#define ACT_BYTES 2

struct csim {
    const mvm_trace *t;
    const mvm_cost *cost;
    const mvm_cluster *c;
    const char *name;
    const mvm_place_ops *ops;
    void *self;
    uint32_t S, L, E, K, LE;
    uint8_t *active;     /* [S][L*E] the placement serving tokens */
    uint8_t *next;       /* [S][L*E] a migration's target, while it copies */
    uint8_t *work;       /* [S][L*E] what the module is handed */
    double *freq;        /* [S][L*E] selections per home since the last call */
    double *link;        /* [S][S] remote call h->r for one token, compute included */
    double *clock;       /* [S] when each server finishes its last token */
    double *recv;        /* [S] copy seconds into each server */
    int pending;         /* a migration is copying */
    double last_call;    /* when the module was last called */
    double switch_at;    /* when it is done */
    double local;        /* mvm_cost_gpu(1) */
    mvm_sim_cluster_result r;
};

void mvm_sim_cluster_result_free(mvm_sim_cluster_result *r)
{
    free(r->home_tokens);
    free(r->home_latency);
    free(r->served);
    memset(r, 0, sizeof *r);
}

static mvm_status check_cluster(const mvm_cluster *c, uint64_t expert_bytes, uint32_t LE)
{
    const uint32_t S = c->n_servers;
    if (S == 0 || !c->capacity_bytes || !c->rtt || !c->bw)
        return mvm_fail(MVM_ERR_INVALID, "cluster: needs at least one server with capacity, "
                        "rtt and bw");
    uint64_t slots = 0;
    for (uint32_t n = 0; n < S; n++) {
        slots += mvm_cluster_slots(c, n, expert_bytes);
        for (uint32_t r = 0; r < S; r++) {
            double rtt = c->rtt[(size_t)n * S + r], bw = c->bw[(size_t)n * S + r];
            if (r != n && !(rtt >= 0 && isfinite(rtt) && bw > 0 && isfinite(bw)))
                return mvm_fail(MVM_ERR_INVALID, "cluster: link %u->%u has rtt %g s, bw %g B/s "
                                "(need rtt >= 0 and bw > 0)", n, r, rtt, bw);
        }
    }
    if (slots < LE)
        return mvm_fail(MVM_ERR_INVALID, "cluster: room for %llu experts in all, the model has "
                        "%u (L*E): every expert must be on some server",
                        (unsigned long long)slots, LE);
    return MVM_OK;
}

/* ---- placements ------------------------------------------------------------------------- */

/* Every expert somewhere, every server within its capacity; else the module is named. */
static mvm_status check_placement(const struct csim *s, const uint8_t *P)
{
    const uint64_t eb = s->t->hdr.expert_bytes;
    for (uint32_t x = 0; x < s->LE; x++) {
        uint32_t n = 0;
        while (n < s->S && !P[(size_t)n * s->LE + x])
            n++;
        if (n == s->S)
            return mvm_fail(MVM_ERR_INVALID, "place %s: layer %u expert %u is on no server%s",
                            s->name, x / s->E, x % s->E,
                            s->r.placements == 1 ? " after the first call (more servers than "
                                                   "the module's 'servers' parameter?)" : "");
    }
    for (uint32_t n = 0; n < s->S; n++) {
        uint64_t held = 0;
        for (uint32_t x = 0; x < s->LE; x++)
            held += P[(size_t)n * s->LE + x];
        if (held > mvm_cluster_slots(s->c, n, eb))
            return mvm_fail(MVM_ERR_INVALID, "place %s: server %u holds %llu experts, room for "
                            "%llu", s->name, n, (unsigned long long)held,
                            (unsigned long long)mvm_cluster_slots(s->c, n, eb));
    }
    return MVM_OK;
}

/* Copy time from `from` to `to` (additions from their nearest holder in `from`, serial
 * per receiving server, servers in parallel); *added counts the copies. */
static double migration_time(struct csim *s, const uint8_t *from, const uint8_t *to,
                             uint64_t *added)
{
    const uint32_t S = s->S, LE = s->LE;
    const double eb = (double)s->t->hdr.expert_bytes;
    double worst = 0;
    *added = 0;
    for (uint32_t n = 0; n < S; n++) {
        s->recv[n] = 0;
        for (uint32_t x = 0; x < LE; x++) {
            if (!to[(size_t)n * LE + x] || from[(size_t)n * LE + x])
                continue;
            double best = INFINITY;
            for (uint32_t r = 0; r < S; r++)
                if (from[(size_t)r * LE + x]) {
                    double t = s->c->rtt[(size_t)r * S + n] + eb / s->c->bw[(size_t)r * S + n];
                    best = t < best ? t : best;
                }
            s->recv[n] += best;
            (*added)++;
        }
        worst = s->recv[n] > worst ? s->recv[n] : worst;
    }
    return worst;
}

/* One call of the module at time `now`. */
static mvm_status call_place(struct csim *s, double now)
{
    const size_t n = (size_t)s->S * s->LE;
    const int first = s->r.placements == 0;
    memcpy(s->work, s->active, n);
    mvm_cluster c = *s->c; /* with the time the statistics span */
    c.period_s = first ? 0 : now - s->last_call;
    s->last_call = now;
    uint64_t ret = s->ops->place(s->self, &c, s->freq, s->work);
    memset(s->freq, 0, n * sizeof *s->freq);
    s->r.placements++;
    int changed = memcmp(s->work, s->active, n) != 0;
    if (!changed)
        return first ? check_placement(s, s->work) : MVM_OK;
    if (ret == 0)
        return mvm_fail(MVM_ERR_INVALID, "place %s: returned 0 but changed the placement",
                        s->name);
    mvm_status st = check_placement(s, s->work);
    if (st != MVM_OK)
        return st;
    if (first) {
        memcpy(s->active, s->work, n);
        return MVM_OK;
    }
    uint64_t added;
    double t = migration_time(s, s->active, s->work, &added);
    s->r.migrations++;
    s->r.bytes_migrated += added * s->t->hdr.expert_bytes;
    s->r.t_migration += t;
    memcpy(s->next, s->work, n);
    s->pending = 1;
    s->switch_at = now + t;
    return MVM_OK;
}

static void switch_if_done(struct csim *s, double now)
{
    if (s->pending && now >= s->switch_at) {
        memcpy(s->active, s->next, (size_t)s->S * s->LE);
        s->pending = 0;
    }
}

/* ---- tokens ---------------------------------------------------------------------------- */

/* Latency of token i homed on h under the active placement; counts calls and selections. */
static double token_latency(struct csim *s, uint32_t i, uint32_t h)
{
    const uint32_t S = s->S, LE = s->LE;
    double lat = 0;
    for (uint32_t l = 0; l < s->L; l++) {
        const int32_t *ex = mvm_trace_experts(s->t, i, l);
        double slowest = 0;
        for (uint32_t k = 0; k < s->K; k++) {
            uint32_t x = l * s->E + (uint32_t)ex[k], on = h;
            double t = s->local;
            s->freq[(size_t)h * LE + x] += 1;
            s->r.calls++;
            if (s->active[(size_t)h * LE + x]) {
                s->r.local_calls++;
            } else {
                t = INFINITY;
                for (uint32_t r = 0; r < S; r++)
                    if (s->active[(size_t)r * LE + x] && s->link[(size_t)h * S + r] < t) {
                        t = s->link[(size_t)h * S + r];
                        on = r;
                    }
            }
            s->r.served[on]++;
            slowest = t > slowest ? t : slowest;
        }
        lat += s->cost->m.attn_time + slowest;
    }
    return lat;
}

static mvm_status run_tokens(struct csim *s, uint32_t period)
{
    double t_prev = 0, sum = 0;
    mvm_status st = call_place(s, 0);
    for (uint32_t i = 0; i < s->t->n_tokens && st == MVM_OK; i++) {
        uint32_t h = s->t->req[i] % s->S;
        double start = fmax(s->clock[h], t_prev);
        switch_if_done(s, start);
        if (period && i > 0 && i % period == 0 && !s->pending) {
            st = call_place(s, start);
            switch_if_done(s, start);
        }
        double lat = token_latency(s, i, h);
        s->clock[h] = start + lat;
        t_prev = start;
        sum += lat;
        s->r.home_tokens[h]++;
        s->r.home_latency[h] += lat;
        s->r.time = fmax(s->r.time, start + lat);
    }
    s->r.tokens = s->t->n_tokens;
    s->r.mean_latency = s->r.tokens ? sum / (double)s->r.tokens : 0;
    s->r.local_share = s->r.calls ? (double)s->r.local_calls / (double)s->r.calls : 0;
    for (uint32_t n = 0; n < s->S; n++)
        if (s->r.home_tokens[n])
            s->r.home_latency[n] /= (double)s->r.home_tokens[n];
    return st;
}

/* ---- set-up ------------------------------------------------------------------------------ */

static void fill_links(struct csim *s)
{
    mvm_cost link = *s->cost;
    for (uint32_t h = 0; h < s->S; h++)
        for (uint32_t r = 0; r < s->S; r++) {
            link.m.net_rtt = s->c->rtt[(size_t)h * s->S + r];
            link.m.net_bw = s->c->bw[(size_t)h * s->S + r];
            s->link[(size_t)h * s->S + r] =
                r == h ? 0 : mvm_cost_net(&link, 1, ACT_BYTES) + s->local;
        }
}

static void free_csim(struct csim *s)
{
    if (s->self)
        s->ops->destroy(s->self);
    void *p[] = {s->active, s->next, s->work, s->freq, s->link, s->clock, s->recv};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        free(p[i]);
}

static mvm_status make_module(struct csim *s, const char *params)
{
    s->ops = mvm_policy_find(MVM_ROLE_PLACE, s->name);
    if (!s->ops) {
        char names[256];
        mvm_policy_names(MVM_ROLE_PLACE, names, sizeof names);
        return mvm_fail(MVM_ERR_INVALID, "no place policy '%s' (available: %s)", s->name,
                        names);
    }
    const mvm_trace_header *h = &s->t->hdr;
    mvm_pshape shape = {.n_layers = h->n_layers, .n_experts = h->n_experts,
                        .top_k = h->top_k, .n_embd = h->n_embd, .n_ff = h->n_ff_exp,
                        .pages_per_expert = 1, .expert_bytes = h->expert_bytes};
    mvm_pinit init = {.shape = &shape, .cost = s->cost, .params = {params}};
    return s->ops->create(&init, &s->self);
}

mvm_status mvm_sim_cluster_run(const mvm_trace *t, const mvm_cost *cost, const mvm_cluster *c,
                               const char *place_name, const char *place_params,
                               uint32_t period_tokens, mvm_sim_cluster_result *out)
{
    memset(out, 0, sizeof *out);
    struct csim s = {.t = t, .cost = cost, .c = c, .name = place_name ? place_name : "(null)"};
    s.L = t->hdr.n_layers;
    s.E = t->hdr.n_experts;
    s.K = t->hdr.top_k;
    s.LE = s.L * s.E;
    s.S = c->n_servers;
    if (t->hdr.expert_bytes == 0)
        return mvm_fail(MVM_ERR_INVALID, "cluster sim: the trace gives no expert size");
    mvm_status st = check_cluster(c, t->hdr.expert_bytes, s.LE);
    if (st != MVM_OK)
        return st;
    const size_t n = (size_t)s.S * s.LE;
    s.active = calloc(n, 1);
    s.next = calloc(n, 1);
    s.work = calloc(n, 1);
    s.freq = calloc(n, sizeof *s.freq);
    s.link = calloc((size_t)s.S * s.S, sizeof *s.link);
    s.clock = calloc(s.S, sizeof *s.clock);
    s.recv = calloc(s.S, sizeof *s.recv);
    s.r.n_servers = s.S;
    s.r.home_tokens = calloc(s.S, sizeof *s.r.home_tokens);
    s.r.home_latency = calloc(s.S, sizeof *s.r.home_latency);
    s.r.served = calloc(s.S, sizeof *s.r.served);
    if (!s.active || !s.next || !s.work || !s.freq || !s.link || !s.clock || !s.recv ||
        !s.r.home_tokens || !s.r.home_latency || !s.r.served) {
        st = mvm_fail(MVM_ERR_NOMEM, "out of memory for the cluster simulation");
    }
    if (st == MVM_OK)
        st = make_module(&s, place_params);
    if (st == MVM_OK) {
        s.local = mvm_cost_gpu(cost, 1);
        fill_links(&s);
        st = run_tokens(&s, period_tokens);
    }
    free_csim(&s);
    if (st != MVM_OK) {
        mvm_sim_cluster_result_free(&s.r);
        return st;
    }
    *out = s.r;
    return MVM_OK;
}
