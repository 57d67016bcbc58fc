/*
 * Chat templates: a subset of Jinja2, as Hugging Face's apply_chat_template renders them
 * (an ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loop controls; the
 * filter tojson as json.dumps; the globals raise_exception and strftime_now). GGUF models
 * carry theirs in tokenizer.chat_template. engine/chat/jinja_impl.h lists the subset.
 *
 * A parsed template is read only: several threads may render it at once.
 */
#ifndef MVM_ENGINE_CHAT_JINJA_H
#define MVM_ENGINE_CHAT_JINJA_H

#include <stddef.h>
#include <cjson/cJSON.h>
#include "moevm/moevm.h"

typedef struct mvm_jinja mvm_jinja;

/* Compiles template source src[0..len). MVM_ERR_INVALID on a syntax error, the message
 * "template line L: what" (mvm_last_error()). */
mvm_status mvm_jinja_parse(const char *src, size_t len, mvm_jinja **out);
/* Renders with the variables of the JSON object `vars` (messages, add_generation_prompt,
 * bos_token, tools, ...; NULL: none) into *out (malloc'd, NUL-terminated; *out_len its length
 * when out_len is not NULL). MVM_ERR_INVALID with a one-line message on a runtime error
 * (raise_exception's message, an undefined value used where it cannot be, a type error),
 * MVM_ERR_RANGE past the limits (output over 64 MiB, loops or recursion too deep), MVM_ERR_NOMEM. */
mvm_status mvm_jinja_render(const mvm_jinja *t, const cJSON *vars, char **out, size_t *out_len);
void mvm_jinja_free(mvm_jinja *t); /* NULL: no-op */

#endif
