/*
 * A prompt's routed experts on the tensor cores, in integers (kernels/cuda/kernels.h,
 * mvm_g_expert_mmq_*): the int8 mma.sync of Ampere and later (m16n8k32, s8 in, s32 out) on
 * the weights as they lie in the expert space: Q8_0 and the table types (IQ4_NL, and
 * MXFP4: gpt-oss's experts, their nibbles looked up as int8 values) against the Q8_0
 * activation blocks, and the K-quants of Q2_K, Q3_K_M, Q4_K_M, Q5_K_M and Q6_K files (Q2_K,
 * Q3_K, Q4_K, Q5_K, Q6_K) and IQ4_XS (IQ4_NL's table in super-blocks) against Q8_K blocks, each
 * block's integers scaled as the CPU scales them (kernels/blocks.h: mvm_k_qfloat for a
 * Q8_0 block, mvm_k_kscale for a K super-block from its integer sums), the blocks added in
 * order. This is llama.cpp's mul_mat_q for MoE
 * (mul_mat_id with its ids): no F16 copy of the weights, and all of a step's experts in two
 * launches whatever their row counts. The same tiles make a prompt batch's dense products
 * (mvm_g_mmq_matmul: matvec's arguments, a block 64 rows by 64 tokens), as llama.cpp's
 * mul_mat_q makes every quantized product of a batch.
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
 * super-block), unpacked to bytes (Q2_K's two bits, Q3_K's three, Q4_K's nibbles, Q5_K's
 * five, Q6_K's six; IQ4_XS's and the table types' looked up), two 16-bit loads a word where a block's
 * quants are only 2-byte aligned (MXFP4's a byte a load), 16 bytes a load for Q4_K and Q5_K
 * weights that are 16-byte aligned, rows of 36 words so that the 32 lanes'
 * fragment loads hit 32 banks. Each thread issues all of a stage's loads before its stores
 * to shared memory (mmq_load_words: until 2026-11-30 each load waited for the store before
 * it, a round trip to memory per word, 16 to 32 of them a thread a stage, and each word's
 * place in its row was worked out again, ~50 instructions a word; now ~10,
 * bench/gpu/sass.sh). The integers
 * stay integers to a block's end: a Q8_0 block's sum is scaled at once; a K super-block's
 * sums, its sub-blocks' weighted by their scales (Q4_K's and Q5_K's mins by the
 * activations' sums: Q8_K's bsums), are scaled after its eighth,
 * as the CPU's. Q6_K's, Q3_K's and Q2_K's scales are per 16: each 32 takes two products, the
 * other half of A zero, and their quants stay unsigned with the activations' sums taking
 * off their offset (32, 4), or Q2_K's mins (per 16 too).
 * Up ends in the unit (SwiGLU, or gpt-oss's) and writes h as expert.cu's up does (Q8_0
 * blocks; with a K down, floats into hf for mvm_g_expert_quantize); down writes out.
 *
 * The PTX is compute_80 (CMakeLists.txt): engine/compute/gpu.c loads this module only where
 * the device takes it, and without it the engine keeps the other paths.
 */
#include "kernels/cuda/expert.cuh"

#define MMQ_M MVM_G_MMQ_TILE   /* weight rows a block (kernels.h) */
#define MMQ_N MVM_G_MMQ_TILE   /* an expert's rows (a batch's tokens) a tile */
#define MMQ_ROWS (MMQ_M + MMQ_N)
#define MMQ_KB 4               /* 32-element sub-blocks of K staged at a time */
#define MMQ_S (MMQ_KB * 8 + 4) /* words a staged row: the quants, and 4 words of padding */
/* W is a K-quant (super-blocks of 256 against Q8_K), not a 32-element Q type (Q8_0, IQ4_NL,
 * MXFP4: against Q8_0 blocks, one scale a block, no min) */
#define MMQ_K(W)                                                                           \
    ((W) == MVM_W_Q2_K || (W) == MVM_W_Q3_K || (W) == MVM_W_Q4_K || (W) == MVM_W_Q5_K ||      \
     (W) == MVM_W_Q6_K || (W) == MVM_W_IQ4_XS)

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
 * for each of its sub-blocks), s (Q4_K, Q5_K: its scale and min; Q6_K: its two scales;
 * Q8_K: its two bsums, or with Q4_K or Q5_K weights their sum and the second), and a K
 * weight super-block's d and dmin (dk). base[i]: row i's first block; a row's blocks are
 * wstep (weights) or xstep (activations) bytes apart. */
struct alignas(16) mmq_stage { /* 16-byte aligned rows (MMQ_S words) for 16-byte stores */
    int q[MMQ_ROWS][MMQ_S];
    float d[MMQ_ROWS][MMQ_KB];
    int s[MMQ_ROWS][MMQ_KB][2];
    float dk[MMQ_M][2];
    const uint8_t *base[MMQ_ROWS];
};

/* The stage's loads go through the read-only cache (__ldg): the weights, and activations
 * that an earlier launch wrote, are not written while a kernel runs. Being global loads,
 * not generic ones through s.base's pointers, they cannot alias the stage's stores, so a
 * thread's loads all go out before it stores any (each waited for the store before it). */
static __device__ __forceinline__ int mmq_word(const uint8_t *p) /* word_at's, 2-byte aligned */
{
    const uint16_t *h = (const uint16_t *)p;
    return (int)((uint32_t)__ldg(h) | (uint32_t)__ldg(h + 1) << 16);
}

/* Word w (quants 4w..4w+3) of a table type's block (IQ4_NL, MXFP4; an IQ4_XS sub-block:
 * 16 bytes of nibbles at qs, quant j < 16 the low nibble of qs[j], quant 16 + j its high
 * one, each an index into the type's 16 int8 values, IQ4_XS's IQ4_NL's; kernels/blocks.h):
 * the four indices' values, looked up with byte permutes as llama.cpp's
 * get_int_from_table_16 does. The table's halves (values 0-7, 8-15) are each two words; a
 * permute picks bytes by the index's low 3 bits from either, a third by its bit 3 between
 * the two picks. q: the 4 bytes of nibbles (qs + 4 (w % 4)). */
template <enum mvm_wtype W>
static __device__ __forceinline__ int table_word(uint32_t q, uint32_t w)
{
    const uint64_t lo = W == MVM_W_MXFP4 ? MVM_K_MXFP4_LO : MVM_K_IQ4NL_LO;
    const uint64_t hi = W == MVM_W_MXFP4 ? MVM_K_MXFP4_HI : MVM_K_IQ4NL_HI;
    const uint32_t x = w < 4 ? q & 0x0F0F0F0F : q >> 4 & 0x0F0F0F0F;
    /* the four indices as a permute's selector nibbles */
    const uint32_t s4 = (x & 0xF) | (x >> 4 & 0xF0) | (x >> 8 & 0xF00) | (x >> 12 & 0xF000);
    const uint32_t a = __byte_perm((uint32_t)lo, (uint32_t)(lo >> 32), s4 & 0x7777);
    const uint32_t b = __byte_perm((uint32_t)hi, (uint32_t)(hi >> 32), s4 & 0x7777);
    return (int)__byte_perm(a, b, 0x3210 | (s4 & 0x8888) >> 1);
}

/* Word w (quants 4w..4w+3) of sub-block c (< 8) of K super-block blk, unpacked to bytes:
 * Q2_K's two bits (0..3), Q3_K's three (0..7), Q4_K's nibbles, Q5_K's five bits, Q6_K's six
 * bits (0..63); kernels/blocks.h's layouts. */
template <enum mvm_wtype W>
static __device__ __forceinline__ int k_word(const uint8_t *blk, uint32_t c, uint32_t w)
{
    if (W == MVM_W_Q4_K)
        return mmq_word(((const mvm_block_q4_K *)blk)->qs + 32 * (c / 2) + 4 * w) >>
                   (4 * (c % 2)) & 0x0F0F0F0F;
    if (W == MVM_W_IQ4_XS) /* IQ4_NL's lookup, a sub-block's 16 bytes of nibbles */
        return table_word<W>((uint32_t)mmq_word(((const mvm_block_iq4_xs *)blk)->qs + 16 * c +
                                                4 * (w % 4)),
                             w);
    if (W == MVM_W_Q2_K) /* two bits of qs (kernels/blocks.h) */
        return mmq_word(((const mvm_block_q2_K *)blk)->qs + 32 * (c / 4) + 4 * w) >>
                   (2 * (c % 4)) & 0x03030303;
    if (W == MVM_W_Q3_K) { /* two bits of qs and hmask's third (kernels/blocks.h) */
        const mvm_block_q3_K *x = (const mvm_block_q3_K *)blk;
        const uint32_t h = c / 4, j = c % 4;
        return (mmq_word(x->qs + 32 * h + 4 * w) >> (2 * j) & 0x03030303) |
               (mmq_word(x->hmask + 4 * w) >> (4 * h + j) & 0x01010101) << 2;
    }
    if (W == MVM_W_Q5_K) { /* Q4_K's nibbles, and bit c of qh as the fifth bit */
        const mvm_block_q5_K *x = (const mvm_block_q5_K *)blk;
        return (mmq_word(x->qs + 32 * (c / 2) + 4 * w) >> (4 * (c % 2)) & 0x0F0F0F0F) |
               (mmq_word(x->qh + 4 * w) >> c & 0x01010101) << 4;
    }
    const mvm_block_q6_K *x = (const mvm_block_q6_K *)blk;
    const uint32_t h = c / 4, k = c % 4;
    const int lo = mmq_word(x->ql + 64 * h + 32 * (k & 1) + 4 * w) >> (4 * (k >> 1)) & 0x0F0F0F0F;
    return lo | (mmq_word(x->qh + 32 * h + 4 * w) >> (2 * k) & 0x03030303) << 4;
}

/* The stage's four sub-blocks of Q4_K or Q5_K weight rows (k0 a multiple of MMQ_KB:
 * sub-blocks 0..3 or 4..7 of super-block k0 / 8), 16-byte loads: 16 bytes of nibbles hold
 * four words of an even sub-block (the low nibbles) and the same four of the odd one after
 * it (the high), as k_word unpacks them; for Q5_K the 16 bytes of qh at the same quants
 * hold their fifth bits. 2 loads a thread a stage (Q5_K: 4) where the word loads took 32
 * of 16 bits (Q5_K: 64); the block's threads (MVM_G_THREADS) take the 64 rows' 4 chunks. */
template <enum mvm_wtype W>
static __device__ __forceinline__ void mmq_load_k4_rows(mmq_stage &s, uint32_t k0,
                                                        uint64_t wstep)
{
    const uint32_t M = 0x0F0F0F0F, half = k0 / MMQ_KB % 2, n = MMQ_M * 4 / MVM_G_THREADS;
    const bool q5 = W == MVM_W_Q5_K;
    uint4 v[n], h[n];
#pragma unroll
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t r = (threadIdx.x + i * MVM_G_THREADS) / 4, j = threadIdx.x % 4;
        const uint8_t *b = s.base[r] + k0 / 8 * wstep;
        const uint8_t *qs =
            q5 ? ((const mvm_block_q5_K *)b)->qs : ((const mvm_block_q4_K *)b)->qs;
        v[i] = __ldg((const uint4 *)(qs + 64 * half + 16 * j));
        if (q5)
            h[i] = __ldg((const uint4 *)(((const mvm_block_q5_K *)b)->qh + 16 * (j % 2)));
    }
#pragma unroll
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t r = (threadIdx.x + i * MVM_G_THREADS) / 4, j = threadIdx.x % 4;
        const uint32_t kb = j / 2 * 2, w = j % 2 * 4, c = 4 * half + kb; /* c: the even one */
        uint4 lo = make_uint4(v[i].x & M, v[i].y & M, v[i].z & M, v[i].w & M);
        uint4 hi = make_uint4(v[i].x >> 4 & M, v[i].y >> 4 & M, v[i].z >> 4 & M,
                              v[i].w >> 4 & M);
        if (q5) {
            const uint32_t B = 0x01010101;
            lo.x |= (h[i].x >> c & B) << 4, lo.y |= (h[i].y >> c & B) << 4;
            lo.z |= (h[i].z >> c & B) << 4, lo.w |= (h[i].w >> c & B) << 4;
            hi.x |= (h[i].x >> (c + 1) & B) << 4, hi.y |= (h[i].y >> (c + 1) & B) << 4;
            hi.z |= (h[i].z >> (c + 1) & B) << 4, hi.w |= (h[i].w >> (c + 1) & B) << 4;
        }
        *(uint4 *)&s.q[r][kb * 8 + w] = lo;
        *(uint4 *)&s.q[r][(kb + 1) * 8 + w] = hi;
    }
}

/* Rows first .. first + n - 1 of the stage (WT: weights' rows, of type W, below MMQ_M; else
 * the tile's activations', Q8_0 blocks with a 32-element W, else Q8_K), sub-blocks k0 .. k0 + nkb
 * - 1 of K, step bytes a row's block to the next: their quants as words, n <= MMQ_M. A
 * thread takes one word of one sub-block in every fourth row (the block's MVM_G_THREADS), so
 * that the word's place in a row is worked out once a stage, and a warp's loads read a
 * row's 4 sub-blocks side by side, a sub-block's 8 words in 8 lanes. A Q8_0 block's quants
 * are 2-byte aligned, two 16-bit loads a word; a Q8_K block's, 4-byte aligned as its float
 * d, a word a load. */
template <enum mvm_wtype W, bool WT>
static __device__ __forceinline__ void mmq_load_words(mmq_stage &s, uint32_t first, uint32_t n,
                                                      uint32_t k0, uint32_t nkb, uint64_t step)
{
    const bool K = MMQ_K(W);
    const uint32_t pass = MVM_G_THREADS / (8 * MMQ_KB); /* rows a pass of the block: 4 */
    const uint32_t w = threadIdx.x % 8, kb = threadIdx.x / 8 % MMQ_KB, k = k0 + kb;
    const uint32_t r0 = first + threadIdx.x / (8 * MMQ_KB);
    if (kb >= nkb)
        return;
    const uint64_t off = (K ? k / 8 : k) * step; /* the word's block from a row's first */
    int v[MMQ_M / pass];
#pragma unroll
    for (uint32_t i = 0; i < MMQ_M / pass; i++) {
        const uint32_t r = r0 + pass * i;
        if (r >= first + n)
            break;
        const uint8_t *blk = s.base[r] + off;
        if (W == MVM_W_MXFP4 && WT) { /* 17-byte blocks: the nibbles only byte-aligned */
            const uint8_t *q = blk + 1 + 4 * (w % 4);
            v[i] = table_word<W>((uint32_t)__ldg(q) | (uint32_t)__ldg(q + 1) << 8 |
                                     (uint32_t)__ldg(q + 2) << 16 | (uint32_t)__ldg(q + 3) << 24,
                                 w);
        } else if (W == MVM_W_IQ4_NL && WT)
            v[i] = table_word<W>((uint32_t)mmq_word(blk + 2 + 4 * (w % 4)), w);
        else if (!K)
            v[i] = mmq_word(blk + 2 + 4 * w);
        else if (!WT)
            v[i] = __ldg(
                (const int *)(((const mvm_block_q8_K *)blk)->qs + 32 * (k % 8) + 4 * w));
        else
            v[i] = k_word<W>(blk, k % 8, w);
    }
#pragma unroll
    for (uint32_t i = 0; i < MMQ_M / pass; i++) {
        const uint32_t r = r0 + pass * i;
        if (r >= first + n)
            break;
        s.q[r][kb * 8 + w] = v[i];
    }
}

/* The same rows' scales of the stage's sub-blocks (mmq_stage's d, s, dk): a thread takes
 * one sub-block in every 32nd row, its loads, as mmq_load_words's, before its stores. */
template <enum mvm_wtype W, bool WT>
static __device__ __forceinline__ void mmq_load_scales(mmq_stage &s, uint32_t first, uint32_t n,
                                                       uint32_t k0, uint32_t nkb, uint64_t step)
{
    const bool K = MMQ_K(W);
    const uint32_t pass = MVM_G_THREADS / MMQ_KB; /* rows a pass of the block: 32 */
    const uint32_t kb = threadIdx.x % MMQ_KB, k = k0 + kb, c = k % 8;
    const uint32_t r0 = first + threadIdx.x / MMQ_KB;
    if (kb >= nkb)
        return;
    const uint64_t off = (K ? k / 8 : k) * step;
    float d[MMQ_M / pass], dm[MMQ_M / pass];
    int s0[MMQ_M / pass], s1[MMQ_M / pass];
#pragma unroll
    for (uint32_t i = 0; i < MMQ_M / pass; i++) {
        const uint32_t r = r0 + pass * i;
        if (r >= first + n)
            break;
        const uint8_t *blk = s.base[r] + off;
        if (W == MVM_W_MXFP4 && WT) { /* its power of two, halved (kernels/blocks.h) */
            d[i] = mvm_k_e8m0_half(__ldg(blk));
        } else if (!K) {
            d[i] = mvm_k_h2f(__ldg((const uint16_t *)blk));
        } else if (!WT) {
            const mvm_block_q8_K *a = (const mvm_block_q8_K *)blk;
            d[i] = __ldg(&a->d);
            s0[i] = __ldg(&a->bsums[2 * c]), s1[i] = __ldg(&a->bsums[2 * c + 1]);
            if (W == MVM_W_Q4_K || W == MVM_W_Q5_K) /* their mins take the whole sum */
                s0[i] += s1[i];
        } else if (W == MVM_W_Q4_K || W == MVM_W_Q5_K) { /* Q5_K's d, dmin, scales: Q4_K's */
            const mvm_block_q4_K *x = (const mvm_block_q4_K *)blk;
            /* mvm_k_scale_min's bytes: c, c + 4 (c < 4); c - 4, c, c + 4 */
            const uint8_t *q = x->scales;
            const uint32_t a = __ldg(q + c + 4), b = __ldg(q + (c < 4 ? c : c - 4));
            const uint32_t cc = c < 4 ? 0 : __ldg(q + c);
            s0[i] = c < 4 ? b & 63 : (a & 0xF) | (b >> 6) << 4;
            s1[i] = c < 4 ? a & 63 : a >> 4 | (cc >> 6) << 4;
            d[i] = kb == 0 ? mvm_k_h2f(__ldg(&x->d)) : 0.0f;
            dm[i] = kb == 0 ? mvm_k_h2f(__ldg(&x->dmin)) : 0.0f;
        } else if (W == MVM_W_IQ4_XS) { /* scale c (kernels/blocks.h), less 32; no min */
            const mvm_block_iq4_xs *x = (const mvm_block_iq4_xs *)blk;
            s0[i] = (int)((__ldg(&x->scales_l[c / 2]) >> (4 * (c % 2)) & 0xF) |
                          (__ldg(&x->scales_h) >> (2 * c) & 3) << 4) -
                    32;
            s1[i] = 0;
            d[i] = kb == 0 ? mvm_k_h2f(__ldg(&x->d)) : 0.0f, dm[i] = 0;
        } else if (W == MVM_W_Q2_K) { /* scales 2c, 2c + 1: a scale and a min nibble each,
                                         the two halves' packed in 16 bits */
            const mvm_block_q2_K *x = (const mvm_block_q2_K *)blk;
            const uint32_t lo = __ldg(&x->scales[2 * c]), hi = __ldg(&x->scales[2 * c + 1]);
            s0[i] = (int)((lo & 0xF) | (hi & 0xF) << 16);
            s1[i] = (int)(lo >> 4 | (hi >> 4) << 16);
            d[i] = kb == 0 ? mvm_k_h2f(__ldg(&x->d)) : 0.0f;
            dm[i] = kb == 0 ? mvm_k_h2f(__ldg(&x->dmin)) : 0.0f;
        } else if (W == MVM_W_Q3_K) { /* scales 2c, 2c + 1 (mvm_k_q3_scales), less 32 */
            const mvm_block_q3_K *x = (const mvm_block_q3_K *)blk;
            const uint32_t lo = __ldg(&x->scales[2 * c % 8]);
            const uint32_t lo1 = __ldg(&x->scales[(2 * c + 1) % 8]);
            const uint32_t top = __ldg(&x->scales[8 + 2 * c % 4]);
            const uint32_t top1 = __ldg(&x->scales[8 + (2 * c + 1) % 4]);
            const uint32_t n = 2 * c < 8 ? 0 : 4; /* the low nibbles for scales 0-7 */
            s0[i] = (int)((lo >> n & 0xF) | (top >> (2 * (2 * c / 4)) & 3) << 4) - 32;
            s1[i] = (int)((lo1 >> n & 0xF) | (top1 >> (2 * ((2 * c + 1) / 4)) & 3) << 4) - 32;
            d[i] = kb == 0 ? mvm_k_h2f(__ldg(&x->d)) : 0.0f, dm[i] = 0;
        } else {
            const mvm_block_q6_K *x = (const mvm_block_q6_K *)blk;
            s0[i] = __ldg(&x->scales[2 * c]), s1[i] = __ldg(&x->scales[2 * c + 1]);
            d[i] = kb == 0 ? mvm_k_h2f(__ldg(&x->d)) : 0.0f, dm[i] = 0;
        }
    }
#pragma unroll
    for (uint32_t i = 0; i < MMQ_M / pass; i++) {
        const uint32_t r = r0 + pass * i;
        if (r >= first + n)
            break;
        if (!K || !WT)
            s.d[r][kb] = d[i];
        if (K)
            s.s[r][kb][0] = s0[i], s.s[r][kb][1] = s1[i];
        if (K && WT && kb == 0)
            s.dk[r][0] = d[i], s.dk[r][1] = dm[i];
    }
}

/* Sub-blocks k0 .. k0 + nkb - 1 of the weights' rows (wstep bytes a block to the next) and
 * of the tile's first 8 nj activation rows (xstep) into s. aligned16 (Q4_K or Q5_K weights
 * whose super-blocks are 16-byte aligned): the weights' quants by mmq_load_k4_rows. */
template <enum mvm_wtype W>
static __device__ void mmq_load(mmq_stage &s, uint32_t k0, uint32_t nkb, uint32_t nj,
                                uint64_t wstep, uint64_t xstep, bool aligned16)
{
    if ((W == MVM_W_Q4_K || W == MVM_W_Q5_K) && aligned16 && nkb == MMQ_KB)
        mmq_load_k4_rows<W>(s, k0, wstep);
    else
        mmq_load_words<W, true>(s, 0, MMQ_M, k0, nkb, wstep);
    mmq_load_words<W, false>(s, MMQ_M, 8 * nj, k0, nkb, xstep);
    mmq_load_scales<W, true>(s, 0, MMQ_M, k0, nkb, wstep);
    mmq_load_scales<W, false>(s, MMQ_M, 8 * nj, k0, nkb, xstep);
}

/* acc[j][i]: this lane's part of the tile, the warp's 16 weight rows against the tile's
 * rows, over nk sub-blocks of K (the rows' bases set in s; aligned16: mmq_load's): c[i] of
 * the product against the tile's rows 8j.. (mma_s8's layout), for the first nj groups of 8
 * rows (an expert of 32 rows, a Qwen3-30B-A3B one's at pp512, skips half the tile's loads
 * and products; acc's other groups stay 0). Every thread of the block must call it. */
template <enum mvm_wtype W>
static __device__ void mmq_tile(mmq_stage &s, uint32_t nk, uint32_t nj, uint64_t wstep,
                                uint64_t xstep, bool aligned16, float acc[8][4])
{
    const bool K = MMQ_K(W);
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
        mmq_load<W>(s, k0, nkb, nj, wstep, xstep, aligned16);
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
                if (!K) {
                    mma_s8(c, a, b);
                    const float dw0 = s.d[m][kb], dw1 = s.d[m + 8][kb];
                    const float dx0 = s.d[n0][kb], dx1 = s.d[n1][kb];
                    /* the CPU's float of a block: sum * (d_w * d_a) */
                    acc[j][0] += (float)c[0] * (dw0 * dx0);
                    acc[j][1] += (float)c[1] * (dw0 * dx1);
                    acc[j][2] += (float)c[2] * (dw1 * dx0);
                    acc[j][3] += (float)c[3] * (dw1 * dx1);
                } else if (W == MVM_W_Q4_K || W == MVM_W_Q5_K || W == MVM_W_IQ4_XS) {
                    mma_s8(c, a, b);
                    isum[j][0] += sw0[0] * c[0], isum[j][1] += sw0[0] * c[1];
                    isum[j][2] += sw1[0] * c[2], isum[j][3] += sw1[0] * c[3];
                    if (W != MVM_W_IQ4_XS) { /* IQ4_XS: a scale a sub-block, no min */
                        const int bs0 = s.s[n0][kb][0], bs1 = s.s[n1][kb][0];
                        msum[j][0] += sw0[1] * bs0, msum[j][1] += sw0[1] * bs1;
                        msum[j][2] += sw1[1] * bs0, msum[j][3] += sw1[1] * bs1;
                    }
                } else if (W == MVM_W_Q2_K) { /* a product per 16 quants, its scale, and
                                                 its min x its sums */
                    const int lo[4] = {a[0], a[1], 0, 0}, hi[4] = {0, 0, a[2], a[3]};
                    int ch[4] = {0, 0, 0, 0};
                    mma_s8(c, lo, b);
                    mma_s8(ch, hi, b);
                    const int *x0 = s.s[n0][kb], *x1 = s.s[n1][kb];
                    const int a0 = sw0[0] & 0xFFFF, a1 = sw0[0] >> 16;
                    const int b0 = sw1[0] & 0xFFFF, b1 = sw1[0] >> 16;
                    const int ma0 = sw0[1] & 0xFFFF, ma1 = sw0[1] >> 16;
                    const int mb0 = sw1[1] & 0xFFFF, mb1 = sw1[1] >> 16;
                    isum[j][0] += a0 * c[0] + a1 * ch[0], isum[j][1] += a0 * c[1] + a1 * ch[1];
                    isum[j][2] += b0 * c[2] + b1 * ch[2], isum[j][3] += b0 * c[3] + b1 * ch[3];
                    msum[j][0] += ma0 * x0[0] + ma1 * x0[1];
                    msum[j][1] += ma0 * x1[0] + ma1 * x1[1];
                    msum[j][2] += mb0 * x0[0] + mb1 * x0[1];
                    msum[j][3] += mb0 * x1[0] + mb1 * x1[1];
                } else { /* Q6_K, Q3_K: a product per 16 quants, each less its offset (32,
                            4) x its sums */
                    const int O = W == MVM_W_Q3_K ? 4 : 32;
                    const int lo[4] = {a[0], a[1], 0, 0}, hi[4] = {0, 0, a[2], a[3]};
                    int ch[4] = {0, 0, 0, 0};
                    mma_s8(c, lo, b);
                    mma_s8(ch, hi, b);
                    const int *x0 = s.s[n0][kb], *x1 = s.s[n1][kb];
                    isum[j][0] += sw0[0] * (c[0] - O * x0[0]) + sw0[1] * (ch[0] - O * x0[1]);
                    isum[j][1] += sw0[0] * (c[1] - O * x1[0]) + sw0[1] * (ch[1] - O * x1[1]);
                    isum[j][2] += sw1[0] * (c[2] - O * x0[0]) + sw1[1] * (ch[2] - O * x0[1]);
                    isum[j][3] += sw1[0] * (c[3] - O * x1[0]) + sw1[1] * (ch[3] - O * x1[1]);
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
    const uint64_t xstep = MMQ_K(GU) ? sizeof(mvm_block_q8_K) : sizeof(mvm_block_q8_0);
    const uint8_t *gate = expert_base(a, e) + c0 / G * group;
    const bool k_down = mvm_k_is_k(f.down);
    /* the rows are gate + a multiple of row, their super-blocks wstep (144 bytes) apart */
    const bool aligned16 = ((uintptr_t)gate | row) % 16 == 0;
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
        mmq_tile<GU>(s, a.n_embd / MVM_QBLOCK, (nt + 7) / 8, wstep, xstep, aligned16, acc);
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
    const uint64_t xstep = MMQ_K(DN) ? sizeof(mvm_block_q8_K) : sizeof(mvm_block_q8_0);
    const uint64_t group = mvm_k_expert_group_bytes(f, a.n_embd);
    /* the rows are down_row's, a row's bytes apart, their super-blocks a group apart */
    const bool aligned16 =
        ((uintptr_t)down_row(a, f, e, 0) | mvm_k_row_bytes(DN, G) | group) % 16 == 0;
    __shared__ mmq_stage s;
    for (uint32_t i = threadIdx.x; i < MMQ_M; i += blockDim.x)
        s.base[i] = down_row(a, f, e, j0 + i < a.n_embd ? j0 + i : a.n_embd - 1);
    const uint32_t lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const uint32_t m = (threadIdx.x >> 5) * 16 + g;
    for (uint32_t t0 = 0; t0 < nr; t0 += MMQ_N) {
        const uint32_t nt = nr - t0 < MMQ_N ? nr - t0 : MMQ_N;
        mmq_rows(s, a, false, r0, t0, nt);
        float acc[8][4];
        mmq_tile<DN>(s, a.n_groups * G / MVM_QBLOCK, (nt + 7) / 8, group, xstep, aligned16,
                     acc);
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

/* A block per (64 rows of one of up to three matrices; 64 tokens of one head): matvec's
 * product (kernels.h, mvm_g_mmq_matmul) of a prompt batch's dense weights (attention,
 * shared experts, dense FFNs, the output), each block's weight rows re-read from L2 for
 * each of the batch's tiles of tokens as llama.cpp's mul_mat_q does for these matrices,
 * where the F16 path dequantized every matrix into a scratch copy first (24 µs a 2048 x
 * 2048 Q4_K matrix on an H200, docs/perf/engine.md, session 106) and converted the inputs
 * to F16 before cuBLAS. The sums are the CPU's blocks in order, as the experts'. */
template <enum mvm_wtype W> static __device__ void mmq_matmul(const mvm_g_matvec_args &a)
{
    uint32_t bx = blockIdx.x;
    const matvec_part p = matvec_part_of(a, MMQ_M, bx); /* the matrix of the block's rows */
    const uint32_t rows = p.rows;
    const uint32_t tiles = mvm_g_div_up(a.n_tok, MMQ_N), head = blockIdx.y / tiles;
    const uint32_t j0 = bx * MMQ_M, t0 = blockIdx.y % tiles * MMQ_N;
    const uint32_t nt = a.n_tok - t0 < MMQ_N ? a.n_tok - t0 : MMQ_N;
    const uint8_t *wh = (const uint8_t *)p.w + head * a.w_head;
    const uint8_t *act = (const uint8_t *)a.act + head * a.act_head;
    float *yh = (float *)p.y + head * a.y_head;
    const uint64_t wstep = mvm_k_row_bytes(W, (uint32_t)mvm_k_block_elems(W));
    const uint64_t xstep = MMQ_K(W) ? sizeof(mvm_block_q8_K) : sizeof(mvm_block_q8_0);
    const bool aligned16 = ((uintptr_t)wh | a.row_bytes) % 16 == 0;
    __shared__ mmq_stage s;
    /* rows past the matrix's repeat its last, tokens past the batch's its tile's first:
     * computed, never written */
    for (uint32_t i = threadIdx.x; i < MMQ_M; i += blockDim.x)
        s.base[i] = wh + (uint64_t)(j0 + i < rows ? j0 + i : rows - 1) * a.row_bytes;
    for (uint32_t n = threadIdx.x; n < MMQ_N; n += blockDim.x)
        s.base[MMQ_M + n] = act + (uint64_t)(t0 + (n < nt ? n : 0)) * a.act_stride;
    float acc[8][4];
    mmq_tile<W>(s, a.n_in / MVM_QBLOCK, (nt + 7) / 8, wstep, xstep, aligned16, acc);
    const uint32_t lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const uint32_t m = (threadIdx.x >> 5) * 16 + g;
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t n = 8 * j + 2 * t + (i & 1), jo = j0 + m + 8 * (i >> 1);
            if (n >= nt || jo >= rows)
                continue;
            float *out = yh + (uint64_t)(t0 + n) * p.y_stride + jo;
            *out = a.accumulate ? *out + acc[j][i] : acc[j][i];
        }
}

/* Each mmq type's kernels (kernels.h, MVM_G_MMQ_TYPES) */
#define MMQ_KERNELS(name, T)                                                                   \
    extern "C" __global__ void __launch_bounds__(MVM_G_THREADS)                                \
        mvm_g_expert_mmq_up_##name(mvm_g_expert_args a)                                        \
    {                                                                                          \
        mmq_up<T>(a);                                                                          \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(MVM_G_THREADS)                                \
        mvm_g_expert_mmq_down_##name(mvm_g_expert_args a)                                      \
    {                                                                                          \
        mmq_down<T>(a);                                                                        \
    }                                                                                          \
    extern "C" __global__ void __launch_bounds__(MVM_G_THREADS)                                \
        mvm_g_mmq_matmul_##name(mvm_g_matvec_args a)                                           \
    {                                                                                          \
        mmq_matmul<T>(a);                                                                      \
    }
MVM_G_MMQ_TYPES(MMQ_KERNELS)
#undef MMQ_KERNELS
