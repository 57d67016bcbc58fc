/*
 * The page-digest kernel (vmm/digest.cu) run on the CPU through tests/cuda_emu.h: its marks
 * must equal the host digest of vmm/digest.h for the pages listed, and nothing else; its
 * checks must answer 1 exactly for the pages still as marked; every launch must leave its
 * accumulators zero for the next; and none of it may depend on the order blocks run in or
 * on a grid with fewer blocks than pages. A wrong answer "unchanged" loses a program's
 * writes, so the pages checked differ from their marks in one word only.
 */
#include "tests/cuda_emu.h"

#include "vmm/digest.cu"

#include <algorithm>
#include <random>
#include <vector>

#include "tests/check.h"

static const uint64_t POISON = 0x5eed5eed5eed5eedull;

struct pool {
    uint64_t words;                /* per page */
    std::vector<uint64_t> mem;     /* the pages, one after another */
    std::vector<uint64_t> digests; /* two per page */
    std::vector<uint64_t> work;    /* three per listed page (a list may repeat pages) */
    std::vector<uint64_t> answers; /* one per listed page */

    pool(size_t pages, uint64_t words_, std::mt19937_64 &rng)
        : words(words_), mem(pages * words_), digests(2 * pages, POISON), work(6 * pages, 0),
          answers(2 * pages, POISON)
    {
        for (uint64_t &w : mem)
            w = rng();
    }
    uint64_t *page(uint64_t k) { return mem.data() + k * words; }
};

/* The launch vmm/cuda_digest.c makes, with at most max_x blocks in x (0: its own limit),
 * the blocks in the order `order` picks. */
static void launch(pool &p, const std::vector<uint64_t> &ids, bool check, unsigned max_x,
                   const char *order, std::mt19937_64 &rng)
{
    uint64_t n = ids.size();
    unsigned x = (unsigned)std::min<uint64_t>(n, max_x ? max_x : MVM_DIGEST_MAX_PAGES);
    dim3 grid{x, mvm_digest_grid(p.words), 1};
    std::vector<unsigned> seq(grid.x * grid.y);
    for (unsigned i = 0; i < seq.size(); i++)
        seq[i] = i;
    if (order[0] == 'r')
        std::reverse(seq.begin(), seq.end());
    else if (order[0] == 's')
        std::shuffle(seq.begin(), seq.end(), rng);
    mvm_digest_args args;
    args.base = (uintptr_t)p.mem.data();
    args.page_words = p.words;
    args.ids = (uintptr_t)ids.data();
    args.n = n;
    args.digests = (uintptr_t)p.digests.data();
    args.work = (uintptr_t)p.work.data();
    args.answers = check ? (uintptr_t)p.answers.data() : 0;
    emu_launch(grid, MVM_DIGEST_BLOCK, seq, [&] { mvm_digest_pages(args); });
}

static bool work_zero(const pool &p)
{
    return std::all_of(p.work.begin(), p.work.end(), [](uint64_t w) { return w == 0; });
}

/* Marks of the listed pages only, each the host's digest of its page. */
static void test_marks(uint64_t words, unsigned max_x, const char *order)
{
    std::mt19937_64 rng(words * 31 + max_x);
    pool p(6, words, rng);
    const std::vector<uint64_t> ids = {3, 0, 5};
    launch(p, ids, false, max_x, order, rng);
    for (uint64_t k = 0; k < 6; k++) {
        uint64_t want[2];
        mvm_digest_words(p.page(k), words, want);
        bool listed = k == 0 || k == 3 || k == 5;
        CHECK(p.digests[2 * k] == (listed ? want[0] : POISON));
        CHECK(p.digests[2 * k + 1] == (listed ? want[1] : POISON));
    }
    CHECK(work_zero(p));
    CHECK(p.answers[0] == POISON); /* a mark answers nothing */
}

/* The inverse of x -> x ^ (x >> s). */
static uint64_t unshift(uint64_t y, int s)
{
    uint64_t x = y;
    for (int i = 0; i < 64 / s + 1; i++)
        x = y ^ (x >> s);
    return x;
}

/* The inverse of an odd multiplier modulo 2^64 (Newton's iteration). */
static uint64_t inverse(uint64_t m)
{
    uint64_t x = m;
    for (int i = 0; i < 6; i++)
        x *= 2 - m * x;
    return x;
}

/* The word w with mvm_digest_lane_a(w, pos) == y, or lane_b. */
static uint64_t lane_a_inverse(uint64_t y, uint64_t pos)
{
    uint64_t x = unshift(y, 31) * inverse(0x94d049bb133111ebull);
    x = unshift(x, 27) * inverse(0xbf58476d1ce4e5b9ull);
    return unshift(x, 30) - pos * 0x9e3779b97f4a7c15ull;
}

static uint64_t lane_b_inverse(uint64_t y, uint64_t pos)
{
    uint64_t x = unshift(y, 33) * inverse(0xc4ceb9fe1a85ec53ull);
    x = unshift(x, 33) * inverse(0xff51afd7ed558ccdull);
    return unshift(x, 33) ^ (pos * 0xd1b54a32d192ed03ull + 0x8cb92ba72f3d8dd7ull);
}

/* Changes two words of page[0..words) so that one of the two sums (`b`: the second) stays
 * what it was: a check that compared that sum only would call the page unchanged. */
static void collide_one_sum(uint64_t *page, uint64_t words, bool b)
{
    uint64_t (*lane)(uint64_t, uint64_t) = b ? mvm_digest_lane_b : mvm_digest_lane_a;
    uint64_t i = 3, j = words - 2, before[2], after[2];
    mvm_digest_words(page, words, before);
    uint64_t old_i = lane(page[i], i);
    page[i] += 12345;
    uint64_t want_j = lane(page[j], j) - (lane(page[i], i) - old_i);
    page[j] = b ? lane_b_inverse(want_j, j) : lane_a_inverse(want_j, j);
    mvm_digest_words(page, words, after);
    CHECK(after[b] == before[b] && after[!b] != before[!b]);
}

/* Checks after marks: 1 for a page as marked (also when listed twice), 0 for one word
 * changed, one bit changed, two words swapped, either sum kept by two changes; a restored
 * word is as marked again. */
static void test_checks(uint64_t words, unsigned max_x, const char *order)
{
    std::mt19937_64 rng(words * 17 + max_x + 1);
    pool p(7, words, rng);
    launch(p, {0, 1, 2, 3, 4, 5, 6}, false, max_x, order, rng);
    p.page(1)[words / 2] += 1;
    p.page(2)[words - 1] ^= 1ull << 63;
    std::swap(p.page(3)[0], p.page(3)[words - 1]);
    uint64_t saved = p.page(4)[7];
    p.page(4)[7] = ~saved, p.page(4)[7] = saved;
    collide_one_sum(p.page(5), words, false);
    collide_one_sum(p.page(6), words, true);
    const std::vector<uint64_t> ids = {0, 1, 2, 3, 4, 5, 6, 0};
    launch(p, ids, true, max_x, order, rng);
    const uint64_t want[] = {1, 0, 0, 0, 1, 0, 0, 1};
    for (size_t i = 0; i < ids.size(); i++)
        CHECK(p.answers[i] == want[i]);
    CHECK(work_zero(p));
    /* The accumulators left zero serve the next launch: the same answers again. */
    std::fill(p.answers.begin(), p.answers.end(), POISON);
    launch(p, ids, true, max_x, order, rng);
    for (size_t i = 0; i < ids.size(); i++)
        CHECK(p.answers[i] == want[i]);
}

int main(void)
{
    /* Pages of one block and of several (grid.y > 1, the last one partly used); blocks in
     * order, shuffled, and reversed with fewer blocks in x than pages (each strides). */
    const uint64_t sizes[] = {300, 3 * MVM_DIGEST_BLOCK * 8 + 5};
    const struct {
        unsigned max_x;
        const char *order;
    } grids[] = {{0, "forward"}, {0, "shuffled"}, {2, "reverse"}};
    for (uint64_t words : sizes)
        for (const auto &g : grids) {
            test_marks(words, g.max_x, g.order);
            test_checks(words, g.max_x, g.order);
        }
    TEST_END();
}
