/*
 * The CPU's share of a decode token routed on the device at a budget (MOEVM_DEVICE_CPU=on;
 * forward_cuda_impl.h). DALI and SMoE compute a step's misses on the CPU from their host
 * homes while the GPU computes the resident experts, both at once, the results summed on
 * the GPU. A token routed on the device (forward_cuda_route.c) has no host in its path to
 * decide that: its route kernel decides. Its misses go, in choice order, to the CPU while
 * the CPU's running time with one more ends before the link's with one more read in place
 * (the simulator's rule, tools/sim.c with --device-cpu, which on 48 layers of Qwen3-30B-A3B
 * at 25% gave 16.7 ms a token against read-through's 19.0: docs/perf/engine.md, session 86).
 * The two per-miss times are the cost model's for one token (mvm_cost_cpu, scaled by the
 * CPU's measured rate, cpu_scale; mvm_cost_zerocopy), sent up with each token's row.
 *
 * The hand-over, in host memory mapped for the device (kernels.h, mvm_g_cpu_share, a share
 * a layer): the route kernel writes the layer's CPU choices, their weights and the router
 * input, then the token's number; a thread of the host (this file's server) waits for that
 * number layer by layer, runs the experts from their homes on a pool of its own
 * (mvm_cpu_experts_run, as the assign module's CPU share runs them), writes their sum and
 * stores `done`. The layer's mvm_g_cpu_wait kernel, after the GPU's experts, waits for
 * `done` and copies the sum into out's row cpu_row, which the expert sum adds once. The
 * server stores `done` for every layer it reaches, so a device never waits on a host that
 * gave up; the wait kernel gives up itself after WAIT_LIMIT_NS (marking the layer late, and
 * the token's later layers wait no more), and the host then fails the token.
 *
 * Why a thread of its own, and a pool of its own: the token's kernels are queued at once
 * and the main thread goes on to replay the token before (forward_cuda_route.c) and wait
 * for the logits, so the layers' CPU work must be someone else's; the fake driver even runs
 * each launch as it is queued, in the queueing thread. The main pool's caller is pinned to
 * its first core (engine/compute/pool.c), where the main thread stays, so this pool takes
 * the pool's other cores, its own thread the first of them; the main pool's workers sleep
 * during a routed token (none of its work is theirs).
 *
 * Why a kernel that waits and not cuStreamWaitValue32 (the design of session 86): a graph
 * of kernel nodes only is updated in place from token to token (engine/compute/gpu_graph.c)
 * and runs as is over the fake driver's emulator; the wait takes one block of one SM.
 *
 * With every expert at home (--n-cpu-moe 99, llama.cpp's -ngl 99 --cpu-moe) the share is
 * every choice: the token still routes on the device and queues all its layers as one
 * graph, where the host-routed pass waits for each layer's logits and queues the next.
 *
 * Readings this file picks: a layer's CPU experts are summed on the CPU (in choice order,
 * mvm_cpu_experts_add) and that sum added at the place of its first CPU choice, so the
 * float order differs from an all-GPU step's; the replay shows them to the policies as
 * CPU runs (mvm_moe.replay_own's 2), which claim no read-through slab.
 */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "engine/compute/clock.h"
#include "engine/forward/engine_options.h"
#include "engine/forward/forward_cuda_impl.h"
#include "engine/forward/residency.h"
#include "vmm/error.h"
#include "vmm/spin.h"

_Static_assert(sizeof(mvm_g_cpu_share) == MVM_G_CPU_SHARE_HEAD, "the share's header");
_Static_assert(offsetof(mvm_g_cpu_share, done) == 320 && offsetof(mvm_g_cpu_share, late) == 384,
               "done and late on lines of their own");

/* How long the device waits for a layer's CPU rows before it gives the token up: far past
 * any layer's experts (milliseconds), short enough that a lost host is an error, not a
 * hang. */
#define WAIT_LIMIT_NS 5000000000ull
/* The server's pauses before it yields its core between looks at a layer's word. */
#define SPIN_PAUSES 2000
/* How long the server spins for the next token before it sleeps. */
#define IDLE_SPIN_NS 2000000ull

struct cuda_cpu_share {
    const mvm_model *m;
    uint8_t *host;              /* [n_layer] shares, mvm_g_cpu_share_bytes apart ... */
    mvm_dptr dev;               /* ... and where the device sees them */
    uint64_t stride;
    uint32_t tok;               /* the last token's number (the main thread's) */
    mvm_pool *pool;             /* the server's (made with the thread) */
    mvm_cpu_experts *cpu;
    mvm_moe rows;               /* a step's rows as mvm_cpu_experts reads them (its rows
                                   and step.layer only: experts_cpu.h) */
    uint8_t *places;            /* [n_expert]: mvm_cuda_fwd_cpu_places's */
    int32_t experts[32];
    uint32_t row_tok[32];
    float row_w[32];
    pthread_t thread;
    int started;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    atomic_uint want;           /* the token to serve (main thread), under lock */
    atomic_uint served;         /* the last token served (server) */
    atomic_int abort;           /* the token failed: stop waiting for its layers */
    int busy;                   /* a token begun and not ended (the main thread's) */
    int stop;                   /* under lock */
    int bad;                    /* the token's choices were not the device's to make: */
    uint32_t bad_layer, bad_n;  /*   where, and what */
    int32_t bad_expert;
    double one_s;               /* the cost model's time for one (unscaled), for plan_s */
    double plan_s, took_s;      /* the token's CPU experts: the model's time, the time taken */
    double took_all;
    uint64_t experts_run, tokens;
};

static mvm_g_cpu_share *layer_share(const struct cuda_cpu_share *c, uint32_t il)
{
    return (mvm_g_cpu_share *)(c->host + il * c->stride);
}

/* Waits for the device's word of layer il to be tok; 0 when the token was given up. */
static int await_layer(struct cuda_cpu_share *c, const mvm_g_cpu_share *s, uint32_t tok)
{
    for (unsigned n = 0; __atomic_load_n(&s->token, __ATOMIC_ACQUIRE) != tok; n++) {
        if (atomic_load_explicit(&c->abort, memory_order_acquire))
            return 0;
        if (n < SPIN_PAUSES)
            mvm_cpu_relax();
        else
            sched_yield();
    }
    return 1;
}

/* Layer il's CPU choices run from their homes, their sum into the share's out. Choices
 * the device could not have made (an expert out of range, more than top_k) run nothing and
 * fail the token (c->bad). */
static void run_layer(struct cuda_cpu_share *c, uint32_t il, mvm_g_cpu_share *s)
{
    const mvm_hparams *hp = &c->m->hp;
    const uint32_t n = s->n, D = hp->n_embd;
    const float *hidden = (const float *)((const uint8_t *)s + MVM_G_CPU_SHARE_HEAD);
    float *out = (float *)((uint8_t *)s + mvm_g_cpu_share_out(D));
    if (!n)
        return;
    memset(out, 0, (size_t)D * sizeof *out);
    for (uint32_t i = 0; i < (n <= hp->n_expert_used ? n : 1); i++)
        if (n > hp->n_expert_used || s->expert[i] < 0 || (uint32_t)s->expert[i] >= hp->n_expert) {
            c->bad = 1, c->bad_layer = il, c->bad_expert = s->expert[i], c->bad_n = n;
            return;
        }
    c->rows.step.layer = il;
    for (uint32_t i = 0; i < n; i++) { /* one row each, in choice order */
        const uint32_t e = (uint32_t)s->expert[i];
        c->experts[i] = s->expert[i];
        c->rows.off[e] = i, c->rows.cnt[e] = 1;
        c->row_tok[i] = 0, c->row_w[i] = s->w[i];
    }
    const double t0 = mvm_now_s();
    mvm_cpu_experts_run(c->cpu, &c->rows, hidden, 1, c->experts, n, 1);
    mvm_cpu_experts_add(c->cpu, &c->rows, out, 1);
    c->took_s += mvm_now_s() - t0;
    c->plan_s += n * c->one_s;
    c->experts_run += n;
}

static void serve(struct cuda_cpu_share *c, uint32_t tok)
{
    for (uint32_t il = 0; il < c->m->hp.n_layer; il++) {
        mvm_g_cpu_share *s = layer_share(c, il);
        if (!await_layer(c, s, tok))
            return;
        run_layer(c, il, s);
        __atomic_store_n(&s->done, tok, __ATOMIC_RELEASE);
    }
}

static void *server_main(void *arg)
{
    struct cuda_cpu_share *c = arg;
    pthread_mutex_lock(&c->lock);
    for (;;) {
        while (!c->stop && atomic_load(&c->want) == atomic_load(&c->served))
            mvm_spin_then_wait(&c->lock, &c->wake, &c->want,
                               mvm_clock_ns() + IDLE_SPIN_NS, NULL);
        if (c->stop)
            break;
        const uint32_t tok = atomic_load(&c->want);
        pthread_mutex_unlock(&c->lock);
        serve(c, tok);
        atomic_store_explicit(&c->served, tok, memory_order_release);
        pthread_mutex_lock(&c->lock);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

/* The server's pool: the main pool's cores but its first (the main thread's), one thread
 * fewer; the same cores where there is one. */
static mvm_status make_pool(struct cuda_cpu_share *c, mvm_pool *main)
{
    const mvm_topo *t = main ? mvm_pool_topo(main) : NULL;
    const int n = main && mvm_pool_size(main) > 1 ? mvm_pool_size(main) - 1 : 1;
    if (!t || t->n_cores < 2)
        return mvm_pool_create(n, t, &c->pool);
    mvm_topo rest = *t;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, &rest.cores)) {
            CPU_CLR(cpu, &rest.cores);
            rest.n_cores--;
            break;
        }
    return mvm_pool_create(n, &rest, &c->pool);
}

static mvm_status start(struct cuda_fwd *f)
{
    struct cuda_cpu_share *c = f->cpu_share;
    TRY(make_pool(c, f->pool));
    TRY(mvm_cpu_experts_create(f->m, c->pool, 1, &c->cpu));
    if (pthread_create(&c->thread, NULL, server_main, c) != 0)
        return mvm_fail(MVM_ERR_NOMEM, "MOEVM_DEVICE_CPU: cannot start the CPU's thread");
    c->started = 1;
    return MVM_OK;
}

mvm_status mvm_cuda_fwd_cpu_alloc(struct cuda_fwd *f)
{
    mvm_option_value on;
    TRY(mvm_option_read(&mvm_opt_device_cpu, &on));
    if (!on.i || f->sizing)
        return MVM_OK;
    if (!f->budget_routing) {
        mvm_log(MVM_LOG_WARN, "MOEVM_DEVICE_CPU=on: no decode is routed on the device at a "
                "budget (MOEVM_BUDGET_ROUTING=in-place or read-through, homes the device can "
                "read, the assign module gpu; or --n-cpu-moe 99), so the CPU takes no share");
        return MVM_OK;
    }
    const mvm_hparams *hp = &f->m->hp;
    struct cuda_cpu_share *c = calloc(1, sizeof *c);
    uint32_t *idx = calloc(2 * (size_t)hp->n_expert, sizeof *idx);
    uint8_t *places = calloc(hp->n_expert, 1);
    if (!c || !idx || !places) {
        free(c);
        free(idx);
        free(places);
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for MOEVM_DEVICE_CPU");
    }
    f->cpu_share = c;
    c->m = f->m;
    c->places = places;
    c->rows.off = idx, c->rows.cnt = idx + hp->n_expert;
    c->rows.row_tok = c->row_tok, c->rows.row_w = c->row_w;
    c->stride = mvm_g_cpu_share_bytes(hp->n_embd);
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->wake, NULL);
    TRY(mvm_gpu_host_map(f->g, hp->n_layer * c->stride, (void **)&c->host, &c->dev));
    memset(c->host, 0, hp->n_layer * c->stride);
    mvm_log(MVM_LOG_INFO, "MOEVM_DEVICE_CPU=on: a decode token routed on the device gives "
            "the CPU %s", f->m->experts_at_home ? "every expert (--n-cpu-moe: they stay home)"
                                                : "the misses it finishes first");
    return MVM_OK;
}

void mvm_cuda_fwd_cpu_free(struct cuda_fwd *f)
{
    struct cuda_cpu_share *c = f->cpu_share;
    if (!c)
        return;
    if (c->started) {
        pthread_mutex_lock(&c->lock);
        c->stop = 1;
        atomic_fetch_add(&c->want, 1); /* (the wait sleeps until want moves) */
        pthread_cond_signal(&c->wake);
        pthread_mutex_unlock(&c->lock);
        pthread_join(c->thread, NULL);
    }
    if (c->tokens)
        mvm_log(MVM_LOG_INFO, "MOEVM_DEVICE_CPU: %llu tokens, %llu experts on the CPU "
                "(%.1f a token), %.0f us a token computing them",
                (unsigned long long)c->tokens, (unsigned long long)c->experts_run,
                (double)c->experts_run / (double)c->tokens, c->took_all * 1e6 / (double)c->tokens);
    mvm_cpu_experts_free(c->cpu);
    mvm_pool_destroy(c->pool);
    mvm_gpu_host_free(f->g, c->host);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->wake);
    free(c->rows.off);
    free(c->places);
    free(c);
    f->cpu_share = NULL;
}

mvm_status mvm_cuda_fwd_cpu_begin(struct cuda_fwd *f, void *words, size_t *up)
{
    struct cuda_cpu_share *c = f->cpu_share;
    if (!c->started)
        TRY(start(f));
    const mvm_cost *cost = mvm_resid_cost(f->moe->resid);
    mvm_resid_stats rs;
    mvm_resid_get_stats(f->moe->resid, &rs);
    if (++c->tok == 0) /* 0 is no token's */
        c->tok = 1;
    c->one_s = mvm_cost_cpu(cost, 1);
    /* every expert at home: every miss the CPU's, whatever the model says */
    const int home = f->m->experts_at_home;
    const float cpu_us = (float)(c->one_s * rs.cpu_scale * 1e6);
    const mvm_g_cpu_token w = {c->tok, home ? fmaxf(cpu_us, 1e-3f) : cpu_us,
                               home ? INFINITY : (float)(mvm_cost_zerocopy(cost, 1) * 1e6), 0};
    memcpy(words, &w, sizeof w);
    *up += sizeof w;
    c->plan_s = c->took_s = 0;
    c->bad = 0;
    c->busy = 1;
    pthread_mutex_lock(&c->lock);
    atomic_store(&c->want, c->tok);
    pthread_cond_signal(&c->wake);
    pthread_mutex_unlock(&c->lock);
    return MVM_OK;
}

/* out's zero row; the CPU's sum is the next, out's last (forward_cuda_setup.c). */
static uint32_t zero_row(const struct cuda_fwd *f)
{
    return f->n_batch * f->m->hp.n_expert_used;
}

/* The token's words on the device (mvm_g_cpu_token), after its position. */
static mvm_dptr token_words(const struct cuda_fwd *f)
{
    return mvm_cuda_fwd_pos(f) + sizeof(uint32_t);
}

void mvm_cuda_fwd_cpu_route(const struct cuda_fwd *f, uint32_t il, mvm_g_route_args *r)
{
    const struct cuda_cpu_share *c = f->cpu_share;
    if (!f->cpu_split)
        return;
    r->share = c->dev + il * c->stride;
    r->token = token_words(f);
    r->hidden = mvm_cuda_fwd_route_stage(f, il, MVM_STAGE_HIDDEN);
    r->on_cpu = mvm_cuda_fwd_route_stage(f, il, MVM_STAGE_CPU);
    r->n_embd = f->m->hp.n_embd;
    r->zero_row = zero_row(f), r->cpu_row = zero_row(f) + 1;
}

mvm_status mvm_cuda_fwd_cpu_wait(struct cuda_fwd *f, uint32_t il)
{
    const struct cuda_cpu_share *c = f->cpu_share;
    if (!f->cpu_split)
        return MVM_OK;
    const uint64_t D = f->m->hp.n_embd;
    mvm_g_cpu_wait_args a = {.share = c->dev + il * c->stride, .token = token_words(f),
                             .on_cpu = mvm_cuda_fwd_route_stage(f, il, MVM_STAGE_CPU),
                             .row = f->out + (zero_row(f) + 1ull) * D * sizeof(float),
                             .timeout_ns = WAIT_LIMIT_NS, .n_embd = (uint32_t)D,
                             .top_k = f->m->hp.n_expert_used};
    return mvm_gpu_cpu_wait(f->g, 0, &a);
}

const uint8_t *mvm_cuda_fwd_cpu_places(struct cuda_fwd *f, const uint8_t *own,
                                       const int32_t *sel, const float *on_cpu)
{
    struct cuda_cpu_share *c = f->cpu_share;
    const uint32_t E = f->m->hp.n_expert, K = f->m->hp.n_expert_used;
    int32_t ran[32]; /* the int32s as the device wrote them */
    memcpy(ran, on_cpu, K * sizeof *ran);
    if (own)
        memcpy(c->places, own, E);
    else
        memset(c->places, 0, E);
    for (uint32_t k = 0; k < K; k++)
        if (ran[k])
            c->places[sel[k]] = 2;
    return c->places;
}

mvm_status mvm_cuda_fwd_cpu_end(struct cuda_fwd *f, mvm_status st)
{
    struct cuda_cpu_share *c = f->cpu_share;
    if (!c || !c->busy)
        return st;
    c->busy = 0;
    if (st != MVM_OK) /* its layers' words may never come */
        atomic_store_explicit(&c->abort, 1, memory_order_release);
    while (atomic_load_explicit(&c->served, memory_order_acquire) != c->tok)
        sched_yield();
    atomic_store(&c->abort, 0);
    if (st != MVM_OK)
        return st;
    if (c->bad)
        return mvm_fail(MVM_ERR_BACKEND, "MOEVM_DEVICE_CPU: layer %u: the device gave the CPU "
                        "%u experts, one of them %d, of top-%u of %u", c->bad_layer, c->bad_n,
                        c->bad_expert, f->m->hp.n_expert_used, f->m->hp.n_expert);
    c->tokens++;
    c->took_all += c->took_s;
    mvm_resid_note_cpu(f->moe->resid, c->plan_s, c->took_s); /* the CPU's rate, as measured */
    for (uint32_t il = 0; il < f->m->hp.n_layer; il++)
        if (layer_share(c, il)->late == c->tok)
            return mvm_fail(MVM_ERR_BACKEND, "MOEVM_DEVICE_CPU: layer %u's experts on the CPU "
                            "did not come within %.0f s; the token is lost", il,
                            (double)WAIT_LIMIT_NS * 1e-9);
    return MVM_OK;
}
