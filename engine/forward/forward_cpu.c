/*
 * The CPU backend of the forward pass (forward_impl.h). One batch of n tokens goes through
 * every layer as
 *   attention:  x += Wo · attn(rope(norm_qk(Wq·h)), rope(norm_qk(Wk·h)), Wv·h),  h = rms(x)
 *   MoE:        x += Σ_selected w_e · expert_e(h) [+ [sigmoid(g·h) ·] shared(h)],  h = rms(x)
 * with the architecture's variations (arch.c): deepseek2's latent attention (below),
 * deepseek2's and glm4moe's leading blocks with a dense FFN in place of the experts, and
 * gpt-oss's sinks, windows and biases.
 * A batch may mix sequences (forward_impl.h's mvm_fwd_batch): the products and the MoE steps
 * take its tokens together, and each token stores and attends over its own sequence's rows
 * of the cache at its own position.
 * Matrix products are split by rows across the pool; attention by (token, heads that share
 * their KV rows: heads_per_unit); the keys and values are stored in the cache's type
 * (kv_cache.h: F16 by default); the experts as experts_cpu.h says. Work is handed out
 * statically (unit u to thread u mod n), so a run is bitwise reproducible for a given thread
 * count: greedy decoding is deterministic, whatever the experts' residency.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/forward/experts_cpu.h"
#include "engine/forward/forward_impl.h"
#include "vmm/error.h"

/* The most queries (heads times tokens) one unit of the attention's work takes: a unit's
 * queries share each read and conversion of the cache's rows (attn_avx512.c), so the more
 * the better (OLMoE's shape at pp512, the kernel's first version: 8 -> 32 took 1706 to
 * 1788 tok/s, docs/perf/cpu.md), as long as a thread's scores for them, x n_ctx floats,
 * stay within MVM_ATTN_SCRATCH floats; never fewer than MVM_ATTN_QUERIES_MIN (a long
 * context's scratch grows beyond it instead). */
#define MVM_ATTN_QUERIES 32
#define MVM_ATTN_QUERIES_MIN 8
#define MVM_ATTN_SCRATCH ((size_t)1 << 20)
/* Decode at length (split_parts): a part's fewest positions, the most tokens a batch may
 * have, the most parts a token (a thread each). */
#define MVM_ATTN_PART_ROWS 128
#define MVM_ATTN_PART_TOKENS 8
#define MVM_ATTN_PARTS_MAX 64

struct cpu_fwd {
    mvm_model *m;
    mvm_pool *pool;
    mvm_moe *moe;
    int nth;
    uint32_t n_ctx, n_batch, q_dim, kv_dim;
    const mvm_kv_layout *kv;    /* the cache's rows and element type (kv_cache.h) */
    uint8_t *kc, *vc;           /* [rows][kv_dim] elements; MLA: kc only, the latent + k_pe */
    /* MLA (deepseek2): the latent attention's buffers, [n_batch][...] */
    uint32_t lat;               /* kv_lora + rope: a cache row, and an absorbed query head */
    float *qa, *qlat, *olat;    /* q_a; [n_head][lat] absorbed queries and their outputs */
    uint8_t *hact;              /* [nth][act_stride]: each thread's per-head activations */
    float *x, *xn, *q, *k, *v, *att, *tmp, *tmp2; /* [n_batch][...] */
    uint8_t *act;               /* [n_batch][act_stride]: the current matmul input */
    size_t act_stride;
    float *sh1, *sh3, *shg;     /* shared expert: [n_batch][n_ff_shexp] x2, [n_batch] */
    uint32_t attn_q;            /* queries a unit of the attention takes at most */
    float *scratch;             /* [nth][attn_q x n_ctx] attention scores */
    float *spec_x, *spec_xn;    /* [n_batch][n_embd]: SMoE's speculative pass (speculate) */
    uint32_t *run_start;        /* [n_batch + 1]: the attention's runs of tokens (token_runs) */
    float *part_out, *part_lse; /* [PART_TOKENS][parts][q_dim], [..][n_head]: split_run's */
    mvm_cpu_experts *experts;          /* the routed experts' threads */
};

static mvm_status cpu_create(mvm_ctx *ctx, void **state)
{
    const mvm_hparams *hp = &ctx->m->hp;
    struct cpu_fwd *c = calloc(1, sizeof *c);
    if (!c)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the inference context");
    *state = c;
    c->m = ctx->m;
    c->pool = ctx->pool;
    c->moe = ctx->moe;
    c->nth = mvm_pool_size(ctx->pool);
    c->n_ctx = ctx->n_ctx;
    c->n_batch = ctx->n_batch;
    c->kv = &ctx->kv;
    c->q_dim = hp->n_head * hp->head_dim;
    c->kv_dim = hp->n_head_kv * hp->head_dim;
    c->lat = hp->kv_lora + hp->rope.n_rot;
    if (hp->kv_lora) /* MLA: one latent row per position; att holds n_head values */
        c->kv_dim = c->lat;
    size_t B = c->n_batch, D = hp->n_embd;
    size_t widest = D > c->q_dim ? D : c->q_dim;
    uint32_t wide[] = {hp->n_ff_shexp, hp->n_ff, hp->q_lora, hp->n_head * hp->v_dim,
                       hp->kv_lora, hp->nope};
    for (size_t i = 0; i < sizeof wide / sizeof *wide; i++)
        widest = wide[i] > widest ? wide[i] : widest;
    c->act_stride = MVM_ALIGN64(mvm_k_act_bytes(MVM_W_F32, widest));
    size_t kv = mvm_kv_bytes(c->kv, c->kv->rows * c->kv_dim);
    int ok = 1;
    c->kc = mvm_buf64(kv, &ok);
    c->vc = hp->kv_lora ? NULL : mvm_buf64(kv, &ok);
    if (hp->kv_lora) {
        size_t heads = B * hp->n_head * c->lat * 4;
        c->qa = mvm_buf64(B * (hp->q_lora ? hp->q_lora : 1) * 4, &ok);
        c->qlat = mvm_buf64(heads, &ok);
        c->olat = mvm_buf64(heads, &ok);
        c->hact = mvm_buf64((size_t)c->nth * c->act_stride, &ok);
    }
    c->x = mvm_buf64(B * D * 4, &ok);
    c->xn = mvm_buf64(B * D * 4, &ok);
    c->tmp = mvm_buf64(B * D * 4, &ok);
    c->tmp2 = mvm_buf64(B * D * 4, &ok);
    c->q = mvm_buf64(B * c->q_dim * 4, &ok);
    c->att = mvm_buf64(B * (c->q_dim > hp->n_head * hp->v_dim ? c->q_dim : hp->n_head * hp->v_dim)
                       * 4, &ok);
    /* the batch's keys and values (MLA: latent rows) in F32, before they are stored */
    c->k = mvm_buf64(B * c->kv_dim * 4, &ok);
    c->v = hp->kv_lora ? NULL : mvm_buf64(B * c->kv_dim * 4, &ok);
    c->act = mvm_buf64(B * c->act_stride, &ok);
    const size_t fit = MVM_ATTN_SCRATCH / c->n_ctx;
    c->attn_q = fit >= MVM_ATTN_QUERIES ? MVM_ATTN_QUERIES
              : fit > MVM_ATTN_QUERIES_MIN ? (uint32_t)fit : MVM_ATTN_QUERIES_MIN;
    c->scratch = mvm_buf64((size_t)c->nth * c->attn_q * c->n_ctx * 4, &ok);
    c->run_start = mvm_buf64((B + 1) * sizeof *c->run_start, &ok);
    const size_t parts = (size_t)(c->nth < MVM_ATTN_PARTS_MAX ? c->nth : MVM_ATTN_PARTS_MAX);
    if (!hp->kv_lora && parts > 1) {
        c->part_out = mvm_buf64(MVM_ATTN_PART_TOKENS * parts * c->q_dim * 4, &ok);
        c->part_lse = mvm_buf64(MVM_ATTN_PART_TOKENS * parts * hp->n_head * 4, &ok);
    }
    uint32_t ffn = hp->n_ff > hp->n_ff_shexp ? hp->n_ff : hp->n_ff_shexp;
    if (ffn) {
        c->sh1 = mvm_buf64(B * ffn * 4, &ok);
        c->sh3 = mvm_buf64(B * ffn * 4, &ok);
        c->shg = mvm_buf64(B * 4, &ok);
    }
    if (mvm_prefetcher_speculative(c->moe->prefetch)) {
        c->spec_x = mvm_buf64(B * D * 4, &ok);
        c->spec_xn = mvm_buf64(B * D * 4, &ok);
    }
    if (!ok)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for a context of %u positions (KV cache "
                        "%.1f MiB)", c->n_ctx, (double)c->kv->bytes / 1048576.0);
    return mvm_cpu_experts_create(c->m, c->pool, c->n_batch, &c->experts);
}

static void cpu_destroy(void *state)
{
    struct cpu_fwd *c = state;
    void *bufs[] = {c->kc, c->vc, c->x, c->xn, c->tmp, c->tmp2, c->q, c->att, c->k, c->v,
                    c->act, c->scratch, c->sh1, c->sh3, c->shg, c->qa, c->qlat, c->olat,
                    c->hact, c->spec_x, c->spec_xn, c->run_start, c->part_out, c->part_lse};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        free(bufs[i]);
    mvm_cpu_experts_free(c->experts);
    free(c);
}

/* ---- matrix products ------------------------------------------------------------------- */

/* src rows (n of `cols` floats, stride `cols`) -> c->act in w's activation format. */
static void prepare(struct cpu_fwd *c, enum mvm_wtype t, const float *src, uint32_t n,
                    uint32_t cols)
{
    for (uint32_t i = 0; i < n; i++)
        mvm_k_prepare_act(t, src + (size_t)i * cols, c->act + i * c->act_stride, cols);
}

struct mm_job {
    mvm_pool *pool;
    const mvm_weight *w;
    const void *act;
    size_t act_stride;
    uint32_t n_tok;
    float *y;
    size_t y_stride;
};

/* A token's product takes its rows MATVEC_CHUNK bytes of weights at a time, shared with
 * stealing (mvm_pool_take): its threads stream the weights from memory side by side, and
 * with fixed halves one often finished ahead of the other (2-11% of the decode's product
 * time on a 2-core VM, OLMoE-1B-7B Q8_0: docs/perf/cpu.md). A chunk's worth is read in
 * about a microsecond and a half at a core's memory rate; a stolen chunk starts a new
 * stream, so smaller ones would pay that start more often. */
#define MATVEC_CHUNK (64u << 10)

static void mm_run(void *p, int t, int nth)
{
    const struct mm_job *j = p;
    const mvm_weight *w = j->w;
    size_t r0, r1;
    if (j->n_tok == 1) {
        const size_t chunk = w->row_bytes < MATVEC_CHUNK ? MATVEC_CHUNK / w->row_bytes : 1;
        while (mvm_pool_take(j->pool, t, chunk, &r0, &r1))
            mvm_k_matvec(w->type, w->data, w->row_bytes, w->cols, j->act, j->y, r0, r1);
        return;
    }
    mvm_pool_split(w->rows, t, nth, &r0, &r1);
    if (r0 < r1)
        mvm_k_matmul(w->type, w->data, w->row_bytes, w->cols, j->act, j->act_stride, j->n_tok,
                     j->y, j->y_stride, r0, r1);
}

/* y[i] = w · src[i] for n rows of w->cols floats; y rows are w->rows floats apart. */
static void matmul(struct cpu_fwd *c, const mvm_weight *w, const float *src, uint32_t n, float *y)
{
    prepare(c, w->type, src, n, w->cols);
    struct mm_job j = {c->pool, w, c->act, c->act_stride, n, y, w->rows};
    if (n == 1)
        mvm_pool_share(c->pool, w->rows, NULL);
    mvm_pool_run(c->pool, mm_run, &j);
}

/* ---- attention ------------------------------------------------------------------------- */

static void qk_norm_rope(struct cpu_fwd *c, const mvm_layer *L, const mvm_fwd_batch *b)
{
    const uint32_t n = b->n;
    const mvm_hparams *hp = &c->m->hp;
    const mvm_arch *a = c->m->arch;
    for (uint32_t i = 0; i < n; i++) {
        float *q = c->q + (size_t)i * c->q_dim, *k = c->k + (size_t)i * c->kv_dim;
        if (a->qkv_bias) {
            for (uint32_t j = 0; j < c->q_dim; j++)
                q[j] += L->bq[j];
            for (uint32_t j = 0; j < c->kv_dim; j++) {
                k[j] += L->bk[j];
                c->v[(size_t)i * c->kv_dim + j] += L->bv[j];
            }
        }
        if (L->q_norm && a->qk_norm == MVM_QK_NORM_HEAD) {
            for (uint32_t h = 0; h < hp->n_head; h++)
                mvm_k_rmsnorm(q + h * hp->head_dim, q + h * hp->head_dim, L->q_norm,
                              hp->head_dim, hp->rms_eps);
            for (uint32_t h = 0; h < hp->n_head_kv; h++)
                mvm_k_rmsnorm(k + h * hp->head_dim, k + h * hp->head_dim, L->k_norm,
                              hp->head_dim, hp->rms_eps);
        } else if (L->q_norm) {
            mvm_k_rmsnorm(q, q, L->q_norm, c->q_dim, hp->rms_eps);
            mvm_k_rmsnorm(k, k, L->k_norm, c->kv_dim, hp->rms_eps);
        }
        mvm_k_rope(q, hp->n_head, hp->head_dim, b->pos[i], &hp->rope);
        mvm_k_rope(k, hp->n_head_kv, hp->head_dim, b->pos[i], &hp->rope);
    }
}

/* The heads of one unit of the attention's work, n_q: a divisor of `group` (the heads
 * that read the same KV rows), at most c->attn_q (a thread's scratch holds n_q x n_ctx
 * scores), the largest that still leaves a unit for each of nth threads among the
 * groups x group / n_q units. A unit reads its rows once for its n_q heads: a long
 * context's cache, larger than the caches, n_q times less. */
static uint32_t heads_per_unit(const struct cpu_fwd *c, uint32_t group, size_t groups)
{
    for (uint32_t n_q = group < c->attn_q ? group : c->attn_q; n_q > 1; n_q--)
        if (group % n_q == 0 && groups * (group / n_q) >= (size_t)c->nth)
            return n_q;
    return 1;
}

struct attn_job {
    struct cpu_fwd *c;
    const mvm_layer *L;
    uint32_t blk;          /* the block (each token reads its sequence's rows of it) */
    const mvm_fwd_batch *b;
    uint32_t n_q;          /* heads per unit (heads_per_unit) */
    uint32_t n_runs;       /* runs of tokens that attend together (token_runs) */
    uint32_t parts;        /* decode at length: each token's positions in parts (split_parts) */
};

/* The batch's tokens in runs that attend together (mvm_k_attn_block), into c->run_start:
 * consecutive tokens of one sequence, at most c->attn_q / n_q of them (a thread's
 * scratch holds that many queries' scores); a windowed layer's one by one (each token's
 * window starts at its own row). A prompt's tokens then read each row once a run, not once
 * a token. */
static uint32_t token_runs(struct cpu_fwd *c, const mvm_layer *L, const mvm_fwd_batch *b,
                           uint32_t n_q)
{
    const uint32_t most = L->swa ? 1 : c->attn_q / n_q;
    uint32_t n_runs = 0;
    for (uint32_t i = 0, e; i < b->n; i = e) {
        for (e = i + 1; e < b->n && e - i < most && b->seq[e] == b->seq[i]; e++)
            ;
        c->run_start[n_runs++] = i;
    }
    c->run_start[n_runs] = b->n;
    return n_runs;
}

/* Units (a run of tokens, n_q heads) dealt round-robin: a prompt's later tokens attend over
 * more positions, and contiguous ranges of units would give them all to one thread. */
static void attn_run(void *p, int t, int nth)
{
    const struct attn_job *j = p;
    struct cpu_fwd *c = j->c;
    const mvm_hparams *hp = &c->m->hp;
    const uint32_t group = hp->n_head / hp->n_head_kv, units = hp->n_head / j->n_q;
    for (size_t u = (size_t)t; u < (size_t)j->n_runs * units; u += (size_t)nth) {
        const uint32_t r = (uint32_t)(u / units), h = (uint32_t)(u % units) * j->n_q;
        const uint32_t i0 = c->run_start[r], nt = c->run_start[r + 1] - i0;
        uint32_t n_pos[MVM_ATTN_QUERIES], first = 0;
        for (uint32_t k = 0; k < nt; k++)
            n_pos[k] = j->b->pos[i0 + k] + 1;
        /* a windowed layer's token (alone in its run): the window's last swa positions */
        if (j->L->swa && n_pos[0] > j->L->swa) {
            first = n_pos[0] - j->L->swa;
            n_pos[0] -= first;
        }
        const mvm_kv_block *kb = mvm_kv_seq_block(c->kv, j->b->seq[i0], j->blk);
        const size_t kvo = mvm_kv_bytes(c->kv, mvm_kv_row(kb, first) * c->kv_dim +
                                                   (size_t)(h / group) * hp->head_dim);
        const size_t qo = (size_t)i0 * c->q_dim + (size_t)h * hp->head_dim;
        mvm_k_attn_block(c->q + qo, c->q_dim, nt, j->n_q, 1, n_pos, c->kv->type, c->kc + kvo,
                         c->vc + kvo, c->kv_dim, hp->head_dim, hp->kq_scale,
                         j->L->sinks ? j->L->sinks + h : NULL,
                         c->scratch + (size_t)t * c->attn_q * c->n_ctx, c->att + qo, NULL);
    }
}

/* ---- decode at length: each token's positions in parts ----------------------------------
 * A unit of heads reads its part of every row, and rows lie kv_dim elements apart: OLMoE's
 * 16 heads read 256 bytes of each 4 KiB row a unit, 16 passes over the cache, at a
 * quarter of the memory's speed (docs/perf/cpu.md). A decode token instead has its
 * positions cut into parts, one unit each with every head (flash-decoding): a unit reads
 * whole rows in order, and the parts' outputs are merged by their log-normalisers
 * (mvm_k_attn_block's lse). The merge's order is fixed by the part count, which follows the
 * thread count, so a run stays reproducible for a given thread count. */

/* Parts per token for a batch whose runs are one token each (decode's; a prompt's tokens
 * share each row among themselves instead): up to one a thread, each of at least
 * MVM_ATTN_PART_ROWS positions. One part (every head of a token in one unit, written in
 * place) where the tokens give every thread one (a single thread's decode). 0, the units of
 * heads instead, for a windowed layer, a batch of more than MVM_ATTN_PART_TOKENS tokens,
 * heads whose scores would not fit a thread's scratch, or a short context on fewer tokens
 * than threads. */
static uint32_t split_parts(const struct cpu_fwd *c, const mvm_layer *L, const mvm_fwd_batch *b,
                            uint32_t n_runs)
{
    if (L->swa || n_runs != b->n || b->n > MVM_ATTN_PART_TOKENS || c->m->hp.n_head > c->attn_q)
        return 0;
    uint32_t most = 0;
    for (uint32_t i = 0; i < b->n; i++)
        most = b->pos[i] + 1 > most ? b->pos[i] + 1 : most;
    uint32_t parts = most / MVM_ATTN_PART_ROWS;
    parts = parts < (uint32_t)c->nth ? parts : (uint32_t)c->nth;
    parts = parts < MVM_ATTN_PARTS_MAX ? parts : MVM_ATTN_PARTS_MAX;
    if (parts >= 2 && c->part_out)
        return parts;
    return b->n >= (uint32_t)c->nth ? 1 : 0;
}

static void split_run(void *p, int t, int nth)
{
    const struct attn_job *j = p;
    struct cpu_fwd *c = j->c;
    const mvm_hparams *hp = &c->m->hp;
    for (size_t u = (size_t)t; u < (size_t)j->b->n * j->parts; u += (size_t)nth) {
        const uint32_t i = (uint32_t)(u / j->parts), part = (uint32_t)(u % j->parts);
        const uint32_t n_pos = j->b->pos[i] + 1;
        const uint32_t each = ((n_pos + j->parts - 1) / j->parts + 15) & ~15u;
        const uint32_t r0 = part * each;
        uint32_t len = n_pos <= r0 ? 0 : n_pos - r0 < each ? n_pos - r0 : each;
        float *lse = c->part_lse ? c->part_lse + u * hp->n_head : NULL;
        if (!len) { /* a short token among long ones: an empty part (never the only one) */
            for (uint32_t h = 0; h < hp->n_head; h++)
                lse[h] = -INFINITY;
            continue;
        }
        const mvm_kv_block *kb = mvm_kv_seq_block(c->kv, j->b->seq[i], j->blk);
        const size_t kvo = mvm_kv_bytes(c->kv, mvm_kv_row(kb, r0) * c->kv_dim);
        const int whole = j->parts == 1; /* the token's output itself, its sinks included */
        mvm_k_attn_block(c->q + (size_t)i * c->q_dim, c->q_dim, 1, hp->n_head / hp->n_head_kv,
                         hp->n_head_kv, &len, c->kv->type, c->kc + kvo, c->vc + kvo, c->kv_dim,
                         hp->head_dim, hp->kq_scale, whole ? j->L->sinks : NULL,
                         c->scratch + (size_t)t * c->attn_q * c->n_ctx,
                         whole ? c->att + (size_t)i * c->q_dim : c->part_out + u * c->q_dim,
                         whole ? NULL : lse);
    }
}

/* Each token's head outputs from its parts': weights e^(lse_part − lse), the sink (gpt-oss)
 * in the denominator. */
static void split_merge(struct cpu_fwd *c, const mvm_layer *L, const mvm_fwd_batch *b,
                        uint32_t parts)
{
    const mvm_hparams *hp = &c->m->hp;
    const uint32_t hd = hp->head_dim;
    for (uint32_t i = 0; i < b->n; i++)
        for (uint32_t h = 0; h < hp->n_head; h++) {
            const float *lse = c->part_lse + (size_t)i * parts * hp->n_head + h;
            double max = L->sinks ? L->sinks[h] : -INFINITY, sum, w[MVM_ATTN_PARTS_MAX];
            for (uint32_t s = 0; s < parts; s++)
                max = lse[s * hp->n_head] > max ? lse[s * hp->n_head] : max;
            sum = L->sinks ? exp(L->sinks[h] - max) : 0;
            for (uint32_t s = 0; s < parts; s++)
                sum += w[s] = exp(lse[s * hp->n_head] - max);
            float *out = c->att + (size_t)i * c->q_dim + (size_t)h * hd;
            for (uint32_t d = 0; d < hd; d++) {
                double acc = 0;
                for (uint32_t s = 0; s < parts; s++)
                    if (w[s] > 0)
                        acc += w[s] * c->part_out[((size_t)i * parts + s) * c->q_dim +
                                                  (size_t)h * hd + d];
                out[d] = (float)(acc / sum);
            }
        }
}

/* ---- multi-head latent attention (deepseek2) ---------------------------------------------
 * The absorbed form (llama.cpp's MLA path; DeepSeek-V2's paper, appendix C): the cache keeps
 * one row per position, [latent c (kv_lora), k_pe (rope)], and each head's query turns into
 * that space, [wk_b_h · q_nope_h, q_pe_h], so a score is one dot product over the row:
 * q_nope · (Wk_h c) + q_pe · k_pe. The head attends over whole rows (the k_pe part of its
 * output is ignored) and wv_b_h takes the latent part out to v_dim values. */

/* q, and the batch's latent rows into c->k, rotated. */
static void mla_project(struct cpu_fwd *c, const mvm_layer *L, const mvm_fwd_batch *b)
{
    const mvm_hparams *hp = &c->m->hp;
    const uint32_t n = b->n;
    const uint32_t R = hp->kv_lora, Q = hp->q_lora;
    if (Q) {
        matmul(c, &L->wq_a, c->xn, n, c->qa);
        for (uint32_t i = 0; i < n; i++)
            mvm_k_rmsnorm(c->qa + (size_t)i * Q, c->qa + (size_t)i * Q, L->q_a_norm, Q,
                          hp->rms_eps);
        matmul(c, &L->wq_b, c->qa, n, c->q);
    } else {
        matmul(c, &L->wq, c->xn, n, c->q);
    }
    float *rows = c->k;
    matmul(c, &L->wkv_a, c->xn, n, rows);
    for (uint32_t i = 0; i < n; i++) {
        float *row = rows + (size_t)i * c->lat;
        mvm_k_rmsnorm(row, row, L->kv_a_norm, R, hp->rms_eps);
        mvm_k_rope(row + R, 1, hp->rope.n_rot, b->pos[i], &hp->rope);
        mvm_k_rope(c->q + (size_t)i * c->q_dim + hp->nope, hp->n_head, hp->head_dim, b->pos[i],
                   &hp->rope);
    }
}

struct mla_job {
    struct cpu_fwd *c;
    const mvm_layer *L;
    uint32_t blk;          /* the block (each token reads its sequence's rows of it) */
    const mvm_fwd_batch *b;
    uint32_t n_q;          /* heads per unit (heads_per_unit: every head reads every row) */
};

/* Per (token, n_q heads): the absorbed queries, the attention over the cache rows, the
 * values. */
static void mla_run(void *p, int t, int nth)
{
    const struct mla_job *j = p;
    struct cpu_fwd *c = j->c;
    const mvm_hparams *hp = &c->m->hp;
    const mvm_weight *kb = &j->L->wk_b, *vb = &j->L->wv_b;
    const uint32_t H = hp->n_head, R = hp->kv_lora, V = hp->v_dim, units = H / j->n_q;
    uint8_t *act = c->hact + (size_t)t * c->act_stride;
    size_t u0, u1;
    mvm_pool_split((size_t)j->b->n * units, t, nth, &u0, &u1);
    for (size_t u = u0; u < u1; u++) {
        const uint32_t i = (uint32_t)(u / units), h0 = (uint32_t)(u % units) * j->n_q;
        /* no window: n_ctx rows, position p in row row0 + p */
        const mvm_kv_block *seq_rows = mvm_kv_seq_block(c->kv, j->b->seq[i], j->blk);
        const uint8_t *cache = c->kc + mvm_kv_bytes(c->kv, seq_rows->row0 * c->kv_dim);
        const size_t at = ((size_t)i * H + h0) * c->lat; /* head h0's of token i */
        for (uint32_t h = h0; h < h0 + j->n_q; h++) {
            const float *q = c->q + (size_t)i * c->q_dim + (size_t)h * hp->head_dim;
            float *ql = c->qlat + at + (size_t)(h - h0) * c->lat;
            mvm_k_prepare_act(kb->type, q, act, hp->nope);
            mvm_k_matvec(kb->type, kb->data, kb->row_bytes, hp->nope, act, ql - (size_t)h * R,
                         (size_t)h * R, (size_t)(h + 1) * R);
            memcpy(ql + R, q + hp->nope, hp->rope.n_rot * sizeof *ql);
        }
        mvm_k_attn_heads(c->qlat + at, j->n_q, c->kv->type, cache, cache, c->lat,
                         j->b->pos[i] + 1, c->lat, hp->kq_scale, NULL,
                         c->scratch + (size_t)t * c->attn_q * c->n_ctx, c->olat + at);
        for (uint32_t h = h0; h < h0 + j->n_q; h++) {
            mvm_k_prepare_act(vb->type, c->olat + at + (size_t)(h - h0) * c->lat, act, R);
            mvm_k_matvec(vb->type, vb->data, vb->row_bytes, R, act, c->att + (size_t)i * H * V,
                         (size_t)h * V, (size_t)(h + 1) * V);
        }
    }
}

/* The batch's rows c->k and c->v (MLA: c->k) into block blk's rows of their sequences'
 * caches, rounded to its type: each token where kv_cache.h's runs put its position (a
 * ring's row twice). */
static void store(struct cpu_fwd *c, uint32_t blk, const mvm_fwd_batch *b)
{
    const size_t row = mvm_kv_bytes(c->kv, c->kv_dim);
    mvm_kv_run runs[MVM_KV_MAX_RUNS];
    for (uint32_t i = 0; i < b->n; i++) {
        const size_t from = (size_t)i * c->kv_dim;
        const mvm_kv_block *kb = mvm_kv_seq_block(c->kv, b->seq[i], blk);
        for (uint32_t r = 0, nr = mvm_kv_runs(kb, b->pos[i], 1, runs); r < nr; r++) {
            mvm_k_quantize(c->kv->type, c->k + from, c->kc + runs[r].row * row, c->kv_dim);
            if (c->v)
                mvm_k_quantize(c->kv->type, c->v + from, c->vc + runs[r].row * row, c->kv_dim);
        }
    }
}

/* x += attention(rms(x)) of block `blk` (its rows of the KV cache: kv_cache.h). */
static void attention(struct cpu_fwd *c, const mvm_layer *L, uint32_t blk,
                      const mvm_fwd_batch *b)
{
    const mvm_hparams *hp = &c->m->hp;
    const uint32_t n = b->n;
    for (uint32_t i = 0; i < n; i++)
        mvm_k_rmsnorm(c->xn + (size_t)i * hp->n_embd, c->x + (size_t)i * hp->n_embd,
                      L->attn_norm, hp->n_embd, hp->rms_eps);
    if (hp->kv_lora) {
        mla_project(c, L, b);
        store(c, blk, b);
        struct mla_job j = {c, L, blk, b, heads_per_unit(c, hp->n_head, n)};
        mvm_pool_run(c->pool, mla_run, &j);
    } else {
        matmul(c, &L->wq, c->xn, n, c->q);
        matmul(c, &L->wk, c->xn, n, c->k);
        matmul(c, &L->wv, c->xn, n, c->v);
        qk_norm_rope(c, L, b);
        store(c, blk, b);
        struct attn_job j = {c, L, blk, b,
                             heads_per_unit(c, hp->n_head / hp->n_head_kv,
                                            (size_t)n * hp->n_head_kv)};
        j.n_runs = token_runs(c, L, b, j.n_q);
        if ((j.parts = split_parts(c, L, b, j.n_runs))) {
            mvm_pool_run(c->pool, split_run, &j);
            if (j.parts > 1)
                split_merge(c, L, b, j.parts);
        } else {
            mvm_pool_run(c->pool, attn_run, &j);
        }
    }
    matmul(c, &L->wo, c->att, n, c->tmp);
    for (size_t i = 0; i < (size_t)n * hp->n_embd; i++)
        c->x[i] += L->bo ? c->tmp[i] + L->bo[i % hp->n_embd] : c->tmp[i];
}

/* ---- mixture of experts ---------------------------------------------------------------- */

/* tmp2 = w2 · (silu(w1 · h) * (w3 · h)), shg = [sigmoid(gate · h)], h = xn: a shared expert
 * (gated in qwen2moe, not in deepseek2 and glm4moe) or a dense block's FFN, to be added
 * (add_ffn). */
static void ffn(struct cpu_fwd *c, const mvm_weight *w1, const mvm_weight *w3,
                const mvm_weight *w2, const float *gate, uint32_t n)
{
    const mvm_hparams *hp = &c->m->hp;
    const uint32_t F = w1->rows;
    for (uint32_t i = 0; i < n; i++) {
        const float *h = c->xn + (size_t)i * hp->n_embd;
        float g = 0;
        for (uint32_t d = 0; gate && d < hp->n_embd; d++)
            g += gate[d] * h[d];
        c->shg[i] = gate ? 1.0f / (1.0f + expf(-g)) : 1.0f;
    }
    matmul(c, w1, c->xn, n, c->sh1);
    matmul(c, w3, c->xn, n, c->sh3);
    for (uint32_t i = 0; i < n; i++)
        mvm_k_swiglu(c->sh1 + (size_t)i * F, c->sh3 + (size_t)i * F, F);
    matmul(c, w2, c->sh1, n, c->tmp2);
}

/* dst += the FFN's output, gated, for n tokens. */
static void add_ffn(const struct cpu_fwd *c, float *dst, uint32_t n)
{
    const uint32_t D = c->m->hp.n_embd;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t d = 0; d < D; d++)
            dst[(size_t)i * D + d] += c->shg[i] * c->tmp2[(size_t)i * D + d];
}

/* A dense block's FFN (deepseek2's and glm4moe's leading blocks). */
static void dense_ffn(struct cpu_fwd *c, const mvm_layer *L, uint32_t n)
{
    const mvm_hparams *hp = &c->m->hp;
    for (uint32_t i = 0; i < n; i++)
        mvm_k_rmsnorm(c->xn + (size_t)i * hp->n_embd, c->x + (size_t)i * hp->n_embd,
                      L->ffn_norm, hp->n_embd, hp->rms_eps);
    ffn(c, &L->ffn_w1, &L->ffn_w3, &L->ffn_w2, NULL, n);
    add_ffn(c, c->x, n);
}

/* SMoE's speculative pass (§IV-C; policy/predict_speculative.c), once the step's shared
 * expert (tmp2, when the model has one) and the experts that were resident (moe->landed)
 * have run: x plus their outputs through layer il+1's attention and FFN norm into spec_xn,
 * the forecast's input. The attention writes layer il+1's KV rows of these positions,
 * which its real pass writes again before any query reads them (a ring's too: kv_cache.h),
 * and works on spec_x and spec_xn so that x and xn (the step's input, which observers
 * read at its end) stay as they are. */
static void speculate(struct cpu_fwd *c, uint32_t il, const mvm_fwd_batch *b)
{
    const mvm_hparams *hp = &c->m->hp;
    const uint32_t n = b->n, D = hp->n_embd;
    memcpy(c->spec_x, c->x, (size_t)n * D * sizeof *c->x);
    mvm_cpu_experts_add_some(c->experts, c->moe, c->spec_x, n, c->moe->landed);
    if (hp->n_ff_shexp)
        add_ffn(c, c->spec_x, n);
    float *x = c->x, *xn = c->xn;
    c->x = c->spec_x, c->xn = c->spec_xn;
    attention(c, &c->m->layers[il + 1], hp->n_dense + il + 1, b);
    c->x = x, c->xn = xn;
    for (uint32_t i = 0; i < n; i++)
        mvm_k_rmsnorm(c->spec_xn + (size_t)i * D, c->spec_x + (size_t)i * D,
                      c->m->layers[il + 1].ffn_norm, D, hp->rms_eps);
    mvm_moe_speculate(c->moe, c->spec_xn);
}

static mvm_status moe(struct cpu_fwd *c, uint32_t il, const mvm_fwd_batch *b)
{
    const uint32_t n = b->n;
    const mvm_hparams *hp = &c->m->hp;
    const mvm_layer *L = &c->m->layers[il];
    for (uint32_t i = 0; i < n; i++)
        mvm_k_rmsnorm(c->xn + (size_t)i * hp->n_embd, c->x + (size_t)i * hp->n_embd,
                      L->ffn_norm, hp->n_embd, hp->rms_eps);
    matmul(c, &L->router, c->xn, n, c->moe->probs);
    for (uint32_t i = 0; L->router_bias && i < n; i++)
        for (uint32_t e = 0; e < hp->n_expert; e++)
            c->moe->probs[(size_t)i * hp->n_expert + e] += L->router_bias[e];
    mvm_moe_route(c->moe, il, b->pos, n, c->xn);
    mvm_status st = mvm_moe_begin(c->moe);
    if (st != MVM_OK)
        return st;
    const mvm_elsewhere *e = c->moe->elsewhere;
    if (e) /* the other ranks' experts run there meanwhile */
        st = e->send(e->self, c->moe, c->xn, n);
    /* At home, the home's own view: the expert address maps the same pages a second time,
     * whose first reads would fault them in again (and count them twice in the RSS). */
    const int spec = mvm_moe_speculates(c->moe);
    mvm_cpu_experts_run_first(c->experts, c->moe, c->xn, n, c->moe->active, c->moe->n_active,
                              c->m->experts_at_home, spec ? c->moe->landed : NULL);
    if (hp->n_ff_shexp) /* added after the routed experts, as the models do */
        ffn(c, &L->shexp_w1, &L->shexp_w3, &L->shexp_w2, L->shexp_gate, n);
    if (spec) {
        speculate(c, il, b);
        mvm_cpu_experts_run_rest(c->experts);
    }
    mvm_cpu_experts_add(c->experts, c->moe, c->x, n);
    if (e && st == MVM_OK)
        st = e->gather(e->self, c->moe, c->x, n);
    mvm_status end = mvm_moe_end(c->moe);
    st = st != MVM_OK ? st : end;
    if (st == MVM_OK && hp->n_ff_shexp)
        add_ffn(c, c->x, n);
    return st;
}

/* ---- the whole pass -------------------------------------------------------------------- */

static mvm_status cpu_eval(mvm_ctx *ctx, const mvm_fwd_batch *b, float *logits)
{
    struct cpu_fwd *c = ctx->state;
    const mvm_model *m = c->m;
    const mvm_hparams *hp = &m->hp;
    mvm_embed_tokens(m, b->tokens, b->n, c->x);
    for (uint32_t blk = 0; blk < hp->n_dense; blk++) {
        attention(c, &m->dense[blk], blk, b);
        dense_ffn(c, &m->dense[blk], b->n);
    }
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        attention(c, &m->layers[il], hp->n_dense + il, b);
        mvm_status st = moe(c, il, b);
        if (st != MVM_OK)
            return st;
    }
    for (uint32_t o = 0; o < b->n_out; o++)
        mvm_k_rmsnorm(c->xn + (size_t)o * hp->n_embd, c->x + (size_t)b->out[o] * hp->n_embd,
                      m->output_norm, hp->n_embd, hp->rms_eps);
    if (b->n_out)
        matmul(c, &m->output, c->xn, b->n_out, logits);
    return MVM_OK;
}

const struct mvm_fwd_backend mvm_fwd_cpu = {"cpu", cpu_create, cpu_destroy, cpu_eval, NULL,
                                            NULL, NULL};
