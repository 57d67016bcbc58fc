/*
 * A reply's reasoning held to a budget of tokens, as llama.cpp's --reasoning-budget holds
 * it (common/reasoning-budget.cpp): once the reasoning block opens (its start tag's tokens
 * sampled, or the prompt left the reply inside it), each token counts against the budget;
 * where the block ends on its own (its end tag's tokens), nothing more happens; where the
 * budget runs out, the tokens that end the block (a message, then the end tag) are forced
 * one by one in place of sampling, once the text is not in the middle of a UTF-8
 * character. A block that opens again is counted again. A budget of 0 ends each block at
 * once (the reply skips its thinking); -1 is no budget (not made).
 *
 * A plain state machine over token ids: the caller asks which token to force (if any)
 * before sampling, and tells it each token the reply took.
 */
#ifndef MVM_ENGINE_CHAT_THINK_BUDGET_H
#define MVM_ENGINE_CHAT_THINK_BUDGET_H

#include <stddef.h>
#include <stdint.h>

enum { MVM_THINK_TAG_MAX = 16, MVM_THINK_FORCED_MAX = 256 };

typedef struct mvm_think_budget {
    int state;                 /* idle, counting, waiting for UTF-8, forcing, done */
    int32_t budget, remaining;
    int32_t start[MVM_THINK_TAG_MAX], end[MVM_THINK_TAG_MAX];
    uint32_t n_start, n_end;
    uint32_t start_seen, end_seen; /* how much of each tag the last tokens matched */
    int32_t forced[MVM_THINK_FORCED_MAX];
    uint32_t n_forced, at;     /* forced[at] is the next to force */
    uint32_t utf8_need;        /* continuation bytes the reply's last character lacks */
} mvm_think_budget;

/* b for the tags' tokens start[0..n_start) and end[0..n_end) (each 1 to
 * MVM_THINK_TAG_MAX), forcing forced[0..n_forced) (1 to MVM_THINK_FORCED_MAX: the message's
 * tokens then the end tag's) once budget (>= 0) tokens were spent; inside: the prompt left
 * the reply in the block. -1 for tags or a forced sequence out of those bounds. */
int mvm_think_budget_init(mvm_think_budget *b, const int32_t *start, uint32_t n_start,
                          const int32_t *end, uint32_t n_end, const int32_t *forced,
                          uint32_t n_forced, int32_t budget, int inside);
/* The token to take next in place of sampling, or -1 to sample. */
int32_t mvm_think_budget_forced(const mvm_think_budget *b);
/* Token t was taken (sampled or forced), its text piece[0..n) (for where the reply's text
 * stands in a UTF-8 character). */
void mvm_think_budget_accept(mvm_think_budget *b, int32_t t, const char *piece, size_t n);
/* Forcing stopped (a grammar would not take the forced token): the block goes on
 * unlimited until it ends or opens again. */
void mvm_think_budget_give_up(mvm_think_budget *b);

#endif
