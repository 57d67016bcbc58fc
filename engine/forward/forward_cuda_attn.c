/*
 * Attention on the device (forward_cuda_impl.h), as the CPU backend computes it
 * (forward_cpu.c): grouped-query attention with the architecture's q/k/v biases, QK norm and
 * (partial) rotary embedding, gpt-oss's sinks, windows and output bias; and deepseek2's
 * multi-head latent attention in the absorbed form, whose cache holds one row per position,
 * [latent (kv_lora), k_pe (rope)]:
 *   q = wq_b · rms(wq_a · h) (or wq · h), [c, k_pe] = wkv_a · h, c RMS-normed, both rotated;
 *   each head's query turned into the latent space, [wk_b_h · q_nope_h, q_pe_h];
 *   single-"kv-head" attention over the whole rows; wv_b_h takes the latent part out.
 * The per-head products (wk_b, wv_b) are one launch each (mvm_cuda_fwd_matmul_heads), and the
 * rotary part of the queries goes into the absorbed ones as one strided copy.
 */
#include "engine/forward/forward_cuda_impl.h"
#include "vmm/error.h"

mvm_status mvm_cuda_fwd_upload_attention(struct cuda_fwd *f, const mvm_layer *L,
                                         struct dev_block *d)
{
    const mvm_hparams *hp = &f->m->hp;
    size_t D = hp->n_embd * sizeof(float), Q = f->q_dim * sizeof(float);
    size_t KV = f->kv_dim * sizeof(float);
    int head = f->m->arch->qk_norm == MVM_QK_NORM_HEAD;
    TRY(mvm_cuda_fwd_copy(f, L->attn_norm, D, &d->attn_norm));
    TRY(mvm_cuda_fwd_weight(f, &L->wo, &d->wo));
    TRY(mvm_cuda_fwd_copy(f, L->bo, D, &d->bo));
    TRY(mvm_cuda_fwd_copy(f, L->sinks, hp->n_head * sizeof(float), &d->sinks));
    d->swa = L->swa;
    if (hp->kv_lora) {
        TRY(mvm_cuda_fwd_copy(f, L->q_a_norm, hp->q_lora * sizeof(float), &d->q_a_norm));
        TRY(mvm_cuda_fwd_copy(f, L->kv_a_norm, hp->kv_lora * sizeof(float), &d->kv_a_norm));
        const mvm_weight *w[] = {&L->wq, &L->wq_a, &L->wq_b, &L->wkv_a, &L->wk_b, &L->wv_b};
        struct dev_weight *dw[] = {&d->wq, &d->wq_a, &d->wq_b, &d->wkv_a, &d->wk_b, &d->wv_b};
        for (size_t i = 0; i < sizeof w / sizeof *w; i++)
            TRY(mvm_cuda_fwd_weight(f, w[i], dw[i]));
        return MVM_OK;
    }
    TRY(mvm_cuda_fwd_copy(f, L->bq, Q, &d->bq));
    TRY(mvm_cuda_fwd_copy(f, L->bk, KV, &d->bk));
    TRY(mvm_cuda_fwd_copy(f, L->bv, KV, &d->bv));
    TRY(mvm_cuda_fwd_copy(f, L->q_norm, head ? hp->head_dim * sizeof(float) : Q, &d->q_norm));
    TRY(mvm_cuda_fwd_copy(f, L->k_norm, head ? hp->head_dim * sizeof(float) : KV, &d->k_norm));
    TRY(mvm_cuda_fwd_weight(f, &L->wq, &d->wq));
    TRY(mvm_cuda_fwd_weight(f, &L->wk, &d->wk));
    return mvm_cuda_fwd_weight(f, &L->wv, &d->wv);
}

mvm_status mvm_cuda_fwd_alloc_attention(struct cuda_fwd *f)
{
    const mvm_hparams *hp = &f->m->hp;
    size_t B = f->n_batch, H = hp->n_head;
    size_t kv = f->kv->rows * f->kv_dim * f->kv->elt;
    size_t values = H * hp->v_dim > f->q_dim ? H * hp->v_dim : f->q_dim;
    TRY(mvm_cuda_fwd_alloc(f, kv, &f->kc));
    TRY(mvm_cuda_fwd_alloc(f, B * f->q_dim * 4, &f->q));
    TRY(mvm_cuda_fwd_alloc(f, B * values * 4, &f->att));
    /* MLA attends over whole latent rows as one kv head */
    const uint32_t hd = hp->kv_lora ? f->lat : hp->head_dim;
    const uint32_t hkv = hp->kv_lora ? 1 : hp->n_head_kv;
    if (mvm_g_attention_unit_heads(hp->n_head, hkv, hd) == 0)
        return mvm_fail(MVM_ERR_UNSUPPORTED, "attention head dimension %u: the device kernel "
                        "takes at most %u", hd, MVM_G_ATTN_QFLOATS);
    TRY(mvm_cuda_fwd_alloc(f, mvm_g_attention_part_bytes(f->n_batch, hp->n_head, hkv, hd),
                           &f->part));
    /* the batch's new rows in F32 where they cannot be written straight into the cache */
    int staged = f->kv->type != MVM_W_F32;
    for (uint32_t b = 0; b < hp->n_dense + hp->n_layer; b++)
        staged |= f->kv->blocks[b].ring != 0;
    if (staged)
        TRY(mvm_cuda_fwd_alloc(f, B * f->kv_dim * 4, &f->k));
    if (!hp->kv_lora) {
        if (staged)
            TRY(mvm_cuda_fwd_alloc(f, B * f->kv_dim * 4, &f->v));
        return mvm_cuda_fwd_alloc(f, kv, &f->vc);
    }
    uint32_t in = hp->nope > hp->kv_lora ? hp->nope : hp->kv_lora;
    f->hact_stride = mvm_cuda_fwd_act_bytes(in);
    TRY(mvm_cuda_fwd_alloc(f, B * (hp->q_lora ? hp->q_lora : 1) * 4, &f->qa));
    TRY(mvm_cuda_fwd_alloc(f, B * H * f->lat * 4, &f->qlat));
    TRY(mvm_cuda_fwd_alloc(f, B * H * f->lat * 4, &f->olat));
    return mvm_cuda_fwd_alloc(f, B * H * f->hact_stride, &f->hact);
}

/* ---- grouped-query attention ----------------------------------------------------------- */

/* q, and k and v straight into the cache, with the architecture's bias and norm, rotated. */
static mvm_status qkv(struct cuda_fwd *f, const struct dev_block *L, mvm_dptr k, mvm_dptr v,
                      uint32_t n, uint32_t pos0)
{
    const mvm_hparams *hp = &f->m->hp;
    uint32_t D = hp->n_embd, hd = hp->head_dim;
    TRY(mvm_cuda_fwd_matmul(f, &L->wq, NULL, f->xn, D, n, f->q, f->q_dim));
    TRY(mvm_cuda_fwd_matmul(f, &L->wk, &L->wq, f->xn, D, n, k, f->kv_dim));
    TRY(mvm_cuda_fwd_matmul(f, &L->wv, &L->wk, f->xn, D, n, v, f->kv_dim));
    if (f->m->arch->qkv_bias) {
        TRY(mvm_cuda_fwd_add(f, f->q, L->bq, 0, 0, f->q_dim, n));
        TRY(mvm_cuda_fwd_add(f, k, L->bk, 0, 0, f->kv_dim, n));
        TRY(mvm_cuda_fwd_add(f, v, L->bv, 0, 0, f->kv_dim, n));
    }
    /* glm4moe's QK norm is optional: a block without one has no q_norm */
    if (L->q_norm && f->m->arch->qk_norm == MVM_QK_NORM_HEAD) {
        TRY(mvm_cuda_fwd_rmsnorm(f, f->q, f->q, hd, L->q_norm, hd, n * hp->n_head));
        TRY(mvm_cuda_fwd_rmsnorm(f, k, k, hd, L->k_norm, hd, n * hp->n_head_kv));
    } else if (L->q_norm) {
        TRY(mvm_cuda_fwd_rmsnorm(f, f->q, f->q, f->q_dim, L->q_norm, f->q_dim, n));
        TRY(mvm_cuda_fwd_rmsnorm(f, k, k, f->kv_dim, L->k_norm, f->kv_dim, n));
    }
    TRY(mvm_cuda_fwd_rope(f, f->q, f->q_dim, hp->n_head, hd, n, pos0));
    return mvm_cuda_fwd_rope(f, k, f->kv_dim, hp->n_head_kv, hd, n, pos0);
}

/* Whether block b's new rows go straight from the products into its rows of the cache:
 * an F32 cache's block without a ring. Otherwise they are computed into f->k (and f->v)
 * and stored (store), as the batch may wrap a ring, whose rows are written twice, and an
 * F16 cache takes them rounded. */
static int direct(const struct cuda_fwd *f, const mvm_kv_block *b)
{
    return f->kv->type == MVM_W_F32 && !b->ring;
}

/* The batch's new rows f->k and f->v (MLA: f->k) into block b's rows (kv_cache.h says
 * where), rounded to the cache's type. */
static mvm_status store(struct cuda_fwd *f, const mvm_kv_block *b, uint32_t n, uint32_t pos0)
{
    const size_t row = f->kv_dim * f->kv->elt, src = f->kv_dim * sizeof(float);
    mvm_kv_run runs[MVM_KV_MAX_RUNS];
    for (uint32_t r = 0, nr = mvm_kv_runs(b, pos0, n, runs); r < nr; r++) {
        const mvm_kv_run *u = &runs[r];
        mvm_g_store_rows_args a = {.dst = f->kc + u->row * row, .src = f->k + u->i0 * src,
                                   .dst_stride = f->kv_dim, .src_stride = f->kv_dim,
                                   .n = f->kv_dim, .n_rows = u->n_rows,
                                   .f16 = f->kv->type == MVM_W_F16};
        TRY(mvm_gpu_store_rows(f->g, 0, &a));
        if (f->v) {
            a.dst = f->vc + u->row * row;
            a.src = f->v + u->i0 * src;
            TRY(mvm_gpu_store_rows(f->g, 0, &a));
        }
    }
    return MVM_OK;
}

static mvm_status gqa(struct cuda_fwd *f, const struct dev_block *L, const mvm_kv_block *b,
                      uint32_t n, uint32_t pos0)
{
    const mvm_hparams *hp = &f->m->hp;
    const uint64_t row = f->kv_dim * f->kv->elt, at = mvm_kv_row(b, pos0) * row;
    if (direct(f, b)) {
        TRY(qkv(f, L, f->kc + at, f->vc + at, n, pos0));
    } else {
        TRY(qkv(f, L, f->k, f->v, n, pos0));
        TRY(store(f, b, n, pos0));
    }
    mvm_g_attention_args a = {.q = f->q, .kc = f->kc + b->row0 * row,
                              .vc = f->vc + b->row0 * row, .out = f->att, .part = f->part,
                              .sinks = L->sinks, .n_tok = n, .pos0 = pos0,
                              .n_head = hp->n_head, .n_head_kv = hp->n_head_kv,
                              .head_dim = hp->head_dim, .n_ctx = f->n_ctx, .window = L->swa,
                              .ring = b->ring, .kv_f16 = f->kv->type == MVM_W_F16,
                              .scale = hp->kq_scale};
    return mvm_gpu_attention(f->g, 0, &a);
}

/* ---- multi-head latent attention (deepseek2) ------------------------------------------- */

/* q, and the batch's latent rows into the cache at `rows`, rotated. */
static mvm_status mla_project(struct cuda_fwd *f, const struct dev_block *L, mvm_dptr rows,
                              uint32_t n, uint32_t pos0)
{
    const mvm_hparams *hp = &f->m->hp;
    const uint32_t D = hp->n_embd, R = hp->kv_lora, Q = hp->q_lora;
    if (Q) {
        TRY(mvm_cuda_fwd_matmul(f, &L->wq_a, NULL, f->xn, D, n, f->qa, Q));
        TRY(mvm_cuda_fwd_matmul(f, &L->wkv_a, &L->wq_a, f->xn, D, n, rows, f->lat));
        TRY(mvm_cuda_fwd_rmsnorm(f, f->qa, f->qa, Q, L->q_a_norm, Q, n));
        TRY(mvm_cuda_fwd_matmul(f, &L->wq_b, NULL, f->qa, Q, n, f->q, f->q_dim));
    } else {
        TRY(mvm_cuda_fwd_matmul(f, &L->wq, NULL, f->xn, D, n, f->q, f->q_dim));
        TRY(mvm_cuda_fwd_matmul(f, &L->wkv_a, &L->wq, f->xn, D, n, rows, f->lat));
    }
    TRY(mvm_cuda_fwd_rmsnorm(f, rows, rows, f->lat, L->kv_a_norm, R, n));
    TRY(mvm_cuda_fwd_rope(f, rows + R * sizeof(float), f->lat, 1, hp->rope.n_rot, n, pos0));
    return mvm_cuda_fwd_rope(f, f->q + hp->nope * sizeof(float), f->q_dim, hp->n_head, hp->head_dim,
                             n, pos0);
}

static mvm_status mla(struct cuda_fwd *f, const struct dev_block *L, const mvm_kv_block *b,
                      uint32_t n, uint32_t pos0)
{
    const mvm_hparams *hp = &f->m->hp;
    const uint32_t H = hp->n_head, R = hp->kv_lora, lat = f->lat;
    mvm_dptr cache = f->kc + b->row0 * lat * f->kv->elt; /* no window: n_ctx rows */
    if (direct(f, b)) {
        TRY(mla_project(f, L, cache + (uint64_t)pos0 * lat * sizeof(float), n, pos0));
    } else {
        TRY(mla_project(f, L, f->k, n, pos0));
        TRY(store(f, b, n, pos0));
    }
    /* the absorbed queries: [wk_b_h · q_nope_h, q_pe_h] per (token, head) */
    TRY(mvm_cuda_fwd_matmul_heads(f, &L->wk_b, H, f->q, hp->head_dim, n, f->qlat, lat));
    TRY(mvm_gpu_copy_rows(f->g, f->qlat + R * sizeof(float), lat * sizeof(float),
                          f->q + hp->nope * sizeof(float), hp->head_dim * sizeof(float),
                          hp->rope.n_rot * sizeof(float), (size_t)n * H));
    mvm_g_attention_args a = {.q = f->qlat, .kc = cache, .vc = cache, .out = f->olat,
                              .part = f->part, .n_tok = n, .pos0 = pos0, .n_head = H,
                              .n_head_kv = 1, .head_dim = lat, .n_ctx = f->n_ctx,
                              .kv_f16 = f->kv->type == MVM_W_F16, .scale = hp->kq_scale};
    TRY(mvm_gpu_attention(f->g, 0, &a));
    /* the values: wv_b_h over the latent part of each head's output (its k_pe part unused) */
    return mvm_cuda_fwd_matmul_heads(f, &L->wv_b, H, f->olat, lat, n, f->att, hp->v_dim);
}

mvm_status mvm_cuda_fwd_attention(struct cuda_fwd *f, const struct dev_block *L, uint32_t blk,
                                  uint32_t n, uint32_t pos0)
{
    const mvm_hparams *hp = &f->m->hp;
    const uint32_t D = hp->n_embd;
    const uint32_t values = hp->kv_lora ? hp->n_head * hp->v_dim : f->q_dim;
    const mvm_kv_block *b = &f->kv->blocks[blk];
    TRY(mvm_cuda_fwd_rmsnorm(f, f->x, f->xn, D, L->attn_norm, D, n));
    TRY(hp->kv_lora ? mla(f, L, b, n, pos0) : gqa(f, L, b, n, pos0));
    TRY(mvm_cuda_fwd_matmul(f, &L->wo, NULL, f->att, values, n, f->tmp, D));
    if (L->bo) /* into the product first, as the CPU adds it */
        TRY(mvm_cuda_fwd_add(f, f->tmp, L->bo, 0, 0, D, n));
    return mvm_cuda_fwd_add(f, f->x, f->tmp, D, 0, D, n);
}
