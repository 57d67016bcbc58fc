/*
 * The reasoning budget's state machine (engine/chat/think_budget.c) against token streams
 * written out by hand from llama.cpp's common/reasoning-budget.cpp: where it forces and
 * what, for a block the prompt opened or one the reply opens (a start tag of two tokens),
 * a block that ends on its own before the budget, a budget of 0, a block that opens again,
 * a character left open in UTF-8 when the budget runs out, and a forcing given up.
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "engine/chat/think_budget.h"

enum { OPEN_A = 100, OPEN_B = 101, CLOSE = 102, MSG = 103, X = 7 };
static const int32_t start[] = {OPEN_A, OPEN_B}, end[] = {CLOSE}, forced[] = {MSG, CLOSE};

/* Feeds the reply: at each step, the forced token if any, else the next of sampled[] (an
 * ASCII piece); the tokens taken into out[0..n); returns n. */
static uint32_t run(mvm_think_budget *b, const int32_t *sampled, uint32_t n_sampled,
                    const char *const *pieces, int32_t *out, uint32_t cap)
{
    uint32_t n = 0, k = 0;
    while (n < cap) {
        int32_t t = mvm_think_budget_forced(b);
        const char *piece = "x";
        if (t < 0) {
            if (k == n_sampled)
                break;
            piece = pieces ? pieces[k] : "x";
            t = sampled[k++];
        }
        mvm_think_budget_accept(b, t, piece, strlen(piece));
        out[n++] = t;
    }
    return n;
}

static int same(const int32_t *a, uint32_t na, const int32_t *b, uint32_t nb)
{
    int ok = na == nb && !memcmp(a, b, na * sizeof *a);
    if (!ok) {
        fprintf(stderr, "  got");
        for (uint32_t i = 0; i < na; i++)
            fprintf(stderr, " %d", a[i]);
        fprintf(stderr, "\n");
    }
    return ok;
}

static void test_budget(void)
{
    mvm_think_budget b;
    int32_t out[64];
    /* the prompt opened the block, budget 3: three tokens, then the message and the tag,
     * then sampling again */
    CHECK(mvm_think_budget_init(&b, start, 2, end, 1, forced, 2, 3, 1) == 0);
    const int32_t s1[] = {X, X, X, X, X};
    const int32_t w1[] = {X, X, X, MSG, CLOSE, X, X};
    CHECK(same(out, run(&b, s1, 5, NULL, out, 64), w1, 7));
    /* the reply opens it (two tokens), ends it itself after 2 of 3: nothing forced */
    CHECK(mvm_think_budget_init(&b, start, 2, end, 1, forced, 2, 3, 0) == 0);
    const int32_t s2[] = {X, OPEN_A, OPEN_B, X, CLOSE, X, X, X, X};
    CHECK(same(out, run(&b, s2, 9, NULL, out, 64), s2, 9));
    /* half a start tag does not open it; a tag split by another token neither */
    CHECK(mvm_think_budget_init(&b, start, 2, end, 1, forced, 2, 1, 0) == 0);
    const int32_t s3[] = {OPEN_A, X, OPEN_B, X, X};
    CHECK(same(out, run(&b, s3, 5, NULL, out, 64), s3, 5));
    /* budget 0: the block ends as it opens; it opens again and ends again */
    CHECK(mvm_think_budget_init(&b, start, 2, end, 1, forced, 2, 0, 0) == 0);
    const int32_t s4[] = {OPEN_A, OPEN_B, X, OPEN_A, OPEN_B, X};
    const int32_t w4[] = {OPEN_A, OPEN_B, MSG, CLOSE, X, OPEN_A, OPEN_B, MSG, CLOSE, X};
    CHECK(same(out, run(&b, s4, 6, NULL, out, 64), w4, 10));
    /* budget 0 and the prompt opened it: forced from the first token */
    CHECK(mvm_think_budget_init(&b, start, 2, end, 1, forced, 2, 0, 1) == 0);
    CHECK(mvm_think_budget_forced(&b) == MSG);
    /* the budget runs out inside a character (a 3-byte one in two pieces): forcing waits
     * for its end */
    CHECK(mvm_think_budget_init(&b, start, 2, end, 1, forced, 2, 2, 1) == 0);
    const int32_t s5[] = {X, 8, 9, X};
    const char *const p5[] = {"a", "\xe2\x82", "\xac", "b"};
    const int32_t w5[] = {X, 8, 9, MSG, CLOSE, X};
    CHECK(same(out, run(&b, s5, 4, p5, out, 64), w5, 6));
    /* given up (a grammar refused the forced token): the block goes on unforced */
    CHECK(mvm_think_budget_init(&b, start, 2, end, 1, forced, 2, 1, 1) == 0);
    mvm_think_budget_accept(&b, X, "x", 1);
    CHECK(mvm_think_budget_forced(&b) == MSG);
    mvm_think_budget_give_up(&b);
    CHECK(mvm_think_budget_forced(&b) == -1);
    /* refused: no tags, a negative budget */
    CHECK(mvm_think_budget_init(&b, start, 0, end, 1, forced, 2, 1, 0) == -1);
    CHECK(mvm_think_budget_init(&b, start, 2, end, 1, forced, 0, 1, 0) == -1);
    CHECK(mvm_think_budget_init(&b, start, 2, end, 1, forced, 2, -1, 0) == -1);
}

int main(void)
{
    RUN(test_budget);
    TEST_END();
}
