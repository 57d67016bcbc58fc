/*
 * The reply reader's parts (chat_reply.h), shared by its files:
 *   chat_reply.c        the syntaxes, the reasoning, the content around the calls, the entry
 *   chat_reply_calls.c  each syntax's tool-call markup
 *   chat_reply_tools.c  the grammars that force a call, and their text's helpers
 *   chat_reply_xml.c    the XML syntaxes' calls in those grammars
 */
#ifndef MVM_ENGINE_CHAT_CHAT_REPLY_IMPL_H
#define MVM_ENGINE_CHAT_CHAT_REPLY_IMPL_H

#include "engine/chat/chat_reply.h"
#include "vmm/error.h"

/* A slice of the reply. */
typedef struct cr_span {
    const char *p;
    size_t n;
} cr_span;

/* The first occurrence of the NUL-terminated needle in s, or NULL. */
const char *cr_find(cr_span s, const char *needle);
/* s without the whitespace at its two ends. */
cr_span cr_trim(cr_span s);
/* What of s a stream may send now: not a tail that may grow into one of the markers (or
 * <think>, </think>), trailing whitespace (kept when keep_space; else trimmed, as markup
 * that follows would trim it), or a UTF-8 character not yet whole. */
cr_span cr_releasable(cr_span s, const char *const *markers, int keep_space);

/* The call block of syntax `o->syntax` that begins at s.p (with its opening marker):
 * 1 when whole, its calls added to `calls` and *used its bytes; 0 when it may yet be
 * completed (partial); -1 when it is not a call. */
int cr_calls(const mvm_chat_reply_opts *o, cr_span s, int partial, cJSON *calls, size_t *used);
/* The marker that opens a call block of the syntax ("" for none). */
const char *cr_call_start(mvm_chat_syntax s);
/* A call of `name` whose arguments are a JSON object's text into calls: 1, or -1 when they
 * are not one. cut (o->held, the text ends in them): the call with its arguments as far as
 * they are certain. */
int cr_json_call(cJSON *calls, cr_span name, cr_span args, int cut);

/* ---- grammar text (chat_reply_tools.c) ---- */

/* A growing GBNF text; nomem once an append failed. */
typedef struct cr_text {
    char *p;
    size_t n, cap;
    int nomem;
} cr_text;
void cr_add(cr_text *t, const char *fmt, ...) MVM_PRINTF(2, 3);
/* A GBNF literal of s: quotes and backslashes escaped, controls as \xHH. */
void cr_add_literal(cr_text *t, const char *s);
/* The grammar of a JSON Schema (cJSON) with every rule's name prefixed, so that its root is
 * PREFIX "root"; -1 with bad[0..cap) saying why (what names it is `what`). */
int cr_add_schema(cr_text *t, const cJSON *schema, const char *prefix, const char *what,
                  char *bad, size_t cap);

/* call-<i> ::= an XML syntax's call of tool `fn` (its "name" and "parameters"), its
 * parameters' rules prefixed t<i>-; -1 with bad[0..cap) saying why. */
int cr_xml_call(cr_text *t, mvm_chat_syntax s, size_t i, const cJSON *fn, char *bad, size_t cap);

#endif
