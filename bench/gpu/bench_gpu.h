/*
 * What the device kernels' benchmarks (bench/gpu/attention.c, experts.c, prompt_experts.c)
 * share: the device opened, device buffers filled on the host, and the engine's clock
 * (mvm_now_s).
 */
#ifndef MVM_BENCH_GPU_BENCH_GPU_H
#define MVM_BENCH_GPU_BENCH_GPU_H

#include <stdio.h>
#include <stdlib.h>

#include "engine/compute/clock.h"
#include "engine/compute/gpu.h"
#include "vmm/error.h"

/* Device 0 through the driver library at `driver` (MOEVM_CUDA_LIBRARY), or NULL with the
 * reason on stderr after the program's name. */
static inline mvm_gpu *bench_open(const char *prog, const char *driver)
{
    setenv("MOEVM_CUDA_LIBRARY", driver, 1);
    mvm_gpu *g;
    if (mvm_gpu_open(0, 0, &g) == MVM_OK)
        return g;
    fprintf(stderr, "%s: opening the device: %s\n", prog, mvm_last_error());
    return NULL;
}

/* Device memory of `bytes` bytes as fill(host, bytes) writes them on the host. */
static inline mvm_status bench_filled(mvm_gpu *g, size_t bytes, void (*fill)(void *, size_t),
                                      mvm_dptr *out)
{
    void *h = malloc(bytes);
    if (!h)
        return mvm_fail(MVM_ERR_NOMEM, "%zu bytes of host memory", bytes);
    fill(h, bytes);
    mvm_status st = mvm_gpu_alloc(g, bytes, out);
    if (st == MVM_OK && (st = mvm_gpu_upload(g, *out, h, bytes)) != MVM_OK)
        mvm_gpu_free(g, *out);
    free(h);
    return st;
}

#endif
