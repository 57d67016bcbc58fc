/*
 * A CPU stand-in for the few CUDA device features moevm's kernels use (vmm/digest.cu,
 * the .cu files of kernels/cuda), so that their logic (which data a block and a thread take, the
 * reductions, the hand-offs between blocks) runs in a test on machines without a GPU
 * (tests/test_digest_kernel.cc and tests/test_cuda_kernels.cc include the .cu files after
 * this header).
 *
 * One block runs at a time, each of its threads a pthread (the same threads serve every
 * block of a launch, one after another): __shared__ variables are then
 * statics, __syncthreads a barrier of the block, a warp shuffle a slot array between two
 * barriers of the warp, and atomics GCC's. Blocks run in an order the caller picks, so a
 * test can try several, as a GPU may run them in any. It checks the logic, not the PTX nor
 * the memory model of a real device: bench/gpu/vmm_costs section 6 does that on a GPU.
 */
#ifndef MVM_TESTS_CUDA_EMU_H
#define MVM_TESTS_CUDA_EMU_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <functional>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static

struct dim3 {
    unsigned x, y, z;
};

static thread_local dim3 threadIdx, blockIdx;
static dim3 gridDim, blockDim;

enum { EMU_MAX_THREADS = 1024, EMU_WARP = 32 };

static pthread_barrier_t emu_block_barrier;
static pthread_barrier_t emu_warp_barrier[EMU_MAX_THREADS / EMU_WARP];
static uint64_t emu_warp_slot[EMU_MAX_THREADS];

static inline void __syncthreads(void) { pthread_barrier_wait(&emu_block_barrier); }

static inline void __threadfence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

/* A warp shuffle: every lane of the warp must call it, as the full mask says; a lane gets
 * lane `from`'s value, or its own when from is outside the warp. */
template <typename V> static inline V emu_shuffle(V v, unsigned from)
{
    static_assert(sizeof(V) <= sizeof(uint64_t), "a shuffle moves at most 8 bytes");
    unsigned warp = threadIdx.x / EMU_WARP;
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    emu_warp_slot[threadIdx.x] = bits;
    pthread_barrier_wait(&emu_warp_barrier[warp]);
    uint64_t r = from < EMU_WARP ? emu_warp_slot[warp * EMU_WARP + from] : bits;
    pthread_barrier_wait(&emu_warp_barrier[warp]);
    V out;
    memcpy(&out, &r, sizeof out);
    return out;
}

template <typename V> static inline V __shfl_down_sync(unsigned mask, V v, int delta)
{
    (void)mask;
    return emu_shuffle(v, threadIdx.x % EMU_WARP + (unsigned)delta);
}

template <typename V> static inline V __shfl_xor_sync(unsigned mask, V v, int lane_mask)
{
    (void)mask;
    return emu_shuffle(v, (threadIdx.x % EMU_WARP) ^ (unsigned)lane_mask);
}

static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v)
{
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}

static inline unsigned long long atomicExch(unsigned long long *p, unsigned long long v)
{
    return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);
}

/* A thread of the block, the same through every block of a launch. */
struct emu_thread {
    const std::function<void()> *body;
    const std::vector<unsigned> *order;
    unsigned x;
};

static void *emu_thread_main(void *arg)
{
    emu_thread *t = (emu_thread *)arg;
    threadIdx = dim3{t->x, 0, 0};
    for (unsigned b : *t->order) {
        blockIdx = dim3{b % gridDim.x, b / gridDim.x, 0};
        (*t->body)();
        __syncthreads(); /* the block ends: its __shared__ statics pass to the next */
    }
    return NULL;
}

/* Runs `body` (a kernel call) as a grid of grid.x * grid.y blocks of `threads` threads (a
 * multiple of the warp, at most EMU_MAX_THREADS), the blocks one after another in the order
 * order[] gives (indices x + y * grid.x, each once), or in index order when it is empty.
 * Aborts when threads cannot be made: a half-started block would wait at its barrier
 * forever. */
static void emu_launch(dim3 grid, unsigned threads, std::vector<unsigned> order,
                       const std::function<void()> &body)
{
    if (!threads || threads > EMU_MAX_THREADS || threads % EMU_WARP)
        abort();
    gridDim = grid;
    blockDim = dim3{threads, 1, 1};
    if (order.empty())
        for (unsigned i = 0; i < grid.x * grid.y; i++)
            order.push_back(i);
    pthread_barrier_init(&emu_block_barrier, NULL, threads);
    for (unsigned w = 0; w < threads / EMU_WARP; w++)
        pthread_barrier_init(&emu_warp_barrier[w], NULL, EMU_WARP);
    std::vector<emu_thread> ts(threads);
    std::vector<pthread_t> ids(threads);
    for (unsigned t = 0; t < threads; t++) {
        ts[t] = emu_thread{&body, &order, t};
        if (pthread_create(&ids[t], NULL, emu_thread_main, &ts[t]) != 0)
            abort();
    }
    for (unsigned t = 0; t < threads; t++)
        pthread_join(ids[t], NULL);
    for (unsigned w = 0; w < threads / EMU_WARP; w++)
        pthread_barrier_destroy(&emu_warp_barrier[w]);
    pthread_barrier_destroy(&emu_block_barrier);
}

#endif
