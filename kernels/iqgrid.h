/*
 * llama.cpp's lattice-grid weight types, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and
 * IQ1_M (ggml-common.h's block_iq*): super-blocks of 256 whose groups of 8 (or 4) elements are
 * one entry of a fixed grid (kernels/iq_grids.inc) with signs. Included by kernels/blocks.h,
 * whose K-quant chunks (mvm_k_kchunk) and scales (mvm_k_kscale) take these types through
 * mvm_k_iq_chunk, so that both backends and every CPU level compute the same integers.
 *
 * Every type unpacks, 32 elements at a time, to int8 values q and one integer scale per 16
 * elements, with x = f · d · sc · q: f = 1/8 for IQ2 and IQ1, 1/4 for IQ3_XXS, 1 for IQ3_S
 * (mvm_k_iq_factor). ggml's forms are d·(0.5 + ls)·0.25·g for IQ2, d·(0.5 + ls)·0.5·g for
 * IQ3_XXS, d·(1 + 2ls)·g for IQ3_S and d·(2ls + 1)·(g ± 1/8) for IQ1, so sc = 2ls + 1 and
 * q = ±g (IQ1: 8g ± 1, its delta folded into the integer): exact, and the dot product of a
 * super-block with a Q8_K block stays one int32 sum rounded once (at most 62 · 127 · 31 · 256
 * < 2^31), as the K-quants' does. (ggml converts IQ1's delta term and some types' sub-block
 * sums to float separately; the values are the same, the rounding differs in the last bits.)
 *
 * Signs: IQ2_XXS, IQ2_XS and IQ3_XXS store 7 of a group's 8 sign bits, the eighth making the
 * count of minus signs even (ggml's ksigns_iq2xs table, computed here: mvm_k_ksign4); IQ2_S
 * and IQ3_S store all 8; IQ1's grid holds -1, 0 and 1 and has no signs.
 */
#ifndef MVM_KERNELS_IQGRID_H
#define MVM_KERNELS_IQGRID_H

#ifndef MVM_KERNELS_BLOCKS_H
#error "include kernels/blocks.h, which includes this header"
#endif

/* IQ2_XXS: chunk c is qs[4c .. 4c + 3] read as bytes: 4 grid indices, then a u32 whose bits
 * 7l .. 7l + 6 are group l's signs and whose top 4 the chunk's scale. */
typedef struct {
    uint16_t d;
    uint16_t qs[MVM_QK_K / 8];
} mvm_block_iq2_xxs;
/* IQ2_XS: qs[4c + l] is group l of chunk c, a 9-bit grid index and 7 sign bits above it; the
 * low (elements 0..15) and high nibble of scales[c] the scales. */
typedef struct {
    uint16_t d;
    uint16_t qs[MVM_QK_K / 8];
    uint8_t scales[MVM_QK_K / 32];
} mvm_block_iq2_xs;
/* IQ2_S: group l of chunk c is grid index qs[4c + l] with bits 2l, 2l + 1 of qh[c] as bits 8
 * and 9, signs qs[32 + 4c + l]; scales as IQ2_XS. */
typedef struct {
    uint16_t d;
    uint8_t qs[MVM_QK_K / 4];
    uint8_t qh[MVM_QK_K / 32];
    uint8_t scales[MVM_QK_K / 32];
} mvm_block_iq2_s;
/* IQ3_XXS: group l (of 8) of chunk c is the grid entries (4 values each) qs[8c + 2l] and
 * qs[8c + 2l + 1]; the u32 at qs[64 + 4c] holds the signs and scale as IQ2_XXS's does. */
typedef struct {
    uint16_t d;
    uint8_t qs[3 * MVM_QK_K / 8];
} mvm_block_iq3_xxs;
/* IQ3_S: grid entry k (< 8) of chunk c is qs[8c + k] with bit k of qh[c] as bit 8; signs[4c +
 * l] are group l's; the low (c even) or high nibble of scales[c / 2] the chunk's scale. */
typedef struct {
    uint16_t d;
    uint8_t qs[MVM_QK_K / 4];
    uint8_t qh[MVM_QK_K / 32];
    uint8_t signs[MVM_QK_K / 8];
    uint8_t scales[MVM_QK_K / 64];
} mvm_block_iq3_s;
/* IQ1_S: group l of chunk c is grid index qs[4c + l] with bits 3l .. 3l + 2 of qh[c] as bits
 * 8..10; bits 12..14 of qh[c] are the chunk's scale, bit 15 its delta's sign. */
typedef struct {
    uint16_t d;
    uint8_t qs[MVM_QK_K / 8];
    uint16_t qh[MVM_QK_K / 32];
} mvm_block_iq1_s;
/* IQ1_M: group l of chunk c is grid index qs[4c + l] with the low 3 bits of nibble l % 2 of
 * qh[2c + l / 2] as bits 8..10 and its fourth bit the group's delta sign; the 16 3-bit
 * scales are bits 3i .. 3i + 2 of the u16 words of scales (4 a word), and d, an f16, is the
 * words' top nibbles. */
typedef struct {
    uint8_t qs[MVM_QK_K / 8];
    uint8_t qh[MVM_QK_K / 16];
    uint16_t scales[MVM_QK_K / 64];
} mvm_block_iq1_m;
MVM_BLK_ASSERT(sizeof(mvm_block_iq2_xxs) == 66 && sizeof(mvm_block_iq2_xs) == 74 &&
                   sizeof(mvm_block_iq2_s) == 82 && sizeof(mvm_block_iq3_xxs) == 98 &&
                   sizeof(mvm_block_iq3_s) == 110 && sizeof(mvm_block_iq1_s) == 50 &&
                   sizeof(mvm_block_iq1_m) == 56,
               "ggml IQ block sizes");

/* The grids: host arrays, and under nvcc device copies too (a __host__ __device__ function
 * reads the one its side can reach: mvm_k_grid). */
#define MVM_K_GRID(type, name, n) static const type mvm_k_##name##_grid[n]
#include "kernels/iq_grids.inc"
#undef MVM_K_GRID
#ifdef __CUDACC__
#define MVM_K_GRID(type, name, n) static __device__ const type mvm_k_##name##_grid_dev[n]
#include "kernels/iq_grids.inc"
#undef MVM_K_GRID
#endif

/* Entry i of type t's grid: 8 values a u64 (IQ2, IQ1) or 4 a u32 (IQ3), one byte each. */
MVM_BLK_FN uint64_t mvm_k_grid(enum mvm_wtype t, unsigned i)
{
#ifdef __CUDA_ARCH__
#define MVM_K_G(name) mvm_k_##name##_grid_dev
#else
#define MVM_K_G(name) mvm_k_##name##_grid
#endif
    switch (t) {
    case MVM_W_IQ2_XXS: return MVM_K_G(iq2xxs)[i];
    case MVM_W_IQ2_XS: return MVM_K_G(iq2xs)[i];
    case MVM_W_IQ2_S: return MVM_K_G(iq2s)[i];
    case MVM_W_IQ3_XXS: return MVM_K_G(iq3xxs)[i];
    case MVM_W_IQ3_S: return MVM_K_G(iq3s)[i];
    default: return MVM_K_G(iq1s)[i];
    }
#undef MVM_K_G
}

/* IQ1_S and IQ1_M: a grid of -1, 0 and 1 with a delta instead of signs. */
MVM_BLK_FN int mvm_k_is_iq1(enum mvm_wtype t)
{
    return t == MVM_W_IQ1_S || t == MVM_W_IQ1_M;
}

/* ggml's ksigns_iq2xs for four groups at once: byte l of the result is byte l of b (7 stored
 * sign bits) with the eighth that makes them even. The parity folds within each byte: the
 * bits the shifts bring in from the next byte never reach bit 0, the only one kept. */
MVM_BLK_FN uint32_t mvm_k_ksign4(uint32_t b)
{
    uint32_t p = b ^ b >> 4;
    p ^= p >> 2;
    p ^= p >> 1;
    return b | (p & 0x01010101u) << 7;
}

/* f, the power of two between a type's integers and its values (see the top). */
MVM_BLK_FN float mvm_k_iq_factor(enum mvm_wtype t)
{
    return t == MVM_W_IQ3_S ? 1.0f : t == MVM_W_IQ3_XXS ? 0.25f : 0.125f;
}

/* The f16 bits of a super-block's d (IQ1_M's assembled from its scale words). */
MVM_BLK_FN uint16_t mvm_k_iq_d(enum mvm_wtype t, const uint8_t *blk)
{
    if (t != MVM_W_IQ1_M)
        return mvm_k_block_d(blk);
    const uint16_t *s = ((const mvm_block_iq1_m *)blk)->scales;
    return (uint16_t)((s[0] >> 12) | (s[1] >> 8 & 0x00F0) | (s[2] >> 4 & 0x0F00) |
                      (s[3] & 0xF000));
}

/* Chunk c (< 8: elements 32c .. 32c + 31) of a grid super-block, decoded but not expanded:
 * element 8l + j's grid value is byte j of g[l]; IQ2/IQ3 negate element e where bit e of neg
 * is set, IQ1 adds its delta, -1 to group l where bit l of dneg is set, else +1, to 8 times
 * the value; sc[0] scales elements 0..15, sc[1] 16..31. The CPU levels expand it with
 * vectors, mvm_k_iq_chunk with a loop.
 * The types that store 7 sign bits a group also give the word that holds them, as stored
 * (sw: IQ2_XXS and IQ3_XXS group l's at bits 7l .. 7l + 6, IQ2_XS's at 16l + 9 .. 16l + 15),
 * so that a vector level can complete the parity in vectors (avx2_iq_ksigns) rather than
 * use neg, which costs about twenty scalar operations. */
typedef struct {
    uint64_t g[4];
    uint32_t neg;
    unsigned dneg;
    uint64_t sw;
    int sc[2];
} mvm_k_iq_raw;

MVM_BLK_FN mvm_k_iq_raw mvm_k_iq_decode(enum mvm_wtype t, const uint8_t *blk, int c)
{
    mvm_k_iq_raw r = {{0, 0, 0, 0}, 0, 0, 0, {0, 0}};
    switch (t) {
    case MVM_W_IQ2_XXS:
    case MVM_W_IQ3_XXS: {
        const int xxs3 = t == MVM_W_IQ3_XXS;
        const uint8_t *g = xxs3 ? ((const mvm_block_iq3_xxs *)blk)->qs + 8 * c
                                : (const uint8_t *)((const mvm_block_iq2_xxs *)blk)->qs + 8 * c;
        uint32_t s;
        memcpy(&s, xxs3 ? ((const mvm_block_iq3_xxs *)blk)->qs + 64 + 4 * c : g + 4, sizeof s);
        MVM_BLK_UNROLL(4)
        for (int l = 0; l < 4; l++)
            r.g[l] = xxs3 ? mvm_k_grid(t, g[2 * l]) | mvm_k_grid(t, g[2 * l + 1]) << 32
                          : mvm_k_grid(t, g[l]);
        r.sw = s;
        r.neg = mvm_k_ksign4((s & 0x7F) | (s << 1 & 0x7F00) | (s << 2 & 0x7F0000) |
                             (s << 3 & 0x7F000000));
        r.sc[0] = r.sc[1] = 2 * (int)(s >> 28) + 1;
        break;
    }
    case MVM_W_IQ2_XS: {
        const mvm_block_iq2_xs *x = (const mvm_block_iq2_xs *)blk;
        MVM_BLK_UNROLL(4)
        for (int l = 0; l < 4; l++)
            r.g[l] = mvm_k_grid(t, x->qs[4 * c + l] & 511);
        memcpy(&r.sw, x->qs + 4 * c, sizeof r.sw);
        /* the 4 groups' sign bits 9..15 gathered into one byte each */
        uint64_t v = r.sw >> 9 & 0x007F007F007F007Full;
        v = (v | v >> 8) & 0x0000FFFF0000FFFFull;
        r.neg = mvm_k_ksign4((uint32_t)(v | v >> 16));
        r.sc[0] = 2 * (x->scales[c] & 15) + 1;
        r.sc[1] = 2 * (x->scales[c] >> 4) + 1;
        break;
    }
    case MVM_W_IQ2_S: {
        const mvm_block_iq2_s *x = (const mvm_block_iq2_s *)blk;
        MVM_BLK_UNROLL(4)
        for (int l = 0; l < 4; l++)
            r.g[l] = mvm_k_grid(t, x->qs[4 * c + l] | (x->qh[c] >> 2 * l & 3) << 8);
        memcpy(&r.neg, x->qs + 32 + 4 * c, sizeof r.neg);
        r.sc[0] = 2 * (x->scales[c] & 15) + 1;
        r.sc[1] = 2 * (x->scales[c] >> 4) + 1;
        break;
    }
    case MVM_W_IQ3_S: {
        const mvm_block_iq3_s *x = (const mvm_block_iq3_s *)blk;
        MVM_BLK_UNROLL(8)
        for (int k = 0; k < 8; k++)
            r.g[k / 2] |= mvm_k_grid(t, x->qs[8 * c + k] | (x->qh[c] >> k & 1) << 8)
                          << 32 * (k % 2);
        memcpy(&r.neg, x->signs + 4 * c, sizeof r.neg);
        r.sc[0] = r.sc[1] = 2 * (x->scales[c / 2] >> 4 * (c % 2) & 15) + 1;
        break;
    }
    case MVM_W_IQ1_S: {
        const mvm_block_iq1_s *x = (const mvm_block_iq1_s *)blk;
        const unsigned h = x->qh[c];
        MVM_BLK_UNROLL(4)
        for (int l = 0; l < 4; l++)
            r.g[l] = mvm_k_grid(t, x->qs[4 * c + l] | (h >> 3 * l & 7) << 8);
        r.dneg = h & 0x8000 ? 15 : 0;
        r.sc[0] = r.sc[1] = 2 * (int)(h >> 12 & 7) + 1;
        break;
    }
    default: { /* IQ1_M */
        const mvm_block_iq1_m *x = (const mvm_block_iq1_m *)blk;
        MVM_BLK_UNROLL(4)
        for (int l = 0; l < 4; l++) {
            const unsigned h = x->qh[2 * c + l / 2] >> 4 * (l % 2);
            r.g[l] = mvm_k_grid(t, x->qs[4 * c + l] | (h & 7) << 8);
            r.dneg |= (h >> 3 & 1) << l;
        }
        const unsigned w = x->scales[c / 2] >> 6 * (c % 2);
        r.sc[0] = 2 * (int)(w & 7) + 1;
        r.sc[1] = 2 * (int)(w >> 3 & 7) + 1;
        break;
    }
    }
    return r;
}

/* Chunk c expanded: x = f · d · sc · q for its int8 values q[32] and scales sc[2] (the
 * halves'). */
MVM_BLK_FN void mvm_k_iq_chunk(enum mvm_wtype t, const uint8_t *blk, int c, int8_t q[32],
                               int sc[2])
{
    const mvm_k_iq_raw r = mvm_k_iq_decode(t, blk, c);
    const int iq1 = mvm_k_is_iq1(t);
    MVM_BLK_UNROLL(32)
    for (int e = 0; e < 32; e++) {
        const int v = (int8_t)(r.g[e / 8] >> 8 * (e % 8));
        q[e] = (int8_t)(iq1 ? 8 * v + (r.dneg >> e / 8 & 1 ? -1 : 1)
                            : r.neg >> e & 1 ? -v : v);
    }
    sc[0] = r.sc[0];
    sc[1] = r.sc[1];
}

#endif
