/*
 * The device context of the forward pass (forward_cuda.c): its device memory, the model's
 * weights besides the experts copied in their file's types, the scratch buffers a batch
 * needs, and the sizing pass that counts them all without a device
 * (mvm_cuda_fwd_context_bytes).
 *
 * Scratch: the logits of MVM_CUDA_LOGIT_ROWS rows at most (forward_cuda_impl.h); the KV
 * cache takes 2 x blocks x n_ctx x kv_dim elements of device memory (MLA:
 * 1 x blocks x n_ctx x (kv_lora + rope); F16 by default, kv_cache.h); attention's split
 * parts (n_batch + 256 / units) x n_head x (head_dim + 3) floats, whatever the context
 * (kernels/cuda/kernels.h); MLA's absorbed queries and their outputs 2 x n_batch x n_head x
 * (kv_lora + rope) floats; where a batch can reach MOEVM_GEMM_ROWS, the tensor-core path's
 * F16 weights (the largest matrix but the output, or the expert batches where cuBLAS takes
 * some layer's experts, up to MOEVM_GEMM_SCRATCH; a prompt's attention scores share that
 * memory), inputs and expert batches, and cuBLAS's workspace (as large as the F16 weights'
 * up to 32 MiB; forward_cuda_gemm.c).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/forward/engine_options.h"
#include "engine/forward/forward_cuda_impl.h"
#include "vmm/error.h"

/* ---- device memory --------------------------------------------------------------------- */

mvm_status mvm_cuda_fwd_alloc(struct cuda_fwd *f, size_t bytes, mvm_dptr *out)
{
    if (f->sizing) { /* cuMemAlloc hands out 256-byte aligned blocks */
        f->need += (bytes + 255) & ~(uint64_t)255;
        *out = (mvm_dptr)f->need;
        return MVM_OK;
    }
    if (f->n_owned == f->cap_owned) {
        size_t cap = f->cap_owned ? 2 * f->cap_owned : 64;
        mvm_dptr *p = realloc(f->owned, cap * sizeof *p);
        if (!p)
            return mvm_fail(MVM_ERR_NOMEM, "out of memory for the device context");
        f->owned = p;
        f->cap_owned = cap;
    }
    TRY(mvm_gpu_alloc(f->g, bytes, out));
    f->owned[f->n_owned++] = *out;
    return MVM_OK;
}

mvm_status mvm_cuda_fwd_copy(struct cuda_fwd *f, const void *src, size_t bytes, mvm_dptr *out)
{
    *out = 0;
    if (!src)
        return MVM_OK;
    const uint64_t before = f->need;
    TRY(mvm_cuda_fwd_alloc(f, bytes, out));
    f->need_weights += f->need - before; /* a sizing pass's count; 0 otherwise */
    return f->sizing ? MVM_OK : mvm_gpu_upload(f->g, *out, src, bytes);
}

mvm_status mvm_cuda_fwd_weight(struct cuda_fwd *f, const mvm_weight *w, struct dev_weight *out)
{
    *out = (struct dev_weight){0, (int)w->type, w->rows, w->cols, w->row_bytes};
    if (w->data) { /* the tensor-core path's scratch is sized by the largest it takes */
        const uint64_t f16 = (uint64_t)w->rows * w->cols * sizeof(uint16_t);
        f->max_cols = w->cols > f->max_cols ? w->cols : f->max_cols;
        if (!mvm_cuda_fwd_mmq_takes(f, (int)w->type)) /* mmq's never reach cuBLAS */
            f->max_f16_bytes = f16 > f->max_f16_bytes ? f16 : f->max_f16_bytes;
    }
    return mvm_cuda_fwd_copy(f, w->data, (size_t)w->rows * w->row_bytes, &out->p);
}

uint64_t mvm_cuda_fwd_act_bytes(uint32_t n)
{
    /* Q8_K's blocks are the largest (292 bytes per 256) */
    return (mvm_k_act_bytes(MVM_W_Q2_K, (n + MVM_QK_K - 1) / MVM_QK_K * MVM_QK_K) + 15) &
           ~(uint64_t)15;
}

/* Block L to the device: its attention, the norm before its FFN, and its FFN: the router
 * and shared expert of a MoE block (its experts are in the space), or a dense block's. */
static mvm_status upload_block(struct cuda_fwd *f, const mvm_layer *L, struct dev_block *d)
{
    const mvm_hparams *hp = &f->m->hp;
    size_t D = hp->n_embd * sizeof(float);
    TRY(mvm_cuda_fwd_upload_attention(f, L, d));
    TRY(mvm_cuda_fwd_copy(f, L->ffn_norm, D, &d->ffn_norm));
    TRY(mvm_cuda_fwd_weight(f, &L->ffn_w1, &d->ffn_w1));
    TRY(mvm_cuda_fwd_weight(f, &L->ffn_w3, &d->ffn_w3));
    TRY(mvm_cuda_fwd_weight(f, &L->ffn_w2, &d->ffn_w2));
    TRY(mvm_cuda_fwd_weight(f, &L->router, &d->router));
    TRY(mvm_cuda_fwd_copy(f, L->router_bias, hp->n_expert * sizeof(float), &d->router_bias));
    TRY(mvm_cuda_fwd_copy(f, L->down_bias, (size_t)hp->n_expert * D, &d->down_bias));
    if (L->shexp_gate) {
        mvm_weight gate = {MVM_W_F32, L->shexp_gate, 1, hp->n_embd, D};
        TRY(mvm_cuda_fwd_weight(f, &gate, &d->shexp_gate));
    }
    TRY(mvm_cuda_fwd_weight(f, &L->shexp_w1, &d->shexp_w1));
    TRY(mvm_cuda_fwd_weight(f, &L->shexp_w3, &d->shexp_w3));
    return mvm_cuda_fwd_weight(f, &L->shexp_w2, &d->shexp_w2);
}

static mvm_status alloc_scratch(struct cuda_fwd *f)
{
    const mvm_hparams *hp = &f->m->hp;
    size_t B = f->n_batch, D = hp->n_embd, E = hp->n_expert, BK = B * hp->n_expert_used;
    uint32_t F = hp->n_ff > hp->n_ff_shexp ? hp->n_ff : hp->n_ff_shexp; /* dense or shared */
    uint32_t widest = hp->n_embd;
    uint32_t wide[] = {f->q_dim, F, hp->q_lora, hp->n_head * hp->v_dim};
    for (size_t i = 0; i < sizeof wide / sizeof *wide; i++)
        widest = wide[i] > widest ? wide[i] : widest;
    f->act_stride = mvm_cuda_fwd_act_bytes(widest); /* a row of inputs in any format */
    /* an expert row's intermediate activations in its down matrix's format */
    f->h_stride = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        enum mvm_wtype down = f->m->layers[il].expert_fmt.down;
        uint64_t h = mvm_k_act_bytes(down, hp->n_ff_exp);
        f->h_stride = h > f->h_stride ? h : f->h_stride;
    }
    f->h_stride = (f->h_stride + 15) & ~(uint64_t)15;
    TRY(mvm_cuda_fwd_alloc_attention(f));
    mvm_dptr *rows[] = {&f->x, &f->xn, &f->tmp};
    const size_t words = 4 + sizeof(mvm_g_cpu_token); /* x: a position and the CPU's words
                                                          after a row (mvm_cuda_fwd_pos) */
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
        TRY(mvm_cuda_fwd_alloc(f, B * D * 4 + (i ? 0 : words), rows[i]));
    TRY(mvm_cuda_fwd_alloc(f, B * E * 4, &f->probs));
    f->logit_rows = B < MVM_CUDA_LOGIT_ROWS ? (uint32_t)B : MVM_CUDA_LOGIT_ROWS;
    TRY(mvm_cuda_fwd_alloc(f, (size_t)f->logit_rows * hp->n_vocab * 4, &f->logits));
    TRY(mvm_cuda_fwd_alloc(f, B * f->act_stride, &f->act));
    TRY(mvm_cuda_fwd_alloc(f, BK * f->h_stride, &f->h));
    if (hp->n_expert) /* up's floats, for a K-quant down and for decode's up (up1) */
        TRY(mvm_cuda_fwd_alloc(f, BK * hp->n_ff_exp * 4, &f->hf));
    TRY(mvm_cuda_fwd_alloc(f, (BK + 2) * D * 4, &f->out)); /* + zeros, the CPU's share's */
    if (f->speculates) { /* 3 x 4 MiB at Qwen3-30B-A3B's width and a batch of 512, 3 x 14
                            at DeepSeek-V3's: the experts' where nothing speculates */
        TRY(mvm_cuda_fwd_alloc(f, B * D * 4, &f->spec_x));
        TRY(mvm_cuda_fwd_alloc(f, B * D * 4, &f->spec_xn));
        TRY(mvm_cuda_fwd_alloc(f, B * D * 4, &f->spec_tmp));
        TRY(mvm_cuda_fwd_alloc(f, BK * 4, &f->spec_rows));
    }
    if (!f->sizing) /* out's last row: zeros, what speculate's masked rows and the CPU's
                       share's later rows add */
        TRY(mvm_gpu_zero(f->g, f->out + BK * D * 4, D * 4));
    TRY(mvm_cuda_fwd_alloc(f, E * 4, &f->active));
    TRY(mvm_cuda_fwd_alloc(f, E * 8, &f->wptr));
    TRY(mvm_cuda_fwd_alloc(f, (3 * E + 3 * BK) * 4, &f->rows));
    if (F) {
        TRY(mvm_cuda_fwd_alloc(f, B * F * 4, &f->sh1));
        TRY(mvm_cuda_fwd_alloc(f, B * F * 4, &f->sh3));
        TRY(mvm_cuda_fwd_alloc(f, B * 4, &f->shg));
    }
    TRY(mvm_cuda_fwd_gemm_alloc(f));
    TRY(mvm_cuda_fwd_route_alloc(f));
    return mvm_cuda_fwd_prompt_alloc(f);
}

static mvm_status upload_model(struct cuda_fwd *f)
{
    const mvm_model *m = f->m;
    mvm_option_value mmq; /* which products take mmq: the scratch is sized by the others */
    TRY(mvm_option_read(&mvm_opt_mmq, &mmq));
    f->mmq = (enum mvm_cuda_choice)mmq.i;
    f->layers = calloc(m->hp.n_layer, sizeof *f->layers);
    f->dense = calloc(m->hp.n_dense ? m->hp.n_dense : 1, sizeof *f->dense);
    if (!f->layers || !f->dense)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the device context");
    for (uint32_t b = 0; b < m->hp.n_dense; b++)
        TRY(upload_block(f, &m->dense[b], &f->dense[b]));
    for (uint32_t il = 0; il < m->hp.n_layer; il++) {
        TRY(upload_block(f, &m->layers[il], &f->layers[il]));
        if (!f->sizing)
            f->layers[il].experts = (mvm_dptr)(uintptr_t)mvm_expert_addr(m->space, il, 0);
    }
    /* the output's products take MVM_CUDA_LOGIT_ROWS rows at most, the tensor cores' in
     * chunks of the scratch (mvm_cuda_fwd_gemm_product): it does not size it, else a large
     * vocabulary would hold MOEVM_GEMM_SCRATCH for what a prompt (one row) never uses */
    const uint64_t f16 = f->max_f16_bytes;
    TRY(mvm_cuda_fwd_weight(f, &m->output, &f->output));
    f->max_f16_bytes = f16;
    TRY(mvm_cuda_fwd_copy(f, m->output_norm, m->hp.n_embd * sizeof(float), &f->output_norm));
    TRY(alloc_scratch(f));
    /* the uploads done: a failed one is reported here */
    return f->sizing ? MVM_OK : mvm_gpu_sync(f->g);
}

/* The fields a context's allocations are sized by. */
static void set_shape(struct cuda_fwd *f, mvm_model *m, uint32_t n_ctx, uint32_t n_batch,
                      const mvm_kv_layout *kv)
{
    const mvm_hparams *hp = &m->hp;
    f->m = m;
    f->n_ctx = n_ctx;
    f->n_batch = n_batch;
    f->kv = kv;
    f->q_dim = hp->n_head * hp->head_dim;
    f->kv_dim = hp->n_head_kv * hp->head_dim;
    f->lat = hp->kv_lora + hp->rope.n_rot;
    if (hp->kv_lora) /* MLA: one latent row per position */
        f->kv_dim = f->lat;
}

/* The device's attention kernels (kernels/cuda/ops.cu, attention_mma.cu) store and read F16,
 * F32 and Q8_0 rows (mvm_g_kv_type_ok); the other types are the CPU backend's alone. Latent
 * rows (deepseek2) in Q8_0 are refused: their attention is the tensor cores' kernel, which
 * stages F16 rows; the CUDA cores' read DeepSeek-V3's at under 1% of the bandwidth. */
static mvm_status kv_readable(const mvm_model *m, const mvm_kv_layout *kv)
{
    const char *name = mvm_k_wtype_name(kv->type);
    if (!mvm_g_kv_type_ok(kv->type))
        return mvm_fail(MVM_ERR_UNSUPPORTED, "a %s KV cache is read by the CPU backend only; "
                        "the GPU's attention reads f16, f32 or q8_0 (MOEVM_KV_TYPE, "
                        "--kv-type)", name);
    if (kv->type == MVM_W_Q8_0 && m->hp.kv_lora)
        return mvm_fail(MVM_ERR_UNSUPPORTED, "a %s KV cache on the GPU takes grouped-query "
                        "attention; %s's latent rows are read as f16 or f32 (MOEVM_KV_TYPE, "
                        "--kv-type)", name, m->arch->name);
    return MVM_OK;
}

mvm_status mvm_cuda_fwd_context_bytes(mvm_model *m, uint32_t n_ctx, uint32_t n_batch,
                                      const mvm_kv_layout *kv, int speculates,
                                      uint64_t *weights, uint64_t *rest)
{
    *weights = *rest = 0;
    TRY(kv_readable(m, kv));
    struct cuda_fwd f = {.sizing = 1, .speculates = speculates};
    set_shape(&f, m, n_ctx, n_batch, kv);
    /* which kernels the context will have; without a driver to ask (the context could not
     * be made either) those of an older device, whose scratch is the larger */
    if (mvm_gpu_device_cc(m->device, 8, &f.sizing_sm80) != MVM_OK)
        f.sizing_sm80 = 0;
    mvm_status st = upload_model(&f);
    free(f.layers);
    free(f.dense);
    *weights = f.need_weights;
    *rest = f.need - f.need_weights;
    return st;
}

void mvm_cuda_fwd_destroy(void *state)
{
    struct cuda_fwd *f = state;
    if (f->g) {
        (void)mvm_gpu_use(f->g); /* the frees below need it, whichever thread ends the run */
        mvm_gpu_profile_report(f->g, stderr); /* MOEVM_GPU_PROFILE's, when on */
    }
    mvm_cuda_fwd_route_release(f);
    mvm_cuda_fwd_prompt_release(f);
    mvm_cuda_fwd_laps_report(f);
    for (size_t i = 0; i < f->n_owned; i++)
        mvm_gpu_free(f->g, f->owned[i]);
    if (f->g) {
        mvm_gpu_host_free(f->g, f->host);
        mvm_gpu_host_free(f->g, f->probs_host);
        mvm_gpu_host_free(f->g, f->stage_host);
        mvm_gpu_host_free(f->g, f->given_host);
        mvm_gpu_host_free(f->g, f->active_host);
        mvm_gpu_host_free(f->g, f->wptr_host);
        mvm_gpu_host_free(f->g, f->addr_host);
        mvm_gpu_host_free(f->g, f->cpu_rows);
    }
    mvm_cuda_fwd_fill_free(f);
    mvm_cuda_fwd_cpu_free(f);
    mvm_gpu_close(f->g);
    mvm_cpu_experts_free(f->cpu);
    free(f->owned);
    free(f->layers);
    free(f->dense);
    free(f->rows_host);
    free(f->spec_rows_host);
    free(f->spec_host);
    free(f->row_far);
    free(f->far);
    free(f->runs);
    free(f->gemm_list);
    free(f->bptr_host);
    free(f->att_ptr_host);
    free(f->home_addr);
    free(f->own);
    free(f->slot);
    free(f);
}

mvm_status mvm_cuda_fwd_create(mvm_ctx *ctx, void **state)
{
    const mvm_hparams *hp = &ctx->m->hp;
    *state = NULL;
    TRY(kv_readable(ctx->m, &ctx->kv));
    struct cuda_fwd *f = calloc(1, sizeof *f);
    if (!f)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the device context");
    *state = f;
    set_shape(f, ctx->m, ctx->n_ctx, ctx->n_batch, &ctx->kv);
    f->moe = ctx->moe;
    f->speculates = ctx->moe && mvm_prefetcher_speculative(ctx->moe->prefetch);
    mvm_space_info info;
    TRY(mvm_space_get_info(f->m->space, &info));
    f->expert_stride = info.expert_stride;
    const size_t BK = (size_t)f->n_batch * hp->n_expert_used;
    if (f->speculates) {
        f->spec_host = malloc((size_t)f->n_batch * hp->n_embd * sizeof *f->spec_host);
        f->spec_rows_host = malloc(BK * sizeof *f->spec_rows_host);
    }
    f->rows_host = malloc((3 * hp->n_expert + 3 * BK) * sizeof *f->rows_host);
    f->row_far = malloc(BK);
    f->far = malloc((size_t)f->n_batch * hp->n_embd * sizeof *f->far);
    f->runs = malloc(f->n_batch * sizeof *f->runs);
    const size_t E = hp->n_expert ? hp->n_expert : 1;
    f->gemm_list = malloc(E * sizeof *f->gemm_list);
    f->bptr_host = malloc(8 * E * sizeof *f->bptr_host);
    f->att_ptr_host = malloc(6 * (size_t)hp->n_head * sizeof *f->att_ptr_host);
    if ((f->speculates && (!f->spec_host || !f->spec_rows_host)) || !f->rows_host ||
        !f->row_far || !f->far || !f->runs || !f->gemm_list || !f->bptr_host ||
        !f->att_ptr_host)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the device context");
    f->pool = ctx->pool;
    char why[256];
    unsigned flags;
    TRY(mvm_ctx_gpu_flags(&flags));
    mvm_status st = mvm_gpu_open(f->m->device, flags, &f->g);
    if (st != MVM_OK) {
        snprintf(why, sizeof why, "%s", mvm_last_error());
        return mvm_fail(st, "CUDA device %d for the forward pass: %s", f->m->device, why);
    }
    TRY(mvm_gpu_host_alloc(f->g, (size_t)f->n_batch * hp->n_embd * sizeof *f->host + 4 +
                                     sizeof(mvm_g_cpu_token), (void **)&f->host));
    TRY(mvm_gpu_host_alloc(f->g, (size_t)f->n_batch * hp->n_expert * sizeof *f->probs_host,
                           (void **)&f->probs_host));
    TRY(mvm_gpu_host_alloc(f->g, E * sizeof *f->active_host, (void **)&f->active_host));
    TRY(mvm_gpu_host_alloc(f->g, E * sizeof *f->wptr_host, (void **)&f->wptr_host));
    st = upload_model(f);
    if (st != MVM_OK) {
        snprintf(why, sizeof why, "%s", mvm_last_error());
        return mvm_fail(st, "device context of %u positions (the weights besides the experts, "
                        "the KV cache, scratch): %s; the experts' budget holds %.0f MiB of the "
                        "device (a smaller --gpu-budget or context leaves more)", f->n_ctx, why,
                        (double)info.device_bytes / 1048576.0);
    }
    /* MOEVM_LOAD_WAIT's choices, in their order */
    enum { WAIT_DEVICE, WAIT_HOST, WAIT_DEVICE_LATE, WAIT_DEVICE_VIEW };
    mvm_option_value wait;
    TRY(mvm_option_read(&mvm_opt_load_wait, &wait));
    if (wait.i != WAIT_HOST && f->moe) /* the steps' copies ordered before the kernels */
        mvm_resid_set_reader_stream(f->moe->resid, mvm_gpu_stream(f->g));
    f->load_late = wait.i == WAIT_DEVICE_LATE;
    /* a slot space maps nothing at the experts' addresses to wait for: device reads where
     * the copies land, as device-view does */
    f->read_view = wait.i == WAIT_DEVICE_VIEW || (wait.i == WAIT_DEVICE && info.slots);
    mvm_option_value profile; /* from here on: the weights' upload is not the pass's */
    TRY(mvm_option_read(&mvm_opt_gpu_profile, &profile));
    return profile.i == 1 ? mvm_gpu_profile(f->g) : MVM_OK;
}
