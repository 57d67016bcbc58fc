/*
 * bench_gpu_prompt_experts: a prompt's routed experts (one MoE layer of a 512-token batch)
 * on the device, by the integer kernels a step of several rows takes without the tensor
 * cores (kernels/cuda/expert.cu's up and down, 8 rows a weight read) and by the int8 tensor
 * cores' mmq kernels (kernels/cuda/mmq.cu, MOEVM_MMQ), launched as the engine launches them,
 * each timed against its arithmetic; then the batch's dense products (a layer's q, o, k and
 * v shapes) by the three ways the engine has: the integer kernels (matvec.cu's tiles), mmq's
 * (mvm_g_mmq_matmul, what MOEVM_MMQ's auto takes) and the F16 copy multiplied by cuBLAS
 * (the weights dequantized and the inputs converted, as forward_cuda_gemm.c does for the
 * types mmq does not take), the last where cuBLAS loads (MOEVM_CUBLAS_LIBRARY).
 *
 *   bench_gpu_prompt_experts path/to/libcuda.so.1 [reps (10)]
 *
 * The shapes' experts all active, the 512 tokens' top-k rows spread evenly over them (what
 * random routing gives on average: 64 rows an OLMoE-1B-7B expert, 32 a Qwen3-30B-A3B one);
 * Q8_0 weights, Q4_K_M's (Q4_K gate/up, Q6_K down), Q5_K_M's (Q5_K gate/up, Q6_K down)
 * and MXFP4 (gpt-oss's experts), of bytes 0x11 (their values do not matter). With a K down, up's timing includes the quantization of its floats to Q8_K. A prompt computes every expert's
 * rows once per layer, so a figure here times a layer's experts of pp512: llama.cpp's whole
 * pp512 batch of OLMoE-1B-7B takes ~14 ms of kernels on an H200 (docs/perf/engine.md), 16
 * such layers and its attention. Prints tables and one line a script reads per row:
 *   RESULT gpu_prompt_kernel shape=olmoe-1b-7b types=q8_0/q8_0 kernel=up_mmq us=120.5 tops=71.3
 *   RESULT gpu_prompt_dense rows=2048 cols=2048 type=q4_K kernel=mmq us=20.1 tops=213.7
 * Over tests/fakecuda (FAKECUDA_KERNELS set) the same launches run emulated: only the times
 * on a GPU mean anything.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/gpu/bench_gpu.h"
#include "kernels/cpu/kernels.h"

#define TOKENS 512

struct shape {
    const char *name;
    uint32_t n_embd, n_ff, n_expert, top_k;
};

static const struct shape shapes[] = {
    {"olmoe-1b-7b", 2048, 1024, 64, 8},
    {"qwen3-30b-a3b", 2048, 768, 128, 8},
};

/* gate/up and down */
static const enum mvm_wtype types[][2] = {
    {MVM_W_Q8_0, MVM_W_Q8_0}, {MVM_W_Q4_K, MVM_W_Q6_K}, {MVM_W_Q5_K, MVM_W_Q6_K},
    {MVM_W_MXFP4, MVM_W_MXFP4}};

static int fail(const char *what)
{
    fprintf(stderr, "bench_gpu_prompt_experts: %s: %s\n", what, mvm_last_error());
    return 1;
}

static void fill_11(void *h, size_t bytes) { memset(h, 0x11, bytes); }

/* The launches timed: up or down, by the integer kernels or the mmq ones. */
enum which { UP_TILED, DOWN_TILED, UP_MMQ, DOWN_MMQ, WHICH };
static const char *const names[WHICH] = {"up_tiled", "down_tiled", "up_mmq", "down_mmq"};

/* The launches of way w of what `args` describes (mvm_g_expert_args, struct dense). */
typedef mvm_status (*launch_fn)(mvm_gpu *g, const void *args, int w);

static mvm_status expert_launch(mvm_gpu *g, const void *args, int w)
{
    mvm_g_expert_args e = *(const mvm_g_expert_args *)args;
    e.mmq = w >= UP_MMQ;
    return w == UP_TILED || w == UP_MMQ ? mvm_gpu_experts_up(g, &e) : mvm_gpu_experts_down(g, &e);
}

/* Seconds a launch: reps queued back to back after a warm-up, waited for once. */
static double time_launches(mvm_gpu *g, launch_fn launch, const void *args, int w, int reps,
                            mvm_status *st)
{
    *st = launch(g, args, w);
    if (*st == MVM_OK)
        *st = mvm_gpu_sync(g);
    const double t0 = mvm_now_s();
    for (int i = 0; i < reps && *st == MVM_OK; i++)
        *st = launch(g, args, w);
    if (*st == MVM_OK)
        *st = mvm_gpu_sync(g);
    return (mvm_now_s() - t0) / reps;
}

/* The tables of the rows: off, cnt and the active list by expert, then row_tok. */
static mvm_status upload_tables(mvm_gpu *g, const struct shape *s, mvm_g_expert_args *a,
                                mvm_dptr *tables)
{
    const uint32_t E = s->n_expert, rows = TOKENS * s->top_k, per = rows / E;
    uint32_t *t = malloc(((size_t)3 * E + rows) * sizeof *t);
    if (!t)
        return mvm_fail(MVM_ERR_NOMEM, "the rows' tables");
    for (uint32_t e = 0; e < E; e++)
        t[e] = e * per, t[E + e] = per, t[2 * E + e] = e;
    for (uint32_t r = 0; r < rows; r++)
        t[3 * E + r] = r % TOKENS;
    const size_t bytes = ((size_t)3 * E + rows) * sizeof *t;
    mvm_status st = mvm_gpu_alloc(g, bytes, tables);
    if (st == MVM_OK)
        st = mvm_gpu_upload(g, *tables, t, bytes);
    free(t);
    a->off = *tables, a->cnt = *tables + E * 4, a->active = *tables + 2ull * E * 4;
    a->row_tok = *tables + 3ull * E * 4;
    return st;
}

static int run(mvm_gpu *g, const struct shape *s, const enum mvm_wtype *t, int reps)
{
    const mvm_k_expert_fmt f = {t[0], t[1], MVM_GLU_SILU, 0};
    const uint32_t G = (uint32_t)mvm_k_expert_group_channels(f), rows = TOKENS * s->top_k;
    const uint64_t stride = (s->n_ff / G * mvm_k_expert_group_bytes(f, s->n_embd) + 255) /
                            256 * 256;
    const size_t act = mvm_k_act_bytes(f.gate_up, s->n_embd);
    mvm_g_expert_args a = {.expert_stride = stride, .act_stride = act,
                           .h_stride = mvm_k_act_bytes(f.down, s->n_ff), .n_embd = s->n_embd,
                           .n_groups = s->n_ff / G, .n_active = s->n_expert,
                           .gate_up = f.gate_up, .down = f.down, .glu = f.glu};
    mvm_dptr tables = 0;
    mvm_status st = upload_tables(g, s, &a, &tables);
    if (st == MVM_OK)
        st = bench_filled(g, stride * s->n_expert, fill_11, &a.experts);
    if (st == MVM_OK)
        st = bench_filled(g, act * TOKENS, fill_11, &a.act);
    if (st == MVM_OK) /* the routing weights: 0x11111111, a tiny float */
        st = bench_filled(g, (size_t)rows * 4, fill_11, &a.row_w);
    if (st == MVM_OK)
        st = bench_filled(g, (size_t)rows * a.h_stride, fill_11, &a.h);
    if (st == MVM_OK) /* up's floats, before their Q8_K blocks (a K down) */
        st = mvm_gpu_alloc(g, (size_t)rows * s->n_ff * 4, &a.hf);
    if (st == MVM_OK)
        st = mvm_gpu_alloc(g, (size_t)rows * s->n_embd * 4, &a.out);
    const int mmq = mvm_gpu_has(g, MVM_GK_EXPERT_MMQ_UP, t[0]) &&
                    mvm_gpu_has(g, MVM_GK_EXPERT_MMQ_DOWN, t[1]);
    double secs[WHICH] = {0};
    for (int w = 0; w < WHICH && st == MVM_OK; w++)
        if (w < UP_MMQ || mmq)
            secs[w] = time_launches(g, expert_launch, &a, w, reps, &st);
    mvm_dptr bufs[] = {tables, a.experts, a.act, a.row_w, a.h, a.hf, a.out};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i])
            mvm_gpu_free(g, bufs[i]);
    if (st != MVM_OK)
        return fail(s->name);
    /* integer operations: gate and up, 2 n_ff x n_embd a row; down, n_embd x n_ff */
    const double ops[WHICH] = {4.0 * rows * s->n_ff * s->n_embd, 2.0 * rows * s->n_ff * s->n_embd,
                               4.0 * rows * s->n_ff * s->n_embd, 2.0 * rows * s->n_ff * s->n_embd};
    char tn[32];
    snprintf(tn, sizeof tn, "%s/%s", mvm_k_wtype_name(t[0]), mvm_k_wtype_name(t[1]));
    for (int w = 0; w < WHICH; w++) {
        if (w >= UP_MMQ && !mmq) {
            printf("| %s | %s | %s | (no mmq kernels: compute capability < 8.0) | |\n",
                   s->name, tn, names[w]);
            continue;
        }
        printf("| %s | %s | %s | %.1f | %.1f |\n", s->name, tn, names[w], secs[w] * 1e6,
               ops[w] / secs[w] / 1e12);
        fprintf(stderr, "RESULT gpu_prompt_kernel shape=%s types=%s kernel=%s us=%.2f "
                "tops=%.2f\n", s->name, tn, names[w], secs[w] * 1e6, ops[w] / secs[w] / 1e12);
    }
    return 0;
}

/* ---- a batch's dense products --------------------------------------------------------- */

/* A layer's q and o of Qwen3-30B-A3B (4096 x 2048, 2048 x 4096; OLMoE-1B-7B's are 2048 x
 * 2048), and its k and v (512 x 2048), in the types of Q8_0 and Q4_K_M files. */
static const uint32_t dense_shapes[][2] = {{2048, 2048}, {4096, 2048}, {2048, 4096}, {512, 2048}};
static const enum mvm_wtype dense_types[] = {MVM_W_Q8_0, MVM_W_Q4_K, MVM_W_Q6_K};

enum dense_way { DENSE_TILED, DENSE_MMQ, DENSE_CUBLAS, DENSE_WAYS };
static const char *const dense_names[DENSE_WAYS] = {"tiled", "mmq", "cublas"};

/* One dense product's buffers: matvec's arguments (the weights, the inputs in their
 * activation format, the outputs), the inputs as floats and cuBLAS's F16 copies. */
struct dense {
    mvm_g_matvec_args a;
    mvm_dptr x, w16, x16;
    enum mvm_wtype t;
};

static mvm_status dense_launch(mvm_gpu *g, const void *args, int w)
{
    const struct dense *d = args;
    const mvm_g_matvec_args *a = &d->a;
    if (w == DENSE_TILED)
        return mvm_gpu_matvec(g, d->t, a);
    if (w == DENSE_MMQ)
        return mvm_gpu_mmq_matmul(g, d->t, a);
    mvm_g_to_half_args h = {.x = d->x, .dst = d->x16, .x_stride = a->n_in,
                            .dst_stride = a->n_in, .n = a->n_in, .n_rows = a->n_tok};
    mvm_g_dequant_args q = {.w = a->w, .dst = d->w16, .row_bytes = a->row_bytes,
                            .dst_stride = a->n_in, .n_in = a->n_in, .n_rows = a->n_out,
                            .per = a->n_out};
    mvm_status st = mvm_gpu_to_half(g, 0, &h);
    if (st == MVM_OK)
        st = mvm_gpu_dequant(g, d->t, &q);
    return st == MVM_OK ? mvm_gpu_gemm(g, a->n_out, a->n_tok, a->n_in, d->w16, a->n_in, d->x16,
                                       a->n_in, a->y, a->n_out, 0.0f)
                        : st;
}

/* The inputs: small floats, finite in cuBLAS's F16 copy */
static void fill_small(void *h, size_t bytes)
{
    float *f = h;
    for (size_t i = 0; i < bytes / sizeof *f; i++)
        f[i] = (float)(i % 7) * 0.125f;
}

static int run_dense(mvm_gpu *g, const uint32_t *shape, enum mvm_wtype t, int cublas, int reps)
{
    const uint32_t rows = shape[0], cols = shape[1];
    struct dense d = {.t = t};
    mvm_g_matvec_args *a = &d.a;
    *a = (mvm_g_matvec_args){.row_bytes = mvm_k_row_bytes(t, cols),
                             .act_stride = mvm_k_act_bytes(t, cols), .y_stride = rows,
                             .n_in = cols, .n_out = rows, .n_tok = TOKENS, .n_head = 1,
                             .split = 1};
    mvm_status st = bench_filled(g, (size_t)rows * a->row_bytes, fill_11, &a->w);
    if (st == MVM_OK)
        st = bench_filled(g, (size_t)TOKENS * cols * 4, fill_small, &d.x);
    if (st == MVM_OK)
        st = mvm_gpu_alloc(g, (size_t)TOKENS * a->act_stride, &a->act);
    if (st == MVM_OK) {
        mvm_g_quantize_args q = {.x = d.x, .q = a->act, .x_stride = cols,
                                 .q_stride = a->act_stride, .n = cols, .n_rows = TOKENS,
                                 .type = t};
        st = mvm_gpu_quantize(g, 0, &q);
    }
    if (st == MVM_OK)
        st = mvm_gpu_alloc(g, (size_t)TOKENS * rows * 4, &a->y);
    if (st == MVM_OK && cublas)
        st = mvm_gpu_alloc(g, (size_t)rows * cols * 2, &d.w16);
    if (st == MVM_OK && cublas)
        st = mvm_gpu_alloc(g, (size_t)TOKENS * cols * 2, &d.x16);
    const int ran[DENSE_WAYS] = {1, mvm_gpu_has(g, MVM_GK_MMQ_MATMUL, t), cublas};
    double secs[DENSE_WAYS] = {0};
    for (int w = 0; w < DENSE_WAYS && st == MVM_OK; w++)
        if (ran[w])
            secs[w] = time_launches(g, dense_launch, &d, w, reps, &st);
    mvm_dptr bufs[] = {a->w, d.x, a->act, a->y, d.w16, d.x16};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i])
            mvm_gpu_free(g, bufs[i]);
    if (st != MVM_OK)
        return fail("a dense product");
    const double ops = 2.0 * TOKENS * rows * cols;
    for (int w = 0; w < DENSE_WAYS; w++) {
        if (!ran[w]) {
            printf("| %u x %u | %s | %s | (%s) | |\n", rows, cols, mvm_k_wtype_name(t),
                   dense_names[w], w == DENSE_MMQ ? "no mmq kernel here" : "no cuBLAS");
            continue;
        }
        printf("| %u x %u | %s | %s | %.1f | %.1f |\n", rows, cols, mvm_k_wtype_name(t),
               dense_names[w], secs[w] * 1e6, ops / secs[w] / 1e12);
        fprintf(stderr, "RESULT gpu_prompt_dense rows=%u cols=%u type=%s kernel=%s us=%.2f "
                "tops=%.2f\n", rows, cols, mvm_k_wtype_name(t), dense_names[w], secs[w] * 1e6,
                ops / secs[w] / 1e12);
    }
    return 0;
}

/* cuBLAS as the engine loads it (MOEVM_CUBLAS_LIBRARY, else the default names), with a
 * workspace of 32 MiB: 0 where it will not load (said on stderr). */
static int open_cublas(mvm_gpu *g, mvm_dptr *ws)
{
    const size_t bytes = 32u << 20;
    const char *lib = getenv("MOEVM_CUBLAS_LIBRARY");
    if (mvm_gpu_alloc(g, bytes, ws) != MVM_OK ||
        mvm_gpu_gemm_open(g, lib ? lib : "auto", *ws, bytes) != MVM_OK) {
        fprintf(stderr, "bench_gpu_prompt_experts: no cuBLAS (%s): its rows left out\n",
                mvm_last_error());
        return 0;
    }
    return 1;
}

int main(int argc, char **argv)
{
    const long reps = argc > 2 ? atol(argv[2]) : 10;
    if (argc < 2 || reps < 1 || reps > 100000) {
        fprintf(stderr, "usage: bench_gpu_prompt_experts path/to/libcuda.so.1 "
                        "[reps 1..100000 (10)]\n");
        return 2;
    }
    mvm_gpu *g = bench_open("bench_gpu_prompt_experts", argv[1]);
    if (!g)
        return 1;
    printf("| shape | gate-up/down | kernel | us (a layer of pp512) | TOPS |\n"
           "|---|---|---|---:|---:|\n");
    int rc = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes && rc == 0; i++)
        for (size_t j = 0; j < sizeof types / sizeof *types && rc == 0; j++)
            rc = run(g, &shapes[i], types[j], (int)reps);
    mvm_dptr ws = 0;
    const int cublas = rc == 0 && open_cublas(g, &ws);
    printf("\n| rows x cols (%d tokens) | type | way | us | TOPS |\n|---|---|---|---:|---:|\n",
           TOKENS);
    for (size_t i = 0; i < sizeof dense_shapes / sizeof *dense_shapes && rc == 0; i++)
        for (size_t j = 0; j < sizeof dense_types / sizeof *dense_types && rc == 0; j++)
            rc = run_dense(g, dense_shapes[i], dense_types[j], cublas, (int)reps);
    if (ws)
        mvm_gpu_free(g, ws);
    mvm_gpu_close(g);
    return rc;
}
