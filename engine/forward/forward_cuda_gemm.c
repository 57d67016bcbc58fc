/*
 * The device pass's products on the tensor cores (forward_cuda_impl.h): a product of at least
 * MOEVM_GEMM_ROWS rows (a prefill batch's tokens, or one expert's tokens in a MoE step)
 * dequantizes its weights to F16, converts its inputs to F16 and lets cuBLAS multiply them
 * with F32 accumulation (engine/compute/blas.h); decode's single rows keep the integer
 * kernels, which read each weight byte once and so are bound by memory, not arithmetic.
 *
 * F32 weights (routers, gates, F32 files) stay on the kernels, which multiply them exactly,
 * and so do matrices of the types the mmq kernels take (mvm_cuda_fwd_mmq_takes): a batch of
 * MVM_CUDA_MMQ_ROWS tokens or more multiplies them on the int8 tensor cores as they lie
 * (forward_cuda_ops.c's product, kernels/cuda/mmq.cu), as llama.cpp does, where this path
 * would dequantize each into the scratch first.
 *
 * This is how llama.cpp multiplies a large batch by quantized weights with cuBLAS (dequantize
 * to F16, GEMM): a weight is read and widened once per batch, then every token reuses it from
 * the tensor cores' tiles, where the integer kernels re-read it per tile of MVM_G_TILE tokens
 * and multiply on the CUDA cores. The numerics are not the CPU's to rounding any more: weights
 * and inputs are rounded to F16 (11 bits), as llama.cpp's are on this path; the tests bound
 * the difference (tests/test_forward_gpu.c).
 *
 * The F16 weights live in one scratch buffer of at most MOEVM_GEMM_SCRATCH bytes, so a large
 * matrix goes in chunks of rows, each dequantized, multiplied, and its buffer reused by the
 * next in stream order. The step's inputs are converted to F16 once, for all its experts
 * (a16x).
 *
 * A MoE step's experts go in batches of as many whole experts as the scratch holds
 * (gemm_per), so that launches are counted by the batch, not by the expert: a prompt batch
 * of OLMoE-1B-7B ran about 4,000 launches, five or seven an expert, and the device was idle
 * half the time between them on an H200 (bench/gpu/ktrace.sh, 2026-11-26). A batch is six:
 * its gate and up rows dequantized for all its experts (one launch, the experts found
 * through a list of ids: mvm_g_experts_list), their down parts likewise, gate and up
 * multiplied for all of them by one cublasGemmBatchedEx, the unit (mvm_g_glu_half, which
 * folds in the routing weights) into F16, down by a second, and the rows put back into
 * f->out (mvm_g_rows_out, with gpt-oss's down bias) where the integer kernels put theirs,
 * so the per-token sum and the speculative pass are unchanged. A batched product has one
 * shape, so each expert is given as many rows as the batch's largest: the round's experts
 * are sorted by their rows, the most first, so that a batch's pad little, and its padding
 * rows (read past an expert's own, into the next's or a16x's spare n_batch rows at the end)
 * are computed and never read. cublasGemmBatchedEx, not the grouped product that would
 * take each expert's own row count (cublasGemmGroupedBatchedEx, cuBLAS 12.5): that one
 * writes its output in its inputs' type, F16 here, which loses the F32 sums and overflows
 * past 65504; this one writes F32, as cublasGemmEx does.
 *
 * An expert larger than the scratch goes alone, in chunks of whole channel groups: gate and
 * up in one product (one dequantization of their rows, group by group), the unit, and down
 * into the expert's rows of f->out, each chunk after the first adding to them (beta = 1).
 *
 * A prompt's attention (a batch of MOEVM_GEMM_ROWS queries or more, an F16 cache without a
 * ring) is three launches a chunk of queries instead of the attention kernel, which reads
 * every key and value once per query (760 us a layer for OLMoE-1B-7B's pp512 on an H200,
 * 2% of its CUDA cores' rate): the scores of every head as one batched product (queries
 * in F16, the cached keys as they are), the softmax (mvm_g_attn_softmax: causal, windows
 * and gpt-oss's sinks, the CPU's order of operations), its weights in F16, and the
 * weighted values as a second batched product into the output. The scores take six bytes
 * a (head, query, position) of the scratch (up to MOEVM_GEMM_SCRATCH; a chunk is as many
 * queries as it holds over every position they see). Numerics: as the products', keys,
 * queries and weights in F16 with F32 sums, where the kernel keeps the queries in F32.
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

/* The scratch of a prompt's attention by products (mvm_cuda_fwd_gemm_attention), 0 where it
 * does not run: where the cache is F16 or Q8_0 (its rows converted to F16 first, att_kv16)
 * and some block's has no ring, six bytes a (head, query, position) for its scores and
 * weights, of n_batch queries over n_ctx positions, up to `cap` but for two queries at least
 * (a batch's queries then go in chunks). Rows of 16 bytes for cuBLAS. */
static uint64_t attention_bytes(const struct cuda_fwd *f, uint64_t cap)
{
    const mvm_hparams *hp = &f->m->hp;
    const uint64_t d = hp->kv_lora ? f->lat : hp->head_dim, H = hp->n_head;
    int plain = 0;
    for (uint32_t b = 0; b < hp->n_dense + hp->n_layer; b++)
        plain |= !f->kv->blocks[b].ring;
    if ((f->kv->type != MVM_W_F16 && f->kv->type != MVM_W_Q8_0) || !plain || d % 8 ||
        f->kv_dim % 8)
        return 0;
    const uint64_t per_q = H * ((f->n_ctx + 7) / 8 * 8) * 6, all = per_q * f->n_batch;
    const uint64_t bytes = all < cap ? all : cap;
    return bytes > 2 * per_q ? bytes : 2 * per_q;
}

/* Whether experts of this format can take the tensor cores: F32 ones keep their precision
 * on the kernels, as F32 matrices do. */
static int expert_gemm_ok(mvm_k_expert_fmt fmt)
{
    return !fmt.tiles && fmt.gate_up != MVM_W_F32 && fmt.down != MVM_W_F32;
}

/* Whether layer il's experts can take cuBLAS: those the mmq kernels take never do. */
static int experts_on_blas(const struct cuda_fwd *f, uint32_t il)
{
    return f->m->hp.n_expert && expert_gemm_ok(f->m->layers[il].expert_fmt) &&
           !mvm_cuda_fwd_mmq(f, il);
}

mvm_status mvm_cuda_fwd_gemm_alloc(struct cuda_fwd *f)
{
    const mvm_hparams *hp = &f->m->hp;
    mvm_option_value rows, cap, batch;
    TRY(mvm_option_read(&mvm_opt_gemm_rows, &rows));
    TRY(mvm_option_read(&mvm_opt_gemm_scratch, &cap));
    TRY(mvm_option_read(&mvm_opt_gemm_batch, &batch));
    f->gemm_rows = rows.i > 0 && (uint64_t)rows.i <= f->n_batch ? (uint32_t)rows.i : 0;
    if (!f->gemm_rows)
        return MVM_OK; /* no batch reaches it: no scratch */
    uint32_t G = MVM_QBLOCK;
    int experts = 0; /* some layer's experts take cuBLAS */
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        if (!experts_on_blas(f, il))
            continue;
        experts = 1;
        if (mvm_k_is_k(f->m->layers[il].expert_fmt.down))
            G = MVM_QK_K;
    }
    f->gemm_ch = experts ? expert_chunk(f, G, (uint64_t)cap.i) : 0;
    /* as much as the largest matrix or expert chunk needs, up to MOEVM_GEMM_SCRATCH, but
     * always one expert chunk and one row of the widest matrix */
    const uint64_t chunk = 3ull * f->gemm_ch * hp->n_embd * sizeof(uint16_t);
    const uint64_t row = (uint64_t)f->max_cols * sizeof(uint16_t);
    uint64_t w16 = f->max_f16_bytes > chunk ? f->max_f16_bytes : chunk;
    w16 = w16 < (uint64_t)cap.i ? w16 : (uint64_t)cap.i;
    w16 = w16 > chunk ? w16 : chunk;
    const uint64_t B = f->n_batch, BK = B * hp->n_expert_used, D = hp->n_embd;
    const uint64_t F = hp->n_ff_exp, expert_f16 = 3 * F * D * sizeof(uint16_t);
    /* whole experts: batches of as many as the scratch holds, up to a layer's */
    if (f->gemm_ch >= F && batch.i) {
        const uint64_t all = expert_f16 * hp->n_expert;
        const uint64_t want = all < (uint64_t)cap.i ? all : (uint64_t)cap.i;
        w16 = w16 > want ? w16 : want;
        f->gemm_per = (uint32_t)(w16 / expert_f16);
    }
    f->gemm_w16_bytes = w16 > row ? w16 : row;
    f->att_bytes = batch.i ? attention_bytes(f, (uint64_t)cap.i) : 0;
    TRY(mvm_cuda_fwd_alloc(f, f->gemm_w16_bytes > f->att_bytes ? f->gemm_w16_bytes
                                                                : f->att_bytes, &f->w16));
    TRY(mvm_cuda_fwd_alloc(f, B * f->max_cols * sizeof(uint16_t), &f->a16));
    if (f->gemm_per) {
        /* a batch's products read each expert's inputs for as many rows as its largest
         * expert has (n_batch at most), past the step's last row */
        TRY(mvm_cuda_fwd_alloc(f, (BK + B) * D * sizeof(uint16_t), &f->a16x));
        TRY(mvm_cuda_fwd_alloc(f, BK * (2 * F > D ? 2 * F : D) * sizeof(float), &f->bgo));
        TRY(mvm_cuda_fwd_alloc(f, BK * F * sizeof(uint16_t), &f->bgh));
        TRY(mvm_cuda_fwd_alloc(f, 8 * hp->n_expert * sizeof(uint64_t), &f->bptr));
    } else if (f->gemm_ch) {
        TRY(mvm_cuda_fwd_alloc(f, BK * D * sizeof(uint16_t), &f->a16x));
        TRY(mvm_cuda_fwd_alloc(f, B * 2 * f->gemm_ch * sizeof(float), &f->gu));
        TRY(mvm_cuda_fwd_alloc(f, B * f->gemm_ch * sizeof(uint16_t), &f->h16));
    }
    if (f->att_bytes) {
        const uint64_t H = hp->n_head, d = hp->kv_lora ? f->lat : hp->head_dim;
        f->att_s = f->w16;
        TRY(mvm_cuda_fwd_alloc(f, B * H * d * sizeof(uint16_t), &f->att_q16));
        TRY(mvm_cuda_fwd_alloc(f, 6 * H * sizeof(uint64_t), &f->att_ptr));
        if (f->kv->type == MVM_W_Q8_0)
            TRY(mvm_cuda_fwd_alloc(f, 2ull * f->n_ctx * f->kv_dim * sizeof(uint16_t),
                                   &f->att_kv16));
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
     * dequantization takes 32 elements of a row; mmq's types take its kernel (or, in few
     * rows, the integer kernels: mvm_cuda_fwd_mmq_takes) */
    if (w->type == MVM_W_F32 || w->cols % MVM_QBLOCK || mvm_cuda_fwd_mmq_takes(f, w->type))
        return MVM_OK;
    return use_gemm(f, n, use);
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

/* Every row of the step as F16 in a16x, in the step's row order, at its first expert here:
 * one launch a step, where there was one an expert. */
static mvm_status step_inputs(struct cuda_fwd *f)
{
    const mvm_hparams *hp = &f->m->hp;
    if (f->a16x_ready)
        return MVM_OK;
    f->a16x_ready = 1;
    return to_half(f, f->xn, f->row_tok, hp->n_embd, hp->n_embd,
                   f->step_tok * hp->n_expert_used, f->a16x);
}

/* Where expert e of layer il is read, as an offset from the layer's experts (its own
 * address: e strides on; in a slot space its slot, as the kernels read it). */
static uint64_t expert_offset(const struct cuda_fwd *f, uint32_t il, uint32_t e)
{
    const uint64_t at = mvm_resid_view_addr(f->moe->resid, il, e);
    return at ? at - f->layers[il].experts : (uint64_t)e * f->expert_stride;
}

/* Expert e's rows, an expert larger than the scratch: in chunks of channels. */
static mvm_status expert_in_chunks(struct cuda_fwd *f, uint32_t il, uint32_t e)
{
    const mvm_hparams *hp = &f->m->hp;
    const mvm_moe *s = f->moe;
    const uint32_t r0 = s->off[e], nr = s->cnt[e], D = hp->n_embd;
    const mvm_dptr expert = f->layers[il].experts + expert_offset(f, il, e);
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

/* The experts of the batch that begins at es (sorted by sort_by_rows; `left` from there):
 * up to gemm_per, whose rows, each padded to the first's, fit the step's n_batch * K rows
 * of the batch's buffers. */
static uint32_t batch_size(const struct cuda_fwd *f, const uint32_t *es, uint32_t left)
{
    const uint64_t cap = (uint64_t)f->n_batch * f->m->hp.n_expert_used;
    const uint32_t rows = f->moe->cnt[es[0]];
    uint32_t k = 1;
    while (k < left && k < f->gemm_per && (uint64_t)(k + 1) * rows <= cap)
        k++;
    return k;
}

/* 64-bit words of a batch of k experts' pointer arrays, ids and offsets (batch_pointers). */
static uint64_t batch_words(uint32_t k)
{
    return 7ull * k + (k + 1) / 2;
}

/* A batch of k whole experts es[0 .. k) of layer il, each given n rows in the batch's
 * buffers (its own first cnt of them): its pointer arrays, as its products read them
 * ([6][k]: gate/up's weights, inputs, outputs, then down's), then its k ids, then where
 * each is read (mvm_g_experts_list.at), into p (batch_words). */
static void batch_pointers(const struct cuda_fwd *f, uint32_t il, const uint32_t *es,
                           uint32_t k, uint32_t n, uint64_t *p)
{
    const uint64_t D = f->m->hp.n_embd, F = f->m->hp.n_ff_exp;
    const uint64_t h = sizeof(uint16_t), fl = sizeof(float);
    const mvm_dptr w_down = f->w16 + k * 2 * F * D * h;
    for (uint32_t i = 0; i < k; i++) {
        const uint64_t off = f->moe->off[es[i]];
        p[i] = f->w16 + i * 2 * F * D * h;
        p[k + i] = f->a16x + off * D * h;
        p[2 * k + i] = f->bgo + i * n * 2 * F * fl;
        p[3 * k + i] = w_down + i * D * F * h;
        p[4 * k + i] = f->bgh + i * n * F * h;
        p[5 * k + i] = f->bgo + i * n * D * fl;
        ((uint32_t *)(p + 6 * k))[i] = es[i];
        p[6 * k + (k + 1) / 2 + i] = expert_offset(f, il, es[i]);
    }
}

/* The batch of layer il whose pointer arrays and ids are at ptr on the device: two
 * dequantizations, two batched products, the unit and the rows put back, six launches for
 * its k experts. */
static mvm_status expert_batch(struct cuda_fwd *f, uint32_t il, mvm_dptr ptr, uint32_t k,
                               uint32_t n)
{
    const mvm_hparams *hp = &f->m->hp;
    const mvm_k_expert_fmt fmt = f->m->layers[il].expert_fmt;
    const uint64_t D = hp->n_embd, F = hp->n_ff_exp, P = sizeof(uint64_t);
    const uint32_t G = (uint32_t)mvm_k_expert_group_channels(fmt);
    const uint64_t gb = mvm_k_expert_group_bytes(fmt, (uint32_t)D);
    const uint64_t rb = mvm_k_row_bytes(fmt.gate_up, (uint32_t)D);
    const mvm_dptr base = f->layers[il].experts;
    const mvm_g_experts_list list = {.experts = ptr + 6 * k * P, .off = f->off, .cnt = f->cnt,
                                     .w_stride = f->expert_stride, .n_exp = k,
                                     .at = ptr + (6 * k + (k + 1) / 2) * P};
    mvm_g_dequant_args d = {.w = base, .dst = f->w16, .row_bytes = rb, .group_bytes = gb,
                            .dst_stride = D, .n_in = (uint32_t)D, .n_rows = (uint32_t)(2 * F),
                            .per = 2 * G, .dst_rows = 2 * G, .dst_expert = 2 * F * D,
                            .list = list};
    TRY(mvm_gpu_dequant(f->g, fmt.gate_up, &d));
    d = (mvm_g_dequant_args){.w = base + 2 * G * rb,
                             .dst = f->w16 + k * 2 * F * D * sizeof(uint16_t),
                             .row_bytes = mvm_k_row_bytes(fmt.down, G), .group_bytes = gb,
                             .dst_stride = F, .n_in = G, .n_rows = (uint32_t)(D * (F / G)),
                             .per = (uint32_t)D, .dst_cols = G, .dst_expert = D * F,
                             .list = list};
    TRY(mvm_gpu_dequant(f->g, fmt.down, &d));
    const mvm_blas_batch gate_up = {.w = ptr, .x = ptr + k * P, .y = ptr + 2 * k * P,
                                    .ldw = D, .ldx = D, .ldy = 2 * F, .m = (uint32_t)(2 * F),
                                    .n = n, .k = (uint32_t)D, .count = k};
    TRY(mvm_gpu_gemm_batched(f->g, &gate_up));
    mvm_g_glu_half_args u = {.gu = f->bgo, .h = f->bgh, .w = f->row_w, .expert = base,
                             .gu_stride = 2 * F, .h_stride = F, .group_bytes = gb,
                             .n_ch = (uint32_t)F, .n_rows = n, .G = G, .glu = fmt.glu,
                             .list = list};
    TRY(mvm_gpu_glu_half(f->g, 0, &u));
    const mvm_blas_batch down = {.w = ptr + 3 * k * P, .x = ptr + 4 * k * P,
                                 .y = ptr + 5 * k * P, .ldw = F, .ldx = F, .ldy = D,
                                 .m = (uint32_t)D, .n = n, .k = (uint32_t)F, .count = k};
    TRY(mvm_gpu_gemm_batched(f->g, &down));
    mvm_g_rows_out_args o = {.src = f->bgo, .out = f->out, .w = f->row_w,
                             .bias = f->layers[il].down_bias, .n = (uint32_t)D, .n_rows = n,
                             .list = list};
    return mvm_gpu_rows_out(f->g, 0, &o);
}

/* es sorted by their rows in step s, the most first, ties by id (a round's few experts, an
 * insertion sort), so that a batch's experts pad little to its largest. */
static void sort_by_rows(const mvm_moe *s, uint32_t *es, uint32_t n)
{
    for (uint32_t i = 1; i < n; i++) {
        const uint32_t e = es[i];
        uint32_t j = i;
        for (; j && (s->cnt[es[j - 1]] < s->cnt[e] ||
                     (s->cnt[es[j - 1]] == s->cnt[e] && es[j - 1] > e));
             j--)
            es[j] = es[j - 1];
        es[j] = e;
    }
}

mvm_status mvm_cuda_fwd_gemm_experts(struct cuda_fwd *f, uint32_t il, uint32_t *es, uint32_t n)
{
    if (!n)
        return MVM_OK;
    TRY(step_inputs(f));
    if (!f->gemm_per) {
        for (uint32_t i = 0; i < n; i++)
            TRY(expert_in_chunks(f, il, es[i]));
        return MVM_OK;
    }
    sort_by_rows(f->moe, es, n);
    /* every batch's pointers go up in one copy, then the batches run */
    uint64_t at = 0;
    for (uint32_t i = 0, k; i < n; i += k, at += batch_words(k)) {
        k = batch_size(f, es + i, n - i);
        batch_pointers(f, il, es + i, k, f->moe->cnt[es[i]], f->bptr_host + at);
    }
    TRY(mvm_gpu_upload(f->g, f->bptr, f->bptr_host, at * sizeof(uint64_t)));
    at = 0;
    for (uint32_t i = 0, k; i < n; i += k, at += batch_words(k)) {
        k = batch_size(f, es + i, n - i);
        TRY(expert_batch(f, il, f->bptr + at * sizeof(uint64_t), k, f->moe->cnt[es[i]]));
    }
    return MVM_OK;
}

/* Whether this device has mmq's kernel k for type t (of kernels.h's MVM_G_MMQ_TYPES), and
 * MOEVM_MMQ lets it (or, sizing, would have) */
static int mmq_has(const struct cuda_fwd *f, enum mvm_gpu_kernel k, enum mvm_wtype t)
{
    if (f->mmq == MVM_CUDA_OFF)
        return 0;
    return f->sizing ? mvm_gpu_would_have(f->sizing_sm80, k, t) : mvm_gpu_has(f->g, k, t);
}

int mvm_cuda_fwd_mmq_takes(const struct cuda_fwd *f, int type)
{
    /* auto as on, as for the experts: llama.cpp multiplies every quantized matrix of a
     * batch of more than 8 tokens by its mul_mat_q on a device with int8 tensor cores
     * (bench/gpu/ktrace.sh's pp512 on an H200: its every product, no cuBLAS), and ours
     * are the same kernels as the experts' measured ones; not timed on a GPU yet */
    return f->mmq != MVM_CUDA_EXPERTS && mmq_has(f, MVM_GK_MMQ_MATMUL, (enum mvm_wtype)type);
}

int mvm_cuda_fwd_mmq(const struct cuda_fwd *f, uint32_t il)
{
    const mvm_k_expert_fmt fmt = f->m->layers[il].expert_fmt;
    /* Q8_0, IQ4_NL and MXFP4 experts, and Q2_K's, Q3_K_M's, Q4_K_M's, Q5_K_M's, Q6_K's and
     * IQ4_XS's (Q2_K to Q6_K and IQ4_XS gate/up and down, with 256-channel groups), on,
     * experts or auto: on an H200 OLMoE-1B-7B's Q4_K_M prompt ran 1.46x the F16 products'
     * (pp512 6,948 against 4,749 tok/s) with 188 MiB less device memory, its decode the same
     * (docs/perf/offload.md, session 106), and Qwen3-30B-A3B's Q8_0 one 2.7x (session 84).
     * Q3_K, Q5_K, Q6_K and IQ4_XS, and the table types (IQ4_NL, gpt-oss's MXFP4) beside
     * Q8_0, were added after (session 111) and take auto by Q4_K's and Q8_0's measure: the
     * same kernels, a third or fifth bit, a second product a sub-block or a table lookup
     * more; Q2_K (session 112), Q3_K's two products a sub-block with mins */
    /* gate/up and down of one kind: both against Q8_0 blocks, or both against Q8_K's (a
     * K-quant down's 256-channel groups) */
    if (fmt.tiles || mvm_k_is_k(fmt.gate_up) != mvm_k_is_k(fmt.down))
        return 0;
    return mmq_has(f, MVM_GK_EXPERT_MMQ_UP, fmt.gate_up) &&
           mmq_has(f, MVM_GK_EXPERT_MMQ_DOWN, fmt.down);
}

mvm_status mvm_cuda_fwd_gemm_wants_expert(struct cuda_fwd *f, uint32_t il, uint32_t e, int *use)
{
    *use = 0;
    /* the batches read an expert where it is resident (its own address, or its slot in a
     * slot space); not a copy still on the bus, nor a home read in place (the kernels'),
     * which nothing here waits for or would read at the link's rate */
    if (!f->gemm_ch || !experts_on_blas(f, il) ||
        !mvm_resid_reads_resident(f->moe->resid, il, e))
        return MVM_OK;
    return use_gemm(f, f->moe->cnt[e], use);
}

/* ---- a prompt's attention by products -------------------------------------------------- */

/* Queries t0 .. t0 + nq - 1 of a's (their F16 copy in att_q16) against the keys they see,
 * from position lo: per head, the scores as one batched product, the softmax, and the
 * weighted values as a second, into a's output. */
static mvm_status attention_chunk(struct cuda_fwd *f, const mvm_g_attention_args *a,
                                  uint32_t t0, uint32_t nq)
{
    const uint32_t H = a->n_head, G = H / a->n_head_kv, d = a->head_dim;
    const uint64_t qs = (uint64_t)H * d, kvs = (uint64_t)a->n_head_kv * d, h16 = 2, fl = 4;
    const uint32_t q0 = a->pos0 + t0, hi = q0 + nq;
    const uint32_t lo = a->window && q0 + 1 > a->window ? q0 + 1 - a->window : 0;
    const uint32_t n_k = hi - lo, ld = (n_k + 7) / 8 * 8;
    const mvm_dptr s = f->att_s, p = f->att_s + (uint64_t)H * nq * ld * fl;
    uint64_t *ptr = f->att_ptr_host; /* [6][H]: the scores' w, x, y, then the values' */
    for (uint32_t h = 0; h < H; h++) {
        const uint64_t kv = (lo * kvs + (uint64_t)(h / G) * d) * h16;
        ptr[h] = a->kc + kv;
        ptr[H + h] = f->att_q16 + ((uint64_t)t0 * qs + (uint64_t)h * d) * h16;
        ptr[2 * H + h] = s + (uint64_t)h * nq * ld * fl;
        ptr[3 * H + h] = a->vc + kv;
        ptr[4 * H + h] = p + (uint64_t)h * nq * ld * h16;
        ptr[5 * H + h] = a->out + ((uint64_t)t0 * qs + (uint64_t)h * d) * fl;
    }
    const mvm_dptr dp = f->att_ptr, P = H * sizeof *ptr;
    TRY(mvm_gpu_upload(f->g, dp, ptr, 6 * P));
    const mvm_blas_batch scores = {.w = dp, .x = dp + P, .y = dp + 2 * P, .ldw = kvs,
                                   .ldx = qs, .ldy = ld, .m = n_k, .n = nq, .k = d,
                                   .count = H};
    TRY(mvm_gpu_gemm_batched(f->g, &scores));
    mvm_g_attn_softmax_args sm = {.s = s, .p = p, .sinks = a->sinks, .ld = ld, .n_head = H,
                                  .n_q = nq, .n_k = n_k, .lo = lo, .q0 = q0,
                                  .window = a->window, .scale = a->scale};
    TRY(mvm_gpu_attn_softmax(f->g, 0, &sm));
    const mvm_blas_batch values = {.w = dp + 3 * P, .x = dp + 4 * P, .y = dp + 5 * P,
                                   .ldw = kvs, .ldx = ld, .ldy = qs, .m = d, .n = nq,
                                   .k = n_k, .count = H, .w_by_k = 1};
    return mvm_gpu_gemm_batched(f->g, &values);
}

/* A Q8_0 cache's rows lo .. hi - 1 of `rows` (a block's first) as F16 at the same rows of
 * dst, for the products: llama.cpp's flash attention over a quantized cache converts it to
 * F16 for a batch's tensor-core products too. The values are those the kernels read
 * (kernels/dequant.h), rounded to F16 as the F16 cache rounds its floats. */
static mvm_status kv_to_half(struct cuda_fwd *f, mvm_dptr rows, uint32_t lo, uint32_t hi,
                             mvm_dptr dst)
{
    const uint64_t rb = mvm_kv_bytes(f->kv, f->kv_dim);
    mvm_g_dequant_args d = {.w = rows + lo * rb,
                            .dst = dst + (uint64_t)lo * f->kv_dim * sizeof(uint16_t),
                            .row_bytes = rb, .dst_stride = f->kv_dim, .n_in = f->kv_dim,
                            .n_rows = hi - lo, .per = hi - lo};
    return mvm_gpu_dequant(f->g, MVM_W_Q8_0, &d);
}

mvm_status mvm_cuda_fwd_gemm_attention(struct cuda_fwd *f, const mvm_g_attention_args *a,
                                       int *done)
{
    *done = 0;
    if (!f->att_s || (a->kv_type != MVM_W_F16 && !f->att_kv16) || a->ring)
        return MVM_OK;
    /* as many queries a chunk as the scratch holds over all the positions any sees (two at
     * least: attention_bytes), and as a grid has rows for the softmax */
    const uint64_t ld = ((uint64_t)a->pos0 + a->n_tok + 7) / 8 * 8;
    uint64_t nq = f->att_bytes / ((uint64_t)a->n_head * ld * 6);
    nq = nq < 65535 / a->n_head ? nq : 65535 / a->n_head;
    int use;
    TRY(use_gemm(f, a->n_tok, &use));
    if (!use)
        return MVM_OK;
    const uint64_t qs = (uint64_t)a->n_head * a->head_dim;
    mvm_g_attention_args h = *a;
    if (a->kv_type == MVM_W_Q8_0) { /* the positions any query sees, from the first one's */
        const uint32_t lo = a->window && a->pos0 + 1 > a->window ? a->pos0 + 1 - a->window : 0;
        h.kc = f->att_kv16, h.vc = f->att_kv16 + (uint64_t)f->n_ctx * f->kv_dim * 2;
        h.kv_type = MVM_W_F16;
        TRY(kv_to_half(f, a->kc, lo, a->pos0 + a->n_tok, h.kc));
        TRY(kv_to_half(f, a->vc, lo, a->pos0 + a->n_tok, h.vc));
    }
    TRY(to_half(f, a->q, 0, qs, (uint32_t)qs, a->n_tok, f->att_q16));
    for (uint32_t t0 = 0; t0 < a->n_tok; t0 += (uint32_t)nq)
        TRY(attention_chunk(f, &h, t0, a->n_tok - t0 < nq ? a->n_tok - t0 : (uint32_t)nq));
    *done = 1;
    return MVM_OK;
}
