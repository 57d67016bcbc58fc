/*
 * A CPU stand-in for the few CUDA device features moevm's kernels use (vmm/digest.cu,
 * the .cu files of kernels/cuda), so that their logic (which data a block and a thread take, the
 * reductions, the hand-offs between blocks) runs in a test on machines without a GPU
 * (tests/test_digest_kernel.cc and tests/test_cuda_kernels.cc include the .cu files after
 * this header; tests/fakecuda/fake_engine_kernels.cc runs them behind the fake driver).
 *
 * One block runs at a time, each of its threads a fiber on the calling thread:
 * a fiber runs until it waits at a barrier, then the next one runs, so __syncthreads is a
 * barrier of the block's fibers, a warp shuffle a slot array and one barrier of the warp's,
 * __shared__ variables statics, and atomics GCC's. Fibers, not threads: a barrier of
 * 128 threads on a 2-core machine costs a futex storm, and the engine's device forward pass
 * (tests/test_forward_gpu.c) launches thousands of blocks. Blocks run in an order the
 * caller picks, so a test can try several, as a GPU may run them in any. A kernel that
 * spins on another thread of its block without a barrier would hang here (none does). It
 * checks the logic, not the PTX nor the memory model of a real device: bench/gpu/vmm_costs
 * section 6 does that on a GPU.
 */
#ifndef MVM_TESTS_CUDA_EMU_H
#define MVM_TESTS_CUDA_EMU_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if !defined(__x86_64__) || defined(EMU_UCONTEXT)
#define EMU_UCONTEXT 1
#include <ucontext.h>
#endif

#include <functional>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#endif

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static

struct dim3 {
    unsigned x, y, z;
};

static dim3 threadIdx, blockIdx; /* the running fiber's, set before it runs */
static dim3 gridDim, blockDim;

/* CUDA's 16- and 8-byte vectors, for the kernels' wide loads and stores. */
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};

struct alignas(8) uint2 {
    unsigned x, y;
};

static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w)
{
    return uint4{x, y, z, w};
}

/* __byte_perm: byte i of the result is byte s_i of the eight bytes x, y (x's low first),
 * s_i the low 3 bits of nibble i of s (libdevice's __nv_byte_perm) */
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s)
{
    const unsigned long long v = (unsigned long long)y << 32 | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++)
        r |= (unsigned)(v >> (8 * (s >> (4 * i) & 7)) & 0xFF) << (8 * i);
    return r;
}

/* __ldg: a load through the read-only cache, a plain load here */
template <typename T> static inline T __ldg(const T *p)
{
    return *p;
}

/* and its float one, for the wide loads */
struct alignas(16) float4 {
    float x, y, z, w;
};

enum { EMU_MAX_THREADS = 1024, EMU_WARP = 32, EMU_STACK = 64 << 10 };

/* Fiber contexts. emu_ctx_make prepares one that starts fn (which must never return) on a
 * stack; emu_ctx_switch saves the running context in `from` and resumes `to`. On x86-64 a
 * switch is a dozen instructions: the callee-saved registers pushed on the old stack, the
 * stack pointers exchanged. Not MXCSR nor the x87 control word, which the ABI has a
 * function preserve too: every fiber runs on the launching thread and no kernel changes
 * them, so they are that thread's throughout; saving and loading them stalled each switch
 * (perf put three quarters of its samples there; test_forward_gpu 5-15% faster without).
 * Elsewhere ucontext, whose every switch also sets the signal mask by a system call (on
 * x86-64 that took 40% of the emulator's time, in the kernel); EMU_UCONTEXT selects it on
 * x86-64 too, for its test. */
#if !defined(EMU_UCONTEXT)
struct emu_ctx {
    void *sp;
};
extern "C" void emu_ctx_switch_x86_64(void **save_sp, void *load_sp);
asm(".text\n"
    ".globl emu_ctx_switch_x86_64\n"
    ".hidden emu_ctx_switch_x86_64\n"
    ".type emu_ctx_switch_x86_64, @function\n"
    "emu_ctx_switch_x86_64:\n"
    "    pushq %rbp\n    pushq %rbx\n    pushq %r12\n    pushq %r13\n    pushq %r14\n"
    "    pushq %r15\n    movq %rsp, (%rdi)\n    movq %rsi, %rsp\n"
    "    popq %r15\n    popq %r14\n    popq %r13\n    popq %r12\n    popq %rbx\n"
    "    popq %rbp\n    ret\n"
    ".size emu_ctx_switch_x86_64, .-emu_ctx_switch_x86_64\n");

static void emu_ctx_switch(emu_ctx *from, emu_ctx *to)
{
    emu_ctx_switch_x86_64(&from->sp, to->sp);
}

static void emu_ctx_make(emu_ctx *c, char *stack, size_t size, void (*fn)(void))
{
    /* What a switch pops: six registers, then fn as the return address, entered with the
     * stack as a call leaves it (16-byte aligned + 8). */
    void **sp = (void **)(((uintptr_t)stack + size) & ~(uintptr_t)15);
    *--sp = NULL; /* fn's own return address: it never returns */
    *--sp = (void *)fn;
    for (int i = 0; i < 6; i++)
        *--sp = NULL;
    c->sp = sp;
}
#else
typedef ucontext_t emu_ctx;

static void emu_ctx_switch(emu_ctx *from, emu_ctx *to) { swapcontext(from, to); }

static void emu_ctx_make(emu_ctx *c, char *stack, size_t size, void (*fn)(void))
{
    getcontext(c);
    c->uc_stack.ss_sp = stack;
    c->uc_stack.ss_size = size;
    c->uc_link = NULL;
    makecontext(c, fn, 0);
}
#endif

/* A thread of the block, the same through every block of a launch. */
struct emu_fiber {
    emu_ctx ctx;
    char *stack;
    dim3 block;
    bool done;
};

static emu_fiber emu_fibers[EMU_MAX_THREADS];
static emu_ctx emu_main;                /* the launching thread, which schedules the fibers */
static const std::function<void()> *emu_body;
static const std::vector<unsigned> *emu_order;
#ifdef EMU_ASAN
static const void *emu_main_stack;
static size_t emu_main_stack_size;
#endif

#ifdef EMU_ASAN
static bool emu_from_main; /* the switch in flight left the scheduler's stack */
#endif

/* ASan's side of a switch into a fiber (fake: what the fiber saved when it left; NULL on its
 * first entry), which also tells the scheduler's stack when the switch came from there. */
static void emu_entered(void *fake)
{
#ifdef EMU_ASAN
    const void *bottom;
    size_t size;
    __sanitizer_finish_switch_fiber(fake, &bottom, &size);
    if (emu_from_main) {
        emu_main_stack = bottom;
        emu_main_stack_size = size;
        emu_from_main = false;
    }
#else
    (void)fake;
#endif
}

/* From the running fiber to the next unfinished one in round-robin order, or back to the
 * scheduler (emu_launch) when none is left; dying: this fiber has finished, and the call
 * does not return. Straight to the next fiber rather than through the scheduler: half the
 * switches, which are most of a launch's time here. */
static void emu_yield(bool dying)
{
    emu_fiber *self = &emu_fibers[threadIdx.x];
    emu_fiber *next = NULL;
    for (unsigned i = 1, t = threadIdx.x; i <= blockDim.x && !next; i++) {
        t = t + 1 == blockDim.x ? 0 : t + 1; /* (a modulo's division cost more) */
        if (!emu_fibers[t].done) {
            next = &emu_fibers[t];
            threadIdx = dim3{t, 0, 0};
            blockIdx = next->block;
        }
    }
    if (next == self) /* alone at a barrier the finished fibers never reached */
        abort();
    emu_ctx *to = next ? &next->ctx : &emu_main;
#ifdef EMU_ASAN
    void *fake = NULL;
    __sanitizer_start_switch_fiber(dying ? NULL : &fake, next ? next->stack : emu_main_stack,
                                   next ? (size_t)EMU_STACK : emu_main_stack_size);
    emu_ctx_switch(&self->ctx, to);
    emu_entered(fake);
#else
    (void)dying;
    emu_ctx_switch(&self->ctx, to);
#endif
}

struct emu_barrier {
    unsigned arrived, generation;
};

static emu_barrier emu_block_barrier;
static emu_barrier emu_warp_barrier[EMU_MAX_THREADS / EMU_WARP];
static uint64_t emu_warp_slot[2][EMU_MAX_THREADS];

/* Returns once `count` fibers have arrived; the others run meanwhile. */
static inline void emu_barrier_wait(emu_barrier *b, unsigned count)
{
    unsigned generation = b->generation;
    if (++b->arrived == count) {
        b->arrived = 0;
        b->generation++;
        return;
    }
    while (b->generation == generation)
        emu_yield(false);
}

static inline void __syncthreads(void) { emu_barrier_wait(&emu_block_barrier, blockDim.x); }

/* A barrier of the calling lane's warp (all of its lanes: the full mask). It moves the warp
 * barrier's generation as a shuffle does, which keeps emu_shuffle's double buffering safe:
 * a lane passes it only after every lane has read its last shuffle. */
static inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    (void)mask;
    emu_barrier_wait(&emu_warp_barrier[threadIdx.x / EMU_WARP], EMU_WARP);
}

static inline void __threadfence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_system(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

/* The four signed bytes of a times those of b, plus c. */
static inline int __dp4a(int a, int b, int c)
{
    for (int k = 0; k < 32; k += 8)
        c += (int8_t)((uint32_t)a >> k) * (int8_t)((uint32_t)b >> k);
    return c;
}

/* A warp shuffle: every lane of the warp must call it, as the full mask says; a lane gets
 * lane `from`'s value, or its own when from is outside the warp. One barrier, with the slots
 * double-buffered by the parity of the warp barrier's generation (k: the shuffles the warp
 * has finished, the same for every lane writing the k-th): a lane can only write the same
 * buffer again at shuffle k + 2, past barrier k + 1, which every lane reaches only after its
 * read of shuffle k. Half the fiber switches of a write, barrier, read, barrier shuffle. */
template <typename V> static inline V emu_shuffle(V v, unsigned from)
{
    static_assert(sizeof(V) <= sizeof(uint64_t), "a shuffle moves at most 8 bytes");
    unsigned warp = threadIdx.x / EMU_WARP;
    emu_barrier *b = &emu_warp_barrier[warp];
    uint64_t *slot = emu_warp_slot[b->generation & 1];
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    slot[threadIdx.x] = bits;
    emu_barrier_wait(b, EMU_WARP);
    uint64_t r = from < EMU_WARP ? slot[warp * EMU_WARP + from] : bits;
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

/* lane src's v, to every lane */
template <typename V> static inline V __shfl_sync(unsigned mask, V v, int src)
{
    (void)mask;
    return emu_shuffle(v, (unsigned)src % EMU_WARP);
}

/* The lanes of the warp whose v is this lane's, as a mask: every lane of the warp must call
 * it, as the full mask says. One barrier over emu_shuffle's double-buffered slots. */
static inline unsigned __match_any_sync(unsigned mask, unsigned v)
{
    (void)mask;
    unsigned warp = threadIdx.x / EMU_WARP;
    emu_barrier *b = &emu_warp_barrier[warp];
    uint64_t *slot = emu_warp_slot[b->generation & 1];
    slot[threadIdx.x] = v;
    emu_barrier_wait(b, EMU_WARP);
    unsigned m = 0;
    for (unsigned l = 0; l < EMU_WARP; l++)
        m |= (unsigned)(slot[warp * EMU_WARP + l] == v) << l;
    return m;
}

static inline int __popc(unsigned v) { return __builtin_popcount(v); }
static inline int __ffs(int v) { return __builtin_ffs(v); }

/* kernels/cuda/device.cuh's xor_sums in one exchange. The rounds there, `v += shfl_xor(v,
 * o)` for each offset o of the list, leave in lane l after round r its value after round
 * r - 1 plus that of lane l ^ o_r. So the lanes publish their values once, and the first
 * lane to go on makes the rounds for the whole warp, every lane's additions as its
 * shuffles would make them, in its slot: one barrier instead of one a round (each a fiber
 * switch per lane). The rounds' barriers were most of the emulated kernels' time
 * (test_forward_gpu: 63,000 switches a q8_0 matvec, 18 ns each). Every lane of the warp
 * must call it, as the shuffles' full mask says; b may be NULL. The slots are emu_shuffle's
 * double buffers: the next exchange writes the other, and the one after comes past a
 * barrier that every lane reaches only after reading its sums. */
#define CUDA_EMU_XOR_SUMS 1

static uint64_t emu_warp_slot_b[2][EMU_MAX_THREADS];
/* the warp barrier's generation whose exchange has been summed (0: none since the launch) */
static unsigned emu_xor_summed[EMU_MAX_THREADS / EMU_WARP];

template <typename V> static inline void emu_xor_rounds(uint64_t *slot, const unsigned *o, int k)
{
    V v[EMU_WARP], w[EMU_WARP];
    for (unsigned l = 0; l < EMU_WARP; l++)
        memcpy(&v[l], &slot[l], sizeof(V));
    for (int r = 0; r < k; r++) {
        for (unsigned l = 0; l < EMU_WARP; l++)
            w[l] = v[l] + v[l ^ o[r]];
        memcpy(v, w, sizeof v);
    }
    for (unsigned l = 0; l < EMU_WARP; l++)
        memcpy(&slot[l], &v[l], sizeof(V));
}

/* The offsets: 1, 2, ... below `lanes` where nearest_first, else lanes / 2 down to 1. */
template <typename V>
static inline void emu_xor_sums(V *a, V *b, unsigned lanes, bool nearest_first)
{
    static_assert(sizeof(V) <= sizeof(uint64_t), "a shuffle moves at most 8 bytes");
    unsigned o[5];
    int k = 0;
    for (unsigned x = 1; x < lanes; x <<= 1)
        o[k++] = nearest_first ? x : lanes / 2 / x;
    if (!k) /* no rounds, no shuffles: no barrier either */
        return;
    const unsigned warp = threadIdx.x / EMU_WARP, lane = threadIdx.x % EMU_WARP;
    emu_barrier *bar = &emu_warp_barrier[warp];
    uint64_t *sa = emu_warp_slot[bar->generation & 1] + warp * EMU_WARP;
    uint64_t *sb = emu_warp_slot_b[bar->generation & 1] + warp * EMU_WARP;
    memcpy(&sa[lane], a, sizeof *a);
    if (b)
        memcpy(&sb[lane], b, sizeof *b);
    emu_barrier_wait(bar, EMU_WARP);
    if (emu_xor_summed[warp] != bar->generation) {
        emu_xor_summed[warp] = bar->generation;
        emu_xor_rounds<V>(sa, o, k);
        if (b)
            emu_xor_rounds<V>(sb, o, k);
    }
    memcpy(a, &sa[lane], sizeof *a);
    if (b)
        memcpy(b, &sb[lane], sizeof *b);
}

static int32_t emu_mma_slot[EMU_MAX_THREADS][6];

/* The warp's mma.sync of a 16 x K A (row-major) by a K x 8 B (column-major) into c, each
 * lane's fragments where the PTX ISA lays them out (g = lane / 4, t = lane % 4; a register
 * holds `per` elements, the lower k in the lower bits, elem(word, j) the j-th): a[0] A's row
 * g, the register's k of the first half of K for lane t; a[1] row g + 8; a[2], a[3] those
 * rows' second half; b[0] B's column g, the first half; b[1] the second; c[0], c[1] row g,
 * columns 2t and 2t + 1; c[2], c[3] row g + 8. Every lane publishes its fragments, and
 * after the warp's barrier computes its four sums from all of them; a second barrier keeps
 * the slots until every lane has read them. So a kernel that puts its fragments elsewhere
 * fails here as it would on a GPU. */
template <typename T, typename Elem>
static inline void emu_mma(T c[4], const uint32_t a[4], const uint32_t b[2], unsigned K,
                           unsigned per, Elem elem)
{
    const unsigned w0 = threadIdx.x / EMU_WARP * EMU_WARP, lane = threadIdx.x % EMU_WARP;
    int32_t *mine = emu_mma_slot[threadIdx.x];
    for (int i = 0; i < 4; i++)
        mine[i] = (int32_t)a[i];
    mine[4] = (int32_t)b[0], mine[5] = (int32_t)b[1];
    __syncwarp();
    /* the element at k of the register reg of lane l */
    auto at = [&](unsigned l, int reg, unsigned k) {
        return elem((uint32_t)emu_mma_slot[w0 + l][reg], k % per);
    };
    const unsigned g = lane / 4, t = lane % 4, half = K / 2;
    for (int i = 0; i < 4; i++) {
        const unsigned row = g + 8 * (i / 2), col = 2 * t + i % 2;
        T sum = 0;
        for (unsigned k = 0; k < K; k++)
            sum += at(row % 8 * 4 + k % half / per, (row >= 8) + 2 * (k >= half), k) *
                   at(col * 4 + k % half / per, 4 + (k >= half), k);
        c[i] += sum;
    }
    __syncwarp();
}

/* kernels/cuda/mmq.cu's mma_s8: m16n8k32, s32 += s8 s8 (four bytes a register). */
static inline void mma_s8(int c[4], const int a[4], const int b[2])
{
    emu_mma(c, (const uint32_t *)a, (const uint32_t *)b, 32, 4,
            [](uint32_t w, unsigned j) { return (int)(int8_t)(w >> 8 * j); });
}

/* The IEEE half h as a float (its products and sums below are exact in float): a normal
 * half's bits moved into a float's, its exponent rebased (15 to 127); a subnormal's m times
 * 2^-24, exact; NaN as NAN. Bit operations rather than ldexpf, whose call was a fifth of
 * test_cuda_kernels under ASan (each m16n8k16 product converts 128 halves a lane). */
static inline float emu_h2f(uint32_t h)
{
    const uint32_t e = h >> 10 & 31, m = h & 1023, sign = (h & 0x8000u) << 16;
    float v;
    if (e == 0) {
        v = (float)m * 0x1p-24f;
        return sign ? -v : v;
    }
    const uint32_t bits = sign | (e == 31 ? (m ? 0x7fc00000u : 0x7f800000u)
                                          : (e + 112) << 23 | m << 13);
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* kernels/cuda/attention_mma.cu's mma_f16: m16n8k16, f32 += f16 f16 (two halves a
 * register). */
static inline void mma_f16(float c[4], const uint32_t a[4], const uint32_t b[2])
{
    emu_mma(c, a, b, 16, 2, [](uint32_t w, unsigned j) { return emu_h2f(w >> 16 * j & 0xFFFF); });
}

/* kernels/cuda/attention_mma.cu's cp.async: the 16 bytes (or zeros) at once, so the wait has
 * nothing to wait for. */
static inline void cp_async16(void *dst, const void *src, bool zero)
{
    if (zero)
        memset(dst, 0, 16);
    else
        memcpy(dst, src, 16);
}

static inline void cp_async_wait_all(void) {}

static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v)
{
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}

static inline unsigned long long atomicExch(unsigned long long *p, unsigned long long v)
{
    return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);
}

static void emu_fiber_main(void)
{
    emu_entered(NULL);
    emu_fiber *f = &emu_fibers[threadIdx.x];
    for (unsigned b : *emu_order) {
        blockIdx = f->block = dim3{b % gridDim.x, b / gridDim.x, 0};
        (*emu_body)();
        __syncthreads(); /* the block ends: its __shared__ statics pass to the next */
    }
    f->done = true;
    emu_yield(true);
    abort(); /* a finished fiber is never resumed */
}

/* Runs `body` (a kernel call) as a grid of grid.x * grid.y blocks of `threads` threads (a
 * multiple of the warp, at most EMU_MAX_THREADS), the blocks one after another in the order
 * order[] gives (indices x + y * grid.x, each once), or in index order when it is empty.
 * Not reentrant: one launch at a time in the process. */
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
    emu_body = &body;
    emu_order = &order;
    emu_block_barrier = emu_barrier{0, 0};
    for (unsigned w = 0; w < threads / EMU_WARP; w++)
        emu_warp_barrier[w] = emu_barrier{0, 0}, emu_xor_summed[w] = 0;
    for (unsigned t = 0; t < threads; t++) {
        emu_fiber *f = &emu_fibers[t];
        if (!f->stack && !(f->stack = (char *)malloc(EMU_STACK)))
            abort();
        f->done = false;
        f->block = dim3{0, 0, 0};
        emu_ctx_make(&f->ctx, f->stack, EMU_STACK, emu_fiber_main);
    }
    /* Fiber 0 first; each then runs to its next barrier (or its end) and hands over to the
     * next (emu_yield), and the last to finish comes back here. */
    threadIdx = dim3{0, 0, 0};
    blockIdx = emu_fibers[0].block;
#ifdef EMU_ASAN
    void *fake = NULL;
    emu_from_main = true;
    __sanitizer_start_switch_fiber(&fake, emu_fibers[0].stack, EMU_STACK);
    emu_ctx_switch(&emu_main, &emu_fibers[0].ctx);
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#else
    emu_ctx_switch(&emu_main, &emu_fibers[0].ctx);
#endif
}

#endif
