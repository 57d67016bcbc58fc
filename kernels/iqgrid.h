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

/* IQ3_XXS's and IQ3_S's grids as 12-bit codes: value j (< 4) of entry i is
 * levels[(code[i] >> 3j) & 7], each grid's bytes being its eight levels only. Made from the
 * grids above (each byte's place among the levels); tests/test_kernels.c checks every
 * entry. The AVX-512 levels look the codes up 32 at a time by word permutes and spread them
 * into bytes, where the entries took a scalar load and an insert each, or a gather
 * (kernels/cpu/avx512_iqgrid.h). */
static const uint8_t mvm_k_iq3xxs_levels[8] = {4, 12, 20, 28, 36, 44, 52, 62};
static const uint8_t mvm_k_iq3s_levels[8] = {1, 3, 5, 7, 9, 11, 13, 15};
static const uint16_t mvm_k_iq3xxs_codes[256] __attribute__((aligned(64))) = {
    0x000, 0x002, 0x004, 0x009, 0x00b, 0x00f, 0x010, 0x012, 0x019, 0x022, 0x03b, 0x03d,
    0x041, 0x043, 0x048, 0x04a, 0x051, 0x055, 0x058, 0x05a, 0x061, 0x06c, 0x078, 0x080,
    0x082, 0x084, 0x089, 0x090, 0x092, 0x099, 0x09b, 0x09f, 0x0a9, 0x0af, 0x0bd, 0x0c1,
    0x0c7, 0x0c8, 0x0ca, 0x0d5, 0x0f8, 0x10b, 0x11f, 0x124, 0x12f, 0x13b, 0x13d, 0x141,
    0x147, 0x15a, 0x16a, 0x19d, 0x1b4, 0x1c8, 0x1cc, 0x1ce, 0x1e3, 0x1f1, 0x201, 0x203,
    0x208, 0x20a, 0x211, 0x213, 0x218, 0x21a, 0x21c, 0x227, 0x228, 0x240, 0x242, 0x249,
    0x250, 0x252, 0x281, 0x283, 0x288, 0x28a, 0x291, 0x298, 0x2ba, 0x2c0, 0x2c2, 0x2d0,
    0x2d9, 0x2e6, 0x2f6, 0x301, 0x305, 0x328, 0x350, 0x354, 0x366, 0x379, 0x385, 0x3d2,
    0x3e0, 0x400, 0x402, 0x409, 0x40b, 0x410, 0x412, 0x416, 0x419, 0x422, 0x441, 0x443,
    0x445, 0x448, 0x44a, 0x451, 0x458, 0x473, 0x477, 0x478, 0x480, 0x482, 0x489, 0x48f,
    0x490, 0x492, 0x49f, 0x4a0, 0x4ad, 0x4c1, 0x4c8, 0x4cc, 0x4f8, 0x4fc, 0x51d, 0x52b,
    0x543, 0x557, 0x561, 0x57c, 0x5c1, 0x5c3, 0x5ce, 0x5e5, 0x601, 0x608, 0x60a, 0x611,
    0x613, 0x628, 0x635, 0x63a, 0x640, 0x642, 0x650, 0x659, 0x664, 0x666, 0x681, 0x683,
    0x688, 0x695, 0x6aa, 0x6ba, 0x6c9, 0x6db, 0x718, 0x727, 0x73a, 0x740, 0x746, 0x752,
    0x76d, 0x78c, 0x79e, 0x7b3, 0x7db, 0x7f0, 0x804, 0x80f, 0x81d, 0x81f, 0x82b, 0x82f,
    0x87c, 0x890, 0x89f, 0x8a0, 0x8b0, 0x8b6, 0x8c7, 0x8e5, 0x904, 0x929, 0x934, 0x955,
    0x963, 0x978, 0x9c5, 0x9c8, 0x9ca, 0x9d8, 0xa0a, 0xa21, 0xa38, 0xa40, 0xa46, 0xa56,
    0xa6d, 0xa8c, 0xa9a, 0xaba, 0xac2, 0xaeb, 0xb08, 0xb13, 0xb17, 0xb3a, 0xb42, 0xb59,
    0xba8, 0xbd4, 0xbe2, 0xc14, 0xc24, 0xc26, 0xc34, 0xc51, 0xc71, 0xc8f, 0xcb4, 0xcd8,
    0xcde, 0xd24, 0xd45, 0xd6a, 0xd9b, 0xdc3, 0xdd1, 0xe03, 0xe05, 0xe07, 0xe08, 0xe1a,
    0xe2a, 0xe56, 0xe60, 0xe8a, 0xea5, 0xeaa, 0xec0, 0xecd, 0xedb, 0xef0, 0xf11, 0xf21,
    0xf40, 0xf42, 0xf54, 0xf98,
};
static const uint16_t mvm_k_iq3s_codes[512] __attribute__((aligned(64))) = {
    0x000, 0x001, 0x002, 0x005, 0x007, 0x008, 0x009, 0x00a, 0x00c, 0x00e, 0x010, 0x011,
    0x015, 0x01b, 0x020, 0x022, 0x025, 0x027, 0x029, 0x02b, 0x030, 0x032, 0x039, 0x03c,
    0x03f, 0x040, 0x041, 0x042, 0x044, 0x048, 0x049, 0x04d, 0x050, 0x053, 0x057, 0x059,
    0x05d, 0x064, 0x071, 0x075, 0x07a, 0x080, 0x081, 0x085, 0x087, 0x088, 0x08b, 0x08e,
    0x091, 0x095, 0x098, 0x09c, 0x0a2, 0x0a5, 0x0a7, 0x0a9, 0x0ab, 0x0b8, 0x0bb, 0x0c3,
    0x0c9, 0x0cd, 0x0d0, 0x0d2, 0x0d9, 0x0db, 0x0de, 0x0e4, 0x0e8, 0x0ea, 0x0f7, 0x0f9,
    0x0fd, 0x100, 0x10b, 0x10f, 0x111, 0x114, 0x11a, 0x120, 0x123, 0x129, 0x138, 0x142,
    0x144, 0x150, 0x152, 0x156, 0x15b, 0x161, 0x165, 0x167, 0x176, 0x17b, 0x186, 0x189,
    0x18b, 0x199, 0x1aa, 0x1b9, 0x1c0, 0x1c2, 0x1c4, 0x1d0, 0x1d2, 0x1d6, 0x1db, 0x1e8,
    0x1ec, 0x200, 0x201, 0x202, 0x204, 0x208, 0x209, 0x20b, 0x20d, 0x20f, 0x210, 0x212,
    0x219, 0x21c, 0x21e, 0x22c, 0x22e, 0x231, 0x23a, 0x240, 0x241, 0x243, 0x246, 0x248,
    0x24c, 0x251, 0x258, 0x25b, 0x261, 0x268, 0x26a, 0x278, 0x27e, 0x280, 0x28a, 0x28d,
    0x28f, 0x290, 0x294, 0x29a, 0x2a0, 0x2a3, 0x2ad, 0x2b0, 0x2ba, 0x2c1, 0x2c4, 0x2c7,
    0x2c8, 0x2cb, 0x2d1, 0x2d7, 0x2d8, 0x2dc, 0x2e1, 0x2f2, 0x2f8, 0x303, 0x305, 0x30a,
    0x30c, 0x319, 0x31b, 0x322, 0x326, 0x328, 0x32c, 0x341, 0x348, 0x34b, 0x351, 0x358,
    0x35a, 0x369, 0x390, 0x394, 0x397, 0x3a4, 0x3a6, 0x3c1, 0x3c3, 0x3c8, 0x3ca, 0x3d1,
    0x3dd, 0x3e1, 0x3f2, 0x3f8, 0x400, 0x401, 0x403, 0x405, 0x407, 0x408, 0x40a, 0x40c,
    0x40e, 0x411, 0x413, 0x417, 0x418, 0x41a, 0x421, 0x423, 0x425, 0x428, 0x42a, 0x437,
    0x438, 0x43b, 0x43d, 0x440, 0x442, 0x448, 0x44b, 0x44f, 0x452, 0x455, 0x459, 0x45c,
    0x462, 0x469, 0x481, 0x484, 0x487, 0x491, 0x493, 0x498, 0x49f, 0x4a1, 0x4ab, 0x4af,
    0x4b9, 0x4bc, 0x4c0, 0x4c2, 0x4c5, 0x4c9, 0x4d2, 0x4d4, 0x4d9, 0x4db, 0x4e2, 0x4e8,
    0x4f6, 0x501, 0x507, 0x510, 0x513, 0x51a, 0x51d, 0x521, 0x53a, 0x53d, 0x544, 0x549,
    0x552, 0x55f, 0x560, 0x56b, 0x578, 0x580, 0x582, 0x587, 0x591, 0x5ad, 0x5b1, 0x5c5,
    0x5c9, 0x5d6, 0x5d8, 0x5e3, 0x5e8, 0x602, 0x609, 0x60b, 0x60d, 0x60f, 0x612, 0x619,
    0x61b, 0x61d, 0x622, 0x624, 0x627, 0x629, 0x633, 0x639, 0x641, 0x643, 0x645, 0x64c,
    0x651, 0x653, 0x660, 0x670, 0x67a, 0x67e, 0x680, 0x68a, 0x690, 0x69a, 0x69c, 0x6a8,
    0x6c1, 0x6c8, 0x6cc, 0x6d1, 0x6d3, 0x6d7, 0x6d8, 0x6e1, 0x6e3, 0x6e7, 0x6ed, 0x6fb,
    0x703, 0x709, 0x70e, 0x712, 0x719, 0x72a, 0x730, 0x734, 0x741, 0x748, 0x74a, 0x755,
    0x75a, 0x764, 0x76e, 0x77b, 0x78e, 0x7a1, 0x7c1, 0x7c3, 0x7d0, 0x7d2, 0x7dd, 0x800,
    0x804, 0x80a, 0x810, 0x814, 0x817, 0x81a, 0x821, 0x828, 0x838, 0x842, 0x847, 0x849,
    0x84b, 0x852, 0x858, 0x85d, 0x863, 0x869, 0x86d, 0x881, 0x883, 0x888, 0x88d, 0x891,
    0x89b, 0x8a0, 0x8af, 0x8b2, 0x8b8, 0x8c4, 0x8c9, 0x8cb, 0x8d0, 0x8d2, 0x8d9, 0x8dd,
    0x900, 0x902, 0x914, 0x91f, 0x920, 0x939, 0x945, 0x947, 0x951, 0x972, 0x98b, 0x99c,
    0x9b0, 0x9c8, 0x9cd, 0x9d8, 0x9e3, 0x9e9, 0xa02, 0xa08, 0xa0c, 0xa12, 0xa20, 0xa24,
    0xa27, 0xa2a, 0xa36, 0xa3c, 0xa41, 0xa43, 0xa45, 0xa4a, 0xa51, 0xa5a, 0xa7a, 0xa80,
    0xa89, 0xa93, 0xa98, 0xa9e, 0xaab, 0xac2, 0xac7, 0xac8, 0xad7, 0xae4, 0xae9, 0xaf5,
    0xafb, 0xb01, 0xb04, 0xb10, 0xb1a, 0xb26, 0xb4a, 0xb56, 0xb69, 0xb6b, 0xba2, 0xbc2,
    0xbc4, 0xbd2, 0xc09, 0xc0b, 0xc0d, 0xc19, 0xc1b, 0xc30, 0xc40, 0xc50, 0xc57, 0xc74,
    0xc8a, 0xc9c, 0xca2, 0xcad, 0xcb2, 0xcb8, 0xcc0, 0xccc, 0xcd1, 0xce0, 0xd15, 0xd23,
    0xd32, 0xd40, 0xd43, 0xd5c, 0xd70, 0xd85, 0xda0, 0xdc9, 0xdcb, 0xe00, 0xe04, 0xe07,
    0xe10, 0xe12, 0xe1e, 0xe20, 0xe2c, 0xe32, 0xe42, 0xe49, 0xe54, 0xe63, 0xe65, 0xe81,
    0xe84, 0xe88, 0xe8e, 0xe91, 0xe98, 0xea9, 0xec2, 0xeda, 0xedd, 0xeeb, 0xf01, 0xf05,
    0xf0b, 0xf10, 0xf28, 0xf52, 0xf62, 0xf82, 0xf99, 0xfc0,
};

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
