/* llama.cpp's --reasoning-budget in chat and serve (cli_think.h). */
#include "tools/cli_think.h"

#include <stdio.h>
#include <string.h>

#include "moevm/moevm.h"

/* text's tokens (control tokens' texts parsed: a mark may be one) after *n of them in
 * out[0..cap); -1 where they do not fit or text does not tokenize. */
static int append(const mvm_engine *e, const char *text, int32_t *out, size_t cap, size_t *n)
{
    size_t got = 0;
    if (mvm_engine_tokenize(e, text, strlen(text), 0, 1, out + *n, cap - *n, &got) != MVM_OK)
        return -1;
    *n += got;
    return 0;
}

int mvm_cli_think_make(const mvm_engine *e, mvm_chat_syntax syntax, int32_t budget,
                       const char *message, int inside, mvm_think_budget *out, char *bad,
                       size_t cap)
{
    const char *open, *close;
    mvm_chat_reasoning_marks(syntax, &open, &close);
    int32_t start[MVM_THINK_TAG_MAX], end[MVM_THINK_TAG_MAX], forced[MVM_THINK_FORCED_MAX];
    size_t ns = 0, ne = 0, nf = 0;
    if (append(e, open, start, MVM_THINK_TAG_MAX, &ns) ||
        append(e, close, end, MVM_THINK_TAG_MAX, &ne) ||
        (message && message[0] && append(e, message, forced, MVM_THINK_FORCED_MAX, &nf)) ||
        append(e, close, forced, MVM_THINK_FORCED_MAX, &nf) ||
        mvm_think_budget_init(out, start, (uint32_t)ns, end, (uint32_t)ne, forced,
                              (uint32_t)nf, budget, inside)) {
        snprintf(bad, cap, "the reasoning budget's marks (%s, %s) and message do not make "
                 "%d tokens at most: %s", open, close, MVM_THINK_FORCED_MAX, mvm_last_error());
        return -1;
    }
    return 0;
}

int32_t mvm_cli_think_next(mvm_think_budget *b, mvm_sampler *s, mvm_grammar *g, float *logits,
                           uint32_t n, const int32_t *prev, uint32_t n_prev, int *forced)
{
    const int32_t f = b ? mvm_think_budget_forced(b) : -1;
    *forced = 0;
    if (f >= 0 && (!g || mvm_grammar_accept(g, f) == MVM_OK)) {
        *forced = 1;
        return f;
    }
    if (f >= 0) /* the grammar does not take it: the reply thinks on */
        mvm_think_budget_give_up(b);
    return mvm_sampler_sample_after(s, logits, n, prev, n_prev);
}

void mvm_cli_think_took(const mvm_engine *e, mvm_think_budget *b, int32_t t)
{
    if (!b)
        return;
    char piece[256];
    size_t n = mvm_engine_token_piece_special(e, t, piece, sizeof piece);
    mvm_think_budget_accept(b, t, piece, n < sizeof piece ? n : sizeof piece);
}
