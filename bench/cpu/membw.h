/* Reading memory as fast as this CPU can, for the bandwidth the benchmarks compare with:
 * both bench_cpu_kernels and bench_cpu_engine measure DRAM read bandwidth with this loop. */
#ifndef MVM_BENCH_CPU_MEMBW_H
#define MVM_BENCH_CPU_MEMBW_H

#include <stddef.h>
#include <string.h>

typedef float v16f __attribute__((vector_size(64)));

/* On x86 one clone per ISA, picked at load; elsewhere the baseline's vectors (NEON on
 * aarch64, whose 128 bits are the widest every core has). */
#if defined(__x86_64__) || defined(__i386__)
#define MVM_BENCH_WIDEST __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MVM_BENCH_WIDEST
#endif

/* The sum of n floats (n % 64 == 0) in the widest vectors the CPU has (MVM_BENCH_WIDEST): a
 * plain read loop, optionally with the software prefetch the kernels use. Plain C at -O2
 * would not vectorize a float sum, and a narrow loop reads measurably slower. */
MVM_BENCH_WIDEST static float mvm_bench_sum_floats(const float *a, size_t n, int prefetch)
{
    v16f s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0}, x;
    for (size_t i = 0; i < n; i += 64) {
        if (prefetch)
            __builtin_prefetch(a + i + 1024);
        memcpy(&x, a + i, sizeof x), s0 += x;
        memcpy(&x, a + i + 16, sizeof x), s1 += x;
        memcpy(&x, a + i + 32, sizeof x), s2 += x;
        memcpy(&x, a + i + 48, sizeof x), s3 += x;
    }
    s0 += s1 + s2 + s3;
    float s = 0;
    for (int k = 0; k < 16; k++)
        s += s0[k];
    return s;
}

#endif
