/*
 * Single-threaded bandwidth of the CPU kernels on weights far beyond the caches, against a
 * plain read of memory: decode is bound by how fast the weights stream in, so the ratio
 * kernel / read is the figure of merit (target >= 0.7 for Q8_0 and F16).
 *
 *   bench_cpu_kernels [reps [types]]   (reps default 5, best of reps; types a comma list such
 *                                      as q2_K,q3_K, default all; prints a markdown table)
 *
 * Times are the thread's CPU time, so that other processes on a shared machine count only
 * through the memory bandwidth they take, not through preemption.
 *
 * matvec: a 4096-wide weight of ~256 MiB (rows to fill). expert: experts of Qwen3-30B-A3B's
 * shape (n_embd 2048, n_ff 768), as many as fill ~256 MiB, each run over all its groups.
 * read: the sum of a 1 GiB float array. "in L2": matvec on the weight's first 1 MiB, 256 times, so
 * that the arithmetic is measured rather than the memory. "matmul": the same 1 MiB times 32
 * tokens' activations, 8 times, as prefill computes (the multi-token kernels share each
 * weight block's loading and unpacking among MVM_K_NT tokens), and "one by one" the same
 * product as a dot product per row and token (how matmul computed before them); their GB/s
 * count the weight bytes once per token, so "gain" is what the sharing buys.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/cpu/bench_util.h"
#include "bench/cpu/membw.h"
#include "kernels/cpu/kernels.h"

#define WEIGHT_BYTES (256ull << 20)
#define READ_BYTES (1ull << 30)
#define L2_BYTES (1ull << 20)
#define N_IN 4096
#define N_EMBD 2048
#define N_FF 768
#define N_TOK 32

/* 64-byte aligned, as the engine places weights: AVX-512 loads then never split lines. */
static void *alloc64(size_t bytes)
{
    return aligned_alloc(64, (bytes + 63) / 64 * 64);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static volatile float sink;

static double read_gbs(const float *a, int reps, int prefetch)
{
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t = mvm_bench_thread_s();
        sink = mvm_bench_sum_floats(a, READ_BYTES / sizeof *a, prefetch);
        t = mvm_bench_thread_s() - t;
        best = fmax(best, (double)READ_BYTES / t / 1e9);
    }
    return best;
}

/* GB/s of one matvec over the first `bytes` of w, `passes` times: all of w streams from DRAM;
 * 1 MiB repeated stays in L2 and measures the arithmetic instead (what prefill sees). */
static double matvec_gbs(enum mvm_wtype t, const void *w, size_t bytes, int passes,
                         const void *act, float *y)
{
    const size_t rb = mvm_k_row_bytes(t, N_IN), rows = bytes / rb;
    double s = mvm_bench_thread_s();
    for (int p = 0; p < passes; p++)
        mvm_k_matvec(t, w, rb, N_IN, act, y, 0, rows);
    s = mvm_bench_thread_s() - s;
    sink = y[rows / 2];
    return (double)(rows * rb) * passes / s / 1e9;
}

/* GB/s of one matmul of the first `bytes` of w by N_TOK tokens, `passes` times, counting the
 * weight bytes once per token (comparable with matvec_gbs); one_by_one: a dot product per
 * row and token instead, rows outside. */
static double matmul_gbs(enum mvm_wtype t, const void *w, size_t bytes, int passes,
                         const void *acts, float *y, int one_by_one)
{
    const size_t rb = mvm_k_row_bytes(t, N_IN), rows = bytes / rb;
    const size_t as = mvm_k_act_bytes(t, N_IN);
    double s = mvm_bench_thread_s();
    for (int p = 0; p < passes; p++) {
        if (!one_by_one) {
            mvm_k_matmul(t, w, rb, N_IN, acts, as, N_TOK, y, rows, 0, rows);
            continue;
        }
        for (size_t r = 0; r < rows; r++)
            for (size_t i = 0; i < N_TOK; i++)
                mvm_k_matvec(t, w, rb, N_IN, (const uint8_t *)acts + i * as, y + i * rows, r,
                             r + 1);
    }
    s = mvm_bench_thread_s() - s;
    sink = y[rows / 2];
    return (double)(rows * rb) * N_TOK * passes / s / 1e9;
}

/* GB/s of the FFN of each of the experts that fill w, over all their groups. */
static double expert_gbs(enum mvm_wtype t, const void *w, const void *act, float *out)
{
    const mvm_k_expert_fmt f = mvm_k_expert_uniform(t);
    const size_t groups = N_FF / mvm_k_expert_group_channels(f);
    const size_t eb = mvm_k_expert_group_bytes(f, N_EMBD) * groups;
    const size_t experts = WEIGHT_BYTES / eb;
    double s = mvm_bench_thread_s();
    for (size_t e = 0; e < experts; e++)
        mvm_k_expert_ffn(f, (const uint8_t *)w + e * eb, N_EMBD, act, 0.125f, out, 0, groups);
    s = mvm_bench_thread_s() - s;
    sink = out[7];
    return (double)(experts * eb) / s / 1e9;
}

/* Whether `name` is one of the comma-separated `list`. */
static int listed(const char *list, const char *name)
{
    const size_t n = strlen(name);
    for (const char *p = list; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (strncmp(p, name, n) == 0 && (p[n] == ',' || p[n] == '\0'))
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    const int reps = argc > 1 ? atoi(argv[1]) : 5;
    const char *only = argc > 2 ? argv[2] : NULL;
    void *w = alloc64(WEIGHT_BYTES);
    float *a = alloc64(READ_BYTES);
    /* the largest activations (F32, N_IN) and the most rows (the smallest row) of any type */
    size_t min_row = SIZE_MAX;
    for (int t = 0; t < MVM_W_COUNT; t++) {
        const size_t rb = mvm_k_row_bytes((enum mvm_wtype)t, N_IN);
        min_row = rb < min_row ? rb : min_row;
    }
    void *act = alloc64(N_IN * sizeof(float)), *act_ex = alloc64(N_EMBD * sizeof(float));
    void *acts = alloc64(N_TOK * N_IN * sizeof(float));
    float *y = malloc(WEIGHT_BYTES / min_row * sizeof *y);
    float *ym = malloc(L2_BYTES / min_row * N_TOK * sizeof *ym);
    float x[N_IN], out[N_EMBD] = {0};
    if (!w || !a || !act || !act_ex || !acts || !y || !ym || reps < 1) {
        fprintf(stderr, "usage: bench_cpu_kernels [reps >= 1 [types, e.g. q2_K,q3_K]]\n");
        return 1;
    }
    for (size_t i = 0; i < READ_BYTES / sizeof *a; i++)
        a[i] = 1.0f;
    const double rd = read_gbs(a, reps, 0), rd_pf = read_gbs(a, reps, 1);
    free(a);
    printf("read (sum of 1 GiB of floats, 1 thread): %.2f GB/s; with software prefetch: %.2f GB/s\n"
           "ratios below are to the plain read\n\n",
           rd, rd_pf);
    printf("| level | type | matvec GB/s | / read | expert GB/s | / read | matvec in L2 GB/s "
           "| x%d one by one | x%d matmul | gain |\n",
           N_TOK, N_TOK);
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < N_IN; i++)
        x[i] = mvm_bench_frand(&rng);
    for (int t = 0; t < MVM_W_COUNT; t++) {
        const enum mvm_wtype wt = (enum mvm_wtype)t;
        if (only && !listed(only, mvm_k_wtype_name(wt)))
            continue;
        /* One fill serves both shapes: it is a run of whole blocks from the start, and
         * matvec rows and expert groups are whole blocks too. */
        mvm_bench_fill_rows(wt, w, WEIGHT_BYTES / mvm_k_row_bytes(wt, N_IN), N_IN, &rng);
        mvm_k_prepare_act(wt, x, act, N_IN);
        mvm_k_prepare_act(wt, x, act_ex, N_EMBD);
        const size_t as = mvm_k_act_bytes(wt, N_IN);
        for (size_t i = 0; i < N_TOK; i++) {
            for (size_t j = 0; j < N_IN; j++)
                x[j] = mvm_bench_frand(&rng);
            mvm_k_prepare_act(wt, x, (uint8_t *)acts + i * as, N_IN);
        }
        /* The levels take turns within each rep, so that all see the same machine state. */
        double mv[MVM_SIMD_COUNT] = {0}, ex[MVM_SIMD_COUNT] = {0}, l2[MVM_SIMD_COUNT] = {0};
        double mm[MVM_SIMD_COUNT] = {0}, m1[MVM_SIMD_COUNT] = {0};
        for (int r = 0; r < reps; r++) {
            for (int lv = 0; lv < MVM_SIMD_COUNT; lv++) {
                if (mvm_k_simd_use((enum mvm_simd)lv) != 0)
                    continue;
                mv[lv] = fmax(mv[lv], matvec_gbs(wt, w, WEIGHT_BYTES, 1, act, y));
                ex[lv] = fmax(ex[lv], expert_gbs(wt, w, act_ex, out));
                l2[lv] = fmax(l2[lv], matvec_gbs(wt, w, L2_BYTES, 256, act, y));
                m1[lv] = fmax(m1[lv], matmul_gbs(wt, w, L2_BYTES, 8, acts, ym, 1));
                mm[lv] = fmax(mm[lv], matmul_gbs(wt, w, L2_BYTES, 8, acts, ym, 0));
            }
        }
        for (int lv = 0; lv < MVM_SIMD_COUNT; lv++) {
            if (!mvm_k_simd_has((enum mvm_simd)lv))
                continue;
            printf("| %s | %s | %.2f | %.2f | %.2f | %.2f | %.1f | %.1f | %.1f | %.2f |\n",
                   mvm_k_simd_name((enum mvm_simd)lv), mvm_k_wtype_name(wt), mv[lv],
                   mv[lv] / rd, ex[lv], ex[lv] / rd, l2[lv], m1[lv], mm[lv], mm[lv] / m1[lv]);
        }
        fflush(stdout);
    }
    free(w), free(act), free(act_ex), free(acts), free(y), free(ym);
    return 0;
}
