/* A reply's reasoning held to a budget of tokens (think_budget.h). */
#include "engine/chat/think_budget.h"

#include <string.h>

enum { IDLE, COUNTING, WAITING_UTF8, FORCING, DONE };

/* Advances a match of tag[0..n) by token t (*seen: how much matched so far): 1 when the
 * tag is whole. A mismatch starts again from t (the tags are a few tokens: a tag that
 * begins inside its own partial match is not looked for). */
static int advance(const int32_t *tag, uint32_t n, uint32_t *seen, int32_t t)
{
    *seen = tag[*seen] == t ? *seen + 1 : tag[0] == t ? 1 : 0;
    if (*seen < n)
        return 0;
    *seen = 0;
    return 1;
}

/* The block opened: its budget counts from here, or (none) it ends at once. */
static void open_block(mvm_think_budget *b)
{
    b->remaining = b->budget;
    b->end_seen = 0;
    b->state = b->budget > 0 ? COUNTING : FORCING;
    b->at = 0;
}

int mvm_think_budget_init(mvm_think_budget *b, const int32_t *start, uint32_t n_start,
                          const int32_t *end, uint32_t n_end, const int32_t *forced,
                          uint32_t n_forced, int32_t budget, int inside)
{
    if (!n_start || n_start > MVM_THINK_TAG_MAX || !n_end || n_end > MVM_THINK_TAG_MAX ||
        !n_forced || n_forced > MVM_THINK_FORCED_MAX || budget < 0)
        return -1;
    memset(b, 0, sizeof *b);
    memcpy(b->start, start, n_start * sizeof *start);
    memcpy(b->end, end, n_end * sizeof *end);
    memcpy(b->forced, forced, n_forced * sizeof *forced);
    b->n_start = n_start, b->n_end = n_end, b->n_forced = n_forced;
    b->budget = budget;
    b->state = IDLE;
    if (inside)
        open_block(b);
    return 0;
}

int32_t mvm_think_budget_forced(const mvm_think_budget *b)
{
    return b->state == FORCING && b->at < b->n_forced ? b->forced[b->at] : -1;
}

/* Follows the reply's text through piece[0..n): whether it ends at a character's end. A
 * byte that cannot continue or begin one is taken as a whole character (nothing would
 * complete it). */
static int utf8_whole(mvm_think_budget *b, const char *piece, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)piece[i];
        if ((c & 0xC0) == 0x80)
            b->utf8_need -= b->utf8_need > 0;
        else
            b->utf8_need = c >= 0xF8 ? 0 : c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC2 ? 1 : 0;
    }
    return b->utf8_need == 0;
}

void mvm_think_budget_accept(mvm_think_budget *b, int32_t t, const char *piece, size_t n)
{
    const int whole = utf8_whole(b, piece, n);
    switch (b->state) {
    case IDLE:
    case DONE:
        if (advance(b->start, b->n_start, &b->start_seen, t))
            open_block(b);
        break;
    case COUNTING:
    case WAITING_UTF8:
        if (advance(b->end, b->n_end, &b->end_seen, t)) {
            b->state = DONE; /* the block ended on its own */
            break;
        }
        if (b->state == COUNTING && --b->remaining > 0)
            break;
        b->state = whole ? FORCING : WAITING_UTF8;
        b->at = 0;
        break;
    case FORCING:
        if (++b->at >= b->n_forced)
            b->state = DONE, b->start_seen = 0;
        break;
    }
}

void mvm_think_budget_give_up(mvm_think_budget *b)
{
    b->state = DONE;
    b->start_seen = 0;
}
