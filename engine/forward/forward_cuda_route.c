/*
 * Decode steps routed on the device (forward_cuda_impl.h; the step itself is forward_cuda.c's
 * moe_routed_here). A MoE step of the host-routed pass waits for the device once a layer:
 * the router's logits come down, the host routes, decides residency and sends the rows up.
 * With one token and every expert resident there is nothing to decide: the router's top-k
 * is what runs, at fixed addresses that are all backed. So such a step routes on the device
 * (mvm_g_route, the host's rule to the bit where logits do not tie), and a decode token
 * queues all its layers without waiting; its only round trip is its logits.
 *
 * The policies still see every step: each layer's logits, router input, choice and weights
 * are left in a stage on the device, come down with the token's logits, and are replayed
 * through the host's step (mvm_moe_route_as, mvm_moe_replay) in layer order, so that the
 * statistics, the evict module's history, the observers (routing traces) and the predictor
 * are what the host-routed pass would have made of the same token. The replay waits for the
 * next token: once that token is queued, the host replays this one's steps while the device
 * computes (the stage comes down to two halves, the next token's to the one that the
 * replay owed does not read), where it took the device's time between tokens (~90 us a token of
 * OLMoE-1B-7B's shape on the development VM, about 5% of a token at 500 tok/s). Whatever
 * else reads or drives the policies first replays what is owed: a host-routed batch
 * (cuda_eval), and mvm_ctx_settle, which the context's readers of the policies call
 * (forward.c). The order of the steps the policies see is the tokens', as before.
 *
 * "Every expert resident" is made to stay true by pinning every expert once all are, for
 * the rest of the context: nothing may move one under a queued kernel, and with all of
 * them on the device there is nothing to load, so the pins take nothing away. Until then,
 * when the budget holds every expert (a budget of 100%, llama.cpp's -ngl 99), all of them
 * are asked resident once at prefetch priority (by the first decode token or prompt batch
 * that could route on the device), as loading a model onto a GPU would; the host-routed
 * pass runs while they land. A packed space (where every expert fits, the default) copies
 * them all up in one job, which that batch would wait for at its first layer anyway: it is
 * waited for at once, and the batch routes here.
 *
 * A benchmark's replayed routing trace (mvm_moe_override) is asked for the token's every
 * layer before it runs and sent up with it; the route kernels lay it out instead of the
 * router's choice.
 *
 * At a budget (MOEVM_BUDGET_ROUTING=in-place) a decode token routes here too: nothing moves
 * under it, and its kernels read each expert through a table of addresses sent up before
 * it (f->addr: 0 for one resident whole and landed, read at its own address; else its
 * home's device address, mvm_expert_home_device, read in place over the bus), which the
 * route kernel hands the expert launch (mvm_g_route_args.addr). Between tokens, while the
 * device is idle, the host replays the token before (each step placed where its kernels
 * read it: mvm_moe.replay_own), so that admission and the prefetches ask their loads
 * then, and makes the table again from what has landed (mvm_resid_landed_all). An expert
 * the table gives its own address to stays there until the token is done, without a pin:
 * only a step's begin or end moves experts, and none runs until then (a host-routed batch
 * after it begins once this one is waited for). A load landing meanwhile maps at an
 * address nothing reads; an eviction's stale mapping is left at one. Why: a host-routed
 * layer waits for its router's logits, and on an H200 about 2 ms of a 12-layer
 * Qwen3-30B-A3B token at 25% was such host time with the device idle (docs/perf/engine.md,
 * session 81); here the device queues the whole token at once and reads the misses at
 * the bus's rate. Its reads of a miss and admission's copy of it each cross the bus, where
 * a host-routed step's load crossed it once; MOEVM_BUDGET_ROUTING=read-through has the
 * kernels keep what they read instead (forward_cuda_fill.c).
 *
 * With MOEVM_DEVICE_CPU=on the route kernel also gives the CPU's threads the misses they
 * finish first (forward_cuda_cpu.c); the replay shows those as CPU runs.
 *
 * Not routed here: a batch of several tokens (prefill, or a server's several sequences; with
 * every expert pinned those route on the device too, forward_cuda_prompt.c),
 * SMoE's speculative pass, the distributed mode, --n-cpu-moe 99 (the experts stay home)
 * unless MOEVM_DEVICE_CPU=on gives the CPU every choice,
 * routers wider than MVM_G_ROUTE_MAX_E experts or 32 chosen, and MOEVM_DEVICE_ROUTING=off.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/compute/clock.h"
#include "engine/forward/engine_options.h"
#include "engine/forward/forward_cuda_impl.h"
#include "engine/forward/moe_step.h"
#include "engine/forward/residency.h"
#include "vmm/error.h"

/* Whether mvm_g_route takes this model's router. */
static int routable(const mvm_hparams *hp)
{
    const uint32_t G = hp->n_group;
    return hp->n_expert && hp->n_expert <= MVM_G_ROUTE_MAX_E && hp->n_expert_used <= 32 &&
           (G <= 1 || (G <= 32 && hp->n_expert % G == 0));
}

/* MOEVM_BUDGET_ROUTING=in-place or read-through where it can run: the table of addresses,
 * every expert at its home to begin with; read-through's pool (forward_cuda_fill.c). With
 * every expert the CPU's (--n-cpu-moe 99, m->experts_at_home) and MOEVM_DEVICE_CPU=on, the
 * same table whatever MOEVM_BUDGET_ROUTING says: every choice is a miss that the CPU's
 * share takes (forward_cuda_cpu.c), its entry the home's host address, never read here. */
static mvm_status budget_alloc(struct cuda_fwd *f)
{
    const uint32_t L = f->m->hp.n_layer, E = f->m->hp.n_expert;
    const uint64_t n = (uint64_t)L * E;
    mvm_option_value mode, cpu;
    mvm_space_info info;
    TRY(mvm_option_read(&mvm_opt_budget_routing, &mode));
    TRY(mvm_option_read(&mvm_opt_device_cpu, &cpu));
    const int at_home = f->m->experts_at_home && cpu.i;
    if (mode.i == 0 && !at_home)
        return MVM_OK;
    if (f->sizing) /* (whatever the space and the assign module: the pass has neither) */
        return mvm_cuda_fwd_alloc(f, n * sizeof(uint64_t), &f->addr);
    TRY(mvm_space_get_info(f->m->space, &info));
    const char *why = !f->moe ? "no residency"
                      : at_home ? NULL
                      : !info.home_readable ? "the device cannot read the homes in place"
                      : strcmp(mvm_resid_assign_name(f->moe->resid), "gpu") != 0
                          ? "the assign module is not gpu"
                          : NULL;
    if (why) {
        mvm_log(MVM_LOG_INFO, "%s: decode routed by the host, as %s",
                mode.i == 0   ? "MOEVM_DEVICE_CPU=on"
                : mode.i == 1 ? "MOEVM_BUDGET_ROUTING=in-place"
                              : "MOEVM_BUDGET_ROUTING=read-through",
                why);
        return MVM_OK;
    }
    TRY(mvm_cuda_fwd_alloc(f, n * sizeof(uint64_t), &f->addr));
    TRY(mvm_gpu_host_alloc(f->g, n * sizeof *f->addr_host, (void **)&f->addr_host));
    f->home_addr = malloc(n * sizeof *f->home_addr);
    f->own = calloc(n, 1);
    f->slot = info.slots ? calloc(n, sizeof *f->slot) : NULL;
    if (!f->home_addr || !f->own || (info.slots && !f->slot))
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the experts' address table");
    for (uint64_t x = 0; x < n; x++) {
        const uint32_t l = (uint32_t)(x / E), e = (uint32_t)(x % E);
        f->addr_host[x] = f->home_addr[x] =
            at_home ? (uint64_t)(uintptr_t)mvm_expert_home(f->m->space, l, e)
                    : (uint64_t)(uintptr_t)mvm_expert_home_device(f->m->space, l, e);
    }
    f->budget_routing = 1;
    if (mode.i == 2 && !at_home)
        TRY(mvm_cuda_fwd_fill_alloc(f, &info));
    return mvm_gpu_upload(f->g, f->addr, f->addr_host, n * sizeof *f->addr_host);
}

mvm_status mvm_cuda_fwd_route_alloc(struct cuda_fwd *f)
{
    const mvm_hparams *hp = &f->m->hp;
    mvm_option_value mode;
    TRY(mvm_option_read(&mvm_opt_device_routing, &mode));
    f->route_mode = routable(hp) ? MVM_ROUTE_GRAPH - mode.i : MVM_ROUTE_OFF;
    if (f->route_mode == MVM_ROUTE_OFF)
        return mvm_cuda_fwd_cpu_alloc(f); /* (which says why it takes no share, if asked) */
    f->stage_floats = hp->n_expert + hp->n_embd + 3 * hp->n_expert_used;
    const size_t bytes = (size_t)hp->n_layer * f->stage_floats * sizeof(float);
    TRY(mvm_cuda_fwd_alloc(f, bytes, &f->stage));
    for (uint32_t il = 0; il < hp->n_layer; il++)
        TRY(mvm_cuda_fwd_copy(f, f->m->layers[il].expert_bias, hp->n_expert * sizeof(float),
                              &f->layers[il].choose_bias));
    const size_t given = (size_t)hp->n_layer * 2 * hp->n_expert_used * sizeof(int32_t);
    TRY(mvm_cuda_fwd_alloc(f, given, &f->given));
    TRY(budget_alloc(f));
    if (f->sizing)
        return MVM_OK;
    TRY(mvm_gpu_host_alloc(f->g, given, (void **)&f->given_host));
    TRY(mvm_gpu_host_alloc(f->g, 2 * bytes, (void **)&f->stage_host));
    return mvm_cuda_fwd_cpu_alloc(f);
}

static float *stage_half(const struct cuda_fwd *f, uint32_t half)
{
    return f->stage_host + (size_t)half * f->m->hp.n_layer * f->stage_floats;
}

float *mvm_cuda_fwd_stage_take(struct cuda_fwd *f)
{
    f->stage_half = f->replay.pending ? !f->replay.half : 0;
    return stage_half(f, f->stage_half);
}

mvm_status mvm_cuda_fwd_given(struct cuda_fwd *f, const mvm_fwd_batch *b, int32_t *host,
                              mvm_dptr dev, int *on)
{
    const uint32_t L = f->m->hp.n_layer, K = f->m->hp.n_expert_used, n = b->n;
    int sel[32];
    float w[32];
    *on = 0;
    if (!mvm_moe_overridden(f->moe))
        return MVM_OK;
    for (uint32_t il = 0; il < L; il++)
        for (uint32_t t = 0; t < n; t++) {
            (void)mvm_moe_override(f->moe, il, b->pos ? b->pos[t] : t, sel, w);
            int32_t *g = host + ((size_t)il * n + t) * 2 * K;
            for (uint32_t k = 0; k < K; k++)
                g[k] = sel[k];
            memcpy(g + K, w, K * sizeof *w);
        }
    *on = 1;
    return mvm_gpu_upload(f->g, dev, host, (size_t)L * n * 2 * K * sizeof(int32_t));
}

uint64_t mvm_cuda_fwd_stage_at(const struct cuda_fwd *f, int part)
{
    const mvm_hparams *hp = &f->m->hp;
    const uint64_t at[] = {0, hp->n_expert, hp->n_expert + hp->n_embd,
                           hp->n_expert + hp->n_embd + hp->n_expert_used,
                           hp->n_expert + hp->n_embd + 2 * hp->n_expert_used};
    return at[part];
}

mvm_dptr mvm_cuda_fwd_route_stage(const struct cuda_fwd *f, uint32_t il, int part)
{
    return f->stage + ((uint64_t)il * f->stage_floats + mvm_cuda_fwd_stage_at(f, part)) *
                          sizeof(float);
}

static void unpin_first(struct cuda_fwd *f, uint64_t n)
{
    const uint32_t E = f->m->hp.n_expert;
    for (uint64_t x = 0; x < n; x++)
        (void)mvm_unpin(f->m->space, (uint32_t)(x / E), (uint32_t)(x % E));
}

/* A packed space's upload of every expert (one job: vmm/upload.c), waited for. The batch
 * that asked for it would wait for all of it at its first layer anyway, its first request
 * joining the same job; waiting here lets that batch route on the device. */
static mvm_status wait_upload(mvm_space *sp)
{
    mvm_move *mv = NULL;
    TRY(mvm_prefetch(sp, 0, 0, MVM_ALL_PAGES, &mv));
    const mvm_status st = mv ? mvm_move_wait(mv, -1) : MVM_OK;
    if (mv)
        (void)mvm_move_release(mv);
    return st;
}

/* Every expert pinned if all are resident (f->all_pinned); else, once, every expert asked
 * resident when the budget holds them all (in a packed space, waited for). Not in a slot
 * space: the kernels of a token routed here with every expert pinned read each at its own
 * address, where a slot space maps none (its decode routes by the host, or with
 * MOEVM_BUDGET_ROUTING by the table). */
static mvm_status pin_all(struct cuda_fwd *f)
{
    mvm_space *sp = f->m->space;
    const uint32_t L = f->m->hp.n_layer, E = f->m->hp.n_expert;
    mvm_space_info info;
    mvm_stats now;
    TRY(mvm_space_get_info(sp, &info));
    if (info.slots)
        return MVM_OK;
    TRY(mvm_space_get_stats(sp, &now));
    const uint64_t all = (uint64_t)L * E, pages = all * info.pages_per_expert;
    if (now.resident_pages < pages) {
        if (f->all_asked || info.device_pages < pages)
            return MVM_OK;
        f->all_asked = 1;
        for (uint64_t x = 0; x < all; x++) {
            mvm_status st = mvm_resid_prefetch(f->moe->resid, (uint32_t)(x / E),
                                               (uint32_t)(x % E));
            if (st == MVM_ERR_NOSPACE) /* a config module's layer budgets: they stay apart */
                return MVM_OK;
            TRY(st);
        }
        if (!info.packed) /* (whether the copies have landed is the worker's timing) */
            return MVM_OK;
        TRY(wait_upload(sp));
        TRY(mvm_space_get_stats(sp, &now));
        if (now.resident_pages < pages)
            return MVM_OK;
    }
    for (uint64_t x = 0; x < all; x++) {
        mvm_status st = mvm_pin(sp, (uint32_t)(x / E), (uint32_t)(x % E));
        if (st != MVM_OK) {
            unpin_first(f, x);
            return st;
        }
    }
    f->all_pinned = 1;
    return MVM_OK;
}

mvm_status mvm_cuda_fwd_route_choose(struct cuda_fwd *f, const mvm_fwd_batch *b)
{
    f->route_here = f->cpu_split = f->prompt.on = 0;
    if (b->n > 1 && mvm_cuda_fwd_prompt_can(f)) { /* a prompt batch (forward_cuda_prompt.c) */
        if (!f->all_pinned)
            TRY(pin_all(f));
        return f->all_pinned ? mvm_cuda_fwd_prompt_begin(f, b) : MVM_OK;
    }
    if (f->route_mode == MVM_ROUTE_OFF || b->n != 1 ||
        (f->m->experts_at_home && !f->budget_routing) || /* (the CPU's every expert: below) */
        !mvm_moe_routes_alone(f->moe) ||
        f->gemm_rows == 1) /* (a one-row product on the tensor cores is not the kernels') */
        return MVM_OK;
    if (!f->all_pinned && !f->m->experts_at_home)
        TRY(pin_all(f));
    f->route_budget = !f->all_pinned && f->budget_routing;
    f->route_here = f->all_pinned || f->route_budget;
    f->cpu_split = f->cpu_share && f->route_budget; /* MOEVM_DEVICE_CPU's share */
    return MVM_OK;
}

mvm_status mvm_cuda_fwd_route_token(struct cuda_fwd *f, uint32_t il, mvm_g_expert_args *a)
{
    const mvm_hparams *hp = &f->m->hp;
    const struct dev_block *L = &f->layers[il];
    const uint32_t E = hp->n_expert, K = hp->n_expert_used;
    /* the stage (its router input kept there by the norm, its logits by the router) */
    const mvm_dptr logits = mvm_cuda_fwd_route_stage(f, il, MVM_STAGE_LOGITS),
                   sel = mvm_cuda_fwd_route_stage(f, il, MVM_STAGE_SEL),
                   w = mvm_cuda_fwd_route_stage(f, il, MVM_STAGE_W);
    const int through = f->route_budget && f->fill.on; /* read-through: kept as read */
    mvm_g_route_args r = {.logits = logits, .choose_bias = L->choose_bias, .active = f->active,
                          .off = f->off, .cnt = f->cnt, .row_tok = f->row_tok,
                          .tok_rows = f->tok_rows, .row_w = f->row_w, .sel = sel, .w = w,
                          .given = f->route_given ? f->given + (uint64_t)il * 2 * K * 4 : 0,
                          .addr = f->route_budget ? f->addr + (uint64_t)il * E * 8 : 0,
                          .wptr = f->wptr,
                          .pool = through ? f->fill.pool : 0,
                          .claims = through ? f->fill.claims : 0,
                          .wstore = through ? f->fill.wstore : 0,
                          .scale = hp->expert_scale, .n_expert = E, .top_k = K,
                          .n_group = hp->n_group, .n_group_used = hp->n_group_used,
                          .sigmoid = (uint32_t)hp->sigmoid_gate,
                          .norm_topk = (uint32_t)hp->norm_topk,
                          .n_pool = f->fill.cap, .layer = il};
    mvm_cuda_fwd_cpu_route(f, il, &r); /* the CPU's share of the misses, if it takes one */
    TRY(mvm_gpu_route(f->g, 0, &r));
    a->n_active = K;
    a->one_row = 1;
    a->wptr = f->route_budget ? f->wptr : 0; /* as the route kernel found them in f->addr */
    a->wstore = through ? f->fill.wstore : 0;
    return MVM_OK;
}

/* Read-through whose replays run late (f->fill.late): before the next token is queued, the
 * token before's table is saved for its replay (ran_*), its claims land, and its experts,
 * which the evict module has not seen it use yet, are kept from the pool's victims. */
static mvm_status land_early(struct cuda_fwd *f)
{
    const uint32_t L = f->m->hp.n_layer, E = f->m->hp.n_expert, K = f->m->hp.n_expert_used;
    memcpy(f->fill.ran_own, f->own, (size_t)L * E);
    memcpy(f->fill.ran_read_dev, f->fill.read_dev, (size_t)L * E);
    memset(f->fill.shield, 0, (size_t)L * E);
    const float *stage = stage_half(f, f->replay.half);
    for (uint32_t il = 0; il < L; il++) {
        int32_t sel[32]; /* the int32s as the device wrote them; the replay checks them */
        memcpy(sel, stage + (size_t)il * f->stage_floats +
                        mvm_cuda_fwd_stage_at(f, MVM_STAGE_SEL), K * sizeof *sel);
        for (uint32_t k = 0; k < K; k++)
            if (sel[k] >= 0 && (uint32_t)sel[k] < E)
                f->fill.shield[(size_t)il * E + (uint32_t)sel[k]] = 1;
    }
    f->fill.landed = 1;
    return mvm_cuda_fwd_fill_land(f);
}

/* The loads a late replay asked, now that no token is queued. */
mvm_status mvm_cuda_fwd_route_loads(struct cuda_fwd *f)
{
    if (!f->fill.deferred)
        return MVM_OK;
    f->fill.deferred = 0;
    return mvm_resid_defer_loads(f->moe->resid, 0);
}

mvm_status mvm_cuda_fwd_route_addresses(struct cuda_fwd *f)
{
    const double t0 = mvm_now_s();
    const int late = f->fill.on && f->fill.late && f->replay.pending && f->replay.at_budget;
    TRY(late ? land_early(f) : mvm_cuda_fwd_route_settle(f));
    const double t1 = mvm_now_s();
    mvm_status st = MVM_OK;
    if (f->fill.on) { /* its victims are evicted before the table is made */
        mvm_resid_set_shield(f->moe->resid, late ? f->fill.shield : NULL);
        st = mvm_cuda_fwd_route_loads(f);
        st = st == MVM_OK ? mvm_cuda_fwd_fill_pool(f) : st;
        mvm_resid_set_shield(f->moe->resid, NULL);
    }
    TRY(st);
    f->route_time.replay += t1 - t0, f->route_time.pool += mvm_now_s() - t1;
    const uint64_t n = (uint64_t)f->m->hp.n_layer * f->m->hp.n_expert;
    uint32_t changed = mvm_resid_landed_all(f->moe->resid, f->own, f->slot);
    for (uint64_t x = 0; changed && x < n; x++)
        f->addr_host[x] = f->own[x] ? mvm_cuda_fwd_own_addr(f, x) : f->home_addr[x];
    changed += f->fill.on ? mvm_cuda_fwd_fill_table(f) : 0;
    if (!changed)
        return MVM_OK;
    return mvm_gpu_upload(f->g, f->addr, f->addr_host, n * sizeof *f->addr_host);
}

/* The steps of a batch of one token at position pos from its stage (down on the host);
 * at_budget: placed where its kernels read each expert (f->own, as when it was queued).
 * Read-through's late replay (land_early ran: the token after it may be computing) reads
 * that table from ran_*, keeps what the token queued reads from the victims, and leaves
 * the loads it asks for the next token's start (mvm_cuda_fwd_route_loads). */
static mvm_status replay(struct cuda_fwd *f, const float *stage, uint32_t pos, int at_budget,
                         int split)
{
    const mvm_hparams *hp = &f->m->hp;
    const uint32_t E = hp->n_expert, K = hp->n_expert_used;
    const int late = at_budget && f->fill.on && f->fill.landed;
    const uint8_t *own = late ? f->fill.ran_own : f->own;
    const uint8_t *read_dev = late ? f->fill.ran_read_dev : f->fill.read_dev;
    mvm_status st = MVM_OK;
    if (at_budget)
        (void)mvm_resid_defer_loads(f->moe->resid, 1);
    if (late)
        mvm_resid_set_shield(f->moe->resid, f->fill.read_dev);
    for (uint32_t il = 0; il < hp->n_layer && st == MVM_OK; il++) {
        const float *s = stage + (size_t)il * f->stage_floats;
        memcpy(f->moe->probs, s + mvm_cuda_fwd_stage_at(f, MVM_STAGE_LOGITS), E * sizeof *s);
        int32_t sel[32]; /* the int32s as the device wrote them */
        memcpy(sel, s + mvm_cuda_fwd_stage_at(f, MVM_STAGE_SEL), K * sizeof *sel);
        for (uint32_t k = 0; k < K && st == MVM_OK; k++) /* the policies index by them */
            if (sel[k] < 0 || (uint32_t)sel[k] >= E)
                st = mvm_fail(MVM_ERR_BACKEND, "layer %u: the device's routing chose expert "
                              "%d of %u", il, sel[k], E);
        if (st != MVM_OK)
            break;
        mvm_moe_route_as(f->moe, il, &pos, 1, s + mvm_cuda_fwd_stage_at(f, MVM_STAGE_HIDDEN),
                         sel, s + mvm_cuda_fwd_stage_at(f, MVM_STAGE_W));
        f->moe->replay_own = at_budget ? (f->fill.on ? read_dev : own) + (size_t)il * E : NULL;
        if (split) /* and those the CPU ran */
            f->moe->replay_own = mvm_cuda_fwd_cpu_places(
                f, f->moe->replay_own, sel, s + mvm_cuda_fwd_stage_at(f, MVM_STAGE_CPU));
        st = mvm_moe_replay(f->moe);
        f->moe->replay_own = NULL;
        for (uint32_t k = 0; st == MVM_OK && at_budget && f->fill.on && k < K; k++) {
            const size_t x = (size_t)il * E + (uint32_t)sel[k]; /* read at a kept slab */
            mvm_resid_note_slab_reads(f->moe->resid, read_dev[x] && !own[x] &&
                                                         f->moe->where[sel[k]] == MVM_RUN_ZEROCOPY);
        }
    }
    if (late) {
        mvm_resid_set_shield(f->moe->resid, NULL);
        f->fill.landed = 0;
        f->fill.deferred = 1;
    } else if (at_budget) { /* once the whole token is counted (as it ran: what
                               read-through kept lands now, and the loads asked next find
                               it there) */
        const mvm_status landed = f->fill.on ? mvm_cuda_fwd_fill_land(f) : MVM_OK;
        const mvm_status loads = mvm_resid_defer_loads(f->moe->resid, 0);
        f->fill.deferred = 0;
        st = st != MVM_OK ? st : landed != MVM_OK ? landed : loads;
    }
    return st;
}

mvm_status mvm_cuda_fwd_route_settle(struct cuda_fwd *f)
{
    mvm_status st = f->replay.failed;
    f->replay.failed = MVM_OK;
    if (!f->replay.pending)
        return st;
    f->replay.pending = 0; /* first: an observer that reads the policies settles nothing */
    const mvm_status got = replay(f, stage_half(f, f->replay.half), f->replay.pos,
                                  f->replay.at_budget, f->replay.split);
    return st != MVM_OK ? st : got;
}

mvm_status mvm_cuda_fwd_route_done(struct cuda_fwd *f, const mvm_fwd_batch *b, mvm_status st,
                                   int idle)
{
    const uint32_t pos = b->pos ? b->pos[0] : 0;
    if (st != MVM_OK)
        return st; /* its steps are not shown: they may not have run */
    f->routed_tokens++;
    f->fill.owed = f->fill.on && f->route_budget; /* its claims came down with its stage */
    if (idle) { /* the stage is down: the next batch replays it */
        f->replay.pending = 1;
        f->replay.half = f->stage_half;
        f->replay.pos = pos;
        f->replay.at_budget = f->route_budget;
        f->replay.split = f->cpu_split;
        return MVM_OK;
    }
    TRY(mvm_gpu_sync(f->g)); /* its stage is down */
    return replay(f, stage_half(f, f->stage_half), pos, f->route_budget, f->cpu_split);
}

void mvm_cuda_fwd_route_release(struct cuda_fwd *f)
{
    uint64_t built, updated, pdl_edges;
    if (f->g && f->routed_tokens) {
        mvm_gpu_graph_stats(f->g, &built, &updated, &pdl_edges);
        /* what the device waits for between tokens: queueing and the time between tokens
         * are host time in which it has nothing queued (bench/gpu: ktrace's busy time
         * against the tokens'); the replay runs while it computes */
        const double us = 1e6 / (double)f->routed_tokens;
        mvm_log(MVM_LOG_INFO, "decode: %llu tokens routed on the device; CUDA graphs: %llu "
                "built (%llu programmatic edges), %llu kernel nodes updated; host time a "
                "token: %.0f us queueing, %.0f "
                "us replaying the policies (the token before: while the device computes, or at a "
                "budget before this one is queued), "
                "%.0f us waiting for the logits, %.0f us between tokens",
                (unsigned long long)f->routed_tokens, (unsigned long long)built,
                (unsigned long long)pdl_edges, (unsigned long long)updated,
                f->route_time.queue * us,
                f->route_time.policies * us, f->route_time.wait * us,
                f->route_time.between * us);
        mvm_resid_stats rs;
        if (f->budget_routing && f->moe) { /* since the context began: the prompt's too */
            mvm_resid_get_stats(f->moe->resid, &rs);
            mvm_log(MVM_LOG_INFO, "decode at a budget routed on the device: %llu expert "
                    "accesses, %llu hits, %llu read in place, %llu on the CPU, %llu admitted, "
                    "%llu prefetched, %llu kept as read (read-through), %llu read at their "
                    "slabs before their map; of the policies' time a token, %.0f us before the "
                    "token is queued (%.0f us replaying or landing the token before, %.0f us "
                    "refilling the pool, the rest the table), the rest while the device computes",
                    (unsigned long long)rs.accesses, (unsigned long long)rs.hits,
                    (unsigned long long)rs.zerocopy_runs, (unsigned long long)rs.cpu_runs,
                    (unsigned long long)rs.admitted, (unsigned long long)rs.prefetches,
                    (unsigned long long)rs.filled,
                    (unsigned long long)rs.slab_reads, f->route_time.before * us,
                    f->route_time.replay * us, f->route_time.pool * us);
        }
    }
    if (f->all_pinned)
        unpin_first(f, (uint64_t)f->m->hp.n_layer * f->m->hp.n_expert);
    f->all_pinned = 0;
    if (f->fill.on && mvm_cuda_fwd_fill_give_back(f) != MVM_OK)
        mvm_log(MVM_LOG_WARN, "giving back the read-through pool: %s", mvm_last_error());
}
