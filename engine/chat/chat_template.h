/*
 * A model's chat template: the Jinja source in its GGUF (tokenizer.chat_template, as Hugging
 * Face's apply_chat_template renders it; engine/chat/jinja.h) turned into the prompt text of
 * a conversation, ready for mvm_tokenizer_encode_special.
 *
 * The variables a template sees are HF's: messages (role, content, and whatever else a
 * message carries: reasoning_content, tool_calls, ...), add_generation_prompt, bos_token
 * and eos_token (the vocabulary's texts), and the caller's extras (tools, enable_thinking,
 * ...). A model without a template gets ChatML (<|im_start|>role\n...<|im_end|>\n), as
 * llama.cpp falls back to, and says so (mvm_chat_template_builtin).
 */
#ifndef MVM_ENGINE_CHAT_CHAT_TEMPLATE_H
#define MVM_ENGINE_CHAT_CHAT_TEMPLATE_H

#include <cjson/cJSON.h>

#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"

typedef struct mvm_chat_template mvm_chat_template;

/* ChatML, llama.cpp's fallback for a model without a template (and Qwen2-MoE's own). */
extern const char mvm_chat_template_chatml[];

/* The template of g (tokenizer t gives bos_token and eos_token), compiled:
 * MVM_ERR_INVALID naming the line when it is not valid Jinja (of the subset jinja.h reads). */
mvm_status mvm_chat_template_open(const mvm_gguf *g, const mvm_tokenizer *t,
                                  mvm_chat_template **out);
/* A template from source text (tests; --chat-template-file). */
mvm_status mvm_chat_template_from_text(const char *src, size_t len, const mvm_tokenizer *t,
                                       mvm_chat_template **out);
void mvm_chat_template_free(mvm_chat_template *ct);
/* 1 when the model had no template and ChatML stands in. */
int mvm_chat_template_builtin(const mvm_chat_template *ct);
/* Its Jinja source (ChatML's when builtin). */
const char *mvm_chat_template_source(const mvm_chat_template *ct);

/* The prompt of `messages` (a JSON array of objects with "role" and "content"), the
 * variables of `extra` (a JSON object, or NULL) added, into *out (malloc'd). When the
 * vocabulary adds its BOS itself (add_bos_token), a BOS text the template wrote first is
 * dropped, so encoding with add_special does not give two. MVM_ERR_INVALID for messages
 * that are not such an array, or what the template raised. */
mvm_status mvm_chat_template_apply(const mvm_chat_template *ct, const cJSON *messages,
                                   const cJSON *extra, int add_generation_prompt, char **out);

#endif
