/*
 * The device pass's products on the tensor cores (forward_cuda_impl.h): a product of at least
 * MOEVM_GEMM_ROWS rows (a prefill batch's tokens, or one expert's tokens in a MoE step)
 * dequantizes its weights to F16, converts its inputs to F16 and lets cuBLAS multiply them
 * with F32 accumulation (engine/compute/blas.h); decode's single rows keep the integer
 * kernels, which read each weight byte once and so are bound by memory, not arithmetic.
 *
 * F32 weights (routers, gates, F32 files) stay on the kernels, which multiply them exactly.
 *
 * This is how llama.cpp multiplies a large batch by quantized weights with cuBLAS (dequantize
 * to F16, GEMM): a weight is read and widened once per batch, then every token reuses it from
 * the tensor cores' tiles, where the integer kernels re-read it per tile of MVM_G_TILE tokens
 * and multiply on the CUDA cores. The numerics are not the CPU's to rounding any more: weights
 * and inputs are rounded to F16 (11 bits), as llama.cpp's are on this path; the tests bound
 * the difference (tests/test_forward_gpu.c).
 *
 * The F16 weights live in one scratch buffer of at most MOEVM_GEMM_SCRATCH bytes, so a large
 * matrix goes in chunks of rows, and an expert in chunks of whole channel groups: each chunk
 * is dequantized, multiplied, and its buffer reused by the next in stream order. An expert's
 * chunk runs gate and up in one product (one dequantization of their rows, group by group),
 * the unit (mvm_g_glu_half, which folds in the routing weights), and down into the
 * expert's rows of f->out, each chunk after the first adding to them (beta = 1): the rows
 * land where the integer kernels put theirs, so the per-token sum and the speculative pass
 * are unchanged. The step's inputs are converted to F16 once, for all its experts (a16x):
 * a prompt batch of OLMoE-1B-7B ran about 4,000 launches, the device idle half the time
 * between them on an H200 (bench/gpu/ktrace.sh, 2026-11-26), and these were two of an
 * expert's seven.
 */
#include <stdint.h>

#include "engine/forward/engine_options.h"
#include "engine/forward/forward_cuda_impl.h"
#include "vmm/error.h"

#define MVM_GEMM_WORKSPACE (32u << 20) /* cuBLAS's at most, as NVIDIA advises for Hopper */

/* Channels of one expert chunk: as many whole groups (of the largest group size of any
 * layer) as `cap` bytes hold for gate, up and down together, at least one, and no more than
 * the expert has. */
static uint32_t expert_chunk(const struct cuda_fwd *f, uint32_t G, uint64_t cap)
{
    const mvm_hparams *hp = &f->m->hp;
    const uint64_t per_ch = 3ull * hp->n_embd * sizeof(uint16_t);
    uint64_t ch = cap / per_ch / G * G;
    ch = ch ? ch : G;
    return (uint32_t)(ch < hp->n_ff_exp ? ch : (hp->n_ff_exp + G - 1) / G * G);
}

mvm_status mvm_cuda_fwd_gemm_alloc(struct cuda_fwd *f)
{
    const mvm_hparams *hp = &f->m->hp;
    mvm_option_value rows, cap;
    TRY(mvm_option_read(&mvm_opt_gemm_rows, &rows));
    TRY(mvm_option_read(&mvm_opt_gemm_scratch, &cap));
    f->gemm_rows = rows.i > 0 && (uint64_t)rows.i <= f->n_batch ? (uint32_t)rows.i : 0;
    if (!f->gemm_rows)
        return MVM_OK; /* no batch reaches it: no scratch */
    uint32_t G = MVM_QBLOCK;
    for (uint32_t il = 0; il < hp->n_layer && hp->n_expert; il++)
        if (mvm_k_is_k(f->m->layers[il].expert_fmt.down))
            G = MVM_QK_K;
    f->gemm_ch = hp->n_expert ? expert_chunk(f, G, (uint64_t)cap.i) : 0;
    /* as much as the largest matrix or expert chunk needs, up to MOEVM_GEMM_SCRATCH, but
     * always one expert chunk and one row of the widest matrix */
    const uint64_t chunk = 3ull * f->gemm_ch * hp->n_embd * sizeof(uint16_t);
    const uint64_t row = (uint64_t)f->max_cols * sizeof(uint16_t);
    uint64_t w16 = f->max_f16_bytes > chunk ? f->max_f16_bytes : chunk;
    w16 = w16 < (uint64_t)cap.i ? w16 : (uint64_t)cap.i;
    w16 = w16 > chunk ? w16 : chunk;
    f->gemm_w16_bytes = w16 > row ? w16 : row;
    const uint64_t B = f->n_batch;
    TRY(mvm_cuda_fwd_alloc(f, f->gemm_w16_bytes, &f->w16));
    TRY(mvm_cuda_fwd_alloc(f, B * f->max_cols * sizeof(uint16_t), &f->a16));
    if (f->gemm_ch) {
        TRY(mvm_cuda_fwd_alloc(f, B * hp->n_expert_used * hp->n_embd * sizeof(uint16_t),
                               &f->a16x));
        TRY(mvm_cuda_fwd_alloc(f, B * 2 * f->gemm_ch * sizeof(float), &f->gu));
        TRY(mvm_cuda_fwd_alloc(f, B * f->gemm_ch * sizeof(uint16_t), &f->h16));
    }
    /* cuBLAS's workspace: as large as the F16 weights, up to what NVIDIA advises; a small
     * model's products are small, and a small device keeps room for its experts */
    f->gemm_ws_bytes = f->gemm_w16_bytes < MVM_GEMM_WORKSPACE ? f->gemm_w16_bytes
                                                              : MVM_GEMM_WORKSPACE;
    return mvm_cuda_fwd_alloc(f, f->gemm_ws_bytes, &f->gemm_ws);
}

/* Whether a product of `rows` rows takes the tensor cores: cuBLAS is opened at the first
 * that could; where it is missing or will not start, the kernels take every product from
 * then on (the same results, only slower), and the user is told once. */
static mvm_status use_gemm(struct cuda_fwd *f, uint32_t rows, int *use)
{
    *use = 0;
    if (!f->gemm_rows || rows < f->gemm_rows)
        return MVM_OK;
    mvm_option_value lib;
    TRY(mvm_option_read(&mvm_opt_cublas_library, &lib));
    if (mvm_gpu_gemm_open(f->g, lib.s, f->gemm_ws, f->gemm_ws_bytes) != MVM_OK) {
        mvm_log(MVM_LOG_WARN, "%s: the products of large batches use the integer kernels "
                "(set MOEVM_CUBLAS_LIBRARY, or MOEVM_GEMM_ROWS=0 to say so)", mvm_last_error());
        f->gemm_rows = 0;
        return MVM_OK;
    }
    *use = 1;
    return MVM_OK;
}

mvm_status mvm_cuda_fwd_gemm_wants(struct cuda_fwd *f, const struct dev_weight *w, uint32_t n,
                                   int *use)
{
    *use = 0;
    /* F32 weights (routers, gates) keep their precision on the kernels; a thread of the
     * dequantization takes 32 elements of a row */
    return w->type == MVM_W_F32 || w->cols % MVM_QBLOCK ? MVM_OK : use_gemm(f, n, use);
}

static mvm_status to_half(struct cuda_fwd *f, mvm_dptr x, mvm_dptr idx, uint64_t x_stride,
                          uint32_t cols, uint32_t n, mvm_dptr dst)
{
    mvm_g_to_half_args a = {.x = x, .idx = idx, .dst = dst, .x_stride = x_stride,
                            .dst_stride = cols, .n = cols, .n_rows = n};
    return mvm_gpu_to_half(f->g, 0, &a);
}

mvm_status mvm_cuda_fwd_gemm_product(struct cuda_fwd *f, const struct dev_weight *w, uint32_t H,
                                     mvm_dptr in, uint64_t in_pitch, uint32_t n, mvm_dptr y,
                                     uint64_t y_pitch)
{
    const uint32_t rows = w->rows / H, cols = w->cols;
    uint64_t chunk = f->gemm_w16_bytes / ((uint64_t)cols * sizeof(uint16_t));
    chunk = chunk < rows ? chunk : rows;
    for (uint32_t h = 0; h < H; h++) {
        TRY(to_half(f, in + h * in_pitch * sizeof(float), 0, H * in_pitch, cols, n, f->a16));
        for (uint32_t r0 = 0; r0 < rows; r0 += (uint32_t)chunk) {
            const uint32_t nr = rows - r0 < chunk ? rows - r0 : (uint32_t)chunk;
            mvm_g_dequant_args d = {.w = w->p + ((uint64_t)h * rows + r0) * w->row_bytes,
                                    .dst = f->w16, .row_bytes = w->row_bytes,
                                    .dst_stride = cols, .n_in = cols, .n_rows = nr, .per = nr};
            TRY(mvm_gpu_dequant(f->g, w->type, &d));
            TRY(mvm_gpu_gemm(f->g, nr, n, cols, f->w16, cols, f->a16, cols,
                             y + (h * y_pitch + r0) * sizeof(float), H * y_pitch, 0.0f));
        }
    }
    return MVM_OK;
}

/* Channels c0 .. c0 + nc - 1 of expert e's nr rows (from row r0 of the step): gate and up,
 * the unit, and down added into f->out (the first chunk sets the rows). */
static mvm_status expert_chunk_rows(struct cuda_fwd *f, uint32_t il, mvm_dptr expert,
                                    uint32_t r0, uint32_t nr, uint32_t c0, uint32_t nc)
{
    const mvm_layer *L = &f->m->layers[il];
    const mvm_k_expert_fmt fmt = L->expert_fmt;
    const uint32_t D = f->m->hp.n_embd, G = (uint32_t)mvm_k_expert_group_channels(fmt);
    const uint64_t gb = mvm_k_expert_group_bytes(fmt, D), rb = mvm_k_row_bytes(fmt.gate_up, D);
    const mvm_dptr first = expert + (uint64_t)(c0 / G) * gb;
    const mvm_dptr w_down = f->w16 + (uint64_t)2 * nc * D * 2;
    /* gate and up rows in one launch, as they lie: each group's G gate rows, then its G up
     * rows (mvm_g_glu_half reads them so) */
    mvm_g_dequant_args d = {.w = first, .dst = f->w16, .row_bytes = rb, .group_bytes = gb,
                            .dst_stride = D, .n_in = D, .n_rows = 2 * nc, .per = 2 * G,
                            .dst_rows = 2 * G};
    TRY(mvm_gpu_dequant(f->g, fmt.gate_up, &d));
    TRY(mvm_gpu_gemm(f->g, 2 * nc, nr, D, f->w16, D, f->a16x + (uint64_t)r0 * D * 2, D, f->gu,
                     2 * nc, 0.0f));
    mvm_g_glu_half_args u = {.gu = f->gu, .h = f->h16, .w = f->row_w + (uint64_t)r0 * 4,
                             .expert = expert, .gu_stride = 2 * nc, .h_stride = nc,
                             .group_bytes = gb, .n_ch = nc, .n_rows = nr, .c0 = c0, .G = G,
                             .glu = fmt.glu};
    TRY(mvm_gpu_glu_half(f->g, 0, &u));
    /* each group's down slots: n_embd rows of G, as the next G columns of [D][nc] */
    d = (mvm_g_dequant_args){.w = first + 2 * G * rb, .dst = w_down,
                             .row_bytes = mvm_k_row_bytes(fmt.down, G), .group_bytes = gb,
                             .dst_stride = nc, .n_in = G, .n_rows = D * (nc / G), .per = D,
                             .dst_cols = G};
    TRY(mvm_gpu_dequant(f->g, fmt.down, &d));
    return mvm_gpu_gemm(f->g, D, nr, nc, w_down, nc, f->h16, nc,
                        f->out + (uint64_t)r0 * D * sizeof(float), D, c0 ? 1.0f : 0.0f);
}

mvm_status mvm_cuda_fwd_gemm_expert(struct cuda_fwd *f, uint32_t il, uint32_t e)
{
    const mvm_hparams *hp = &f->m->hp;
    const mvm_moe *s = f->moe;
    const uint32_t r0 = s->off[e], nr = s->cnt[e], D = hp->n_embd;
    const mvm_dptr expert = f->layers[il].experts + (uint64_t)e * f->expert_stride;
    /* every row of the step as F16 in a16x, in the step's row order, at its first expert
     * here: one launch a step, where there was one an expert */
    if (!f->a16x_ready) {
        TRY(to_half(f, f->xn, f->row_tok, D, D, f->step_tok * hp->n_expert_used, f->a16x));
        f->a16x_ready = 1;
    }
    for (uint32_t c0 = 0; c0 < hp->n_ff_exp; c0 += f->gemm_ch) {
        const uint32_t nc = hp->n_ff_exp - c0 < f->gemm_ch ? hp->n_ff_exp - c0 : f->gemm_ch;
        TRY(expert_chunk_rows(f, il, expert, r0, nr, c0, nc));
    }
    const mvm_dptr bias = f->layers[il].down_bias;
    if (!bias)
        return MVM_OK;
    /* gpt-oss: its down bias, weighted by each row's routing weight, as the kernels add it */
    mvm_g_add_args b = {.x = f->out + (uint64_t)r0 * D * sizeof(float),
                        .y = bias + (uint64_t)e * D * sizeof(float), .n = D, .n_tok = nr,
                        .scale = f->row_w + (uint64_t)r0 * 4};
    return mvm_gpu_add(f->g, 0, &b);
}

mvm_status mvm_cuda_fwd_gemm_wants_expert(struct cuda_fwd *f, uint32_t il, uint32_t e, int *use)
{
    const mvm_k_expert_fmt fmt = f->m->layers[il].expert_fmt;
    *use = 0;
    if (!f->gemm_ch || fmt.tiles || fmt.gate_up == MVM_W_F32 || fmt.down == MVM_W_F32)
        return MVM_OK;
    return use_gemm(f, f->moe->cnt[e], use);
}
