/* The cost model measured on this machine (calibrate.h). */
#include "tools/calibrate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/compute/clock.h"
#include "engine/forward/experts_cpu.h"
#include "engine/forward/moe_step.h"
#include "vmm/error.h"

/* A point is repeated at most this often: enough for a stable median of microsecond
 * times, few enough that a slow point still ends. */
#define MAX_REPS 2000

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double mvm_median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The largest |y - (a + b·x)| / y. */
static double max_rel(const double *x, const double *y, size_t n, double a, double b)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(y[i] - (a + b * x[i])) / fabs(y[i]));
    return m;
}

int mvm_fit_line(const double *x, const double *y, size_t n, mvm_line *out)
{
    double mx = 0, my = 0;
    for (size_t i = 0; i < n; i++)
        mx += x[i], my += y[i];
    if (n < 2)
        return -1;
    mx /= (double)n;
    my /= (double)n;
    double sxx = 0, sxy = 0;
    for (size_t i = 0; i < n; i++) {
        sxx += (x[i] - mx) * (x[i] - mx);
        sxy += (x[i] - mx) * (y[i] - my);
    }
    if (!(sxx > 0))
        return -1;
    mvm_line l = {.b = sxy / sxx};
    l.a = my - l.b * mx;
    l.max_rel = max_rel(x, y, n, l.a, l.b);
    *out = l;
    return 0;
}

/* Times fn(ctx, rep) until seconds have passed and at least 3 times; the median into
 * *median, the count into *reps. */
typedef mvm_status (*timed_fn)(void *ctx, uint32_t rep, double *seconds);

static mvm_status repeat(timed_fn fn, void *ctx, double seconds, double *median, uint32_t *reps)
{
    double *t = malloc(MAX_REPS * sizeof *t), start = mvm_now_s();
    if (!t)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the calibration's timings");
    uint32_t n = 0;
    mvm_status st = MVM_OK;
    while (st == MVM_OK && n < MAX_REPS && (n < 3 || mvm_now_s() - start < seconds)) {
        st = fn(ctx, n, &t[n]);
        n++;
    }
    if (st == MVM_OK) {
        *median = mvm_median(t, n);
        *reps = n;
    }
    free(t);
    return st;
}

/* ---- CPU experts ------------------------------------------------------------------------ */

static void noop(void *ctx, int thread, int n_threads)
{
    (void)ctx, (void)thread, (void)n_threads;
}

static mvm_status time_pool(void *ctx, uint32_t rep, double *seconds)
{
    (void)rep;
    double t0 = mvm_now_s();
    mvm_pool_run(ctx, noop, NULL);
    *seconds = mvm_now_s() - t0;
    return MVM_OK;
}

struct cpu_run {
    mvm_model *m;
    mvm_moe *step;
    mvm_cpu_experts *x;
    float *xn;          /* [max_tokens][n_embd] random inputs */
    uint32_t n, next;   /* tokens of this point; the next (layer, expert) in rotation */
};

/* One expert of n rows: every token routed to the next expert of the rotation. */
static mvm_status time_expert(void *ctx, uint32_t rep, double *seconds)
{
    (void)rep;
    struct cpu_run *c = ctx;
    const mvm_hparams *hp = &c->m->hp;
    uint32_t E = hp->n_expert, layer = c->next / E;
    int32_t e = (int32_t)(c->next % E);
    c->next = (c->next + 1) % (hp->n_layer * E);
    for (uint32_t i = 0; i < c->n; i++)
        for (uint32_t k = 0; k < E; k++)
            c->step->probs[(size_t)i * E + k] = k == (uint32_t)e ? 8.0f : 0.0f;
    mvm_moe_route(c->step, layer, NULL, c->n, c->xn);
    if (c->step->cnt[e] != c->n)
        return mvm_fail(MVM_ERR_UNSUPPORTED, "calibration: %s's router did not send every "
                        "token to the expert with the highest logit", c->m->arch->name);
    double t0 = mvm_now_s();
    mvm_cpu_experts_run(c->x, c->step, c->xn, c->n, &e, 1, 1);
    *seconds = mvm_now_s() - t0;
    return MVM_OK;
}

/* The policies of a step that only routes: nothing from MOEVM_* applies. */
static mvm_ctx_policies plain_policies(const mvm_machine *machine)
{
    return (mvm_ctx_policies){
        .residency = {.evict = "lru", .config = "none", .assign = "gpu", .machine = machine},
        .prefetch = {.predict = "none"},
        .routing = {.route = "none"}};
}

int mvm_calib_fit(mvm_calib_experts *c)
{
    if (mvm_fit_line(c->tokens, c->seconds, c->n_points, &c->fit))
        return -1;
    /* An expert task costs at least what starts it (the CPU's fork/join): where the free
     * line's intercept lies below (per-token work dominates and noise tilts the line), the
     * least-squares slope with the intercept held there. */
    double a = c->floor_s > 1e-9 ? c->floor_s : 1e-9, sxy = 0, sxx = 0;
    if (c->fit.a >= a)
        return c->fit.b > 0 ? 0 : -1;
    for (uint32_t i = 0; i < c->n_points; i++) {
        sxy += c->tokens[i] * (c->seconds[i] - a);
        sxx += c->tokens[i] * c->tokens[i];
    }
    c->fit.a = a;
    c->fit.b = sxy / sxx;
    c->fit.max_rel = max_rel(c->tokens, c->seconds, c->n_points, a, c->fit.b);
    return c->fit.b > 0 ? 0 : -1;
}

int mvm_calib_fit_flat(mvm_calib_experts *c)
{
    if (!c->n_points)
        return -1;
    double v[MVM_CALIB_MAX_POINTS];
    memcpy(v, c->seconds, c->n_points * sizeof *v);
    double a = mvm_median(v, c->n_points), least = c->floor_s > 1e-9 ? c->floor_s : 1e-9;
    c->fit.a = a > least ? a : least;
    c->fit.b = 0;
    c->fit.max_rel = max_rel(c->tokens, c->seconds, c->n_points, c->fit.a, 0);
    return 0;
}

/* The points of *out at 1, 2, 4, ... tokens up to max_tokens (>= 2), fn timing one expert
 * of *n tokens. */
static mvm_status sweep_once(timed_fn fn, void *ctx, uint32_t *n, uint32_t max_tokens,
                             double seconds_per_point, mvm_calib_experts *out)
{
    mvm_status st = MVM_OK;
    out->n_points = 0;
    for (*n = 1; st == MVM_OK; *n = *n * 2 > max_tokens ? max_tokens : *n * 2) {
        uint32_t i = out->n_points++;
        double warm;
        if ((st = fn(ctx, 0, &warm)) != MVM_OK)
            break;
        out->tokens[i] = *n;
        st = repeat(fn, ctx, seconds_per_point, &out->seconds[i], &out->reps[i]);
        if (*n == max_tokens || out->n_points == MVM_CALIB_MAX_POINTS)
            break;
    }
    return st;
}

/* sweep_once, then the fit; a line that does not rise (a burst of other work during the
 * first points) is measured once more before it is refused, or, where `flat_ok` (a side
 * bound by the experts' bytes), taken as flat. `where` names the side in the error of a
 * failed fit. */
static mvm_status sweep(timed_fn fn, void *ctx, uint32_t *n, uint32_t max_tokens,
                        double seconds_per_point, const char *where, bool flat_ok,
                        mvm_calib_experts *out)
{
    mvm_status st = MVM_OK;
    for (int attempt = 0; attempt < 2 && st == MVM_OK; attempt++) {
        st = sweep_once(fn, ctx, n, max_tokens, seconds_per_point, out);
        if (st == MVM_OK && !mvm_calib_fit(out))
            return MVM_OK;
    }
    if (st == MVM_OK && flat_ok && !mvm_calib_fit_flat(out))
        return MVM_OK;
    if (st == MVM_OK)
        return mvm_fail(MVM_ERR_INVALID, "calibration: the %s experts' times did not grow "
                        "with their tokens (%.3g s at 1, %.3g s at %u): the machine was too "
                        "busy to measure; try again, or a longer --time", where,
                        out->seconds[0], out->seconds[out->n_points - 1], max_tokens);
    return st;
}

static mvm_status too_few(uint32_t max_tokens)
{
    return mvm_fail(MVM_ERR_INVALID, "calibration: at least 2 tokens per expert are needed "
                    "for a line (got %u)", max_tokens);
}

/* n floats uniform in [-1, 1), the same every run: the experts' inputs. */
static mvm_status random_inputs(size_t n, float **out)
{
    float *x = malloc(n * sizeof *x);
    if (!x)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the calibration's inputs");
    uint32_t seed = 12345;
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / 8388608.0f - 1.0f;
    }
    *out = x;
    return MVM_OK;
}

mvm_status mvm_calib_cpu_experts(mvm_model *m, mvm_pool *pool, uint32_t max_tokens,
                                 double seconds_per_point, mvm_calib_experts *out)
{
    memset(out, 0, sizeof *out);
    if (max_tokens < 2)
        return too_few(max_tokens);
    const mvm_hparams *hp = &m->hp;
    struct cpu_run c = {.m = m};
    mvm_ctx_policies pol = plain_policies(mvm_machine_preset("h100"));
    mvm_status st = mvm_moe_create(m, max_tokens, &pol, 0, 1, 0, &c.step);
    if (st == MVM_OK)
        st = mvm_cpu_experts_create(m, pool, max_tokens, &c.x);
    if (st == MVM_OK)
        st = random_inputs((size_t)max_tokens * hp->n_embd, &c.xn);
    if (st == MVM_OK)
        st = repeat(time_pool, pool, seconds_per_point / 4, &out->floor_s, &(uint32_t){0});
    if (st == MVM_OK)
        st = sweep(time_expert, &c, &c.n, max_tokens, seconds_per_point, "CPU", false, out);
    free(c.xn);
    mvm_cpu_experts_free(c.x);
    mvm_moe_free(c.step);
    return st;
}

/* ---- GPU experts ------------------------------------------------------------------------ */

struct gpu_run {
    mvm_ctx *ctx;
    float *x; /* [max_tokens][n_embd] random inputs */
    uint32_t n_layer, n_expert, k;
    uint32_t n, next; /* tokens of this point; the next (layer, expert) in rotation */
};

/* What one more expert adds to a step's launch at n tokens: k experts in one launch less
 * the first alone, over k - 1 (k 1: the lone expert's time). Each repetition takes the next
 * k experts of the rotation, which walks every layer's experts in turn. */
static mvm_status time_gpu_expert(void *ctx, uint32_t rep, double *seconds)
{
    (void)rep;
    struct gpu_run *g = ctx;
    uint32_t layer = g->next / g->n_expert;
    int32_t e[MVM_CALIB_GPU_GROUP];
    for (uint32_t j = 0; j < g->k; j++)
        e[j] = (int32_t)((g->next + j) % g->n_expert);
    g->next = (g->next + g->k) % (g->n_layer * g->n_expert);
    double one, all;
    mvm_status st = mvm_ctx_time_experts(g->ctx, layer, e, 1, g->x, g->n, &one);
    if (st != MVM_OK || g->k == 1) {
        *seconds = one;
        return st;
    }
    st = mvm_ctx_time_experts(g->ctx, layer, e, g->k, g->x, g->n, &all);
    *seconds = (all - one) / (g->k - 1);
    return st;
}

mvm_status mvm_calib_gpu_experts(mvm_model *m, mvm_pool *pool, uint32_t max_tokens,
                                 double seconds_per_point, double launch,
                                 mvm_calib_experts *out)
{
    memset(out, 0, sizeof *out);
    if (max_tokens < 2)
        return too_few(max_tokens);
    struct gpu_run g = {.n_layer = m->hp.n_layer, .n_expert = m->hp.n_expert};
    g.k = m->hp.n_expert_used < MVM_CALIB_GPU_GROUP ? m->hp.n_expert_used : MVM_CALIB_GPU_GROUP;
    out->floor_s = g.k == 1 ? launch : 0;
    mvm_ctx_policies pol = plain_policies(mvm_machine_preset("h100"));
    pol.wait_loads = 1;
    mvm_status st = mvm_ctx_create(m, pool, 1, max_tokens, &pol, &g.ctx);
    if (st == MVM_OK)
        st = random_inputs((size_t)max_tokens * m->hp.n_embd, &g.x);
    if (st == MVM_OK)
        st = sweep(time_gpu_expert, &g, &g.n, max_tokens, seconds_per_point, "GPU", true,
                   out);
    free(g.x);
    mvm_ctx_free(g.ctx);
    return st;
}

/* ---- a decode token on the device --------------------------------------------------------- */

#define TOKEN_AT 32 /* the position a timed token is evaluated at: after a prompt of this many */

struct token_run {
    mvm_ctx *ctx;
    float *logits; /* [n_vocab] */
    int32_t tok;
};

/* One decode token at position TOKEN_AT, its logits read back, then the context cut back
 * to the prompt: every repetition attends to the same positions. */
static mvm_status time_token(void *ctx, uint32_t rep, double *seconds)
{
    (void)rep;
    struct token_run *t = ctx;
    double t0 = mvm_now_s();
    mvm_status st = mvm_ctx_eval(t->ctx, &t->tok, 1, t->logits, 0);
    *seconds = mvm_now_s() - t0;
    mvm_ctx_truncate(t->ctx, TOKEN_AT);
    return st;
}

/* Every expert made resident, or MVM_ERR_NOSPACE when the budget cannot hold them all. */
static mvm_status all_resident(mvm_space *space)
{
    mvm_space_info info;
    mvm_status st = mvm_space_get_info(space, &info);
    if (st != MVM_OK)
        return st;
    const uint64_t ppe = (info.expert_bytes + info.page_size - 1) / info.page_size;
    const uint64_t need = ppe * info.n_layers * info.n_experts;
    if (info.device_pages < need)
        return mvm_fail(MVM_ERR_NOSPACE, "the device budget holds %u of the %llu pages the "
                        "experts take; a token is timed with every expert resident "
                        "(--gpu-budget 100%%)", info.device_pages, (unsigned long long)need);
    for (uint32_t x = 0; x < info.n_layers * info.n_experts && st == MVM_OK; x++)
        st = mvm_make_resident(space, x / info.n_experts, x % info.n_experts, MVM_ALL_PAGES);
    return st;
}

mvm_status mvm_calib_gpu_token(mvm_model *m, mvm_pool *pool, double seconds_per_point,
                               double *seconds)
{
    *seconds = 0;
    struct token_run t = {.tok = (int32_t)(TOKEN_AT % m->hp.n_vocab)};
    int32_t prompt[TOKEN_AT];
    for (uint32_t i = 0; i < TOKEN_AT; i++)
        prompt[i] = (int32_t)((i * 7919u + 1) % m->hp.n_vocab);
    mvm_ctx_policies pol = plain_policies(mvm_machine_preset("h100"));
    pol.wait_loads = 1;
    mvm_stats before, after;
    mvm_status st = all_resident(m->space);
    /* (batches of 8: the prompt's speed is not what is timed) */
    if (st == MVM_OK)
        st = mvm_ctx_create(m, pool, TOKEN_AT + 1, 8, &pol, &t.ctx);
    if (st == MVM_OK && !(t.logits = malloc((size_t)m->hp.n_vocab * sizeof *t.logits)))
        st = mvm_fail(MVM_ERR_NOMEM, "out of memory for the calibration's logits");
    if (st == MVM_OK)
        st = mvm_ctx_eval(t.ctx, prompt, TOKEN_AT, NULL, 0);
    double warm;
    if (st == MVM_OK)
        st = time_token(&t, 0, &warm); /* the first token's graph built, its kernels loaded */
    if (st == MVM_OK)
        st = mvm_space_get_stats(m->space, &before);
    if (st == MVM_OK)
        st = repeat(time_token, &t, seconds_per_point, seconds, &(uint32_t){0});
    if (st == MVM_OK)
        st = mvm_space_get_stats(m->space, &after);
    if (st == MVM_OK && after.pages_loaded != before.pages_loaded)
        st = mvm_fail(MVM_ERR_NOSPACE, "experts moved while tokens were timed (%llu pages): "
                      "the token's time is not the resident one",
                      (unsigned long long)(after.pages_loaded - before.pages_loaded));
    free(t.logits);
    mvm_ctx_free(t.ctx);
    return st;
}

int mvm_calib_apply_token(mvm_machine *m, double t_token, const mvm_hparams *hp,
                          uint64_t expert_bytes)
{
    mvm_cost cost;
    mvm_cost_init(&cost, m, expert_bytes, hp->n_embd, hp->n_ff_exp);
    const double experts = (double)hp->n_layer * hp->n_expert_used * mvm_cost_gpu(&cost, 1);
    const double rest = (t_token - experts) / hp->n_layer;
    if (!(rest > 0) || !isfinite(rest))
        return -1;
    m->attn_time = rest;
    return 0;
}

/* A side's rates from its fit a + b·n: *setup = `setup` if positive and under half of a
 * (the part of a that is not reading the expert), else a/2; *mem_bw = expert_bytes /
 * (a − *setup); *flops = cost.h's flops_per_token / b. -1 (nothing written) unless a and b
 * are positive and finite. */
static int rates(const mvm_calib_experts *c, double setup, uint64_t expert_bytes,
                 uint32_t n_embd, uint32_t n_ff, bool flat_ok, double *setup_out,
                 double *mem_bw, double *flops)
{
    double a = c->fit.a, b = c->fit.b;
    if (!(a > 0) || !isfinite(a) || !isfinite(b) || b < 0 || (b == 0 && !flat_ok))
        return -1;
    *setup_out = setup > 0 && setup < a / 2 ? setup : a / 2;
    *mem_bw = (double)expert_bytes / (a - *setup_out);
    if (b > 0) /* flat: the work per token is below what the points resolve; *flops kept */
        *flops = 2.0 * 3.0 * n_embd * n_ff / b;
    return 0;
}

int mvm_calib_apply_cpu(mvm_machine *m, const mvm_calib_experts *c, uint64_t expert_bytes,
                        uint32_t n_embd, uint32_t n_ff)
{
    /* the setup is the pool's fork/join; one too slow (a noisy measurement) is held to
     * half of c0 */
    return rates(c, c->floor_s, expert_bytes, n_embd, n_ff, false, &m->cpu_setup,
                 &m->cpu_mem_bw, &m->cpu_flops);
}

int mvm_calib_apply_gpu(mvm_machine *m, const mvm_calib_experts *c, uint64_t expert_bytes,
                        uint32_t n_embd, uint32_t n_ff)
{
    return rates(c, m->gpu_launch, expert_bytes, n_embd, n_ff, true, &m->gpu_launch,
                 &m->gpu_mem_bw, &m->gpu_flops);
}

/* ---- copies ----------------------------------------------------------------------------- */

struct copy_run {
    mvm_space *space;
    mvm_space_info info;
    uint32_t pages, next;
};

static mvm_status time_copy(void *ctx, uint32_t rep, double *seconds)
{
    (void)rep;
    struct copy_run *c = ctx;
    uint32_t E = c->info.n_experts, layer = c->next / E, e = c->next % E;
    c->next = (c->next + 1) % (c->info.n_layers * E);
    double t0 = mvm_now_s();
    mvm_status st = mvm_make_resident(c->space, layer, e, c->pages);
    *seconds = mvm_now_s() - t0;
    mvm_status ev = mvm_evict(c->space, layer, e, 0);
    return st != MVM_OK ? st : ev;
}

mvm_status mvm_calib_copies(mvm_space *space, double seconds_per_point, mvm_calib_copy *out)
{
    memset(out, 0, sizeof *out);
    struct copy_run c = {.space = space};
    mvm_status st = mvm_space_get_info(space, &c.info);
    if (st != MVM_OK)
        return st;
    uint32_t ppe = (uint32_t)((c.info.expert_bytes + c.info.page_size - 1) / c.info.page_size);
    if (c.info.device_pages < ppe)
        return mvm_fail(MVM_ERR_NOSPACE, "calibration: the device budget (%u pages) holds "
                        "less than one expert (%u pages): raise MOEVM_GPU_BUDGET",
                        c.info.device_pages, ppe);
    uint32_t *all = malloc(c.info.n_experts * sizeof *all);
    if (!all)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the calibration");
    for (uint32_t e = 0; e < c.info.n_experts; e++)
        all[e] = e;
    for (uint32_t l = 0; l < c.info.n_layers && st == MVM_OK; l++)
        st = mvm_evict_many(space, l, all, c.info.n_experts);
    free(all);
    out->pages_small = 1;
    out->pages_full = ppe;
    out->bytes_small = ppe > 1 ? c.info.page_size : c.info.expert_bytes;
    out->bytes_full = c.info.expert_bytes;
    uint32_t reps;
    c.pages = out->pages_small;
    if (st == MVM_OK)
        st = repeat(time_copy, &c, seconds_per_point, &out->t_small, &reps);
    c.pages = out->pages_full;
    if (st == MVM_OK && ppe > 1)
        st = repeat(time_copy, &c, seconds_per_point, &out->t_full, &reps);
    else
        out->t_full = out->t_small;
    return st;
}

int mvm_calib_apply_copy(mvm_machine *m, const mvm_calib_copy *c)
{
    double setup, bw;
    if (!(c->t_full > 0) || !(c->t_small > 0))
        return -1;
    if (c->bytes_full > c->bytes_small) {
        if (!(c->t_full > c->t_small))
            return -1;
        bw = (double)(c->bytes_full - c->bytes_small) / (c->t_full - c->t_small);
        setup = c->t_small - (double)c->bytes_small / bw;
        if (!(setup > 0)) { /* per-page costs outweigh a fixed one: keep a token setup */
            setup = 0.01 * c->t_small;
            bw = (double)c->bytes_full / (c->t_full - setup);
        }
    } else {
        setup = m->load_setup < c->t_full / 2 ? m->load_setup : c->t_full / 2;
        bw = (double)c->bytes_full / (c->t_full - setup);
    }
    m->load_setup = setup;
    m->pcie_bw = bw;
    return 0;
}

/* The plausible ranges are wide on purpose: they catch measurements off by orders of
 * magnitude, not a slow machine. pcie_bw: PCIe 6.0 x16 gives 128 GB/s a direction,
 * GH200's NVLink-C2C 450. gpu_mem_bw: B200's HBM3e 8 TB/s, and an expert read from the
 * L2 a little more. cpu_mem_bw: a two-socket server's DRAM gives about 1 TB/s. cpu_flops
 * per thread: a core's AVX-512 VNNI byte products at 4 GHz reach about 1 TFLOP/s counted
 * as FP32 (calibrate counts 6·n_embd·n_ff per token, whatever the weight type). */
const mvm_calib_figure mvm_calib_figures[] = {
    {"pcie_bw", "GB/s", offsetof(mvm_machine, pcie_bw), 1e-9, 0.1, 500, 0},
    {"load_setup", "us", offsetof(mvm_machine, load_setup), 1e6, 0.1, 1e4, 0},
    {"gpu_mem_bw", "GB/s", offsetof(mvm_machine, gpu_mem_bw), 1e-9, 1, 2e4, 0},
    {"gpu_flops", "GFLOP/s", offsetof(mvm_machine, gpu_flops), 1e-9, 1, 1e7, 0},
    {"gpu_launch", "us", offsetof(mvm_machine, gpu_launch), 1e6, 0.1, 1e4, 0},
    {"cpu_mem_bw", "GB/s", offsetof(mvm_machine, cpu_mem_bw), 1e-9, 0.1, 2000, 0},
    {"cpu_flops", "GFLOP/s", offsetof(mvm_machine, cpu_flops), 1e-9, 0.05, 1000, 1},
    {"cpu_setup", "us", offsetof(mvm_machine, cpu_setup), 1e6, 0.01, 1e4, 0},
    {"attn_time", "us", offsetof(mvm_machine, attn_time), 1e6, 0.1, 1e5, 0},
};
const size_t mvm_calib_n_figures = sizeof mvm_calib_figures / sizeof *mvm_calib_figures;

uint32_t mvm_calib_warn_implausible(const mvm_machine *m, uint32_t threads, FILE *out)
{
    uint32_t n = 0;
    for (size_t i = 0; i < mvm_calib_n_figures; i++) {
        const mvm_calib_figure *f = &mvm_calib_figures[i];
        double v = *(const double *)((const char *)m + f->off) * f->scale;
        double k = f->per_thread ? (double)(threads ? threads : 1) : 1;
        if (v >= f->lo * k && v <= f->hi * k)
            continue;
        char per[48] = "";
        if (f->per_thread)
            snprintf(per, sizeof per, " for %u thread%s", threads, threads == 1 ? "" : "s");
        fprintf(out, "moevm calibrate: warning: %s is %.4g %s, outside the plausible %g to %g "
                "%s%s: the cost file may mislead the planner (was the machine busy, or do the "
                "experts fit the CPU caches? calibrate again with a longer --time and the model "
                "you run)\n", f->key, v, f->unit, f->lo * k, f->hi * k, f->unit, per);
        n++;
    }
    return n;
}
