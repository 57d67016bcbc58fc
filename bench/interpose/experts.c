/*
 * What expert slices save (docs/perf/interpose.md), on tests/fakecuda: an MoE decode loop
 * as transformers' eager experts run it. Each layer keeps its experts in one fused tensor,
 * written by one host-to-device copy; each token routes to top-k experts per layer, and a
 * kernel is handed each routed expert's address (base + e * expert bytes). Routing is
 * seeded: per layer a Zipf(skew) popularity over a shuffled expert order (skew 0: uniform),
 * and each slot keeps the previous token's expert with probability `reuse` (decode tokens
 * route alike).
 * bench/interpose/experts.sh runs it under LD_PRELOAD with MOEVM_PRELOAD_SLICES on and off
 * and reads the moves from MOEVM_REPORT; this prints what the kernels read where:
 *   {"tokens": T, "kernels": K, "device_bytes": D, "host_bytes": H, "seconds": S}
 * host_bytes are what kernels read from pages left at their host homes (over the bus on a
 * GPU). Every expert sum is checked, so a run that moves wrong data fails.
 * usage: bench_preload_experts [layers experts expert_mib top_k tokens reuse_pct seed skew]
 */
#include <cuda.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fakecuda.h"

#define MiB (1ull << 20)

static void must(CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "bench_preload_experts: %s failed (%d)\n", what, (int)r);
        exit(1);
    }
}

static uint32_t rng_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33);
}

static double skew = 1.0; /* the Zipf exponent: 0 routes uniformly */

/* An expert of `n` by Zipf(skew) rank, mapped through the layer's order. */
static int zipf_pick(uint64_t *s, const int *order, int n)
{
    double h = 0, u;
    for (int r = 1; r <= n; r++)
        h += pow(r, -skew);
    u = (double)rng_next(s) / 4294967296.0 * h;
    for (int r = 1; r <= n; r++) {
        u -= pow(r, -skew);
        if (u < 0)
            return order[r - 1];
    }
    return order[n - 1];
}

static int taken(const int *chosen, int k, int e)
{
    for (int i = 0; i < k; i++)
        if (chosen[i] == e)
            return 1;
    return 0;
}

static uint32_t word(int layer, int e, uint64_t i)
{
    return (uint32_t)(i * 2654435761u + (uint32_t)e * 40503u + (uint32_t)layer * 977u);
}

int main(int argc, char **argv)
{
    int layers = argc > 1 ? atoi(argv[1]) : 8, experts = argc > 2 ? atoi(argv[2]) : 8;
    uint64_t expert_bytes = (argc > 3 ? strtoull(argv[3], NULL, 10) : 4) * MiB;
    int top_k = argc > 4 ? atoi(argv[4]) : 2, tokens = argc > 5 ? atoi(argv[5]) : 32;
    int reuse = argc > 6 ? atoi(argv[6]) : 30;
    uint64_t seed = argc > 7 ? strtoull(argv[7], NULL, 10) : 1;
    skew = argc > 8 ? atof(argv[8]) : 1.0;
    if (layers < 1 || experts < 2 || expert_bytes == 0 || top_k < 1 || top_k > experts || top_k > 64 ||
        tokens < 1 || reuse < 0 || reuse > 100 || layers * experts > 4096 || skew < 0) {
        fprintf(stderr, "usage: bench_preload_experts [layers experts expert_mib top_k tokens "
                        "reuse_pct seed skew]\n");
        return 2;
    }
    uint64_t n = expert_bytes / 4;
    CUdevice dev;
    CUcontext ctx;
    must(cuInit(0), "cuInit");
    must(cuDeviceGet(&dev, 0), "cuDeviceGet");
    must(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    must(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    CUmodule mod;
    CUfunction sum;
    must(cuModuleLoadData(&mod, "fakecuda"), "cuModuleLoadData");
    must(cuModuleGetFunction(&sum, mod, "fk_sum_u32"), "cuModuleGetFunction");

    CUdeviceptr *w = malloc((size_t)layers * sizeof *w), out;
    uint64_t *expect = malloc((size_t)layers * experts * sizeof *expect);
    int *order = malloc((size_t)layers * experts * sizeof *order);
    int *prev = calloc((size_t)layers * top_k, sizeof *prev);
    uint32_t *host = malloc(experts * expert_bytes);
    if (!w || !expect || !order || !prev || !host) {
        fprintf(stderr, "bench_preload_experts: out of memory\n");
        return 1;
    }
    must(cuMemAlloc(&out, 4096), "cuMemAlloc");
    uint64_t s = seed;
    for (int l = 0; l < layers; l++) {
        must(cuMemAlloc(&w[l], experts * expert_bytes), "cuMemAlloc (a layer's experts)");
        for (int e = 0; e < experts; e++) {
            uint64_t t = 0;
            for (uint64_t i = 0; i < n; i++)
                t += host[e * n + i] = word(l, e, i);
            expect[l * experts + e] = t;
            order[l * experts + e] = e;
        }
        for (int e = experts - 1; e > 0; e--) { /* each layer its own popular experts */
            int j = (int)(rng_next(&s) % (uint32_t)(e + 1)), t = order[l * experts + e];
            order[l * experts + e] = order[l * experts + j];
            order[l * experts + j] = t;
        }
        must(cuMemcpyHtoD(w[l], host, experts * expert_bytes), "cuMemcpyHtoD");
    }
    free(host);

    fakecuda_reset_counters();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long kernels = 0, wrong = 0;
    for (int tok = 0; tok < tokens; tok++)
        for (int l = 0; l < layers; l++) {
            int chosen[64];
            for (int k = 0; k < top_k; k++) {
                int *p = &prev[l * top_k + k];
                int e = tok > 0 && (int)(rng_next(&s) % 100) < reuse
                            ? *p
                            : zipf_pick(&s, order + l * experts, experts);
                while (taken(chosen, k, e)) /* a token's experts are distinct */
                    e = zipf_pick(&s, order + l * experts, experts);
                chosen[k] = *p = e;
            }
            for (int i = 0; i < top_k; i++) {
                CUdeviceptr in = w[l] + (CUdeviceptr)chosen[i] * expert_bytes;
                void *params[] = {&out, &in, &n};
                must(cuLaunchKernel(sum, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL),
                     "cuLaunchKernel");
                uint64_t got = 0;
                must(cuMemcpyDtoH(&got, out, sizeof got), "cuMemcpyDtoH");
                wrong += got != expect[l * experts + chosen[i]];
                kernels++;
            }
        }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (wrong) {
        fprintf(stderr, "bench_preload_experts: %ld of %ld expert sums wrong\n", wrong, kernels);
        return 1;
    }
    printf("{\"tokens\": %d, \"kernels\": %ld, \"device_bytes\": %llu, \"host_bytes\": %llu, "
           "\"seconds\": %.3f}\n",
           tokens, kernels, fakecuda_kernel_bytes(0), fakecuda_kernel_bytes(1),
           (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
    return 0;
}
