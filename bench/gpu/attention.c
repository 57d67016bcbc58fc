/*
 * bench_gpu_attention: the device attention (kernels/cuda/ops.cu, launched as the engine
 * launches it: mvm_gpu_attention, the splits then their combination) on real model shapes
 * and long contexts; where the tensor cores' kernel (kernels/cuda/attention_mma.cu) takes the
 * shape and the device has it, both that ("mma") and ops.cu's kernel ("cores"), so that one
 * run says which MOEVM_ATTN_MMA should choose. A decoded token reads every key and value row of the context once per
 * group of heads, so the figure of merit is those bytes over the time, against the GPU's
 * memory bandwidth; a 32-token batch (prefill's) is timed too, its bytes counted per query.
 * The grouped-query shapes run over a Q8_0 cache too (llama.cpp's -ctk q8_0 -ctv q8_0: 53%
 * of F16's bytes, ops.cu's block reader), which the device takes for them alone.
 *
 *   bench_gpu_attention path/to/libcuda.so.1 [max positions (default 131072)] [reps (20)]
 *
 * Over tests/fakecuda (FAKECUDA_KERNELS set) it runs the same launches emulated: CI runs it
 * so, small, to keep it working; only the times on a GPU mean anything.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/gpu/bench_gpu.h"

struct shape {
    const char *name;
    uint32_t n_head, n_head_kv, head_dim, mla; /* mla: keys and values are the same rows */
};

static const struct shape shapes[] = {
    {"Qwen3-30B-A3B (32/4 x 128)", 32, 4, 128, 0},
    {"gpt-oss-120b (64/8 x 64)", 64, 8, 64, 0},
    {"DeepSeek-V3 MLA (128/1 x 576)", 128, 1, 576, 1},
    {"DeepSeek-V2-Lite MLA (16/1 x 576)", 16, 1, 576, 1},
};

static int fail(const char *what)
{
    fprintf(stderr, "bench_gpu_attention: %s: %s\n", what, mvm_last_error());
    return 1;
}

/* Small F16 values (0x3000: 0.125), or F32 ones. */
static void fill_f16(void *h, size_t bytes)
{
    for (size_t i = 0; i < bytes / 2; i++)
        ((uint16_t *)h)[i] = (uint16_t)(0x3000 + (i * 7919 % 512));
}

static void fill_f32(void *h, size_t bytes)
{
    for (size_t i = 0; i < bytes / 4; i++)
        ((float *)h)[i] = (float)(i * 7919 % 1000) * 1e-3f - 0.5f;
}

/* Q8_0 blocks of scale 2^-7 (0x2000) and quants -64..63. */
static void fill_q8_0(void *h, size_t bytes)
{
    for (size_t b = 0; b < bytes / sizeof(mvm_block_q8_0); b++) {
        mvm_block_q8_0 *blk = (mvm_block_q8_0 *)h + b;
        blk->d = 0x2000;
        for (int j = 0; j < MVM_QBLOCK; j++)
            blk->qs[j] = (int8_t)((b * 7919 + (size_t)j * 31) % 128 - 64);
    }
}

static mvm_status filled(mvm_gpu *g, size_t bytes, enum mvm_wtype t, mvm_dptr *out)
{
    return bench_filled(g, bytes, t == MVM_W_Q8_0 ? fill_q8_0 : t == MVM_W_F16 ? fill_f16
                                                                              : fill_f32, out);
}

/* Seconds per call of mvm_gpu_attention_on(a, mma), the best of reps after one warm-up. */
static double time_attention(mvm_gpu *g, const mvm_g_attention_args *a, int mma, int reps,
                             mvm_status *st)
{
    double best = 1e30;
    for (int r = -1; r < reps && *st == MVM_OK; r++) {
        const double t0 = mvm_now_s();
        *st = mvm_gpu_attention_on(g, 0, a, mma);
        if (*st == MVM_OK)
            *st = mvm_gpu_sync(g);
        if (r >= 0 && mvm_now_s() - t0 < best)
            best = mvm_now_s() - t0;
    }
    return best;
}

static int run_shape(mvm_gpu *g, const struct shape *s, enum mvm_wtype kv, uint32_t max_pos,
                     int reps)
{
    const uint32_t batch = 32, kv_dim = s->n_head_kv * s->head_dim;
    const uint32_t q_dim = s->n_head * s->head_dim;
    const size_t row = mvm_k_row_bytes(kv, kv_dim), rows = (size_t)max_pos * row;
    mvm_dptr q, kc, vc, out, part;
    if (filled(g, (size_t)batch * q_dim * 4, MVM_W_F32, &q) != MVM_OK ||
        filled(g, rows, kv, &kc) != MVM_OK ||
        (s->mla ? (vc = kc, MVM_OK) : filled(g, rows, kv, &vc)) != MVM_OK ||
        mvm_gpu_alloc(g, (size_t)batch * q_dim * 4, &out) != MVM_OK ||
        mvm_gpu_alloc(g, mvm_g_attention_part_bytes(batch, s->n_head, s->n_head_kv,
                                                    s->head_dim), &part) != MVM_OK)
        return fail(s->name);
    printf("\n%s, %s cache\n\n| positions | queries | kernel | splits | us | KV GB/s |\n"
           "|---:|---:|---|---:|---:|---:|\n", s->name, kv == MVM_W_Q8_0 ? "Q8_0" : "F16");
    /* 512: a short chat's decode, where a split is few tiles and the launch few blocks */
    static const uint32_t positions[] = {512, 4096, 32768, 131072};
    mvm_status st = MVM_OK;
    for (size_t p = 0; p < sizeof positions / sizeof *positions && st == MVM_OK; p++) {
        const uint32_t n = positions[p] < max_pos ? positions[p] : max_pos;
        for (uint32_t n_tok = 1; n_tok <= batch && st == MVM_OK; n_tok *= batch) {
            mvm_g_attention_args a = {.q = q, .kc = kc, .vc = vc, .out = out, .part = part,
                                      .n_tok = n_tok, .pos0 = n - n_tok, .n_head = s->n_head,
                                      .n_head_kv = s->n_head_kv, .head_dim = s->head_dim,
                                      .n_ctx = max_pos, .kv_type = kv,
                                      .scale = 0.0884f}; /* the values do not matter */
            /* each query's rows, read once per unit of heads: keys and values (MLA: the same
             * rows); a batch's queries read them again, mostly from L2 */
            const double bytes = (double)n_tok * n * row * (s->mla ? 1 : 2);
            const int mma = mvm_g_attention_mma_takes(&a) &&
                            mvm_gpu_has(g, MVM_GK_ATTENTION_MMA, 0);
            for (int on = mma; on >= 0 && st == MVM_OK; on--) {
                const double t = time_attention(g, &a, on, reps, &st);
                a.mma = (uint32_t)on; /* the splits it ran in */
                if (st == MVM_OK)
                    printf("| %u | %u | %s | %u | %.1f | %.1f |\n", n, n_tok,
                           on ? "mma" : "cores", mvm_g_attention_splits(&a), t * 1e6,
                           bytes / t / 1e9);
            }
        }
        if (n == max_pos)
            break;
    }
    mvm_gpu_free(g, q), mvm_gpu_free(g, kc), mvm_gpu_free(g, out), mvm_gpu_free(g, part);
    if (!s->mla)
        mvm_gpu_free(g, vc);
    return st == MVM_OK ? 0 : fail(s->name);
}

int main(int argc, char **argv)
{
    const long max_pos = argc > 2 ? atol(argv[2]) : 131072, reps = argc > 3 ? atol(argv[3]) : 20;
    if (argc < 2 || max_pos < 64 || max_pos > (1l << 24) || reps < 1) {
        fprintf(stderr, "usage: bench_gpu_attention path/to/libcuda.so.1 [max positions "
                "64..16777216 (131072)] [reps >= 1 (20)]\n");
        return 2;
    }
    mvm_gpu *g = bench_open("bench_gpu_attention", argv[1]);
    if (!g)
        return 1;
    int rc = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes && rc == 0; i++)
        rc = run_shape(g, &shapes[i], MVM_W_F16, (uint32_t)max_pos, (int)reps);
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes && rc == 0; i++)
        if (!shapes[i].mla)
            rc = run_shape(g, &shapes[i], MVM_W_Q8_0, (uint32_t)max_pos, (int)reps);
    mvm_gpu_close(g);
    return rc;
}
