/*
 * The device side of the page digest (vmm/digest.h), built to PTX and embedded in the cuda
 * backend, which loads it with cuModuleLoadData (vmm/cuda_digest.c).
 *
 *   mvm_digest(words, n, out, expect)
 *     expect == NULL: out[0..1] = the digest of words[0..n)
 *     else:           out[0] = 1 if that digest equals expect[0..1], else 0
 *
 * Each block sums its share of the words, then the last block to finish (a counter in
 * module memory, reset by that block) adds the blocks' sums: one launch, no memset, and
 * the answer lands in device memory in stream order. Launches of one module must not
 * overlap (the cuda backend queues them all on its copy stream).
 */
#include <stdint.h>

#include "vmm/digest.h"

__device__ uint64_t mvm_digest_partial[2 * MVM_DIGEST_MAX_GRID];
__device__ unsigned int mvm_digest_finished;

/* The block's sums of a and b, in thread 0. */
static __device__ void block_sum(uint64_t *a, uint64_t *b)
{
    __shared__ uint64_t warp_a[MVM_DIGEST_BLOCK / 32], warp_b[MVM_DIGEST_BLOCK / 32];
    for (int o = 16; o > 0; o >>= 1) {
        *a += __shfl_down_sync(0xffffffffu, *a, o);
        *b += __shfl_down_sync(0xffffffffu, *b, o);
    }
    if ((threadIdx.x & 31) == 0) {
        warp_a[threadIdx.x >> 5] = *a;
        warp_b[threadIdx.x >> 5] = *b;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < MVM_DIGEST_BLOCK / 32; w++) {
            *a += warp_a[w];
            *b += warp_b[w];
        }
    }
    __syncthreads(); /* warp_* may be reused by a second call */
}

extern "C" __global__ void __launch_bounds__(MVM_DIGEST_BLOCK)
    mvm_digest(const uint64_t *words, uint64_t n, uint64_t *out, const uint64_t *expect)
{
    __shared__ bool last;
    uint64_t a = 0, b = 0;
    uint64_t stride = (uint64_t)gridDim.x * MVM_DIGEST_BLOCK;
    for (uint64_t i = (uint64_t)blockIdx.x * MVM_DIGEST_BLOCK + threadIdx.x; i < n; i += stride) {
        uint64_t w = words[i];
        a += mvm_digest_lane_a(w, i);
        b += mvm_digest_lane_b(w, i);
    }
    block_sum(&a, &b);
    if (threadIdx.x == 0) {
        mvm_digest_partial[2 * blockIdx.x] = a;
        mvm_digest_partial[2 * blockIdx.x + 1] = b;
        __threadfence(); /* the sums are visible before the counter says so */
        last = atomicAdd(&mvm_digest_finished, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    const volatile uint64_t *part = mvm_digest_partial;
    a = b = 0;
    for (unsigned i = threadIdx.x; i < gridDim.x; i += MVM_DIGEST_BLOCK) {
        a += part[2 * i];
        b += part[2 * i + 1];
    }
    block_sum(&a, &b);
    if (threadIdx.x == 0) {
        if (expect) {
            out[0] = a == expect[0] && b == expect[1];
        } else {
            out[0] = a;
            out[1] = b;
        }
        mvm_digest_finished = 0;
    }
}
