/*
 * The AVX2 (with FMA and F16C) building blocks: the whole AVX2 level (dot_avx2.c) and the
 * parts of the AVX-512 levels where 512-bit vectors do not pay (avx512.h). Every function
 * carries a target attribute instead of the files being compiled with -mavx2, so the
 * project builds with default flags and this code only runs once simd.c has seen the CPU
 * support it; avx512.h compiles them for its own target.
 *
 * Float weights are widened to F32 in registers (F16 by F16C, BF16 by a 16-bit shift) and
 * multiplied with the F32 activations. The 32-element Q types meet Q8_0 activations in int8
 * as in ggml (maddubs, then madd to int32; one vpdpbusd where the level has VNNI) and each
 * block's sum is scaled by its two f16 scales (Q4_1/Q5_1 add their min times the activation
 * block's sum). The K-quants keep maddubs and madd at every level: their madd applies a
 * sub-block's scale, and VNNI's vpdpwssd in its place put a 5-cycle add on each
 * accumulator's chain (measured slower: Q4_K matmul 13.0 against 13.6 GB/s).
 * (The K-quants' blocks are in avx2_kquant.h, which this file includes at its end.)
 * Both Q kernels take 8 blocks a step, 8 blocks of a row in the dot product or 8 outputs in
 * the expert's down loop, and reduce them with one transposing hadd tree to a vector of 8
 * sums, so that the scales are converted 8 at a time and the stores stay vector-wide.
 *
 * Every kernel takes n_tok tokens (a constant 1..MVM_K_NT once inlined into the level's
 * entry points, dispatch.h): the weights are loaded and unpacked once and each token then
 * does exactly the arithmetic it would do alone, in the same order, so a batch gives the
 * same bits as one token at a time.
 *
 * Every weight stream is prefetched MVM_K_PREFETCH bytes ahead: with a dozen or more
 * instructions per cache line, out-of-order execution alone does not keep enough misses in
 * flight, and single-core bandwidth from DRAM drops by a fifth (measured: Q8_0 matvec
 * 6.9 -> 8.7 GB/s, F16 8.2 -> 9.9 GB/s on a Xeon with a 10.5 GB/s single-core read). The
 * kernels that read several rows side by side (gemm_*_avx512vnni) prefetch each row's
 * next block MVM_K_PREFETCH_ROWS ahead of where they point: so many streams that far ahead
 * would not stay in L1.
 */
#ifndef MVM_KERNELS_CPU_AVX2_H
#define MVM_KERNELS_CPU_AVX2_H

#include <immintrin.h>

#include "kernels/cpu/dispatch.h"

/* A file may compile these blocks for a wider target by defining AVX2_TARGET first, and with
 * AVX512-VNNI's fused integer dot products by defining MVM_K_VNNI 1 (avx512.h does both).
 * MVM_K_AVXVNNI 1 compiles them for the AVX-VNNI level (dot_avxvnni.c): AVX2 with vpdpbusd
 * in its VEX form, on 256-bit vectors, which Intel's cores without AVX-512 have from Alder
 * Lake on; MVM_K_VNNI follows. AVX2_LEVEL(name) is name_avx2 or name_avxvnni, the symbols of
 * the prompt kernels each of the two levels compiles for itself (tiles_avx2.h,
 * gemm_q_avx2.h). */
#ifndef MVM_K_AVXVNNI
#define MVM_K_AVXVNNI 0
#endif
#if MVM_K_AVXVNNI
#define AVX2_TARGET __attribute__((target("avx2,fma,f16c,avxvnni")))
#define MVM_K_VNNI 1
#define AVX2_LEVEL(name) name##_avxvnni
#else
#define AVX2_LEVEL(name) name##_avx2
#endif
#ifndef AVX2_TARGET
#define AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#endif
#ifndef MVM_K_VNNI
#define MVM_K_VNNI 0
#endif
/* 1 where the target has AVX-512 (avx512.h): the few blocks that gain from 512-bit vectors
 * take them (avx2_kquant.h's avx512_*_sums). */
#ifndef MVM_K_AVX512
#define MVM_K_AVX512 0
#endif
#define AVX2_INLINE MVM_K_INLINE AVX2_TARGET
/* v held as computed at this point: an empty asm that reads and writes it. A running integer
 * sum of unrolled products is associative, and GCC turns it into a tree that holds every
 * product at once; in tiles_avx2.h's loops (16 products a token before a sum is taken) that
 * spilled 4 tokens' products to the stack, and the chain kept as written ran 15-30% faster. */
#define AVX2_KEEP(v) __asm__("" : "+x"(v))

/* 4096 until session 77. 8192 took one thread's Q8_0 and Q6_K products from memory from
 * 36-38 to 39-42 GB/s on a 2-core AMD EPYC (Zen 5 class), and two threads' Q8_0 decode,
 * where the VM's memory read at 79-83 GB/s, from 171-180 to 195-212 tok/s (six
 * alternations; docs/perf/cpu.md). Where it read at 45-50 GB/s decode is at the bound
 * either way. The rows kernels kept 4096: at 8192 a Q8_0 prompt of 64 tokens fell from
 * about 1000 to 600-950 tok/s. */
#define MVM_K_PREFETCH 8192
#define MVM_K_PREFETCH_ROWS 4096

/* Prefetches the cache lines of [p, p + bytes) `ahead` bytes ahead (prefetches never fault,
 * so running past the end of the weights is harmless). */
AVX2_INLINE void avx2_prefetch_at(const uint8_t *p, size_t bytes, size_t ahead)
{
#pragma GCC unroll 16
    for (size_t o = 0; o < bytes; o += 64)
        _mm_prefetch((const char *)p + ahead + o, _MM_HINT_T0);
}

/* The same into L2 only (prefetcht1, which Zen 4 keeps out of L1). */
AVX2_INLINE void avx2_prefetch_l2_at(const uint8_t *p, size_t bytes, size_t ahead)
{
#pragma GCC unroll 16
    for (size_t o = 0; o < bytes; o += 64)
        _mm_prefetch((const char *)p + ahead + o, _MM_HINT_T1);
}

/* A stream's lines are also sent to L2 (prefetcht1) this far ahead. A prefetch into L1 holds
 * one of the core's line fill buffers until its line arrives, and an Intel core has 16 of
 * them: at a hundred nanoseconds a miss that is about 10 GB/s a core, the rate one thread's
 * Q8_0 decode stalled at (loads 8 KiB after the L1 prefetch still missing). Lines on their
 * way to L2 are tracked by its own queue, which holds three times as many. On a 2-core Intel
 * Xeon (Emerald Rapids; docs/perf/cpu.md, session 142), one thread's Q8_0 experts at one
 * token 10.1-10.2 -> 11.7 GMAC/s (2, 4, 6 x MVM_K_PREFETCH: 1.13-1.20x, 1.15-1.16x,
 * 1.09-1.17x), two threads' Q8_0 decode 61-64 -> 69-73 tok/s (3 layers), 15-19 -> 16-22
 * (16 layers). */
#define MVM_K_PREFETCH_L2 (4 * MVM_K_PREFETCH)

/* A weight stream read by itself: MVM_K_PREFETCH ahead into L1, MVM_K_PREFETCH_L2 into L2. */
AVX2_INLINE void avx2_prefetch(const uint8_t *p, size_t bytes)
{
    avx2_prefetch_at(p, bytes, MVM_K_PREFETCH);
    avx2_prefetch_l2_at(p, bytes, MVM_K_PREFETCH_L2);
}

/* One of several rows read side by side: MVM_K_PREFETCH_ROWS ahead. */
AVX2_INLINE void avx2_prefetch_rows(const uint8_t *p, size_t bytes)
{
    avx2_prefetch_at(p, bytes, MVM_K_PREFETCH_ROWS);
}

/* The same into L2 only: a row's block after the next, so that the L1 prefetch finds it
 * there. */
AVX2_INLINE void avx2_prefetch_rows_l2(const uint8_t *p, size_t bytes)
{
    avx2_prefetch_l2_at(p, bytes, MVM_K_PREFETCH_ROWS);
}

/* Tiles of a tiled matrix (kernels.h, "Expert tiles") ahead of the one in use that the next
 * is sent to L1 (avx2_prefetch_tiles): the hardware's prefetchers alone left 4 to 8
 * tokens streamed from memory at about half their speed from L2. Until session 77 it was 4
 * tiles ahead into L2 (one into L1 had been too late on the machine then), but on a 2-core
 * AMD EPYC (Zen 5 class) that left one token's products at 24 GB/s of weights against a 39
 * GB/s read and 55 from L2: the copy and the arithmetic in turn, not overlapped. Two tiles
 * ahead into L1 (4.5-6.6 KiB, about MVM_K_PREFETCH_ROWS) took an OLMoE Q4_K_M
 * expert (bench_cpu_expert_tokens) at 1, 2, 4, 8 tokens from 37, 78, 134-157, 178-182
 * GMAC/s to 55, 105, 170-173, 219-223, Q6_K's from 29 to 45 at 1 token, and 16 tokens and
 * more within noise; three or four tiles, or prefetchnta, were no better (docs/perf/cpu.md). */
#define MVM_K_TILE_AHEAD 2
/* And one tile further into L2 first (prefetcht1, which Zen 4 keeps out of L1): on a 2-core
 * AMD EPYC (Zen 4, family 25) whose memory read at 25 GB/s, the L1 prefetch alone left 8
 * tokens streamed at half their speed from L2 (60 against 120 GMAC/s); a second L1 prefetch
 * a tile further, or one alone 3 or 4 tiles ahead, did no better, an L2 prefetch 3 to 6 tiles
 * ahead took them to 93-100 (bench_cpu_expert_tokens, alternating builds: Q4_K_M's 1, 4, 8,
 * 16 tokens 26, 57, 60, 83 -> 30, 75, 100, 115 GMAC/s; Q6_K's 18, 44, 40, 63 -> 22, 61, 83,
 * 103; docs/perf/cpu.md). */
AVX2_INLINE void avx2_prefetch_tiles(const uint8_t *tile, size_t tb, const uint8_t *end)
{
    if (tile + (MVM_K_TILE_AHEAD + 1) * tb <= end)
        for (size_t o = 0; o < tb; o += 64)
            _mm_prefetch((const char *)tile + MVM_K_TILE_AHEAD * tb + o, _MM_HINT_T0);
    if (tile + (MVM_K_TILE_AHEAD + 2) * tb <= end)
        for (size_t o = 0; o < tb; o += 64)
            _mm_prefetch((const char *)tile + (MVM_K_TILE_AHEAD + 1) * tb + o, _MM_HINT_T1);
}

AVX2_INLINE float avx2_hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Lane k of the result is the sum of the 8 lanes of v[k]. */
AVX2_INLINE __m256 avx2_hsum8(const __m256 v[8])
{
    /* hadd(x, y) = [x01 x23 y01 y23 | x45 x67 y45 y67]; two rounds leave [v0..v3 partial |
     * v0..v3 other partial] and the same for v4..v7, and the halves are then added. */
    const __m256 h0 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    const __m256 h1 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(h0, h1, 0x20),
                         _mm256_permute2f128_ps(h0, h1, 0x31));
}

/* avx2_hsum8 of int32 lanes: lane k is the sum of the 8 lanes of v[k], by unpacks and adds
 * (vphaddd, like vhaddps, is several micro-ops on current cores). The Q types' block sums go
 * through it before their one conversion: their partial sums are integers below 2^24, so
 * the floats are the same as summing converted lanes in any order. */
AVX2_INLINE __m256i avx2_hsum8_i32(const __m256i v[8])
{
    __m256i q[2];
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m256i *x = v + 4 * h;
        /* [x0 x1 pairs' sums] and [x2 x3 ...]: lanes 0+2 and 1+3 of each 128-bit half */
        const __m256i s01 = _mm256_add_epi32(_mm256_unpacklo_epi32(x[0], x[1]),
                                             _mm256_unpackhi_epi32(x[0], x[1]));
        const __m256i s23 = _mm256_add_epi32(_mm256_unpacklo_epi32(x[2], x[3]),
                                             _mm256_unpackhi_epi32(x[2], x[3]));
        /* each half: x0 .. x3's sums of its four lanes */
        q[h] = _mm256_add_epi32(_mm256_unpacklo_epi64(s01, s23), _mm256_unpackhi_epi64(s01, s23));
    }
    return _mm256_add_epi32(_mm256_permute2x128_si256(q[0], q[1], 0x20),
                            _mm256_permute2x128_si256(q[0], q[1], 0x31));
}

/* The exact integer sum of the 8 int32 lanes. */
AVX2_INLINE int32_t avx2_hsum_i32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* An 8 x 8 transpose of dwords in place: v[i] lane j becomes v[j] lane i (rows' words into
 * the lanes). */
AVX2_INLINE void avx2_transpose8_i32(__m256i v[8])
{
    __m256i t[8], u[8];
#pragma GCC unroll 4
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_epi32(v[i], v[i + 1]);
        t[i + 1] = _mm256_unpackhi_epi32(v[i], v[i + 1]);
    }
#pragma GCC unroll 2
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        v[j] = _mm256_permute2x128_si256(u[j], u[j + 4], 0x20);
        v[j + 4] = _mm256_permute2x128_si256(u[j], u[j + 4], 0x31);
    }
}

/* Token i's activations, as `type`, of n_tok at base, stride bytes apart. */
#define AVX2_TOK(type, base, stride, i) ((const type *)((const uint8_t *)(base) + (i) * (stride)))

/* ---- float weights ---------------------------------------------------------------------- */

/* 8 elements of float type t at p, as F32. */
AVX2_INLINE __m256 avx2_load8(enum mvm_wtype t, const uint8_t *p)
{
    switch (t) {
    case MVM_W_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    case MVM_W_BF16:
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
    default: return _mm256_loadu_ps((const float *)p);
    }
}

AVX2_INLINE float avx2_dot_float(enum mvm_wtype t, const uint8_t *w, const float *a, size_t n)
{
    const size_t es = t == MVM_W_F32 ? 4 : 2;
    /* Four accumulators hide the FMA latency when the row is in cache (prefill). */
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const uint8_t *p = w + i * es;
        avx2_prefetch(p, 32 * es);
        s0 = _mm256_fmadd_ps(avx2_load8(t, p), _mm256_loadu_ps(a + i), s0);
        s1 = _mm256_fmadd_ps(avx2_load8(t, p + 8 * es), _mm256_loadu_ps(a + i + 8), s1);
        s2 = _mm256_fmadd_ps(avx2_load8(t, p + 16 * es), _mm256_loadu_ps(a + i + 16), s2);
        s3 = _mm256_fmadd_ps(avx2_load8(t, p + 24 * es), _mm256_loadu_ps(a + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(avx2_load8(t, w + i * es), _mm256_loadu_ps(a + i), s0);
    float s = avx2_hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++)
        s += mvm_k_elem(t, w, i) * a[i];
    return s;
}

MVM_K_DOTN_ONE_BY_ONE(AVX2_TARGET, avx2_dotn_float, avx2_dot_float, float)

/* out += s * row (dispatch.h's axpy). */
AVX2_INLINE void avx2_axpy_float(enum mvm_wtype t, const uint8_t *row, float s, float *out,
                                 size_t n)
{
    const size_t es = t == MVM_W_F32 ? 4 : 2;
    const __m256 sv = _mm256_set1_ps(s);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_fmadd_ps(sv, avx2_load8(t, row + i * es),
                                                  _mm256_loadu_ps(out + i)));
    for (; i < n; i++)
        out[i] += s * mvm_k_elem(t, row, i);
}

/* 8 partial sums of one 32-element block of float type t at p times the activations a. */
AVX2_INLINE __m256 avx2_block_float(enum mvm_wtype t, const uint8_t *p, const __m256 a[4])
{
    const size_t es = t == MVM_W_F32 ? 4 : 2;
    const __m256 lo =
        _mm256_fmadd_ps(avx2_load8(t, p), a[0], _mm256_mul_ps(avx2_load8(t, p + 8 * es), a[1]));
    const __m256 hi = _mm256_fmadd_ps(avx2_load8(t, p + 16 * es), a[2],
                                      _mm256_mul_ps(avx2_load8(t, p + 24 * es), a[3]));
    return _mm256_add_ps(lo, hi);
}

AVX2_INLINE void avx2_down_float(enum mvm_wtype t, const uint8_t *w, const float *act, float *out,
                                 size_t n)
{
    const __m256 a[4] = {_mm256_loadu_ps(act), _mm256_loadu_ps(act + 8), _mm256_loadu_ps(act + 16),
                         _mm256_loadu_ps(act + 24)};
    const size_t bytes = mvm_k_block_bytes(t);
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        avx2_prefetch(w + j * bytes, 8 * bytes);
        __m256 v[8];
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++)
            v[k] = avx2_block_float(t, w + (j + k) * bytes, a);
        _mm256_storeu_ps(out + j, _mm256_add_ps(_mm256_loadu_ps(out + j), avx2_hsum8(v)));
    }
    for (; j < n; j++)
        out[j] += avx2_hsum(avx2_block_float(t, w + j * bytes, a));
}

MVM_K_DOWNN_ONE_BY_ONE(AVX2_TARGET, avx2_downn_float, avx2_down_float, float)

/* ---- the 32-element Q types against Q8_0 activations ------------------------------------ */

/* The fifth bits of a Q5_0/Q5_1 block: bit j of the little-endian u32 at p as 0x10 in byte j
 * (each byte picks its bit from a copy of the u32's byte j / 8). */
AVX2_INLINE __m256i avx2_bits5(const uint8_t *p)
{
    uint32_t h;
    memcpy(&h, p, sizeof h);
    const __m256i spread =
        _mm256_shuffle_epi8(_mm256_set1_epi32((int)h),
                            _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                              0x0101010101010101, 0));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit),
                            _mm256_set1_epi8(0x10));
}

/* The 32 nibbles of the 16 bytes at qs, elements 0..15 from the low nibbles and 16..31 from
 * the high ones. */
AVX2_INLINE __m256i avx2_nibbles32(const uint8_t *qs)
{
    const __m128i b = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(0x0F));
}

/* The values of the 32 nibbles at qs in the table of table type t (IQ4_NL, MXFP4): one byte
 * shuffle of the table's 16 bytes. */
AVX2_INLINE __m256i avx2_table32(enum mvm_wtype t, const uint8_t *qs)
{
    const int mx = t == MVM_W_MXFP4;
    return _mm256_shuffle_epi8(
        _mm256_broadcastsi128_si256(
            _mm_set_epi64x((long long)(mx ? MVM_K_MXFP4_HI : MVM_K_IQ4NL_HI),
                           (long long)(mx ? MVM_K_MXFP4_LO : MVM_K_IQ4NL_LO))),
        avx2_nibbles32(qs));
}

/* The 32 quants of a block of type t: signed bytes for Q8_0, and for IQ4_NL and MXFP4 their
 * table's values of the nibbles; for the others the unsigned quants (avx2_nibbles32's order),
 * with the fifth bits of Q5_0/Q5_1 (avx2_qdot subtracts the bias of Q4_0/Q5_0). */
AVX2_INLINE __m256i avx2_qload(enum mvm_wtype t, const uint8_t *blk)
{
    const mvm_k_qlayout L = mvm_k_qlay(t);
    if (t == MVM_W_Q8_0)
        return _mm256_loadu_si256((const __m256i *)(blk + L.qs));
    if (mvm_k_is_table(t))
        return avx2_table32(t, blk + L.qs);
    const __m256i q = avx2_nibbles32(blk + L.qs);
    return L.qh ? _mm256_or_si256(q, avx2_bits5(blk + L.qh)) : q;
}

/* ---- a KV cache's rows of BF16 or a 32-element Q type (dispatch.h's kv_row) ------------
 * Each block's 32 values are mvm_k_dequantize's bit for bit (a quant of at most 8 bits times
 * d is exact before its one rounding; Q4_1's and Q5_1's min added after it, as there), so
 * attention over such a cache gives an F32 cache's results of those values. Why: ops.c's
 * attention converted each row with the scalar code, 2 ns an element, which made a Q8_0
 * cache's attention 5-12x an F16 one's on an AVX2 machine; now 1.2-2.5x (docs/perf/cpu.md,
 * session 135, which has the dot product and axpy on the blocks in place tried too). */

/* A block of type t's 32 values, 8 a vector. */
AVX2_INLINE void avx2_kv_block(enum mvm_wtype t, const uint8_t *blk, __m256 x[4])
{
    const mvm_k_qlayout L = mvm_k_qlay(t);
    const __m256i q = _mm256_sub_epi8(avx2_qload(t, blk), _mm256_set1_epi8((char)L.bias));
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    const __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    const __m256 d = _mm256_set1_ps(mvm_k_block_scale(t, blk));
    const __m256 m = _mm256_set1_ps(L.m ? mvm_k_h2f(mvm_k_block_h(blk, L.m)) : 0.0f);
    for (int k = 0; k < 4; k++) {
        x[k] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part[k])));
        if (L.m) /* not +0 where there is none: -0 stays -0, as mvm_k_dequantize's */
            x[k] = _mm256_add_ps(x[k], m);
    }
}

/* n elements (whole blocks) of a row as floats. */
AVX2_INLINE void avx2_kv_row(enum mvm_wtype t, const void *src, float *dst, size_t n)
{
    const uint8_t *row = src;
    if (!mvm_k_is_q(t)) { /* BF16 */
        size_t i = 0;
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(dst + i, avx2_load8(t, row + 2 * i));
        for (; i < n; i++)
            dst[i] = mvm_k_elem(t, row, i);
        return;
    }
    for (size_t b = 0; b < n / MVM_QBLOCK; b++) {
        __m256 x[4];
        avx2_kv_block(t, row + b * mvm_k_block_bytes(t), x);
        for (int k = 0; k < 4; k++)
            _mm256_storeu_ps(dst + b * MVM_QBLOCK + 8 * k, x[k]);
    }
}

/* acc plus, in each int32 lane, the sum of its four products of unsigned bytes of u with
 * signed bytes of s. Without VNNI that is maddubs then madd, whose int16 pair sums must not
 * saturate (every caller's quants are small enough); with it one vpdpbusd, the same
 * integers. */
AVX2_INLINE __m256i avx2_dpbusd(__m256i acc, __m256i u, __m256i s)
{
#if MVM_K_AVXVNNI
    return _mm256_dpbusd_avx_epi32(acc, u, s);
#elif MVM_K_VNNI
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s),
                                                   _mm256_set1_epi16(1)));
#endif
}

/* 8 partial sums of one block's w·a (w from avx2_qload), exact: each is at most 4·128·127.
 * The products are of unsigned by signed bytes (avx2_dpbusd): Q8_0 and the table
 * types give |w| and a with w's sign (|w| rather than |a|: a weight of -128 stays exact as
 * 128 while a is in [-127, 127]); the others give the unsigned quants as they are (at most
 * 2·31·127 a pair: no int16 saturation), and Q4_0/Q5_0 subtract bias·a (in int16 before the
 * one madd, or in int32 after VNNI's products), which the down loop hoists since a is the
 * same for all its outputs. */
AVX2_INLINE __m256i avx2_qdot_i32(enum mvm_wtype t, __m256i w, __m256i a)
{
    const mvm_k_qlayout L = mvm_k_qlay(t);
    const __m256i zero = _mm256_setzero_si256();
    if (t == MVM_W_Q8_0 || mvm_k_is_table(t))
        return avx2_dpbusd(zero, _mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
    if (!L.bias)
        return avx2_dpbusd(zero, w, a);
#if MVM_K_VNNI
    return _mm256_sub_epi32(avx2_dpbusd(zero, w, a),
                            avx2_dpbusd(zero, _mm256_set1_epi8((char)L.bias), a));
#else
    /* the bias's products subtracted in int16, before the one madd */
    const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(w, a),
                                       _mm256_maddubs_epi16(_mm256_set1_epi8((char)L.bias), a));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
#endif
}

/* avx2_qdot_i32 as floats (exact). */
AVX2_INLINE __m256 avx2_qdot(enum mvm_wtype t, __m256i w, __m256i a)
{
    return _mm256_cvtepi32_ps(avx2_qdot_i32(t, w, a));
}

/* 8 partial sums of an activation block's quants (the min term of Q4_1/Q5_1), exact. */
AVX2_INLINE __m256i avx2_qsum_i32(__m256i a)
{
    return avx2_dpbusd(_mm256_setzero_si256(), _mm256_set1_epi8(1), a);
}

/* avx2_qsum_i32 as floats. */
AVX2_INLINE __m256 avx2_qsum(__m256i a)
{
    return _mm256_cvtepi32_ps(avx2_qsum_i32(a));
}

/* The f16s at byte `off` of 8 Q blocks at p, `bytes` apart, as floats: their scales (off 0)
 * or their mins (off L.m). */
AVX2_INLINE __m256 avx2_scales8(const uint8_t *p, size_t bytes, size_t off)
{
#if MVM_K_AVX512
    /* With AVX-512 each half's four lie in a 128-byte window, picked by one two-source word
     * permute: the first window at p, the second at the fifth block or, for blocks under
     * 32 bytes, ending with the eighth, so neither reads past the 8 blocks. The word
     * indices are at most 63 for blocks of 16 to 40 bytes (all the Q types but MXFP4, and
     * the Q8_0 activations). Gathering the halves through the stack, as below, put 16
     * stores and a load that waits for them on every 8 blocks: a Q8_0 row's dot product in
     * L2 went from 48 to 55-57 GB/s on a Zen 5 with this, an expert's from 48 to 55. */
    if (bytes >= 16 && bytes <= 40 && bytes % 2 == 0 && off % 2 == 0 && off + 2 <= bytes) {
        const size_t hi = 4 * bytes < 8 * bytes - 128 ? 4 * bytes : 8 * bytes - 128;
        short lo_at[4], hi_at[4];
        for (int k = 0; k < 4; k++) {
            lo_at[k] = (short)((off + k * bytes) / 2);
            hi_at[k] = (short)((off + (k + 4) * bytes - hi) / 2);
        }
        const __m128i lo_idx = _mm_setr_epi16(lo_at[0], lo_at[1], lo_at[2], lo_at[3], 0, 0, 0, 0);
        const __m128i hi_idx = _mm_setr_epi16(hi_at[0], hi_at[1], hi_at[2], hi_at[3], 0, 0, 0, 0);
        const __m512i lo = _mm512_permutex2var_epi16(
            _mm512_loadu_si512(p), _mm512_zextsi128_si512(lo_idx), _mm512_loadu_si512(p + 64));
        const __m512i up = _mm512_permutex2var_epi16(_mm512_loadu_si512(p + hi),
                                                     _mm512_zextsi128_si512(hi_idx),
                                                     _mm512_loadu_si512(p + hi + 64));
        return _mm256_cvtph_ps(
            _mm_unpacklo_epi64(_mm512_castsi512_si128(lo), _mm512_castsi512_si128(up)));
    }
#endif
    uint16_t d[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
        d[k] = mvm_k_block_d(p + off + k * bytes);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)d));
}

/* 8 E8M0 exponents (one in each int32 lane) as the floats 2^(e - 128) (mvm_k_e8m0_half),
 * built in the exponent field, the two subnormal cases blended in. */
AVX2_INLINE __m256 avx2_e8m0_half8(__m256i v)
{
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(v, _mm256_set1_epi32(1)), 23);
    const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), v);
    const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), v);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, sub, small));
}

/* The scales of 8 blocks of Q type t at p, p + bytes, ...: MXFP4's E8M0 bytes
 * (avx2_e8m0_half8), the others' f16s. */
AVX2_INLINE __m256 avx2_wscales8(enum mvm_wtype t, const uint8_t *p, size_t bytes)
{
    if (t != MVM_W_MXFP4)
        return avx2_scales8(p, bytes, 0);
    uint8_t e[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
        e[k] = p[k * bytes];
    return avx2_e8m0_half8(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)e)));
}

/* acc + one block of type t times one activation block, scaled (plus the min term). */
AVX2_INLINE __m256 avx2_qblock(enum mvm_wtype t, const uint8_t *blk, const mvm_block_q8_0 *a,
                               __m256 acc)
{
    const mvm_k_qlayout L = mvm_k_qlay(t);
    const float da = _cvtsh_ss(a->d);
    const __m256i qa = _mm256_loadu_si256((const __m256i *)a->qs);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(mvm_k_block_scale(t, blk) * da),
                          avx2_qdot(t, avx2_qload(t, blk), qa), acc);
    if (L.m)
        acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(mvm_k_block_h(blk, L.m)) * da),
                              avx2_qsum(qa), acc);
    return acc;
}

/* 8 blocks of type t at p, bytes apart: quants (avx2_qload), scales, mins (else scales). */
AVX2_INLINE void avx2_qload8(enum mvm_wtype t, const uint8_t *p, size_t bytes, __m256i wq[8],
                             __m256 *ws, __m256 *wm)
{
    const mvm_k_qlayout L = mvm_k_qlay(t);
    avx2_prefetch(p, 8 * bytes);
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
        wq[j] = avx2_qload(t, p + j * bytes);
    *ws = avx2_wscales8(t, p, bytes);
    *wm = L.m ? avx2_scales8(p, bytes, L.m) : *ws;
}

AVX2_INLINE void avx2_dotn_q(enum mvm_wtype t, const uint8_t *w, const uint8_t *act, size_t as,
                             const int nt, size_t n, float *y, size_t ys)
{
    const mvm_k_qlayout L = mvm_k_qlay(t);
    const size_t bytes = mvm_k_block_bytes(t), nb = n / MVM_QBLOCK;
    /* 8 blocks a step, reduced together and scaled by a vector of their 8 scales: converting
     * and broadcasting the scales block by block would cost a third of the instructions. */
    __m256 acc[MVM_K_NT];
    for (int k = 0; k < nt; k++)
        acc[k] = _mm256_setzero_ps();
    size_t b = 0;
    for (; b + 8 <= nb; b += 8) {
        __m256i wq[8];
        __m256 ws, wm;
        avx2_qload8(t, w + b * bytes, bytes, wq, &ws, &wm);
        for (int k = 0; k < nt; k++) {
            const mvm_block_q8_0 *a = AVX2_TOK(mvm_block_q8_0, act, as, k) + b;
            __m256i qa[8], v[8];
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) {
                qa[j] = _mm256_loadu_si256((const __m256i *)a[j].qs);
                v[j] = avx2_qdot_i32(t, wq[j], qa[j]);
            }
            const __m256 da = avx2_scales8((const uint8_t *)a, sizeof *a, 0);
            acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(avx2_hsum8_i32(v)), _mm256_mul_ps(ws, da),
                                     acc[k]);
            if (L.m) {
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++)
                    v[j] = avx2_qsum_i32(qa[j]);
                acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(avx2_hsum8_i32(v)),
                                         _mm256_mul_ps(wm, da), acc[k]);
            }
        }
    }
    for (int k = 0; k < nt; k++) {
        const mvm_block_q8_0 *a = AVX2_TOK(mvm_block_q8_0, act, as, k);
        for (size_t c = b; c < nb; c++)
            acc[k] = avx2_qblock(t, w + c * bytes, a + c, acc[k]);
        y[k * ys] = avx2_hsum(acc[k]);
    }
}

AVX2_INLINE void avx2_downn_q(enum mvm_wtype t, const uint8_t *w, const uint8_t *a, size_t as,
                              const int nt, float *out, size_t os, size_t n)
{
    const mvm_k_qlayout L = mvm_k_qlay(t);
    __m256i qa[MVM_K_NT];
    __m256 da[MVM_K_NT], min_scale[MVM_K_NT];
    for (int k = 0; k < nt; k++) {
        const mvm_block_q8_0 *ak = AVX2_TOK(mvm_block_q8_0, a, as, k);
        const float d = _cvtsh_ss(ak->d);
        qa[k] = _mm256_loadu_si256((const __m256i *)ak->qs);
        da[k] = _mm256_set1_ps(d);
        min_scale[k] = _mm256_set1_ps(L.m ? avx2_hsum(avx2_qsum(qa[k])) * d : 0.0f);
    }
    const size_t bytes = mvm_k_block_bytes(t);
    for (size_t j = 0; j < n; j += 8) { /* n % 32 == 0 for Q types (mvm_k_downn_fn) */
        __m256i wq[8];
        __m256 ws, wm;
        avx2_qload8(t, w + j * bytes, bytes, wq, &ws, &wm);
        for (int k = 0; k < nt; k++) {
            __m256i v[8];
#pragma GCC unroll 8
            for (int c = 0; c < 8; c++)
                v[c] = avx2_qdot_i32(t, wq[c], qa[k]);
            float *o = out + k * os + j;
            __m256 r = _mm256_fmadd_ps(_mm256_cvtepi32_ps(avx2_hsum8_i32(v)),
                                       _mm256_mul_ps(ws, da[k]), _mm256_loadu_ps(o));
            if (L.m)
                r = _mm256_fmadd_ps(wm, min_scale[k], r);
            _mm256_storeu_ps(o, r);
        }
    }
}

/* ---- the activations' quantizers: blocks.h's, 8 floats a register ---------------------- */

/* 32 int32 lanes (q[0] the first 8) in [-128, 127] as bytes, in order. */
AVX2_INLINE __m256i avx2_pack_i8(const __m256i q[4])
{
    /* packs work within 128-bit halves: [q0 lo, q1 lo, q2 lo, q3 lo | q0 hi, q1 hi, ...] in
     * dwords of 4 bytes, put back in order by one dword permute */
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]),
                                         _mm256_packs_epi32(q[2], q[3]));
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* The largest lane of v. */
AVX2_INLINE float avx2_hmax(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

/* 8n floats at x: their magnitudes' maximum, or -1 when one is a NaN. */
AVX2_INLINE float avx2_amax(const float *x, int n)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
    for (int i = 0; i < n; i++) {
        const __m256 v = _mm256_loadu_ps(x + 8 * i);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v));
    }
    return _mm256_movemask_ps(nan) ? -1.0f : avx2_hmax(m);
}

/* One Q8_0 block as mvm_k_q8_0_block makes it (avx512.h's q8_0_block16 in 8-float vectors);
 * 0 (nothing written) when the block holds a NaN or an infinity. roundf (half away from zero)
 * as truncation plus one where the exact remainder is at least a half. */
AVX2_INLINE int avx2_q8_0_block(const float *x, mvm_block_q8_0 *y)
{
    const float amax = avx2_amax(x, 4);
    if (amax < 0 || __builtin_isinf(amax))
        return 0;
    const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
    y->d = mvm_k_f2h(d);
    const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
    __m256i q[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + 8 * i), _mm256_set1_ps(id));
        const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        const __m256 up = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(v, t)),
                                        _mm256_set1_ps(0.5f), _CMP_GE_OQ);
        const __m256 r =
            _mm256_add_ps(t, _mm256_and_ps(up, _mm256_or_ps(one, _mm256_and_ps(v, sign))));
        q[i] = _mm256_cvttps_epi32(r);
    }
    _mm256_storeu_si256((__m256i *)y->qs, avx2_pack_i8(q));
    return 1;
}

/* One Q8_K block as mvm_k_q8_K_block makes it (the vector conversion's rounding is lrintf's,
 * nearest even); 0 when it holds a NaN or an infinity. The largest magnitude's first element
 * sets the scale, as mvm_k_signed_max picks it. */
AVX2_INLINE int avx2_q8_K_block(const float *x, mvm_block_q8_K *y)
{
    const float amax = avx2_amax(x, MVM_QK_K / 8);
    if (amax < 0 || __builtin_isinf(amax))
        return 0;
    if (amax == 0) {
        memset(y, 0, sizeof *y);
        return 1;
    }
    float max = 0;
    for (int i = 0; i < MVM_QK_K / 8; i++) {
        const __m256 v = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_loadu_ps(x + 8 * i));
        const int at = _mm256_movemask_ps(_mm256_cmp_ps(v, _mm256_set1_ps(amax), _CMP_EQ_OQ));
        if (at) {
            max = x[8 * i + __builtin_ctz((unsigned)at)];
            break;
        }
    }
    const float iscale = -127.f / max;
#pragma GCC unroll 8
    for (int c = 0; c < MVM_QK_K / 32; c++) {
        __m256i q[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            q[i] = _mm256_min_epi32(
                _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_set1_ps(iscale),
                                                 _mm256_loadu_ps(x + 32 * c + 8 * i))),
                _mm256_set1_epi32(127));
        _mm256_storeu_si256((__m256i *)(y->qs + 32 * c), avx2_pack_i8(q));
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            y->bsums[2 * c + h] =
                (int16_t)avx2_hsum_i32(_mm256_add_epi32(q[2 * h], q[2 * h + 1]));
        }
    }
    y->d = 1 / iscale;
    return 1;
}

/* Defines `name`, dispatch.h's quantize_act (n floats into Q8_K blocks where k, else Q8_0) over
 * a level's block quantizers q8_K and q8_0, each 0 where the block holds a NaN or an infinity:
 * the scalar quantizer's block then. */
#define AVX2_QUANTIZE_ACT(attr, name, q8_K, q8_0)                                                  \
    attr __attribute__((unused)) static void name(int k, const float *x, void *act, size_t n)      \
    {                                                                                              \
        if (k) {                                                                                   \
            mvm_block_q8_K *y = act;                                                               \
            for (size_t b = 0; b < n / MVM_QK_K; b++)                                              \
                if (!q8_K(x + b * MVM_QK_K, y + b))                                                \
                    mvm_k_q8_K_block(x + b * MVM_QK_K, y + b);                                     \
            return;                                                                                \
        }                                                                                          \
        mvm_block_q8_0 *y = act;                                                                   \
        for (size_t b = 0; b < n / MVM_QBLOCK; b++)                                                \
            if (!q8_0(x + b * MVM_QBLOCK, y + b))                                                  \
                mvm_k_q8_0_block(x + b * MVM_QBLOCK, y + b);                                       \
    }
AVX2_QUANTIZE_ACT(AVX2_TARGET, avx2_quantize_act, avx2_q8_K_block, avx2_q8_0_block)

/* ---- K-quant super-blocks against Q8_K activations: avx2_kquant.h ---------------------- */
#include "kernels/cpu/avx2_kquant.h"

#endif
