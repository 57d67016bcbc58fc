/*
 * A prompt's routed experts on the tensor cores, in integers (kernels/cuda/kernels.h,
 * mvm_g_expert_mmq_*): the int8 mma.sync of Ampere and later (m16n8k32, s8 in, s32 out) on
 * the weights as they lie in the expert space, Q8_0 against the Q8_0 activation blocks, and
 * Q4_K_M's Q4_K and Q6_K against Q8_K blocks, each block's integers scaled as the CPU scales
 * them (kernels/blocks.h: mvm_k_qfloat for a Q8_0 block, mvm_k_kscale for a K super-block
 * from its integer sums), the blocks added in order. This is llama.cpp's mul_mat_q for MoE
 * (mul_mat_id with its ids): no F16 copy of the weights, and all of a step's experts in two
 * launches whatever their row counts.
 *
 * Why: a prompt's experts on the CUDA cores (expert.cu's tiled up and down, 8 rows a weight
 * read) took 793 µs a launch for OLMoE-1B-7B's pp512 on an H200, and the F16 path that
 * dequantizes each expert for cuBLAS (engine/forward/forward_cuda_gemm.c) spends its launches
 * and a copy of every weight as F16 before its products; pp512 stood at 0.12-0.22x
 * llama.cpp's at every expert resident (docs/perf/offload.md, runs J-L).
 *
 * A block computes a 64 x 64 tile: 64 weight rows (up: a 32-channel slice's gate rows then
 * its up rows; down: 64 outputs) against 64 of an expert's rows (tokens), looping over the
 * expert's rows 64 at a time. Four warps, each 16 weight rows x the 64 rows as eight
 * m16n8k32 products per 32 elements of K (fewer where the expert has fewer rows left: the
 * groups of 8 past its last are neither loaded nor multiplied). The weights and the tile's activations go
 * through shared memory four 32-element sub-blocks at a time (four Q8_0 blocks, half a K
 * super-block), unpacked to signed bytes (Q4_K's nibbles, Q6_K's six bits), two 16-bit loads
 * a word where a block's quants are only 2-byte aligned, rows of 36 words so that the 32
 * lanes' fragment loads hit 32 banks. The integers stay integers to a block's end: a Q8_0
 * block's sum is scaled at once; a K super-block's sums, its sub-blocks' weighted by their
 * scales (Q4_K's mins by the activations' sums: Q8_K's bsums), are scaled after its eighth,
 * as the CPU's. Q6_K's scales are per 16: each 32 takes two products, the other half of A
 * zero, and its quants stay unsigned with the activations' sums taking off their 32.
 * Up ends in the unit (SwiGLU, or gpt-oss's) and writes h as expert.cu's up does (Q8_0
 * blocks; with a K down, floats into hf for mvm_g_expert_quantize); down writes out.
 *
 * The PTX is compute_80 (CMakeLists.txt): engine/compute/gpu.c loads this module only where
 * the device takes it, and without it the engine keeps the other paths.
 */
#include "kernels/cuda/expert.cuh"

#define MMQ_M 64               /* weight rows a block */
#define MMQ_N 64               /* an expert's rows a tile */
#define MMQ_ROWS (MMQ_M + MMQ_N)
#define MMQ_KB 4               /* 32-element sub-blocks of K staged at a time */
#define MMQ_S (MMQ_KB * 8 + 4) /* words a staged row: the quants, and 4 words of padding */

#ifdef __CUDACC__
/* c += a b on the warp's fragments (the PTX ISA's layout for m16n8k32 with .s8, g = lane /
 * 4, t = lane % 4): a[0] row g, k bytes 4t..4t+3; a[1] row g + 8, the same; a[2], a[3]
 * those rows' bytes 16 + 4t..; b[0] column g, k bytes 4t..; b[1] 16 + 4t..; c[0], c[1] row
 * g, columns 2t, 2t + 1; c[2], c[3] row g + 8. tests/cuda_emu.h emulates it so. */
static __device__ __forceinline__ void mma_s8(int c[4], const int a[4], const int b[2])
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}
#endif

/* The staged sub-blocks: rows 0..63 the weights', 64..127 the tile's activations'; their
 * quants as words, and per row and sub-block: d (a Q8_0 block's scale; a Q8_K block's d
 * for each of its sub-blocks), s (Q4_K: its scale and min; Q6_K: its two scales; Q8_K:
 * its two bsums), and a K weight super-block's d and dmin (dk). base[i]: row i's first
 * block; a row's blocks are wstep (weights) or xstep (activations) bytes apart. */
struct mmq_stage {
    int q[MMQ_ROWS][MMQ_S];
    float d[MMQ_ROWS][MMQ_KB];
    int s[MMQ_ROWS][MMQ_KB][2];
    float dk[MMQ_M][2];
    const uint8_t *base[MMQ_ROWS];
};

/* Word w (quants 4w..4w+3) of sub-block c (< 8) of K super-block blk, unpacked to bytes:
 * Q4_K's nibbles, Q6_K's six bits (0..63); kernels/blocks.h's layouts. */
template <enum mvm_wtype W>
static __device__ __forceinline__ int k_word(const uint8_t *blk, uint32_t c, uint32_t w)
{
    if (W == MVM_W_Q4_K)
        return word_at(((const mvm_block_q4_K *)blk)->qs + 32 * (c / 2) + 4 * w) >>
                   (4 * (c % 2)) & 0x0F0F0F0F;
    const mvm_block_q6_K *x = (const mvm_block_q6_K *)blk;
    const uint32_t h = c / 4, k = c % 4;
    const int lo = word_at(x->ql + 64 * h + 32 * (k & 1) + 4 * w) >> (4 * (k >> 1)) & 0x0F0F0F0F;
    return lo | (word_at(x->qh + 32 * h + 4 * w) >> (2 * k) & 0x03030303) << 4;
}

/* Sub-blocks k0 .. k0 + nkb - 1 of the weights' rows and of the tile's first 8 nj
 * activation rows into s: weights of type W, activations Q8_0 (W Q8_0) or Q8_K. A warp's
 * loads take a row's 4 sub-blocks side by side, a sub-block's 8 words in 8 lanes; the
 * indices are shifts of constants, no division. */
template <enum mvm_wtype W>
static __device__ void mmq_load(mmq_stage &s, uint32_t k0, uint32_t nkb, uint32_t nj,
                                uint64_t wstep, uint64_t xstep)
{
    const bool K = W != MVM_W_Q8_0;
    for (uint32_t i = threadIdx.x; i < MMQ_ROWS * MMQ_KB * 8; i += blockDim.x) {
        const uint32_t w = i % 8, kb = i / 8 % MMQ_KB, r = i / (8 * MMQ_KB), k = k0 + kb;
        if (kb >= nkb || r >= MMQ_M + 8 * nj)
            continue;
        const bool wt = r < MMQ_M;
        const uint8_t *blk = s.base[r] + (K ? k / 8 : k) * (wt ? wstep : xstep);
        int v;
        if (!K)
            v = word_at(blk + 2 + 4 * w);
        else if (!wt)
            v = word_at((const uint8_t *)((const mvm_block_q8_K *)blk)->qs + 32 * (k % 8) + 4 * w);
        else
            v = k_word<W>(blk, k % 8, w);
        s.q[r][kb * 8 + w] = v;
    }
    for (uint32_t i = threadIdx.x; i < MMQ_ROWS * MMQ_KB; i += blockDim.x) {
        const uint32_t kb = i % MMQ_KB, r = i / MMQ_KB, k = k0 + kb, c = k % 8;
        if (kb >= nkb || r >= MMQ_M + 8 * nj)
            continue;
        const bool wt = r < MMQ_M;
        const uint8_t *blk = s.base[r] + (K ? k / 8 : k) * (wt ? wstep : xstep);
        if (!K) {
            s.d[r][kb] = mvm_k_h2f(*(const uint16_t *)blk);
        } else if (!wt) {
            const mvm_block_q8_K *a = (const mvm_block_q8_K *)blk;
            s.d[r][kb] = a->d;
            s.s[r][kb][0] = a->bsums[2 * c], s.s[r][kb][1] = a->bsums[2 * c + 1];
        } else if (W == MVM_W_Q4_K) {
            uint8_t sc, m;
            mvm_k_scale_min(((const mvm_block_q4_K *)blk)->scales, (int)c, &sc, &m);
            s.s[r][kb][0] = sc, s.s[r][kb][1] = m;
            if (kb == 0)
                s.dk[r][0] = mvm_k_h2f(*(const uint16_t *)blk),
                s.dk[r][1] = mvm_k_h2f(*(const uint16_t *)(blk + 2));
        } else {
            const mvm_block_q6_K *x = (const mvm_block_q6_K *)blk;
            s.s[r][kb][0] = x->scales[2 * c], s.s[r][kb][1] = x->scales[2 * c + 1];
            if (kb == 0)
                s.dk[r][0] = mvm_k_h2f(x->d), s.dk[r][1] = 0;
        }
    }
}

/* acc[j][i]: this lane's part of the tile, the warp's 16 weight rows against the tile's
 * rows, over nk sub-blocks of K (the rows' bases set in s): c[i] of the product against the
 * tile's rows 8j.. (mma_s8's layout), for the first nj groups of 8 rows (an expert of 32
 * rows, a Qwen3-30B-A3B one's at pp512, skips half the tile's loads and products; acc's
 * other groups stay 0). Every thread of the block must call it. */
template <enum mvm_wtype W>
static __device__ void mmq_tile(mmq_stage &s, uint32_t nk, uint32_t nj, uint64_t wstep,
                                uint64_t xstep, float acc[8][4])
{
    const bool K = W != MVM_W_Q8_0;
    const uint32_t lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const uint32_t m = (threadIdx.x >> 5) * 16 + g;
    int isum[8][4], msum[8][4]; /* a K super-block's integer sums so far */
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            acc[j][i] = 0, isum[j][i] = 0, msum[j][i] = 0;
    for (uint32_t k0 = 0; k0 < nk; k0 += MMQ_KB) {
        const uint32_t nkb = nk - k0 < MMQ_KB ? nk - k0 : MMQ_KB;
        __syncthreads(); /* the stage before is read */
        mmq_load<W>(s, k0, nkb, nj, wstep, xstep);
        __syncthreads();
        for (uint32_t kb = 0; kb < nkb; kb++) {
            const int *qa = s.q[m] + kb * 8, *qb = s.q[m + 8] + kb * 8;
            const int a[4] = {qa[t], qb[t], qa[4 + t], qb[4 + t]};
            const int *sw0 = s.s[m][kb], *sw1 = s.s[m + 8][kb];
#pragma unroll
            for (int j = 0; j < 8; j++) {
                if ((uint32_t)j >= nj) /* the whole warp alike: mma.sync's lanes together */
                    break;
                const uint32_t n = MMQ_M + 8 * j, n0 = n + 2 * t, n1 = n0 + 1;
                const int b[2] = {s.q[n + g][kb * 8 + t], s.q[n + g][kb * 8 + 4 + t]};
                int c[4] = {0, 0, 0, 0};
                if (W == MVM_W_Q8_0) {
                    mma_s8(c, a, b);
                    const float dw0 = s.d[m][kb], dw1 = s.d[m + 8][kb];
                    const float dx0 = s.d[n0][kb], dx1 = s.d[n1][kb];
                    /* the CPU's float of a block: sum * (d_w * d_a) */
                    acc[j][0] += (float)c[0] * (dw0 * dx0);
                    acc[j][1] += (float)c[1] * (dw0 * dx1);
                    acc[j][2] += (float)c[2] * (dw1 * dx0);
                    acc[j][3] += (float)c[3] * (dw1 * dx1);
                } else if (W == MVM_W_Q4_K) {
                    mma_s8(c, a, b);
                    const int bs0 = s.s[n0][kb][0] + s.s[n0][kb][1];
                    const int bs1 = s.s[n1][kb][0] + s.s[n1][kb][1];
                    isum[j][0] += sw0[0] * c[0], msum[j][0] += sw0[1] * bs0;
                    isum[j][1] += sw0[0] * c[1], msum[j][1] += sw0[1] * bs1;
                    isum[j][2] += sw1[0] * c[2], msum[j][2] += sw1[1] * bs0;
                    isum[j][3] += sw1[0] * c[3], msum[j][3] += sw1[1] * bs1;
                } else { /* Q6_K: a product per 16 quants, each less 32 x its sums */
                    const int lo[4] = {a[0], a[1], 0, 0}, hi[4] = {0, 0, a[2], a[3]};
                    int ch[4] = {0, 0, 0, 0};
                    mma_s8(c, lo, b);
                    mma_s8(ch, hi, b);
                    const int *x0 = s.s[n0][kb], *x1 = s.s[n1][kb];
                    isum[j][0] += sw0[0] * (c[0] - 32 * x0[0]) + sw0[1] * (ch[0] - 32 * x0[1]);
                    isum[j][1] += sw0[0] * (c[1] - 32 * x1[0]) + sw0[1] * (ch[1] - 32 * x1[1]);
                    isum[j][2] += sw1[0] * (c[2] - 32 * x0[0]) + sw1[1] * (ch[2] - 32 * x0[1]);
                    isum[j][3] += sw1[0] * (c[3] - 32 * x1[0]) + sw1[1] * (ch[3] - 32 * x1[1]);
                }
            }
        }
        if (K && (k0 + nkb) % 8 == 0) { /* a super-block's end: its float, as the CPU's */
            const float d0 = s.dk[m][0], d1 = s.dk[m + 8][0];
            const float dm0 = s.dk[m][1], dm1 = s.dk[m + 8][1];
#pragma unroll
            for (int j = 0; j < 8 && (uint32_t)j < nj; j++) {
                const uint32_t n0 = MMQ_M + 8 * j + 2 * t;
                const float da0 = s.d[n0][0], da1 = s.d[n0 + 1][0];
                acc[j][0] += da0 * (d0 * (float)isum[j][0] - dm0 * (float)msum[j][0]);
                acc[j][1] += da1 * (d0 * (float)isum[j][1] - dm0 * (float)msum[j][1]);
                acc[j][2] += da0 * (d1 * (float)isum[j][2] - dm1 * (float)msum[j][2]);
                acc[j][3] += da1 * (d1 * (float)isum[j][3] - dm1 * (float)msum[j][3]);
#pragma unroll
                for (int i = 0; i < 4; i++)
                    isum[j][i] = 0, msum[j][i] = 0;
            }
        }
    }
}

/* The tile's activation rows from the expert's row r0 + t0 (nt of them; the rest repeat its
 * first, computed and never written): row_tok's tokens of act (up), or h's rows (down). */
static __device__ void mmq_rows(mmq_stage &s, const mvm_g_expert_args &a, bool up, uint32_t r0,
                                uint32_t t0, uint32_t nt)
{
    for (uint32_t n = threadIdx.x; n < MMQ_N; n += blockDim.x) {
        const uint32_t r = r0 + t0 + (n < nt ? n : 0);
        s.base[MMQ_M + n] = up ? (const uint8_t *)a.act + U32(a.row_tok)[r] * a.act_stride
                               : (const uint8_t *)a.h + (uint64_t)r * a.h_stride;
    }
}

/* A block per (32-channel slice, active expert): gate's and up's 32 rows of the slice
 * against every row of the expert, the unit, and each row's slice of h: a Q8_0 block, or
 * with a K down 32 floats of hf. */
template <enum mvm_wtype GU> static __device__ void mmq_up(const mvm_g_expert_args &a)
{
    const mvm_k_expert_fmt f = {GU, (enum mvm_wtype)a.down, (enum mvm_k_glu)a.glu, 0};
    const uint32_t e = U32(a.active)[blockIdx.y], c0 = blockIdx.x * MVM_QBLOCK;
    const uint32_t r0 = U32(a.off)[e], nr = U32(a.cnt)[e];
    const uint32_t G = (uint32_t)mvm_k_expert_group_channels(f), s0 = c0 % G;
    const uint64_t row = mvm_k_row_bytes(GU, a.n_embd);
    const uint64_t group = mvm_k_expert_group_bytes(f, a.n_embd);
    const uint64_t wstep = mvm_k_row_bytes(GU, (uint32_t)mvm_k_block_elems(GU));
    const uint64_t xstep = GU == MVM_W_Q8_0 ? sizeof(mvm_block_q8_0) : sizeof(mvm_block_q8_K);
    const uint8_t *gate = expert_base(a, e) + c0 / G * group;
    const bool k_down = mvm_k_is_k(f.down);
    __shared__ mmq_stage s;
    __shared__ float dots[2][MMQ_N][MVM_QBLOCK + 1]; /* gate's and up's sums; then the unit */
    for (uint32_t i = threadIdx.x; i < MMQ_M; i += blockDim.x)
        s.base[i] = gate + ((i / MVM_QBLOCK) * G + s0 + i % MVM_QBLOCK) * row;
    const uint32_t lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const uint32_t m = (threadIdx.x >> 5) * 16 + g, part = m / MVM_QBLOCK, c = m % MVM_QBLOCK;
    for (uint32_t t0 = 0; t0 < nr; t0 += MMQ_N) {
        const uint32_t nt = nr - t0 < MMQ_N ? nr - t0 : MMQ_N;
        mmq_rows(s, a, true, r0, t0, nt);
        float acc[8][4];
        mmq_tile<GU>(s, a.n_embd / MVM_QBLOCK, (nt + 7) / 8, wstep, xstep, acc);
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                dots[part][8 * j + 2 * t + (i & 1)][c + 8 * (i >> 1)] = acc[j][i];
        __syncthreads();
        for (uint32_t k = threadIdx.x; k < nt * MVM_QBLOCK; k += blockDim.x) {
            const uint32_t n = k / MVM_QBLOCK, ch = k % MVM_QBLOCK, r = r0 + t0 + n;
            const float v = expert_unit(a, gate + group, G, s0 + ch, dots[0][n][ch],
                                        dots[1][n][ch], r);
            if (k_down) /* n_ff floats a row, for mvm_g_expert_quantize */
                ((float *)a.hf)[(uint64_t)r * a.n_groups * G + c0 + ch] = v;
            else
                dots[0][n][ch] = v;
        }
        __syncthreads();
        for (uint32_t n = threadIdx.x; n < nt && !k_down; n += blockDim.x)
            mvm_k_q8_0_block(dots[0][n], (mvm_block_q8_0 *)((uint8_t *)a.h +
                                                            (uint64_t)(r0 + t0 + n) * a.h_stride) +
                                             c0 / MVM_QBLOCK);
        /* dots is the next tile's once mmq_tile's first barrier is passed */
    }
}

/* A block per (64 outputs, active expert): their down rows, a gather of one block a group
 * (down_row), against every row of the expert's h; out[r][j] plus gpt-oss's down bias
 * weighted by the row's routing weight, as expert.cu's down. */
template <enum mvm_wtype DN> static __device__ void mmq_down(const mvm_g_expert_args &a)
{
    const mvm_k_expert_fmt f = {(enum mvm_wtype)a.gate_up, DN, (enum mvm_k_glu)a.glu, 0};
    const uint32_t e = U32(a.active)[blockIdx.y], j0 = blockIdx.x * MMQ_M;
    const uint32_t r0 = U32(a.off)[e], nr = U32(a.cnt)[e];
    const uint32_t G = (uint32_t)mvm_k_expert_group_channels(f);
    const uint64_t xstep = DN == MVM_W_Q8_0 ? sizeof(mvm_block_q8_0) : sizeof(mvm_block_q8_K);
    __shared__ mmq_stage s;
    for (uint32_t i = threadIdx.x; i < MMQ_M; i += blockDim.x)
        s.base[i] = down_row(a, f, e, j0 + i < a.n_embd ? j0 + i : a.n_embd - 1);
    const uint32_t lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const uint32_t m = (threadIdx.x >> 5) * 16 + g;
    const uint64_t group = mvm_k_expert_group_bytes(f, a.n_embd);
    for (uint32_t t0 = 0; t0 < nr; t0 += MMQ_N) {
        const uint32_t nt = nr - t0 < MMQ_N ? nr - t0 : MMQ_N;
        mmq_rows(s, a, false, r0, t0, nt);
        float acc[8][4];
        mmq_tile<DN>(s, a.n_groups * G / MVM_QBLOCK, (nt + 7) / 8, group, xstep, acc);
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const uint32_t n = 8 * j + 2 * t + (i & 1), jo = j0 + m + 8 * (i >> 1);
                if (n >= nt || jo >= a.n_embd)
                    continue;
                const uint32_t r = r0 + t0 + n;
                const float b = a.down_bias ? ((const float *)a.row_w)[r] * down_bias(a, e, jo)
                                            : 0.0f;
                ((float *)a.out)[(uint64_t)r * a.n_embd + jo] = acc[j][i] + b;
            }
    }
}

#define MMQ_UP(name, T)                                                                        \
    extern "C" __global__ void __launch_bounds__(MVM_G_THREADS)                                \
        mvm_g_expert_mmq_up_##name(mvm_g_expert_args a)                                        \
    {                                                                                          \
        mmq_up<T>(a);                                                                          \
    }
#define MMQ_DOWN(name, T)                                                                      \
    extern "C" __global__ void __launch_bounds__(MVM_G_THREADS)                                \
        mvm_g_expert_mmq_down_##name(mvm_g_expert_args a)                                      \
    {                                                                                          \
        mmq_down<T>(a);                                                                        \
    }
MMQ_UP(q8_0, MVM_W_Q8_0)
MMQ_UP(q4_K, MVM_W_Q4_K)
MMQ_DOWN(q8_0, MVM_W_Q8_0)
MMQ_DOWN(q4_K, MVM_W_Q4_K)
MMQ_DOWN(q6_K, MVM_W_Q6_K)
#undef MMQ_UP
#undef MMQ_DOWN
