/*
 * What the device kernels' benchmarks (bench/gpu/attention.c, bench/gpu/experts.c) share:
 * device buffers filled on the host, and the engine's clock (mvm_now_s).
 */
#ifndef MVM_BENCH_GPU_BENCH_GPU_H
#define MVM_BENCH_GPU_BENCH_GPU_H

#include <stdlib.h>

#include "engine/compute/clock.h"
#include "engine/compute/gpu.h"
#include "vmm/error.h"

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
