/*
 * The reply reader's parts (chat_reply.h), shared by its files:
 *   chat_reply.c        the syntaxes, the reasoning, the content around the calls, the entry
 *   chat_reply_calls.c  each syntax's tool-call markup
 *   chat_reply_tools.c  the grammars that force a call
 */
#ifndef MVM_ENGINE_CHAT_CHAT_REPLY_IMPL_H
#define MVM_ENGINE_CHAT_CHAT_REPLY_IMPL_H

#include "engine/chat/chat_reply.h"

/* A slice of the reply. */
typedef struct cr_span {
    const char *p;
    size_t n;
} cr_span;

/* The first occurrence of the NUL-terminated needle in s, or NULL. */
const char *cr_find(cr_span s, const char *needle);
/* s without the whitespace at its two ends. */
cr_span cr_trim(cr_span s);

/* The call block of syntax `o->syntax` that begins at s.p (with its opening marker):
 * 1 when whole, its calls added to `calls` and *used its bytes; 0 when it may yet be
 * completed (partial); -1 when it is not a call. */
int cr_calls(const mvm_chat_reply_opts *o, cr_span s, int partial, cJSON *calls, size_t *used);
/* The marker that opens a call block of the syntax ("" for none). */
const char *cr_call_start(mvm_chat_syntax s);

#endif
