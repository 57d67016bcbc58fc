/* What the CPU benchmarks share besides the memory read loop (membw.h): their clocks and the
 * random numbers they fill weights and activations with. */
#ifndef MVM_BENCH_CPU_BENCH_UTIL_H
#define MVM_BENCH_CPU_BENCH_UTIL_H

#include <stdint.h>
#include <time.h>

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

/* Uniform in [-1, 1) from a xorshift64 state (the same sequence in every benchmark). */
static inline float mvm_bench_frand(uint64_t *state)
{
    uint64_t r = *state;
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    *state = r;
    return (float)(r >> 40) / (float)(1 << 23) - 1.0f;
}

#endif
