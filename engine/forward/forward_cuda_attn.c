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
#include "engine/forward/engine_options.h"
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
    size_t kv = mvm_kv_bytes(f->kv, f->kv->rows * f->kv_dim);
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
    mvm_option_value mma;
    TRY(mvm_option_read(&mvm_opt_attn_mma, &mma));
    f->attn_mma = (enum mvm_cuda_choice)mma.i;
    /* the batch's new rows in F32 where they cannot be written straight into the cache */
    int staged = f->kv->type != MVM_W_F32 || f->kv->n_seq > 1;
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

/* ---- the batch's runs ------------------------------------------------------------------ */

/* Run r's rows of block blk. */
static const mvm_kv_block *run_block(const struct cuda_fwd *f, const struct cuda_run *r,
                                     uint32_t blk)
{
    return mvm_kv_seq_block(f->kv, r->seq, blk);
}

/* Whether the batch's new rows go straight from the products into the cache: one run (a
 * sequence's rows are consecutive) into an F32 cache's block without a ring. Otherwise they
 * are computed into f->k (and f->v) and stored (store), as the batch may wrap a ring, whose
 * rows are written twice, an F16 cache takes them rounded, and the runs of several
 * sequences go to rows of their own. */
static int direct(const struct cuda_fwd *f, uint32_t blk)
{
    return f->n_runs == 1 && f->kv->type == MVM_W_F32 && !run_block(f, f->runs, blk)->ring;
}

/* Run r's new rows in f->k and f->v (MLA: f->k) into its rows of block blk (kv_cache.h says
 * where), rounded to the cache's type. */
static mvm_status store(struct cuda_fwd *f, uint32_t blk, const struct cuda_run *r)
{
    const size_t row = mvm_kv_bytes(f->kv, f->kv_dim), src = f->kv_dim * sizeof(float);
    mvm_kv_run runs[MVM_KV_MAX_RUNS];
    const mvm_kv_block *b = run_block(f, r, blk);
    /* a decode graph's token: its row from the position on the device (no ring) */
    const mvm_dptr pos = b->ring ? 0 : mvm_cuda_fwd_pos(f);
    for (uint32_t k = 0, nk = mvm_kv_runs(b, r->pos0, r->n, runs); k < nk; k++) {
        const mvm_kv_run *u = &runs[k];
        const uint64_t at = (pos ? b->row0 : u->row) * row;
        mvm_g_store_rows_args a = {.dst = f->kc + at, .src = f->k + (r->i0 + u->i0) * src,
                                   .dst_stride = f->kv_dim, .src_stride = f->kv_dim,
                                   .n = f->kv_dim, .n_rows = u->n_rows,
                                   .type = f->kv->type, .pos = pos};
        if (f->v) { /* the values in the same launch */
            a.dst2 = f->vc + at;
            a.src2 = f->v + (r->i0 + u->i0) * src;
        }
        TRY(mvm_gpu_store_rows(f->g, 0, &a));
    }
    return MVM_OK;
}

/* a's attention: by products on the tensor cores where they take it (a prompt's batch),
 * else by the kernels, on the tensor cores where MOEVM_ATTN_MMA asks and they take it (on:
 * every shape; auto: latent rows);
 * *by_kernel (NULL: not asked) says whether the kernels did. */
static mvm_status attend(struct cuda_fwd *f, const mvm_g_attention_args *a, int *by_kernel)
{
    int done;
    TRY(mvm_cuda_fwd_gemm_attention(f, a, &done));
    if (by_kernel)
        *by_kernel = !done;
    if (done)
        return MVM_OK;
    const int mma = f->attn_mma != MVM_CUDA_OFF && mvm_g_attention_mma_takes(a) &&
                    mvm_gpu_has(f->g, MVM_GK_ATTENTION_MMA, 0) &&
                    (f->attn_mma == MVM_CUDA_ON || a->kc == a->vc);
    return mvm_gpu_attention_on(f->g, 0, a, mma);
}

/* Whether the attention's kernels should leave their output quantized in f->act for L's
 * output product (mvm_g_attention_args.act): a Q type's, on the kernels, where it adds the
 * residual in its own pass (no bias), and heads of whole 32-element blocks. */
static mvm_status wants_att_act(struct cuda_fwd *f, const struct dev_block *L, uint32_t n,
                                int *wants)
{
    int gemm;
    TRY(mvm_cuda_fwd_gemm_wants(f, &L->wo, n, &gemm));
    *wants = !gemm && !L->bo && mvm_k_is_q((enum mvm_wtype)L->wo.type) &&
             f->m->hp.head_dim % MVM_QBLOCK == 0;
    return MVM_OK;
}

/* ---- grouped-query attention ----------------------------------------------------------- */

/* The queries into q (f->q, or qk_rope's staging), the keys and values into k, v (the
 * cache's rows, or staging), with the architecture's bias and, with `norm`, its QK norm;
 * not rotated. */
static mvm_status qkv(struct cuda_fwd *f, const struct dev_block *L, mvm_dptr q, mvm_dptr k,
                      mvm_dptr v, uint32_t n, int norm)
{
    const mvm_hparams *hp = &f->m->hp;
    uint32_t D = hp->n_embd, hd = hp->head_dim;
    const struct dev_weight *const ws[] = {&L->wq, &L->wk, &L->wv};
    const mvm_dptr ys[] = {q, k, v};
    const uint64_t strides[] = {f->q_dim, f->kv_dim, f->kv_dim};
    TRY(mvm_cuda_fwd_matmul_many(f, ws, 3, f->xn_act, f->xn, D, n, ys, strides));
    if (f->m->arch->qkv_bias) {
        TRY(mvm_cuda_fwd_add(f, q, L->bq, 0, 0, f->q_dim, n));
        TRY(mvm_cuda_fwd_add(f, k, L->bk, 0, 0, f->kv_dim, n));
        TRY(mvm_cuda_fwd_add(f, v, L->bv, 0, 0, f->kv_dim, n));
    }
    /* glm4moe's QK norm is optional: a block without one has no q_norm. Per head, or over
     * the whole rows where q and k are as wide (OLMoE's): both in one launch. */
    const int head = f->m->arch->qk_norm == MVM_QK_NORM_HEAD;
    if (!norm)
        return MVM_OK;
    if (L->q_norm && (head || f->q_dim == f->kv_dim)) {
        const uint32_t w = head ? hd : f->q_dim;
        mvm_g_rmsnorm_args a = {.x = q, .out = q, .w = L->q_norm, .x2 = k,
                                .w2 = L->k_norm, .x_stride = w, .out_stride = w, .n = w,
                                .n_rows = n * (head ? hp->n_head : 1),
                                .n_rows2 = n * (head ? hp->n_head_kv : 1), .eps = hp->rms_eps};
        TRY(mvm_gpu_rmsnorm(f->g, 0, &a));
    } else if (L->q_norm) {
        TRY(mvm_cuda_fwd_rmsnorm(f, q, q, f->q_dim, L->q_norm, f->q_dim, n));
        TRY(mvm_cuda_fwd_rmsnorm(f, k, k, f->kv_dim, L->k_norm, f->kv_dim, n));
    }
    return MVM_OK;
}

/* Run r's queries and keys rotated; its keys at k (their first row). */
static mvm_status rope_run(struct cuda_fwd *f, mvm_dptr k, const struct cuda_run *r)
{
    const mvm_hparams *hp = &f->m->hp;
    const struct cuda_heads q = {f->q + (uint64_t)r->i0 * f->q_dim * sizeof(float), f->q_dim,
                                 hp->n_head, hp->head_dim},
                            kh = {k, f->kv_dim, hp->n_head_kv, hp->head_dim};
    return mvm_cuda_fwd_rope(f, &q, &kh, r->n, r->pos0);
}

/* The QK norm mvm_g_qk_rope takes for L's staged rows (MVM_G_QK_NORM_*), or -1 where the
 * batch goes another way: straight into an F32 cache (direct), the runs of several
 * sequences, a block with a ring (its rows may wrap; gpt-oss's windowed layers), heads too
 * wide for one block's copy, each through the kernels one after the other. */
static int qk_rope_norm(const struct cuda_fwd *f, const struct dev_block *L, uint32_t blk)
{
    if (direct(f, blk) || f->n_runs != 1 || !f->v || run_block(f, f->runs, blk)->ring ||
        f->m->hp.head_dim > MVM_G_QK_HEAD_MAX)
        return -1;
    if (!L->q_norm)
        return MVM_G_QK_NORM_NONE;
    return f->m->arch->qk_norm == MVM_QK_NORM_HEAD ? MVM_G_QK_NORM_HEAD : MVM_G_QK_NORM_ROWS;
}

/* The one run's staged rows (qkv's, without the norm, its queries in f->att, which the
 * attention writes only later) normed, rotated and stored in one launch, the queries into
 * f->q, as rope_run and store would after qkv's norm (a decode token's: 3 launches a layer,
 * or 2, where this is one). */
static mvm_status qk_rope(struct cuda_fwd *f, const struct dev_block *L, uint32_t blk, int norm)
{
    const mvm_hparams *hp = &f->m->hp;
    const struct cuda_run *r = f->runs;
    const mvm_kv_block *b = run_block(f, r, blk);
    const mvm_dptr pos = mvm_cuda_fwd_pos(f); /* a decode graph's, on the device */
    const uint64_t at = mvm_kv_bytes(f->kv, (pos ? b->row0 : mvm_kv_row(b, r->pos0)) * f->kv_dim);
    mvm_g_qk_rope_args a = {.q_in = f->att, .q = f->q, .k = f->k, .v = f->v,
                            .q_norm = L->q_norm,
                            .k_norm = L->k_norm, .kc = f->kc + at, .vc = f->vc + at,
                            .pos = pos, .q_stride = f->q_dim, .kv_stride = f->kv_dim,
                            .cache_stride = f->kv_dim, .n_tok = r->n, .n_head = hp->n_head,
                            .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim,
                            .norm = (uint32_t)norm, .kv_type = f->kv->type,
                            .pos0 = pos ? 0 : r->pos0, .eps = hp->rms_eps, .rope = hp->rope};
    return mvm_gpu_qk_rope(f->g, 0, &a);
}

static mvm_status gqa(struct cuda_fwd *f, const struct dev_block *L, uint32_t blk, uint32_t n)
{
    const mvm_hparams *hp = &f->m->hp;
    const uint64_t row = mvm_kv_bytes(f->kv, f->kv_dim), src = f->kv_dim * sizeof(float);
    const int fused = qk_rope_norm(f, L, blk);
    if (direct(f, blk)) {
        const uint64_t at = mvm_kv_row(run_block(f, f->runs, blk), f->runs->pos0) * row;
        TRY(qkv(f, L, f->q, f->kc + at, f->vc + at, n, 1));
        TRY(rope_run(f, f->kc + at, f->runs));
    } else if (fused >= 0) {
        TRY(qkv(f, L, f->att, f->k, f->v, n, 0));
        TRY(qk_rope(f, L, blk, fused));
    } else {
        TRY(qkv(f, L, f->q, f->k, f->v, n, 1));
        for (const struct cuda_run *r = f->runs; r < f->runs + f->n_runs; r++) {
            TRY(rope_run(f, f->k + r->i0 * src, r));
            TRY(store(f, blk, r));
        }
    }
    int act;
    TRY(wants_att_act(f, L, n, &act));
    if (act) /* what act held of xn is overwritten */
        f->xn_act = NULL, f->xn_experts = 0;
    for (const struct cuda_run *r = f->runs; r < f->runs + f->n_runs; r++) {
        const mvm_kv_block *b = run_block(f, r, blk);
        mvm_g_attention_args a = {.q = f->q + (uint64_t)r->i0 * f->q_dim * sizeof(float),
                                  .kc = f->kc + b->row0 * row, .vc = f->vc + b->row0 * row,
                                  .out = f->att + (uint64_t)r->i0 * f->q_dim * sizeof(float),
                                  .part = f->part, .sinks = L->sinks, .n_tok = r->n,
                                  .pos0 = r->pos0, .n_head = hp->n_head,
                                  .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim,
                                  .n_ctx = f->n_ctx, .window = L->swa, .ring = b->ring,
                                  .kv_type = f->kv->type, .scale = hp->kq_scale,
                                  .pos = mvm_cuda_fwd_pos(f),
                                  .act = act ? f->act + r->i0 * f->act_stride : 0,
                                  .act_stride = f->act_stride, .act_type = L->wo.type};
        int by_kernel;
        TRY(attend(f, &a, &by_kernel));
        act &= by_kernel; /* the products leave act as it was: the output is quantized after */
    }
    f->att_act = act;
    return MVM_OK;
}

/* ---- multi-head latent attention (deepseek2) ------------------------------------------- */

/* q, and the batch's latent rows into `rows`, normed; not rotated. */
static mvm_status mla_project(struct cuda_fwd *f, const struct dev_block *L, mvm_dptr rows,
                              uint32_t n)
{
    const mvm_hparams *hp = &f->m->hp;
    const uint32_t D = hp->n_embd, R = hp->kv_lora, Q = hp->q_lora;
    /* the query's first product and the latent rows', one input */
    const struct dev_weight *const ws[] = {Q ? &L->wq_a : &L->wq, &L->wkv_a};
    const mvm_dptr ys[] = {Q ? f->qa : f->q, rows};
    const uint64_t strides[] = {Q ? Q : f->q_dim, f->lat};
    TRY(mvm_cuda_fwd_matmul_many(f, ws, 2, f->xn_act, f->xn, D, n, ys, strides));
    if (Q) {
        TRY(mvm_cuda_fwd_rmsnorm(f, f->qa, f->qa, Q, L->q_a_norm, Q, n));
        TRY(mvm_cuda_fwd_matmul(f, &L->wq_b, NULL, f->qa, Q, n, f->q, f->q_dim));
    }
    return mvm_cuda_fwd_rmsnorm(f, rows, rows, f->lat, L->kv_a_norm, R, n);
}

/* Run r's latent rows (at `rows`, their first) and queries rotated: their rope parts. */
static mvm_status mla_rope_run(struct cuda_fwd *f, mvm_dptr rows, const struct cuda_run *r)
{
    const mvm_hparams *hp = &f->m->hp;
    const uint64_t q = ((uint64_t)r->i0 * f->q_dim + hp->nope) * sizeof(float);
    const struct cuda_heads pe = {rows + hp->kv_lora * sizeof(float), f->lat, 1, hp->rope.n_rot},
                            qh = {f->q + q, f->q_dim, hp->n_head, hp->head_dim};
    return mvm_cuda_fwd_rope(f, &pe, &qh, r->n, r->pos0);
}

static mvm_status mla(struct cuda_fwd *f, const struct dev_block *L, uint32_t blk, uint32_t n)
{
    const mvm_hparams *hp = &f->m->hp;
    const uint32_t H = hp->n_head, R = hp->kv_lora, lat = f->lat;
    const uint64_t lat_bytes = (uint64_t)lat * sizeof(float);
    if (direct(f, blk)) { /* no window: n_ctx rows, position p in row row0 + p */
        mvm_dptr rows = f->kc + mvm_kv_row(run_block(f, f->runs, blk), f->runs->pos0) * lat_bytes;
        TRY(mla_project(f, L, rows, n));
        TRY(mla_rope_run(f, rows, f->runs));
    } else {
        TRY(mla_project(f, L, f->k, n));
        for (const struct cuda_run *r = f->runs; r < f->runs + f->n_runs; r++) {
            TRY(mla_rope_run(f, f->k + r->i0 * lat_bytes, r));
            TRY(store(f, blk, r));
        }
    }
    /* the absorbed queries: [wk_b_h · q_nope_h, q_pe_h] per (token, head) */
    TRY(mvm_cuda_fwd_matmul_heads(f, &L->wk_b, H, f->q, hp->head_dim, n, f->qlat, lat));
    TRY(mvm_gpu_copy_rows(f->g, f->qlat + R * sizeof(float), lat_bytes,
                          f->q + hp->nope * sizeof(float), hp->head_dim * sizeof(float),
                          hp->rope.n_rot * sizeof(float), (size_t)n * H));
    for (const struct cuda_run *r = f->runs; r < f->runs + f->n_runs; r++) {
        mvm_dptr cache = f->kc + mvm_kv_bytes(f->kv, run_block(f, r, blk)->row0 * lat);
        const uint64_t at = (uint64_t)r->i0 * H * lat_bytes;
        mvm_g_attention_args a = {.q = f->qlat + at, .kc = cache, .vc = cache,
                                  .out = f->olat + at, .part = f->part, .n_tok = r->n,
                                  .pos0 = r->pos0, .n_head = H, .n_head_kv = 1,
                                  .head_dim = lat, .n_ctx = f->n_ctx,
                                  .kv_type = f->kv->type, .scale = hp->kq_scale,
                                  .pos = mvm_cuda_fwd_pos(f)};
        TRY(attend(f, &a, NULL));
    }
    /* the values: wv_b_h over the latent part of each head's output (its k_pe part unused) */
    return mvm_cuda_fwd_matmul_heads(f, &L->wv_b, H, f->olat, lat, n, f->att, hp->v_dim);
}

mvm_status mvm_cuda_fwd_attention(struct cuda_fwd *f, const struct dev_block *L, uint32_t blk,
                                  uint32_t n)
{
    const mvm_hparams *hp = &f->m->hp;
    const uint32_t D = hp->n_embd;
    const uint32_t values = hp->kv_lora ? hp->n_head * hp->v_dim : f->q_dim;
    /* the input quantized for the first product in the norm's pass */
    const struct dev_weight *first = hp->kv_lora && L->wq_a.p ? &L->wq_a : &L->wq;
    TRY(mvm_cuda_fwd_norm_for(f, L->attn_norm, first, n));
    f->att_act = 0;
    TRY(hp->kv_lora ? mla(f, L, blk, n) : gqa(f, L, blk, n));
    if (!L->bo) /* the residual added by the product itself */
        return mvm_cuda_fwd_matmul_add(f, &L->wo, f->att, values, n, f->x, f->att_act);
    TRY(mvm_cuda_fwd_matmul(f, &L->wo, NULL, f->att, values, n, f->tmp, D));
    TRY(mvm_cuda_fwd_add(f, f->tmp, L->bo, 0, 0, D, n)); /* into the product first, as the
                                                           CPU adds it */
    return mvm_cuda_fwd_add(f, f->x, f->tmp, D, 0, D, n);
}
