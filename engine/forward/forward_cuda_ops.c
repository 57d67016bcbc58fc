/*
 * The device pass's products and small ops (forward_cuda_impl.h): a matrix times each row of
 * a batch on the integer kernels (its input quantized once for the products that share it,
 * several matrices of one input in one launch, a residual added in the product's own pass;
 * in a batch of MVM_CUDA_MMQ_ROWS tokens or more, mmq's types by its kernel on the int8
 * tensor cores, with the same arguments) or on the tensor cores (forward_cuda_gemm.c), the
 * norms (the next product's input quantized in their pass), the element-wise adds and the
 * rotary embedding; the FFN of a dense block or a shared expert; the output product, a
 * chunk of rows at a time, and the logits down.
 */
#include <stdint.h>

#include "engine/forward/forward_cuda_impl.h"
#include "vmm/error.h"

/* x rows (n of `cols` floats, stride floats apart) -> q (rows q_stride bytes apart) in the
 * activation format of weight type t (a Q or K type). */
mvm_status mvm_cuda_fwd_quantize(struct cuda_fwd *f, enum mvm_wtype t, mvm_dptr x,
                                 uint64_t stride, uint32_t cols, uint32_t n, mvm_dptr q,
                                 uint64_t q_stride)
{
    mvm_g_quantize_args a = {.x = x, .q = q, .x_stride = stride, .q_stride = q_stride,
                             .n = cols, .n_rows = n, .type = t};
    return mvm_gpu_quantize(f->g, 0, &a);
}

/* Up to two more matrices of a product's input, of its type and width (mvm_g_matvec_args's
 * w2 and w3): their weights, outputs and output strides. */
struct more_products {
    const struct dev_weight *w[2];
    mvm_dptr y[2];
    uint64_t y_stride[2];
    uint32_t n;
};

/* n tokens of H heads through w's H slabs of rows (H = 1: a plain product): head h of token
 * i reads in + (i * H + h) * in_pitch floats and writes (adds to, with accumulate) y + (i *
 * H + h) * y_pitch floats; with `more` (H = 1), its matrices too, in the same launch. A Q or
 * K type's input is quantized into qbuf (q_pitch bytes a row) unless `ready`. */
static mvm_status product(struct cuda_fwd *f, const struct dev_weight *w, uint32_t H, int ready,
                          mvm_dptr in, uint64_t in_pitch, uint32_t n, mvm_dptr y, uint64_t y_pitch,
                          mvm_dptr qbuf, uint64_t q_pitch, int accumulate,
                          const struct more_products *more)
{
    const enum mvm_wtype t = (enum mvm_wtype)w->type;
    const uint32_t rows = w->rows / H;
    mvm_g_matvec_args a = {.w = w->p, .act = in, .y = y, .row_bytes = w->row_bytes,
                           .act_stride = H * in_pitch * sizeof(float), .y_stride = H * y_pitch,
                           .w_head = rows * w->row_bytes, .act_head = in_pitch * sizeof(float),
                           .y_head = y_pitch, .n_in = w->cols, .n_out = rows, .n_tok = n,
                           .n_head = H, .accumulate = (uint32_t)accumulate};
    if (more && more->n > 0)
        a.w2 = more->w[0]->p, a.y2 = more->y[0], a.y_stride2 = more->y_stride[0],
        a.n_out2 = more->w[0]->rows;
    if (more && more->n > 1)
        a.w3 = more->w[1]->p, a.y3 = more->y[1], a.y_stride3 = more->y_stride[1],
        a.n_out3 = more->w[1]->rows;
    a.split = mvm_g_matvec_split((uint64_t)a.n_out + a.n_out2 + a.n_out3, a.n_in, n, H);
    if (mvm_k_block_elems(t) > 1) {
        if (!ready && qbuf == f->act) /* what act held of xn is gone */
            f->xn_act = NULL, f->xn_experts = 0;
        if (!ready)
            TRY(mvm_cuda_fwd_quantize(f, t, in, in_pitch, w->cols, n * H, qbuf, q_pitch));
        a.act = qbuf;
        a.act_stride = H * q_pitch;
        a.act_head = q_pitch;
    }
    if (n >= MVM_CUDA_MMQ_ROWS && mvm_cuda_fwd_mmq_takes(f, w->type))
        return mvm_gpu_mmq_matmul(f->g, w->type, &a);
    return mvm_gpu_matvec(f->g, w->type, &a);
}

/* Whether f->act holds w's input already: the product before, prev's, took it from there in
 * w's activation format (prev NULL: none did). */
static mvm_status ready_after(struct cuda_fwd *f, const struct dev_weight *w,
                              const struct dev_weight *prev, uint32_t n, int *ready)
{
    int prev_gemm = 0;
    if (prev) /* which left f->act as it was */
        TRY(mvm_cuda_fwd_gemm_wants(f, prev, n, &prev_gemm));
    const uint64_t block = mvm_k_block_elems((enum mvm_wtype)w->type);
    *ready = prev && !prev_gemm && mvm_k_block_elems((enum mvm_wtype)prev->type) == block;
    return MVM_OK;
}

mvm_status mvm_cuda_fwd_matmul(struct cuda_fwd *f, const struct dev_weight *w,
                               const struct dev_weight *prev, mvm_dptr in, uint64_t in_stride,
                               uint32_t n, mvm_dptr y, uint64_t y_stride)
{
    int gemm, ready;
    TRY(mvm_cuda_fwd_gemm_wants(f, w, n, &gemm));
    if (gemm)
        return mvm_cuda_fwd_gemm_product(f, w, 1, in, in_stride, n, y, y_stride);
    TRY(ready_after(f, w, prev, n, &ready));
    return product(f, w, 1, ready, in, in_stride, n, y, y_stride, f->act, f->act_stride, 0,
                   NULL);
}

mvm_status mvm_cuda_fwd_matmul_many(struct cuda_fwd *f, const struct dev_weight *const *ws,
                                    uint32_t k, const struct dev_weight *prev, mvm_dptr in,
                                    uint64_t in_stride, uint32_t n, const mvm_dptr *ys,
                                    const uint64_t *y_strides)
{
    struct more_products more = {.n = 0};
    int gemm, ready;
    TRY(mvm_cuda_fwd_gemm_wants(f, ws[0], n, &gemm));
    uint32_t m = 1; /* those that go with the first: its type and width, on the kernels */
    for (int g = gemm; !g && m < k && m <= 2 && ws[m]->type == ws[0]->type &&
                       ws[m]->cols == ws[0]->cols;
         m++) {
        TRY(mvm_cuda_fwd_gemm_wants(f, ws[m], n, &g));
        if (g)
            break;
        more.w[more.n] = ws[m], more.y[more.n] = ys[m], more.y_stride[more.n++] = y_strides[m];
    }
    if (m == 1) {
        TRY(mvm_cuda_fwd_matmul(f, ws[0], prev, in, in_stride, n, ys[0], y_strides[0]));
    } else {
        TRY(ready_after(f, ws[0], prev, n, &ready));
        TRY(product(f, ws[0], 1, ready, in, in_stride, n, ys[0], y_strides[0], f->act,
                    f->act_stride, 0, &more));
    }
    for (uint32_t i = m; i < k; i++) /* the others, each its own launch */
        TRY(mvm_cuda_fwd_matmul(f, ws[i], ws[i - 1], in, in_stride, n, ys[i], y_strides[i]));
    return MVM_OK;
}

mvm_status mvm_cuda_fwd_matmul_add(struct cuda_fwd *f, const struct dev_weight *w, mvm_dptr in,
                                   uint64_t in_stride, uint32_t n, mvm_dptr x, int ready)
{
    const uint32_t D = f->m->hp.n_embd;
    int gemm;
    TRY(mvm_cuda_fwd_gemm_wants(f, w, n, &gemm));
    if (!gemm) /* in the product's own pass: one kernel fewer, the same sums */
        return product(f, w, 1, ready, in, in_stride, n, x, D, f->act, f->act_stride, 1, NULL);
    TRY(mvm_cuda_fwd_gemm_product(f, w, 1, in, in_stride, n, f->tmp, D));
    return mvm_cuda_fwd_add(f, x, f->tmp, D, 0, D, n);
}

mvm_status mvm_cuda_fwd_matmul_heads(struct cuda_fwd *f, const struct dev_weight *w, uint32_t H,
                                     mvm_dptr in, uint64_t in_pitch, uint32_t n, mvm_dptr y,
                                     uint64_t y_pitch)
{
    int gemm;
    TRY(mvm_cuda_fwd_gemm_wants(f, w, n, &gemm));
    if (gemm)
        return mvm_cuda_fwd_gemm_product(f, w, H, in, in_pitch, n, y, y_pitch);
    return product(f, w, H, 0, in, in_pitch, n, y, y_pitch, f->hact, f->hact_stride, 0, NULL);
}

/* The norm a takes the owed expert sum (f->sum_owed) first where its rows are all of the
 * sum's, x's; else the sum is launched before it. */
static mvm_status take_owed_sum(struct cuda_fwd *f, mvm_g_rmsnorm_args *a)
{
    const mvm_g_expert_sum_args *o = &f->owed;
    if (!f->sum_owed || a->x != o->x || a->n_rows != o->n_tok || a->n != o->n_embd ||
        a->x_stride != a->n)
        return mvm_cuda_fwd_settle_sum(f);
    a->sum_out = o->out, a->sum_rows = o->tok_rows, a->sum_k = o->top_k;
    f->sum_owed = 0;
    return MVM_OK;
}

mvm_status mvm_cuda_fwd_norm_input(struct cuda_fwd *f, mvm_dptr norm, int t, uint32_t n,
                                   mvm_dptr copy)
{
    const uint32_t D = f->m->hp.n_embd;
    mvm_g_rmsnorm_args a = {.x = f->x, .out = f->xn, .w = norm, .out2 = copy, .x_stride = D,
                            .out_stride = D, .n = D, .n_rows = n, .eps = f->m->hp.rms_eps};
    if (t >= 0 && mvm_k_block_elems((enum mvm_wtype)t) > 1)
        a.q = f->act, a.q_stride = f->act_stride, a.q_type = (uint32_t)t;
    f->xn_act = NULL, f->xn_experts = 0;
    TRY(take_owed_sum(f, &a));
    return mvm_gpu_rmsnorm(f->g, 0, &a);
}

mvm_status mvm_cuda_fwd_rmsnorm(struct cuda_fwd *f, mvm_dptr x, mvm_dptr out, uint64_t stride,
                                mvm_dptr w, uint32_t len, uint32_t rows)
{
    f->xn_act = NULL, f->xn_experts = 0; /* (conservative: out need not be xn) */
    mvm_g_rmsnorm_args a = {.x = x, .out = out, .w = w, .x_stride = stride,
                            .out_stride = stride, .n = len, .n_rows = rows,
                            .eps = f->m->hp.rms_eps};
    TRY(take_owed_sum(f, &a));
    return mvm_gpu_rmsnorm(f->g, 0, &a);
}

mvm_status mvm_cuda_fwd_settle_sum(struct cuda_fwd *f)
{
    if (!f->sum_owed)
        return MVM_OK;
    f->sum_owed = 0;
    return mvm_gpu_expert_sum(f->g, 0, &f->owed);
}

mvm_status mvm_cuda_fwd_add(struct cuda_fwd *f, mvm_dptr x, mvm_dptr y, uint64_t y_stride,
                            mvm_dptr gate, uint32_t len, uint32_t rows)
{
    mvm_g_add_args a = {.x = x, .y = y, .gate = gate, .y_stride = y_stride, .n = len,
                        .n_tok = rows};
    return mvm_gpu_add(f->g, 0, &a);
}

mvm_status mvm_cuda_fwd_rope(struct cuda_fwd *f, const struct cuda_heads *a,
                             const struct cuda_heads *b, uint32_t n, uint32_t pos0)
{
    /* a decode graph's reads its position on the device: its arguments do not change */
    const mvm_dptr pos = mvm_cuda_fwd_pos(f);
    mvm_g_rope_args r = {.x = a->x, .stride = a->stride, .n_heads = a->n_heads,
                         .head_dim = a->head_dim, .x2 = b->x, .stride2 = b->stride,
                         .n_heads2 = b->n_heads, .head_dim2 = b->head_dim, .n_tok = n,
                         .pos0 = pos ? 0 : pos0, .rope = f->m->hp.rope, .pos = pos};
    return mvm_gpu_rope(f->g, 0, &r);
}

/* xn = rms(x) for the product of w that follows, quantized for it in the same pass where its
 * kernels will take it from act (xn_act: w), not where the tensor cores take the floats. */
mvm_status mvm_cuda_fwd_norm_for(struct cuda_fwd *f, mvm_dptr norm, const struct dev_weight *w,
                                 uint32_t n)
{
    int gemm;
    TRY(mvm_cuda_fwd_gemm_wants(f, w, n, &gemm));
    const int q = !gemm && mvm_k_block_elems((enum mvm_wtype)w->type) > 1;
    TRY(mvm_cuda_fwd_norm_input(f, norm, q ? w->type : -1, n, 0));
    f->xn_act = q ? w : NULL;
    return MVM_OK;
}

/* ---- the output product ------------------------------------------------------------------ */

/* (forward_cuda_impl.h; MVM_CUDA_LOGIT_ROWS rows at most) */
mvm_status mvm_cuda_fwd_head(struct cuda_fwd *f, uint32_t from, uint32_t nl)
{
    const mvm_hparams *hp = &f->m->hp;
    const uint32_t rows = nl - from < f->logit_rows ? nl - from : f->logit_rows;
    return mvm_cuda_fwd_matmul(f, &f->output, NULL,
                               f->xn + (uint64_t)from * hp->n_embd * sizeof(float), hp->n_embd,
                               rows, f->logits, hp->n_vocab);
}

/* (forward_cuda_impl.h) Every row from first on: chunk after chunk; else each wanted
 * row's chunk computed when f->logits holds another. */
mvm_status mvm_cuda_fwd_logits_down(struct cuda_fwd *f, const mvm_fwd_batch *b, uint32_t first,
                                    uint32_t nl, float *logits)
{
    const size_t row = (size_t)f->m->hp.n_vocab * sizeof(float);
    const uint32_t C = f->logit_rows;
    if (b->n_out == nl) { /* every row from first on, chunk after chunk */
        for (uint32_t from = 0; from < nl; from += C) {
            if (from)
                TRY(mvm_cuda_fwd_head(f, from, nl));
            const uint32_t rows = nl - from < C ? nl - from : C;
            TRY(mvm_gpu_download(f->g, (char *)logits + from * row, f->logits, rows * row));
        }
        return MVM_OK;
    }
    uint32_t at = 0; /* the chunk f->logits holds */
    for (uint32_t o = 0; o < b->n_out; o++) {
        const uint32_t r = b->out[o] - first, chunk = r / C * C;
        if (chunk != at)
            TRY(mvm_cuda_fwd_head(f, chunk, nl));
        at = chunk;
        TRY(mvm_gpu_download(f->g, (char *)logits + o * row, f->logits + (r - chunk) * row,
                             row));
    }
    return MVM_OK;
}

/* ---- the FFN of a dense block or a shared expert ---------------------------------------- */

/* sh1 = silu(w1 . h) * (w3 . h), h = xn, and shg = gate . h when gated: the unit of a
 * shared expert (gated in qwen2moe, not in deepseek2 and glm4moe: gate NULL or none) or of a
 * dense block's FFN. */
static mvm_status ffn_unit(struct cuda_fwd *f, const struct dev_weight *w1,
                           const struct dev_weight *w3, const struct dev_weight *gate, uint32_t n)
{
    uint32_t D = f->m->hp.n_embd, F = w1->rows;
    if (gate && gate->p)
        TRY(mvm_cuda_fwd_matmul(f, gate, NULL, f->xn, D, n, f->shg, 1));
    const struct dev_weight *const ws[] = {w1, w3};
    const mvm_dptr ys[] = {f->sh1, f->sh3};
    const uint64_t strides[] = {F, F};
    TRY(mvm_cuda_fwd_matmul_many(f, ws, 2, f->xn_act == w1 ? w1 : NULL, f->xn, D, n, ys,
                                 strides));
    mvm_g_add_args sw = {.x = f->sh1, .y = f->sh3, .y_stride = F, .n = F, .n_tok = n};
    return mvm_gpu_swiglu(f->g, 0, &sw);
}

mvm_status mvm_cuda_fwd_ffn_out(struct cuda_fwd *f, const struct dev_weight *w1,
                                const struct dev_weight *w3, const struct dev_weight *w2,
                                const struct dev_weight *gate, uint32_t n)
{
    TRY(ffn_unit(f, w1, w3, gate, n));
    return mvm_cuda_fwd_matmul(f, w2, NULL, f->sh1, w1->rows, n, f->tmp, f->m->hp.n_embd);
}

mvm_status mvm_cuda_fwd_add_ffn(struct cuda_fwd *f, const struct dev_weight *gate, uint32_t n)
{
    uint32_t D = f->m->hp.n_embd;
    return mvm_cuda_fwd_add(f, f->x, f->tmp, D, gate && gate->p ? f->shg : 0, D, n);
}

mvm_status mvm_cuda_fwd_ffn(struct cuda_fwd *f, const struct dev_weight *w1,
                            const struct dev_weight *w3, const struct dev_weight *w2,
                            const struct dev_weight *gate, uint32_t n)
{
    if (gate && gate->p) {
        TRY(mvm_cuda_fwd_ffn_out(f, w1, w3, w2, gate, n));
        return mvm_cuda_fwd_add_ffn(f, gate, n);
    }
    TRY(ffn_unit(f, w1, w3, NULL, n));
    return mvm_cuda_fwd_matmul_add(f, w2, f->sh1, w1->rows, n, f->x, 0);
}

mvm_status mvm_cuda_fwd_dense_ffn(struct cuda_fwd *f, const struct dev_block *L, uint32_t n)
{
    TRY(mvm_cuda_fwd_norm_for(f, L->ffn_norm, &L->ffn_w1, n));
    return mvm_cuda_fwd_ffn(f, &L->ffn_w1, &L->ffn_w3, &L->ffn_w2, NULL, n);
}
