/* What the thread pool's run costs after the caller has been busy elsewhere for a while
 * (engine/compute/pool.c: its workers spin, then sleep): the gap a CPU decode's sampler
 * and output leave between tokens, or a GPU layer's device work between two steps of
 * experts on the CPU. One empty mvm_pool_run after each gap, the caller spinning through
 * the gap as a busy host does; the median and 90th percentile of 200.
 *   bench_pool_wake [threads (2)]          (the pool pinned to cores 0 .. threads-1) */
#include <stdio.h>
#include <stdlib.h>

#include "bench/cpu/bench_util.h"
#include "engine/compute/pool.h"

#define RUNS 200

static void nothing(void *ctx, int t, int n) { (void)ctx, (void)t, (void)n; }

static int by_value(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const int n = argc > 1 ? atoi(argv[1]) : 2;
    mvm_topo topo = {.n_cores = n};
    CPU_ZERO(&topo.cores);
    for (int c = 0; c < n && c < CPU_SETSIZE; c++)
        CPU_SET(c, &topo.cores);
    mvm_pool *p;
    if (n < 1 || mvm_pool_create(n, &topo, &p) != MVM_OK) {
        fprintf(stderr, "bench_pool_wake: cannot make a pool of %d threads\n", n);
        return 1;
    }
    static const double gaps_us[] = {0, 20, 100, 500, 2000, 10000};
    printf("pool of %d threads, pinned; an empty run after the caller's gap:\n", n);
    for (size_t g = 0; g < sizeof gaps_us / sizeof *gaps_us; g++) {
        double run[RUNS];
        for (int i = 0; i < RUNS; i++) {
            const double t = mvm_bench_wall_s();
            while (mvm_bench_wall_s() - t < gaps_us[g] * 1e-6)
                ;
            const double t0 = mvm_bench_wall_s();
            mvm_pool_run(p, nothing, NULL);
            run[i] = mvm_bench_wall_s() - t0;
        }
        qsort(run, RUNS, sizeof *run, by_value);
        printf("gap %6.0f us: run median %6.1f us, p90 %6.1f us\n", gaps_us[g],
               run[RUNS / 2] * 1e6, run[RUNS * 9 / 10] * 1e6);
        printf("RESULT bench=pool_wake threads=%d gap_us=%.0f median_us=%.2f p90_us=%.2f\n", n,
               gaps_us[g], run[RUNS / 2] * 1e6, run[RUNS * 9 / 10] * 1e6);
    }
    mvm_pool_destroy(p);
    return 0;
}
