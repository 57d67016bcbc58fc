/*
 * Decode's Q8_0 products in several shapes of kernel, side by side on the same rows, to
 * find what reads an expert's rows at HBM speed (llama.cpp's up ran at ~2.4 TB/s on an
 * H200 where moevm's up1 ran at ~0.9, bench/gpu/ktrace.sh, 2026-11-26; the lab's first
 * run and what it changed are in docs/perf/engine.md; bench/gpu/lease.sh's step `lab`):
 *
 *   nvcc -O3 -arch=sm_90 -I. bench/gpu/kernel_lab.cu -o /tmp/kernel_lab && /tmp/kernel_lab
 *
 * moevm's own kernels (kernels/cuda, included) against variants of one row loop,
 * lab_rows<P, LPB, EXACT, U>: P threads share a row (a warp, or a block's warps), LPB
 * lanes a Q8_0 block (8 / LPB words a lane), EXACT: the block's integer sum is added up
 * over its lanes before it is scaled (the CPU's float a block), else each lane scales its
 * own part; U rounds unrolled. Each launch reads another set of experts (or copy of a
 * matrix), so that the rows come from HBM, not the L2. Prints µs a launch (events over
 * REPS launches in a row) and each variant's largest difference from moevm's kernel.
 */
#include <cuda_fp16.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/expert.cu"
#include "kernels/cuda/matvec.cu"

#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e_ = (x);                                                              \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "kernel_lab: %s: %s\n", #x, cudaGetErrorString(e_));           \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

enum { QB = 34, SETS = 16, REPS = 64 };

static __device__ __forceinline__ float h16(const uint8_t *p)
{
    return __half2float(__ushort_as_half(*(const uint16_t *)p));
}

template <int P, int LPB, bool EXACT, int R, int U>
static __device__ __forceinline__ void lab_rows(const uint8_t *const *w, uint64_t stride,
                                                const uint8_t *act, uint32_t nb, float *acc)
{
    constexpr int WPL = 8 / LPB;
    const uint32_t t = threadIdx.x % P, k = t % LPB, bpr = P / LPB;
#pragma unroll(U)
    for (uint32_t b0 = 0; b0 < nb; b0 += bpr) {
        const uint32_t b = b0 + t / LPB < nb ? b0 + t / LPB : 0;
        const bool ok = b0 + t / LPB < nb;
        const uint8_t *ab = act + (uint64_t)b * QB;
        int av[WPL];
#pragma unroll
        for (int j = 0; j < WPL; j++)
            av[j] = word_at(ab + 2 + 4 * (k * WPL + j));
        const float da = h16(ab);
#pragma unroll
        for (int r = 0; r < R; r++) {
            const uint8_t *blk = w[r] + (uint64_t)b * stride;
            int s = 0;
#pragma unroll
            for (int j = 0; j < WPL; j++)
                s = __dp4a(word_at(blk + 2 + 4 * (k * WPL + j)), av[j], s);
            if (EXACT)
                for (int o = 1; o < LPB; o <<= 1)
                    s += __shfl_xor_sync(FULL_MASK, s, o);
            if (ok && (!EXACT || k == 0))
                acc[r] += (float)s * (h16(blk) * da);
        }
    }
}

/* lab_rows with each U rounds' loads issued first, into registers, then used: the loads
 * of a round cannot wait for the last round's shuffles. */
template <int P, int LPB, bool EXACT, int R, int U>
static __device__ __forceinline__ void lab_rows_pf(const uint8_t *const *w, uint64_t stride,
                                                   const uint8_t *act, uint32_t nb, float *acc)
{
    constexpr int WPL = 8 / LPB;
    const uint32_t t = threadIdx.x % P, k = t % LPB, bpr = P / LPB;
    for (uint32_t b0 = 0; b0 < nb; b0 += U * bpr) {
        int wv[U][R][WPL], av[U][WPL];
        float ws[U][R], da[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const uint32_t bu = b0 + u * bpr + t / LPB, b = bu < nb ? bu : 0;
            const uint8_t *ab = act + (uint64_t)b * QB;
#pragma unroll
            for (int j = 0; j < WPL; j++)
                av[u][j] = word_at(ab + 2 + 4 * (k * WPL + j));
            da[u] = h16(ab);
#pragma unroll
            for (int r = 0; r < R; r++) {
                const uint8_t *blk = w[r] + (uint64_t)b * stride;
                ws[u][r] = h16(blk);
#pragma unroll
                for (int j = 0; j < WPL; j++)
                    wv[u][r][j] = word_at(blk + 2 + 4 * (k * WPL + j));
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const bool ok = b0 + u * bpr + t / LPB < nb;
#pragma unroll
            for (int r = 0; r < R; r++) {
                int s = 0;
#pragma unroll
                for (int j = 0; j < WPL; j++)
                    s = __dp4a(wv[u][r][j], av[u][j], s);
                if (EXACT)
                    for (int o = 1; o < LPB; o <<= 1)
                        s += __shfl_xor_sync(FULL_MASK, s, o);
                if (ok && (!EXACT || k == 0))
                    acc[r] += (float)s * (ws[u][r] * da[u]);
            }
        }
    }
}

/* The sum of v over the P threads that share a row (P / 32 warps of the block). */
template <int P> static __device__ __forceinline__ float row_sum(float v, float *tmp)
{
    v = warp_sum(v);
    if (P == 32)
        return v;
    if ((threadIdx.x & 31) == 0)
        tmp[threadIdx.x >> 5] = v;
    __syncthreads();
    float s = 0;
    const uint32_t w0 = (threadIdx.x >> 5) / (P / 32) * (P / 32);
    for (uint32_t w = w0; w < w0 + P / 32; w++)
        s += tmp[w];
    return s;
}

/* up: a row group of P threads per channel, its gate row and up row together (llama.cpp
 * fuses them too), or with SEQ one after the other (moevm's up1 since 897f782);
 * hf[r][ch] = silu(g) * u * row_w. */
template <int P, int LPB, bool EXACT, int U, bool SEQ = false>
__global__ void lab_up(mvm_g_expert_args a)
{
    __shared__ float tmp[2][32];
    const uint32_t per_block = blockDim.x / P;
    const uint32_t ch = blockIdx.x * per_block + threadIdx.x / P;
    const uint32_t e = U32(a.active)[blockIdx.y], r = U32(a.off)[e];
    const uint32_t G = MVM_QBLOCK, g = ch / G, s = ch % G, D = a.n_embd;
    const uint64_t row = D / MVM_QBLOCK * QB, group = 2 * G * row + (uint64_t)D * QB;
    const uint8_t *gate = (const uint8_t *)a.experts + e * a.expert_stride + g * group + s * row;
    const uint8_t *w[2] = {gate, gate + G * row};
    const uint8_t *act = (const uint8_t *)a.act + U32(a.row_tok)[r] * a.act_stride;
    float acc[2] = {0, 0};
    if (SEQ) {
        lab_rows<P, LPB, EXACT, 1, (U > 0 ? U : 1)>(w, QB, act, D / MVM_QBLOCK, acc);
        lab_rows<P, LPB, EXACT, 1, (U > 0 ? U : 1)>(w + 1, QB, act, D / MVM_QBLOCK, acc + 1);
    } else if (U < 0) {
        lab_rows_pf<P, LPB, EXACT, 2, (U < 0 ? -U : 1)>(w, QB, act, D / MVM_QBLOCK, acc);
    } else {
        lab_rows<P, LPB, EXACT, 2, (U > 0 ? U : 1)>(w, QB, act, D / MVM_QBLOCK, acc);
    }
    const float gs = row_sum<P>(acc[0], tmp[0]), us = row_sum<P>(acc[1], tmp[1]);
    if (threadIdx.x % P == 0)
        ((float *)a.hf)[(uint64_t)r * a.n_groups * G + ch] =
            silu(gs) * us * ((const float *)a.row_w)[r];
}

/* down: P threads per output j, whose row is its block of each group's down slot. */
template <int P, int LPB, bool EXACT, int U> __global__ void lab_down(mvm_g_expert_args a)
{
    __shared__ float tmp[32];
    const uint32_t j = blockIdx.x * (blockDim.x / P) + threadIdx.x / P;
    const uint32_t e = U32(a.active)[blockIdx.y], r = U32(a.off)[e], G = MVM_QBLOCK;
    const uint64_t row = a.n_embd / MVM_QBLOCK * QB, group = 2 * G * row + (uint64_t)a.n_embd * QB;
    const uint8_t *w[1] = {(const uint8_t *)a.experts + e * a.expert_stride + 2 * G * row +
                           (uint64_t)j * QB};
    float acc[1] = {0};
    const uint8_t *h = (const uint8_t *)a.h + (uint64_t)r * a.h_stride;
    if (U < 0)
        lab_rows_pf<P, LPB, EXACT, 1, (U < 0 ? -U : 1)>(w, group, h, a.n_groups, acc);
    else
        lab_rows<P, LPB, EXACT, 1, (U > 0 ? U : 1)>(w, group, h, a.n_groups, acc);
    const float s = row_sum<P>(acc[0], tmp);
    if (threadIdx.x % P == 0)
        ((float *)a.out)[(uint64_t)r * a.n_embd + j] = s;
}

/* matvec: P threads per row of a row-major Q8_0 matrix. */
template <int P, int LPB, bool EXACT, int U> __global__ void lab_matvec(mvm_g_matvec_args a)
{
    __shared__ float tmp[32];
    const uint32_t r = blockIdx.x * (blockDim.x / P) + threadIdx.x / P;
    const uint8_t *w[1] = {(const uint8_t *)a.w + (uint64_t)r * a.row_bytes};
    float acc[1] = {0};
    const uint8_t *x = (const uint8_t *)a.act;
    if (U < 0)
        lab_rows_pf<P, LPB, EXACT, 1, (U < 0 ? -U : 1)>(w, QB, x, a.n_in / MVM_QBLOCK, acc);
    else
        lab_rows<P, LPB, EXACT, 1, (U > 0 ? U : 1)>(w, QB, x, a.n_in / MVM_QBLOCK, acc);
    const float s = row_sum<P>(acc[0], tmp);
    if (threadIdx.x % P == 0)
        ((float *)a.y)[r] = s;
}

/* Random bytes, then every 34-byte block's scale a small f16 (n a multiple of 34). */
__global__ void fill_q8_0(uint8_t *p, uint64_t n, uint32_t seed)
{
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        const uint32_t o = (uint32_t)(i % QB);
        p[i] = o == 0 ? (uint8_t)(h & 0xff) : o == 1 ? (uint8_t)(0x20 + (h & 3)) : (uint8_t)h;
    }
}

static uint8_t *dev_q8_0(uint64_t bytes, uint32_t seed)
{
    uint8_t *p;
    CK(cudaMalloc(&p, bytes));
    fill_q8_0<<<1024, 256>>>(p, bytes, seed);
    CK(cudaGetLastError());
    return p;
}

static float *dev_f32(uint64_t n)
{
    float *p;
    CK(cudaMalloc(&p, n * 4));
    CK(cudaMemset(p, 0, n * 4));
    return p;
}

static cudaEvent_t ev0, ev1;

/* µs a launch of launch(set) over REPS launches in a row, after a warm-up. */
template <typename F> static double time_us(F launch)
{
    for (int i = 0; i < SETS; i++)
        launch(i);
    CK(cudaEventRecord(ev0));
    for (int i = 0; i < REPS; i++)
        launch(i % SETS);
    CK(cudaEventRecord(ev1));
    CK(cudaEventSynchronize(ev1));
    CK(cudaGetLastError());
    float ms;
    CK(cudaEventElapsedTime(&ms, ev0, ev1));
    return ms * 1000.0 / REPS;
}

/* The largest |x - ref| over n floats, relative to the largest |ref|. */
static double rel_diff(const float *x, const float *ref, uint64_t n)
{
    float *h = (float *)malloc(n * 8);
    CK(cudaMemcpy(h, x, n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h + n, ref, n * 4, cudaMemcpyDeviceToHost));
    double d = 0, m = 0;
    for (uint64_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)h[i] - h[n + i]));
        m = fmax(m, fabs((double)h[n + i]));
    }
    free(h);
    return m > 0 ? d / m : d;
}

static void report(const char *shape, const char *kernel, double us, double bytes, double diff)
{
    printf("RESULT lab shape=%s kernel=%s us=%.2f gbps=%.1f diff=%.1e\n", shape, kernel, us,
           bytes / us / 1e3, diff);
}

struct experts_case {
    const char *name;
    uint32_t D, F, E, K;
};

/* SETS sets of K distinct experts on the device; per set: active[K], off[E], cnt[E]. */
static uint32_t *expert_sets(const experts_case &c)
{
    uint32_t *h = (uint32_t *)calloc((size_t)SETS * (c.K + 2 * c.E), 4), *sets;
    srand(7);
    for (int s = 0; s < SETS; s++) {
        uint32_t *act = h + s * (c.K + 2 * c.E), *off = act + c.K, *cnt = off + c.E;
        for (uint32_t k = 0; k < c.K;) {
            const uint32_t e = (uint32_t)rand() % c.E;
            if (cnt[e])
                continue;
            cnt[e] = 1, off[e] = k, act[k++] = e;
        }
    }
    CK(cudaMalloc(&sets, (size_t)SETS * (c.K + 2 * c.E) * 4));
    CK(cudaMemcpy(sets, h, (size_t)SETS * (c.K + 2 * c.E) * 4, cudaMemcpyHostToDevice));
    free(h);
    return sets;
}

static void experts_lab(const experts_case &c)
{
    const uint32_t G = MVM_QBLOCK, ng = c.F / G;
    const uint64_t row = c.D / G * QB, group = 2 * G * row + (uint64_t)c.D * QB;
    const uint64_t stride = ng * group;
    mvm_g_expert_args a = {};
    a.experts = (mvm_dptr)dev_q8_0(stride * c.E, 1);
    a.act = (mvm_dptr)dev_q8_0(row, 2);
    a.h = (mvm_dptr)dev_q8_0((uint64_t)c.K * ng * QB, 3);
    a.hf = (mvm_dptr)dev_f32((uint64_t)c.K * c.F);
    a.out = (mvm_dptr)dev_f32((uint64_t)c.K * c.D);
    float *ref = dev_f32((uint64_t)c.K * (c.F > c.D ? c.F : c.D));
    a.expert_stride = stride, a.act_stride = row, a.h_stride = ng * QB;
    a.n_embd = c.D, a.n_groups = ng, a.n_active = c.K, a.gate_up = MVM_W_Q8_0;
    a.down = MVM_W_Q8_0, a.glu = MVM_GLU_SILU, a.one_row = 1;
    uint32_t *sets = expert_sets(c), *rows;
    float *rw;
    CK(cudaMalloc(&rows, c.K * 4));
    CK(cudaMemset(rows, 0, c.K * 4));
    float *w1 = (float *)malloc(c.K * 4);
    for (uint32_t k = 0; k < c.K; k++)
        w1[k] = 1.0f / (float)(k + 1);
    CK(cudaMalloc(&rw, c.K * 4));
    CK(cudaMemcpy(rw, w1, c.K * 4, cudaMemcpyHostToDevice));
    a.row_tok = (mvm_dptr)rows, a.row_w = (mvm_dptr)rw;
    auto at = [&](int s) {
        mvm_g_expert_args b = a;
        b.active = (mvm_dptr)(sets + s * (c.K + 2 * c.E));
        b.off = b.active + 4 * c.K, b.cnt = b.off + 4 * c.E;
        return b;
    };
    const double up_bytes = (double)c.K * 2 * c.F * row, down_bytes = (double)c.K * c.D * ng * QB;
    const uint64_t nf = (uint64_t)c.K * c.F, no = (uint64_t)c.K * c.D;

    mvm_g_shape s = mvm_g_expert_up1_shape(&a);
    report(c.name, "up1", time_us([&](int i) {
               mvm_g_expert_up1_q8_0<<<dim3(s.gx, s.gy), s.block>>>(at(i));
           }), up_bytes, 0);
    CK(cudaMemcpy(ref, (float *)a.hf, nf * 4, cudaMemcpyDeviceToDevice));
    s = mvm_g_expert_up_shape(&a);
    report(c.name, "up_tiled", time_us([&](int i) {
               mvm_g_expert_up_q8_0<<<dim3(s.gx, s.gy), s.block>>>(at(i));
           }), up_bytes, 0);
/* UPX: a variant of lab_up (SEQ: its rows one after the other), named tag_P.._L.._E.._U.._T.. */
#define UPX(SEQ, tag, P, LPB, EX, U, T)                                                    \
    CK(cudaMemset((void *)a.hf, 0xff, nf * 4));                                            \
    {                                                                                      \
        const double us = time_us([&](int i) {                                             \
            lab_up<P, LPB, EX, U, SEQ><<<dim3(c.F / (T / P), c.K), T>>>(at(i));            \
        });                                                                                \
        report(c.name, tag "_P" #P "_L" #LPB "_E" #EX "_U" #U "_T" #T, us, up_bytes,       \
               rel_diff((float *)a.hf, ref, nf));                                          \
    }
#define UP(P, LPB, EX, U, T) UPX(false, "up", P, LPB, EX, U, T)
#define UP_SEQ(P, LPB, EX, U, T) UPX(true, "up_seq", P, LPB, EX, U, T)
    UP(32, 4, 0, 8, 128) UP(32, 4, 1, 8, 128) UP(32, 2, 0, 4, 128) UP(32, 8, 1, 8, 128)
    UP(32, 4, 0, 2, 128) UP(32, 4, 0, 8, 256) UP(128, 4, 0, 2, 128) UP(128, 4, 1, 2, 128)
    UP(64, 4, 0, 4, 128) UP(64, 4, 1, 4, 128) UP(32, 4, 0, -8, 128) UP(32, 4, 1, -8, 128)
    UP(32, 4, 1, -4, 128) UP(32, 8, 1, -4, 128) UP(64, 4, 1, -4, 128) UP(128, 4, 1, -2, 128)
    UP_SEQ(32, 4, 1, 4, 128) UP_SEQ(32, 4, 1, 8, 128) UP_SEQ(128, 4, 1, 2, 128)
#undef UP
#undef UP_SEQ
#undef UPX
    s = mvm_g_expert_down_shape(&a);
    report(c.name, "down_tiled", time_us([&](int i) {
               mvm_g_expert_down_q8_0<<<dim3(s.gx, s.gy), s.block>>>(at(i));
           }), down_bytes, 0);
    CK(cudaMemcpy(ref, (float *)a.out, no * 4, cudaMemcpyDeviceToDevice));
    s = mvm_g_expert_down1_shape(&a);
    report(c.name, "down1", time_us([&](int i) {
               mvm_g_expert_down1_q8_0<<<dim3(s.gx, s.gy), s.block>>>(at(i));
           }), down_bytes, rel_diff((float *)a.out, ref, no));
#define DOWN(P, LPB, EX, U, T)                                                             \
    CK(cudaMemset((void *)a.out, 0xff, no * 4));                                           \
    {                                                                                      \
        const double us = time_us([&](int i) {                                             \
            lab_down<P, LPB, EX, U><<<dim3(c.D / (T / P), c.K), T>>>(at(i));               \
        });                                                                                \
        report(c.name, "down_P" #P "_L" #LPB "_E" #EX "_U" #U "_T" #T, us, down_bytes,     \
               rel_diff((float *)a.out, ref, no));                                         \
    }
    DOWN(32, 4, 0, 4, 128) DOWN(32, 4, 1, 4, 128) DOWN(32, 2, 0, 4, 128)
    DOWN(32, 8, 1, 4, 128) DOWN(32, 4, 0, 4, 256) DOWN(128, 4, 0, 2, 128)
    DOWN(64, 4, 0, 2, 128) DOWN(32, 4, 1, -4, 128) DOWN(32, 8, 1, -4, 128)
    DOWN(64, 4, 1, -2, 128) DOWN(32, 4, 1, -2, 128)
#undef DOWN
    CK(cudaFree((void *)a.experts));
}

static void matvec_lab(const char *name, uint32_t n_out, uint32_t n_in)
{
    const uint64_t row = n_in / MVM_QBLOCK * QB, bytes = row * n_out;
    uint8_t *w = dev_q8_0(bytes * SETS, 4);
    mvm_g_matvec_args a = {};
    a.act = (mvm_dptr)dev_q8_0(row, 5);
    a.y = (mvm_dptr)dev_f32(n_out);
    float *ref = dev_f32(n_out);
    a.row_bytes = row, a.act_stride = row, a.y_stride = n_out;
    a.n_in = n_in, a.n_out = n_out, a.n_tok = 1, a.n_head = 1;
    auto at = [&](int s) {
        mvm_g_matvec_args b = a;
        b.w = (mvm_dptr)(w + s * bytes);
        return b;
    };
    const mvm_g_shape s = mvm_g_matvec_shape(&a);
    report(name, "matvec", time_us([&](int i) {
               mvm_g_matvec_q8_0<<<dim3(s.gx, s.gy), s.block>>>(at(i));
           }), (double)bytes, 0);
    CK(cudaMemcpy(ref, (float *)a.y, n_out * 4, cudaMemcpyDeviceToDevice));
    { /* the kernel with a block of warps a row, as the engine runs products of few rows */
        CK(cudaMemset((void *)a.y, 0xff, n_out * 4));
        mvm_g_matvec_args sa = a;
        sa.split = MVM_G_WARPS;
        const mvm_g_shape ss = mvm_g_matvec_shape(&sa);
        const double us = time_us([&](int i) {
            mvm_g_matvec_args b = at(i);
            b.split = MVM_G_WARPS;
            mvm_g_matvec_q8_0<<<dim3(ss.gx, ss.gy), ss.block>>>(b);
        });
        report(name, "matvec_split", us, (double)bytes, rel_diff((float *)a.y, ref, n_out));
    }
#define MV(P, LPB, EX, U, T)                                                               \
    CK(cudaMemset((void *)a.y, 0xff, n_out * 4));                                          \
    {                                                                                      \
        const double us = time_us([&](int i) {                                             \
            lab_matvec<P, LPB, EX, U><<<n_out / (T / P), T>>>(at(i));                      \
        });                                                                                \
        report(name, "mv_P" #P "_L" #LPB "_E" #EX "_U" #U "_T" #T, us, (double)bytes,      \
               rel_diff((float *)a.y, ref, n_out));                                        \
    }
    MV(32, 4, 0, 8, 128) MV(32, 4, 1, 8, 128) MV(32, 2, 0, 4, 128) MV(32, 8, 1, 8, 128)
    MV(128, 4, 0, 2, 128) MV(128, 4, 1, 2, 128) MV(64, 4, 0, 4, 128) MV(256, 4, 0, 1, 256)
    MV(32, 4, 1, -8, 128) MV(32, 4, 1, -4, 128) MV(32, 8, 1, -4, 128) MV(64, 4, 1, -4, 128)
    MV(128, 4, 1, -2, 128)
#undef MV
    CK(cudaFree(w));
}

int main(void)
{
    CK(cudaEventCreate(&ev0));
    CK(cudaEventCreate(&ev1));
    const experts_case cases[] = {{"olmoe", 2048, 1024, 64, 8}, {"qwen3", 2048, 768, 128, 8}};
    for (const experts_case &c : cases)
        experts_lab(c);
    matvec_lab("qkv6144x2048", 6144, 2048);
    matvec_lab("o2048x2048", 2048, 2048);
    return 0;
}
