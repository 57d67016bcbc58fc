/*
 * A prompt batch routed on the device (forward_cuda_impl.h; MOEVM_PROMPT_ROUTING). A host-routed
 * batch waits for the host once a MoE layer: the router's logits and input come down, the host
 * routes every token, groups the rows by expert, decides residency and sends the rows up,
 * the device idle from the sync to the first expert launch. On an H200, OLMoE-1B-7B's pp512
 * batch took 81 ms of which its kernels kept the device busy about 32 (docs/perf/engine.md,
 * sessions 106 and 107). With every expert resident and pinned (forward_cuda_route.c: what
 * lets decode route on the device) there is nothing to decide, so such a batch routes here:
 * mvm_g_route_rows chooses each token's experts by the host's rule (to the bit where logits
 * do not tie), mvm_g_route_group lays the rows out as the host's group() would, and the
 * expert launches take every expert (n_expert blocks a slice; one with no rows does
 * nothing), so the whole batch is queued without a wait.
 *
 * The policies still see every step, in layer order, as the host-routed pass would have
 * shown them: each layer's logits, router input, choice and weights are made in a slot of a
 * device ring of MVM_PROMPT_RING and come down on a second stream, beside the experts'
 * kernels, into the same slot of a pinned ring behind a mark; the host replays a layer
 * (mvm_moe_route_as, mvm_moe_replay) before its slot is written again, and the rest once
 * the batch is queued, so the replays run while the device computes the layers after. (A
 * replay of a 512-token layer took ~0.27 ms on the development VM, docs/perf/engine.md
 * session 110, where such a layer computes in ~2 ms on an H200.)
 *
 * Not routed here: decode (forward_cuda_route.c), a budget under 100%, experts on cuBLAS
 * (its batched products take each expert's row count from the host: forward_cuda_gemm.c;
 * the types mvm_cuda_fwd_mmq names take the mmq kernels on a device that has them, which
 * read the counts on the device), SMoE's speculative pass, the distributed mode,
 * MOEVM_DEVICE_ROUTING=off and MOEVM_PROMPT_ROUTING=host. A benchmark's replayed routing
 * trace (mvm_moe_override) is asked for the batch's every token and layer before it runs and
 * sent up with it; the route kernel lays it out instead of the router's choice.
 */
#include <string.h>

#include "engine/compute/clock.h"
#include "engine/forward/engine_options.h"
#include "engine/forward/forward_cuda_impl.h"
#include "engine/forward/moe_step.h"
#include "vmm/error.h"

/* The floats of a slot of the ring, for a batch of n_batch tokens. */
static size_t slot_floats(const struct cuda_fwd *f)
{
    const mvm_hparams *hp = &f->m->hp;
    return (size_t)f->n_batch * (hp->n_expert + hp->n_embd + 2 * hp->n_expert_used);
}

/* The bytes of a batch's replayed choice, [n_layer][n_batch][2 K] int32s. */
static size_t given_bytes(const struct cuda_fwd *f)
{
    const mvm_hparams *hp = &f->m->hp;
    return (size_t)hp->n_layer * f->n_batch * 2 * hp->n_expert_used * sizeof(int32_t);
}

mvm_status mvm_cuda_fwd_prompt_alloc(struct cuda_fwd *f)
{
    mvm_option_value mode;
    TRY(mvm_option_read(&mvm_opt_prompt_routing, &mode));
    if (mode.i != 0 || f->route_mode == MVM_ROUTE_OFF || f->n_batch < 2)
        return MVM_OK;
    TRY(mvm_cuda_fwd_alloc(f, MVM_PROMPT_RING * slot_floats(f) * sizeof(float),
                           &f->prompt.stage));
    return mvm_cuda_fwd_alloc(f, given_bytes(f), &f->prompt.given);
}

int mvm_cuda_fwd_prompt_can(const struct cuda_fwd *f)
{
    return f->prompt.stage && f->moe && !f->m->experts_at_home && !f->gemm_ch &&
           mvm_moe_routes_alone(f->moe);
}

/* The pinned rings, made at the first batch routed here; where the driver refuses them, the
 * host routes every batch from then on (the same results), as the log says once. */
static mvm_status make_rings(struct cuda_fwd *f)
{
    struct cuda_prompt *p = &f->prompt;
    mvm_status st = mvm_gpu_host_alloc(f->g, MVM_PROMPT_RING * slot_floats(f) * sizeof(float),
                                       (void **)&p->ring);
    if (st == MVM_OK)
        st = mvm_gpu_host_alloc(f->g, given_bytes(f), (void **)&p->given_host);
    if (st == MVM_OK)
        return MVM_OK;
    mvm_log(MVM_LOG_WARN, "%s: prompt batches are routed by the host", mvm_last_error());
    mvm_gpu_host_free(f->g, p->ring);
    p->ring = NULL;
    p->stage = 0; /* (mvm_cuda_fwd_prompt_can: never again) */
    return MVM_ERR_NOMEM;
}

mvm_status mvm_cuda_fwd_prompt_begin(struct cuda_fwd *f, const mvm_fwd_batch *b)
{
    struct cuda_prompt *p = &f->prompt;
    if (!p->ring && make_rings(f) != MVM_OK)
        return MVM_OK;
    TRY(mvm_cuda_fwd_given(f, b, p->given_host, p->given, &p->given_on));
    p->on = 1;
    p->pos = b->pos;
    p->n = b->n;
    p->queued = p->replayed = 0;
    return MVM_OK;
}

/* Where a part of a layer's stage (MVM_STAGE_LOGITS, _HIDDEN, _SEL or _W) begins in its
 * slot, in floats, for the batch's n tokens: [n][E], [n][D], [n][K] int32, [n][K]. */
static size_t part_at(const struct cuda_fwd *f, uint32_t il, int part)
{
    const mvm_hparams *hp = &f->m->hp;
    const size_t n = f->prompt.n, E = hp->n_expert, D = hp->n_embd, K = hp->n_expert_used;
    const size_t at[] = {0, n * E, n * (E + D), n * (E + D + K)};
    return (size_t)(il % MVM_PROMPT_RING) * slot_floats(f) + at[part];
}

static float *host_part(const struct cuda_fwd *f, uint32_t il, int part)
{
    return f->prompt.ring + part_at(f, il, part);
}

mvm_dptr mvm_cuda_fwd_prompt_stage(const struct cuda_fwd *f, uint32_t il, int part)
{
    return f->prompt.stage + part_at(f, il, part) * sizeof(float);
}

/* The next layer not replayed, once its stage is down, shown to the policies. */
static mvm_status replay_next(struct cuda_fwd *f)
{
    const mvm_hparams *hp = &f->m->hp;
    struct cuda_prompt *p = &f->prompt;
    const uint32_t il = p->replayed, E = hp->n_expert, K = hp->n_expert_used, n = p->n;
    const double t0 = mvm_now_s();
    TRY(mvm_gpu_wait_mark(f->g, il % MVM_PROMPT_RING));
    const double t1 = mvm_now_s();
    const int32_t *sel = (const int32_t *)host_part(f, il, MVM_STAGE_SEL);
    for (size_t i = 0; i < (size_t)n * K; i++) /* the policies index by them */
        if (sel[i] < 0 || (uint32_t)sel[i] >= E)
            return mvm_fail(MVM_ERR_BACKEND, "layer %u: the device's routing chose expert %d "
                            "of %u for the prompt's token %zu", il, sel[i], E, i / K);
    memcpy(f->moe->probs, host_part(f, il, MVM_STAGE_LOGITS), (size_t)n * E * sizeof(float));
    mvm_moe_route_as(f->moe, il, p->pos, n, host_part(f, il, MVM_STAGE_HIDDEN), sel,
                     host_part(f, il, MVM_STAGE_W));
    p->replayed++;
    mvm_status st = mvm_moe_replay(f->moe);
    p->wait += t1 - t0, p->replay += mvm_now_s() - t1;
    return st;
}

mvm_status mvm_cuda_fwd_prompt_layer(struct cuda_fwd *f, uint32_t il)
{
    struct cuda_prompt *p = &f->prompt;
    while (p->replayed + MVM_PROMPT_RING <= il) /* the layer whose slot il takes */
        TRY(replay_next(f));
    return MVM_OK;
}

mvm_status mvm_cuda_fwd_prompt_route(struct cuda_fwd *f, uint32_t il, uint32_t n,
                                     mvm_g_expert_args *ea)
{
    const mvm_hparams *hp = &f->m->hp;
    struct cuda_prompt *p = &f->prompt;
    const uint32_t E = hp->n_expert, D = hp->n_embd, K = hp->n_expert_used;
    const double t0 = mvm_now_s();
    const mvm_dptr sel = mvm_cuda_fwd_prompt_stage(f, il, MVM_STAGE_SEL),
                   w = mvm_cuda_fwd_prompt_stage(f, il, MVM_STAGE_W);
    mvm_g_route_args a = {.logits = mvm_cuda_fwd_prompt_stage(f, il, MVM_STAGE_LOGITS),
                          .choose_bias = f->layers[il].choose_bias, .sel = sel, .w = w,
                          .given = p->given_on ? p->given + (uint64_t)il * n * 2 * K * 4 : 0,
                          .scale = hp->expert_scale, .n_expert = E, .top_k = K,
                          .n_group = hp->n_group, .n_group_used = hp->n_group_used,
                          .sigmoid = (uint32_t)hp->sigmoid_gate,
                          .norm_topk = (uint32_t)hp->norm_topk, .layer = il, .n_tok = n};
    TRY(mvm_gpu_route_rows(f->g, 0, &a));
    mvm_g_route_group_args g = {.sel = sel, .w = w, .active = f->active, .off = f->off,
                                .cnt = f->cnt, .row_tok = f->row_tok, .tok_rows = f->tok_rows,
                                .row_w = f->row_w, .n_expert = E, .top_k = K, .n_tok = n,
                                .zero_row = f->n_batch * K};
    TRY(mvm_gpu_route_group(f->g, 0, &g));
    /* the slot down on the second stream while the experts run: a 512-token layer of a
     * 2,048-wide model's 4 MiB of router input would hold the compute stream ~80 us at the
     * 55 GB/s of a pinned copy (an estimate from docs/perf/vmm.md's copy rate, not timed);
     * nothing writes it again before this layer is replayed (mvm_cuda_fwd_prompt_layer) */
    TRY(mvm_gpu_download_aside(f->g, host_part(f, il, MVM_STAGE_LOGITS),
                               mvm_cuda_fwd_prompt_stage(f, il, MVM_STAGE_LOGITS),
                               (size_t)n * (E + D + 2 * K) * sizeof(float)));
    TRY(mvm_gpu_mark(f->g, il % MVM_PROMPT_RING));
    ea->n_active = E; /* every expert: mvm_g_route_group lists them all */
    p->queued = il + 1;
    p->queue += mvm_now_s() - t0;
    return MVM_OK;
}

mvm_status mvm_cuda_fwd_prompt_settle(struct cuda_fwd *f, mvm_status st)
{
    struct cuda_prompt *p = &f->prompt;
    if (!p->on)
        return st;
    p->on = 0;
    while (st == MVM_OK && p->replayed < p->queued)
        st = replay_next(f);
    if (st == MVM_OK && p->queued == f->m->hp.n_layer)
        p->batches++, p->tokens += p->n;
    return st;
}

void mvm_cuda_fwd_prompt_release(struct cuda_fwd *f)
{
    struct cuda_prompt *p = &f->prompt;
    if (p->batches) {
        const double us = 1e6 / (double)p->batches;
        mvm_log(MVM_LOG_INFO, "prompt: %llu batches of %.1f tokens routed on the device; host "
                "time a batch in its MoE layers: %.0f us queueing the routing and the stage, "
                "%.0f us replaying the policies (the device computing), %.0f us waiting for a "
                "layer's stage", (unsigned long long)p->batches,
                (double)p->tokens / (double)p->batches, p->queue * us, p->replay * us,
                p->wait * us);
    }
    if (p->ring) {
        mvm_gpu_host_free(f->g, p->ring);
        mvm_gpu_host_free(f->g, p->given_host);
    }
    p->ring = NULL, p->given_host = NULL;
}
