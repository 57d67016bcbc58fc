/*
 * A prompt's routed experts on the tensor cores, in integers (kernels/cuda/kernels.h,
 * mvm_g_expert_mmq_*): Q8_0 weights times Q8_0 activations by the int8 mma.sync of Ampere
 * and later (m16n8k32, s8 in, s32 out), each 32-element block's integer sum scaled by the
 * weight's and the activation's scales as the CPU scales it (kernels/blocks.h,
 * mvm_k_qfloat), the blocks added in order. This is llama.cpp's mul_mat_q for MoE
 * (mul_mat_id with its ids): the weights read as they lie in the expert space, no F16 copy
 * of them, and all of a step's experts in two launches whatever their row counts.
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
 * m16n8k32 products a block of K. The weights and the tile's activations go through shared
 * memory MMQ_KB blocks of K at a time, two 16-bit loads a word (a Q8_0 block's quants are
 * only 2-byte aligned), rows of 36 words so that the 32 lanes' fragment loads hit 32 banks.
 * Up ends in the unit (SwiGLU, or gpt-oss's) and writes each row's slice as one Q8_0 block
 * of h, down's activations, as expert.cu's up does; down writes its outputs to out.
 *
 * The PTX is compute_80 (CMakeLists.txt): engine/compute/gpu.c loads this module only where
 * the device takes it, and without it the engine keeps the other paths.
 */
#include "kernels/cuda/expert.cuh"

#define MMQ_M 64               /* weight rows a block */
#define MMQ_N 64               /* an expert's rows a tile */
#define MMQ_ROWS (MMQ_M + MMQ_N)
#define MMQ_KB 4               /* blocks of K staged at a time */
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

/* The staged blocks of K: rows 0..63 the weights', 64..127 the tile's activations'; their
 * quants as words and their scales as floats. base[i]: row i's first block; a row's
 * blocks are wstep (weights) or xstep (activations) bytes apart. */
struct mmq_stage {
    int q[MMQ_ROWS][MMQ_S];
    float d[MMQ_ROWS][MMQ_KB];
    const uint8_t *base[MMQ_ROWS];
};

/* Blocks kb0 .. kb0 + nkb - 1 of every row into s. */
static __device__ void mmq_load(mmq_stage &s, uint32_t kb0, uint32_t nkb, uint64_t wstep,
                                uint64_t xstep)
{
    for (uint32_t i = threadIdx.x; i < MMQ_ROWS * nkb * 8; i += blockDim.x) {
        const uint32_t w = i % 8, kb = i / 8 % nkb, r = i / 8 / nkb;
        const uint8_t *blk = s.base[r] + (kb0 + kb) * (r < MMQ_M ? wstep : xstep);
        s.q[r][kb * 8 + w] = word_at(blk + 2 + 4 * w);
    }
    for (uint32_t i = threadIdx.x; i < MMQ_ROWS * nkb; i += blockDim.x) {
        const uint32_t kb = i % nkb, r = i / nkb;
        const uint8_t *blk = s.base[r] + (kb0 + kb) * (r < MMQ_M ? wstep : xstep);
        s.d[r][kb] = mvm_k_h2f(*(const uint16_t *)blk);
    }
}

/* acc[j][i]: this lane's part of the tile, the warp's 16 weight rows against the tile's 64
 * rows, over nb blocks of K (the rows' bases set in s): c[i] of the product against the
 * tile's rows 8j.. (mma_s8's layout). Every thread of the block must call it. */
static __device__ void mmq_tile(mmq_stage &s, uint32_t nb, uint64_t wstep, uint64_t xstep,
                                float acc[8][4])
{
    const uint32_t lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const uint32_t m = (threadIdx.x >> 5) * 16 + g;
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            acc[j][i] = 0;
    for (uint32_t kb0 = 0; kb0 < nb; kb0 += MMQ_KB) {
        const uint32_t nkb = nb - kb0 < MMQ_KB ? nb - kb0 : MMQ_KB;
        __syncthreads(); /* the stage before is read */
        mmq_load(s, kb0, nkb, wstep, xstep);
        __syncthreads();
        for (uint32_t kb = 0; kb < nkb; kb++) {
            const int a[4] = {s.q[m][kb * 8 + t], s.q[m + 8][kb * 8 + t],
                              s.q[m][kb * 8 + 4 + t], s.q[m + 8][kb * 8 + 4 + t]};
            const float dw0 = s.d[m][kb], dw1 = s.d[m + 8][kb];
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const uint32_t n = MMQ_M + 8 * j;
                const int b[2] = {s.q[n + g][kb * 8 + t], s.q[n + g][kb * 8 + 4 + t]};
                int c[4] = {0, 0, 0, 0};
                mma_s8(c, a, b);
                const float dx0 = s.d[n + 2 * t][kb], dx1 = s.d[n + 2 * t + 1][kb];
                /* the CPU's float of a block: sum * (d_w * d_a) */
                acc[j][0] += (float)c[0] * (dw0 * dx0);
                acc[j][1] += (float)c[1] * (dw0 * dx1);
                acc[j][2] += (float)c[2] * (dw1 * dx0);
                acc[j][3] += (float)c[3] * (dw1 * dx1);
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
 * against every row of the expert, the unit, and each row's slice as a Q8_0 block of h. */
extern "C" __global__ void __launch_bounds__(MVM_G_THREADS)
    mvm_g_expert_mmq_up_q8_0(mvm_g_expert_args a)
{
    const mvm_k_expert_fmt f = {MVM_W_Q8_0, MVM_W_Q8_0, (enum mvm_k_glu)a.glu, 0};
    const uint32_t e = U32(a.active)[blockIdx.y], c0 = blockIdx.x * MVM_QBLOCK;
    const uint32_t r0 = U32(a.off)[e], nr = U32(a.cnt)[e];
    const uint32_t G = (uint32_t)mvm_k_expert_group_channels(f), s0 = c0 % G;
    const uint64_t row = mvm_k_row_bytes(MVM_W_Q8_0, a.n_embd);
    const uint64_t group = mvm_k_expert_group_bytes(f, a.n_embd);
    const uint8_t *gate = expert_base(a, e) + c0 / G * group;
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
        mmq_tile(s, a.n_embd / MVM_QBLOCK, sizeof(mvm_block_q8_0), sizeof(mvm_block_q8_0), acc);
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                dots[part][8 * j + 2 * t + (i & 1)][c + 8 * (i >> 1)] = acc[j][i];
        __syncthreads();
        for (uint32_t k = threadIdx.x; k < nt * MVM_QBLOCK; k += blockDim.x) {
            const uint32_t n = k / MVM_QBLOCK, ch = k % MVM_QBLOCK;
            dots[0][n][ch] = expert_unit(a, gate + group, G, s0 + ch, dots[0][n][ch],
                                         dots[1][n][ch], r0 + t0 + n);
        }
        __syncthreads();
        for (uint32_t n = threadIdx.x; n < nt; n += blockDim.x)
            mvm_k_q8_0_block(dots[0][n], (mvm_block_q8_0 *)((uint8_t *)a.h +
                                                            (uint64_t)(r0 + t0 + n) * a.h_stride) +
                                             c0 / MVM_QBLOCK);
        /* dots is the next tile's once mmq_tile's first barrier is passed */
    }
}

/* A block per (64 outputs, active expert): their down rows, a gather of one block a group
 * (down_row), against every row of the expert's h; out[r][j] plus gpt-oss's down bias
 * weighted by the row's routing weight, as expert.cu's down. */
extern "C" __global__ void __launch_bounds__(MVM_G_THREADS)
    mvm_g_expert_mmq_down_q8_0(mvm_g_expert_args a)
{
    const mvm_k_expert_fmt f = {MVM_W_Q8_0, MVM_W_Q8_0, (enum mvm_k_glu)a.glu, 0};
    const uint32_t e = U32(a.active)[blockIdx.y], j0 = blockIdx.x * MMQ_M;
    const uint32_t r0 = U32(a.off)[e], nr = U32(a.cnt)[e];
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
        mmq_tile(s, a.n_groups, group, sizeof(mvm_block_q8_0), acc);
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
