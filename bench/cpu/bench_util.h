/* What the CPU benchmarks share besides the memory read loop (membw.h): their clocks and the
 * random numbers they fill weights and activations with. */
#ifndef MVM_BENCH_CPU_BENCH_UTIL_H
#define MVM_BENCH_CPU_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/kernels.h"

static inline double mvm_bench_clock_s(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The calling thread's CPU time: on a shared machine other processes then count only
 * through the memory bandwidth they take, not through preemption (the kernel benchmarks). */
static inline double mvm_bench_thread_s(void)
{
    return mvm_bench_clock_s(CLOCK_THREAD_CPUTIME_ID);
}

/* Wall time, for runs of several threads (the engine benchmarks). */
static inline double mvm_bench_wall_s(void)
{
    return mvm_bench_clock_s(CLOCK_MONOTONIC);
}

/* The SIMD level whose name (mvm_k_simd_name's) is the len bytes at p, or -1. */
static inline int mvm_bench_simd_named(const char *p, size_t len)
{
    for (int lv = 0; lv < MVM_SIMD_COUNT; lv++)
        if (strlen(mvm_k_simd_name((enum mvm_simd)lv)) == len &&
            strncmp(p, mvm_k_simd_name((enum mvm_simd)lv), len) == 0)
            return lv;
    return -1;
}

/* The kernels' level that MOEVM_CPU_SIMD names (as the engine reads it: unset or auto, the
 * best), so that one benchmark binary measures each level of the machine: 0, or -1 with a
 * line on stderr when the name is no level or this CPU lacks it. */
static inline int mvm_bench_simd_from_env(const char *prog)
{
    const char *v = getenv("MOEVM_CPU_SIMD");
    if (!v || !*v || strcmp(v, "auto") == 0)
        return 0;
    const int lv = mvm_bench_simd_named(v, strlen(v));
    if (lv >= 0 && mvm_k_simd_use((enum mvm_simd)lv) == 0)
        return 0;
    fprintf(stderr, "%s: MOEVM_CPU_SIMD=%s: not a SIMD level this CPU has (best: %s)\n", prog,
            v, mvm_k_simd_name(mvm_k_simd_detect()));
    return -1;
}

/* Uniform in [-1, 1) from a xorshift64 state (the same sequence in every benchmark). */
static inline float mvm_bench_frand(uint64_t *state)
{
    uint64_t r = *state;
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    *state = r;
    return (float)(r >> 40) / (float)(1 << 23) - 1.0f;
}

/* n_rows rows of n_row random weights (within ±0.05, the scale of real ones) quantized to
 * type t, one after another at w. */
static inline void mvm_bench_fill_rows(enum mvm_wtype t, void *w, size_t n_rows, size_t n_row,
                                       uint64_t *state)
{
    float *row = malloc(n_row * sizeof *row);
    const size_t rb = mvm_k_row_bytes(t, n_row);
    for (size_t r = 0; r < n_rows; r++) {
        for (size_t i = 0; i < n_row; i++)
            row[i] = mvm_bench_frand(state) * 0.05f;
        mvm_k_quantize(t, row, (uint8_t *)w + r * rb, n_row);
    }
    free(row);
}

#endif
