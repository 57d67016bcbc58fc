/*
 * The cost of a make-resident on the host backend, against a bare memcpy of the same bytes:
 * what the mechanism adds (queueing to the migration worker, the hand-off back, the remap
 * of each page with mmap(MAP_FIXED)) on top of the copy itself. Ratios are taken in one run
 * because this machine's absolute numbers are noisy. Then the hand-off alone: a 64 KiB load
 * after a gap, with the worker and the waiter sleeping at once or spinning first
 * (MOEVM_MOVE_SPIN), one RESULT line each.
 *
 *   bench_vmm_host [reps]      (default 30; prints a markdown table)
 *
 * The GPU counterpart, which is what the <= 1.1x target is about, is bench/gpu/vmm_costs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "moevm/moevm.h"

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int die(const char *what)
{
    fprintf(stderr, "bench_vmm_host: %s: %s\n", what, mvm_last_error());
    return 1;
}

/* One expert size: median make-resident time and median bare-copy time, interleaved so
 * both see the same machine state. */
static int measure(uint64_t mib, int reps)
{
    const uint32_t experts = 4;
    uint64_t bytes = mib << 20;
    mvm_space_desc d;
    if (mvm_space_desc_init(&d) != MVM_OK)
        return die("options");
    d.backend = MVM_BACKEND_HOST;
    d.n_layers = 1, d.n_experts = experts, d.expert_bytes = bytes;
    d.device_budget = bytes; /* one expert at a time: every make-resident really moves */
    mvm_space *sp;
    if (mvm_space_create(&d, &sp) != MVM_OK)
        return die("mvm_space_create");
    uint8_t *dst = malloc(bytes);
    if (!dst)
        return die("malloc");
    for (uint32_t e = 0; e < experts; e++) {
        uint8_t *h = mvm_expert_home(sp, 0, e);
        for (uint64_t i = 0; i < bytes; i++)
            h[i] = (uint8_t)(i * 131 + e * 7 + 1);
    }
    memset(dst, 1, bytes);
    double *mr = malloc(sizeof(double) * (size_t)reps), *cp = malloc(sizeof(double) * (size_t)reps);
    for (int r = -3; r < reps; r++) { /* three warm-up rounds fault in every page */
        uint32_t e = (uint32_t)(r + 3) % experts;
        double t0 = now_us();
        if (mvm_make_resident(sp, 0, e, MVM_ALL_PAGES) != MVM_OK)
            return die("mvm_make_resident");
        double t1 = now_us();
        memcpy(dst, mvm_expert_home(sp, 0, e), bytes);
        double t2 = now_us();
        if (mvm_evict(sp, 0, e, 0) != MVM_OK)
            return die("mvm_evict");
        if (r >= 0) {
            mr[r] = t1 - t0;
            cp[r] = t2 - t1;
        }
    }
    double m = median(mr, reps), c = median(cp, reps);
    printf("| %4llu MiB | %9.1f | %9.1f | %5.2fx | %6.2f |\n", (unsigned long long)mib, m, c,
           m / c, (double)bytes / c / 1e3);
    free(mr);
    free(cp);
    free(dst);
    mvm_space_destroy(sp);
    return 0;
}

/* Busy for us microseconds, as a host computing a step's routing between two requests. */
static void busy_us(double us)
{
    for (double t0 = now_us(); now_us() - t0 < us;)
        ;
}

/* A lone load of a 64 KiB expert after the caller has been busy for gap_us: the hand-off to
 * the migration worker and back with almost no copy in it, with the waiters spinning for
 * spin_us (MOEVM_MOVE_SPIN) before they sleep. Prints the median and 90th percentile. */
static int measure_handoff(int gap_us, int spin_us, int reps)
{
    char spin[16];
    snprintf(spin, sizeof spin, "%d", spin_us);
    setenv("MOEVM_MOVE_SPIN", spin, 1);
    const uint64_t bytes = 64 << 10;
    mvm_space_desc d;
    if (mvm_space_desc_init(&d) != MVM_OK)
        return die("options");
    d.backend = MVM_BACKEND_HOST;
    d.n_layers = 1, d.n_experts = 2, d.expert_bytes = bytes, d.page_size = bytes;
    d.device_budget = bytes;
    mvm_space *sp;
    if (mvm_space_create(&d, &sp) != MVM_OK)
        return die("mvm_space_create");
    double *t = malloc(sizeof(double) * (size_t)reps);
    if (!t)
        return die("malloc");
    for (int r = -3; r < reps; r++) {
        uint32_t e = (uint32_t)(r + 3) % 2;
        busy_us(gap_us);
        double t0 = now_us();
        if (mvm_make_resident(sp, 0, e, MVM_ALL_PAGES) != MVM_OK)
            return die("mvm_make_resident");
        if (r >= 0)
            t[r] = now_us() - t0;
        if (mvm_evict(sp, 0, e, 0) != MVM_OK)
            return die("mvm_evict");
    }
    double m = median(t, reps), p90 = t[reps * 9 / 10]; /* sorted by median */
    printf("| %5d | %5d | %8.1f | %8.1f |\n", gap_us, spin_us, m, p90);
    printf("RESULT bench=vmm_handoff gap_us=%d spin_us=%d median_us=%.1f p90_us=%.1f\n",
           gap_us, spin_us, m, p90);
    free(t);
    mvm_space_destroy(sp);
    return 0;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 30;
    if (reps < 5) {
        fprintf(stderr, "usage: bench_vmm_host [reps >= 5]\n");
        return 2;
    }
    printf("| expert | make-resident (us, median) | bare memcpy (us, median) | ratio | "
           "memcpy GB/s |\n|---|---|---|---|---|\n");
    const uint64_t sizes[] = {2, 8, 32, 128};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        if (measure(sizes[i], reps) != 0)
            return 1;
    printf("\n| gap (us) | spin (us) | 64 KiB load, median (us) | 90th percentile (us) |\n"
           "|---|---|---|---|\n");
    const int gaps[] = {0, 100, 500, 3000};
    for (size_t i = 0; i < sizeof gaps / sizeof *gaps; i++)
        for (int spin = 0; spin <= 2000; spin += 2000) /* one space at a time: none spins */
            if (measure_handoff(gaps[i], spin, reps) != 0) /* beside the one measured */
                return 1;
    return 0;
}
