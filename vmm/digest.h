/*
 * The page digest: 128 bits that tell whether a device page still holds what was loaded
 * into it, so a write_back space can skip copying an unchanged page home at eviction (a
 * program's weights are read, never written, and would otherwise cross the bus twice).
 *
 * It is two sums over the page's 64-bit words, each word mixed with its position by a
 * bijection (splitmix64's and murmur3's finalisers): for a fixed position each term is a
 * one-to-one function of the word, so a page that differs in one word always differs in
 * both sums, and one that differs in several collides with probability about 2^-128. Sums
 * are order-free, so the device computes them in parallel (vmm/digest.cu) and gets the same
 * answer as this host code, which fakecuda and the tests use.
 */
#ifndef MVM_VMM_DIGEST_H
#define MVM_VMM_DIGEST_H

#include <stdint.h>

#ifdef __CUDACC__
#define MVM_DIGEST_FN static __host__ __device__ __forceinline__
#else
#define MVM_DIGEST_FN static inline
#endif

/* The launch shape of the device digest (vmm/digest.cu): blocks of MVM_DIGEST_BLOCK threads,
 * at most MVM_DIGEST_MAX_GRID of them on one page (gridDim.y), pages spread over at most
 * MVM_DIGEST_MAX_PAGES blocks in x (a launch of more pages strides over them). */
#define MVM_DIGEST_BLOCK 256
#define MVM_DIGEST_MAX_GRID 128
#define MVM_DIGEST_MAX_PAGES 65535

MVM_DIGEST_FN uint64_t mvm_digest_lane_a(uint64_t word, uint64_t pos)
{
    uint64_t x = word + pos * 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

MVM_DIGEST_FN uint64_t mvm_digest_lane_b(uint64_t word, uint64_t pos)
{
    uint64_t x = word ^ (pos * 0xd1b54a32d192ed03ull + 0x8cb92ba72f3d8dd7ull);
    x = (x ^ (x >> 33)) * 0xff51afd7ed558ccdull;
    x = (x ^ (x >> 33)) * 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* The digest of words[0..n) into out[0..1]. */
MVM_DIGEST_FN void mvm_digest_words(const uint64_t *words, uint64_t n, uint64_t out[2])
{
    uint64_t a = 0, b = 0;
    for (uint64_t i = 0; i < n; i++) {
        a += mvm_digest_lane_a(words[i], i);
        b += mvm_digest_lane_b(words[i], i);
    }
    out[0] = a;
    out[1] = b;
}

/* The parameters of the device digest mvm_digest_pages (vmm/digest.cu): one struct passed by
 * value, so that the host (vmm/cuda_digest.c), the kernel and fakecuda agree on them by
 * name. Addresses are device addresses; the arrays hold 64-bit words. */
typedef struct mvm_digest_args {
    uint64_t base;       /* chunk k: the page_words words at base + 8 * k * page_words */
    uint64_t page_words;
    uint64_t ids;        /* [n] the chunks of the batch */
    uint64_t n;
    uint64_t digests;    /* [2 * chunks] each chunk's mark */
    uint64_t work;       /* [3 * n] the kernel's accumulators, zero between launches */
    uint64_t answers;    /* [n] the checks' answers; 0: the launch marks */
} mvm_digest_args;

/* The blocks that share a page of n words: enough for a few words per thread. */
MVM_DIGEST_FN unsigned mvm_digest_grid(uint64_t n)
{
    uint64_t per_block = (uint64_t)MVM_DIGEST_BLOCK * 8;
    uint64_t g = n / per_block + (n % per_block != 0);
    return g == 0 ? 1 : g > MVM_DIGEST_MAX_GRID ? MVM_DIGEST_MAX_GRID : (unsigned)g;
}

#endif
