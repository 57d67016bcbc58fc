/*
 * The page digest (vmm/digest.h) that lets write_back spaces skip unchanged pages: a page
 * that differs from the loaded one must never digest the same in the ways programs change
 * memory (one word, a few bits, words moved), and the launch shape must cover any size.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "vmm/digest.h"

#define WORDS 8192 /* a 64 KiB page */

static int differs(const uint64_t *page, const uint64_t ref[2])
{
    uint64_t d[2];
    mvm_digest_words(page, WORDS, d);
    return d[0] != ref[0] && d[1] != ref[1]; /* both lanes, not just one */
}

int main(void)
{
    static uint64_t page[WORDS];
    uint64_t seed = 42, ref[2], again[2];
    for (int i = 0; i < WORDS; i++)
        page[i] = check_rng_next(&seed);
    mvm_digest_words(page, WORDS, ref);
    mvm_digest_words(page, WORDS, again);
    CHECK(ref[0] == again[0] && ref[1] == again[1]);

    /* One word changed, anywhere, to anything: each lane is a bijection of the word at a
     * given position, so both sums change, always. */
    int single = 0, bits = 0, swaps = 0, moved = 0;
    for (int t = 0; t < 2000; t++) {
        int i = (int)(check_rng_next(&seed) % WORDS), j = (int)(check_rng_next(&seed) % WORDS);
        uint64_t keep = page[i], keep_j = page[j];
        /* a random word, or a bit */
        page[i] = t % 2 ? check_rng_next(&seed) : keep ^ (1ull << (t % 64));
        single += differs(page, ref);
        page[i] = keep ^ (uint64_t)t << 7 ^ 1; /* a few bits */
        bits += differs(page, ref);
        page[i] = keep_j, page[j] = keep; /* two distinct words swapped */
        swaps += i == j || page[i] == page[j] || differs(page, ref);
        page[i] = keep, page[j] = keep_j;
        moved += !differs(page, ref); /* and restored: equal again */
    }
    CHECK(single == 2000 && bits == 2000 && swaps == 2000 && moved == 2000);

    /* The page shifted by one word, and a zero page against one with a single 1. */
    memmove(page + 1, page, (WORDS - 1) * sizeof *page);
    CHECK(differs(page, ref));
    uint64_t zero[2];
    memset(page, 0, sizeof page);
    mvm_digest_words(page, WORDS, zero);
    page[WORDS - 1] = 1;
    CHECK(differs(page, zero));

    /* The grid: at least one block, a few words per thread, at most the kernel's maximum. */
    CHECK(mvm_digest_grid(0) == 1 && mvm_digest_grid(1) == 1);
    CHECK(mvm_digest_grid(MVM_DIGEST_BLOCK * 8) == 1 && mvm_digest_grid(MVM_DIGEST_BLOCK * 8 + 1) == 2);
    CHECK(mvm_digest_grid((2u << 20) / 8) == MVM_DIGEST_MAX_GRID);
    CHECK(mvm_digest_grid(~0ull) == MVM_DIGEST_MAX_GRID);
    TEST_END();
}
