/*
 * llama.cpp's --reasoning-budget in `moevm chat` and `moevm serve`: a reply's reasoning held
 * to a budget of tokens (engine/chat/think_budget.h), its block found by the marks of the
 * template's syntax (<think> and </think>; gpt-oss's analysis channel and <|end|>), and the
 * next token of a reply taken from the budget where it forces one, else from the sampler.
 */
#ifndef MVM_TOOLS_CLI_THINK_H
#define MVM_TOOLS_CLI_THINK_H

#include <stddef.h>

#include "engine/chat/chat_reply.h"
#include "engine/chat/think_budget.h"
#include "moevm/engine.h"

/* A budget of `budget` tokens (>= 0) for a reply of e in syntax's markup, forcing message
 * (NULL: none) then the close mark when it runs out; inside: the prompt opened the block.
 * 0; -1 with a message in bad (a mark or message that does not tokenize, or too long). */
int mvm_cli_think_make(const mvm_engine *e, mvm_chat_syntax syntax, int32_t budget,
                       const char *message, int inside, mvm_think_budget *out, char *bad,
                       size_t cap);
/* The reply's next token: b's forced one where b (may be NULL) forces one and the grammar g
 * (the sampler's, or NULL) takes it (*forced 1; else b gives up forcing), else s's draw from
 * logits[0..n) after prev[0..n_prev) (*forced 0; -1 where none can be drawn). */
int32_t mvm_cli_think_next(mvm_think_budget *b, mvm_sampler *s, mvm_grammar *g, float *logits,
                           uint32_t n, const int32_t *prev, uint32_t n_prev, int *forced);
/* Token t was taken: b (may be NULL) follows it. */
void mvm_cli_think_took(const mvm_engine *e, mvm_think_budget *b, int32_t t);

#endif
