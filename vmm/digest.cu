/*
 * The device side of the page digest (vmm/digest.h), built to PTX and embedded in the cuda
 * backend, which loads it with cuModuleLoadData (vmm/cuda_digest.c).
 *
 *   mvm_digest_pages(mvm_digest_args a)   (the fields: vmm/digest.h)
 *     page i < n is chunk k = ids[i], the page_words words at base + k * page_words;
 *     answers == 0: digests[2k..2k+1] = its digest                  (after a load: a mark)
 *     else:         answers[i] = 1 if its digest is digests[2k..2k+1], else 0  (a check)
 *
 * One launch digests a whole batch of pages: a load's or an eviction's, so a batch costs
 * one launch, not one per page. blockIdx.x strides over the pages, blockIdx.y splits a
 * page among gridDim.y blocks. Each block adds its sums into the page's accumulator
 * work[3i..3i+2] (a, b, blocks done) with atomics, whose sums are exact and order-free
 * (modulo 2^64, like the host's); the page's last block takes the sums and leaves the
 * accumulator zero for the next launch. So work must be zero before the first launch, and
 * launches sharing a work area must not overlap (the cuda backend queues each area's
 * launches on its copy stream).
 */
#include <stdint.h>

#include "vmm/digest.h"

typedef unsigned long long ull;

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
    __syncthreads(); /* warp_* are reused by the next page */
}

extern "C" __global__ void __launch_bounds__(MVM_DIGEST_BLOCK)
    mvm_digest_pages(mvm_digest_args args)
{
    const uint64_t *base = (const uint64_t *)args.base, *ids = (const uint64_t *)args.ids;
    const uint64_t page_words = args.page_words, n = args.n;
    uint64_t *digests = (uint64_t *)args.digests, *work = (uint64_t *)args.work;
    uint64_t *answers = (uint64_t *)args.answers;
    __shared__ bool last;
    const uint64_t stride = (uint64_t)gridDim.y * MVM_DIGEST_BLOCK;
    for (uint64_t i = blockIdx.x; i < n; i += gridDim.x) {
        const uint64_t k = ids[i];
        const uint64_t *words = base + k * page_words;
        uint64_t a = 0, b = 0;
        for (uint64_t w = (uint64_t)blockIdx.y * MVM_DIGEST_BLOCK + threadIdx.x; w < page_words;
             w += stride) {
            uint64_t x = words[w];
            a += mvm_digest_lane_a(x, w);
            b += mvm_digest_lane_b(x, w);
        }
        block_sum(&a, &b);
        ull *acc = (ull *)work + 3 * i;
        if (threadIdx.x == 0) {
            atomicAdd(&acc[0], (ull)a);
            atomicAdd(&acc[1], (ull)b);
            __threadfence(); /* the sums land before the count says so */
            last = atomicAdd(&acc[2], 1ull) == gridDim.y - 1;
        }
        __syncthreads();
        if (last && threadIdx.x == 0) {
            __threadfence();
            a = atomicExch(&acc[0], 0ull); /* every block's sum, and zero for the next launch */
            b = atomicExch(&acc[1], 0ull);
            atomicExch(&acc[2], 0ull);
            if (answers) {
                answers[i] = a == digests[2 * k] && b == digests[2 * k + 1];
            } else {
                digests[2 * k] = a;
                digests[2 * k + 1] = b;
            }
        }
        __syncthreads(); /* `last` is rewritten for the next page */
    }
}
