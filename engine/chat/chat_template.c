/* A model's chat template (chat_template.h). */
#include "engine/chat/chat_template.h"

#include <stdlib.h>
#include <string.h>

#include "engine/chat/jinja.h"
#include "vmm/error.h"

struct mvm_chat_template {
    mvm_jinja *jinja;
    char *src;       /* the Jinja source, as given */
    int builtin;
    char *bos, *eos; /* the vocabulary's texts; "" when it has none */
    int add_bos;
};

const char mvm_chat_template_chatml[] =
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}";

static char *token_text(const mvm_tokenizer *t, int32_t id)
{
    const char *s = id >= 0 ? mvm_tokenizer_text(t, id) : NULL;
    return strdup(s ? s : "");
}

static mvm_status make(const char *src, size_t len, int builtin, const mvm_tokenizer *t,
                       mvm_chat_template **out)
{
    *out = NULL;
    mvm_chat_template *ct = calloc(1, sizeof *ct);
    if (!ct)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the chat template");
    ct->builtin = builtin;
    ct->bos = token_text(t, mvm_tokenizer_bos(t));
    ct->eos = token_text(t, mvm_tokenizer_eos(t));
    ct->add_bos = mvm_tokenizer_adds_bos(t);
    ct->src = strndup(src, len);
    mvm_status st = !ct->bos || !ct->eos || !ct->src ? mvm_fail(MVM_ERR_NOMEM, "out of memory")
                                         : mvm_jinja_parse(src, len, &ct->jinja);
    if (st != MVM_OK) {
        mvm_chat_template_free(ct);
        return st;
    }
    *out = ct;
    return MVM_OK;
}

mvm_status mvm_chat_template_open(const mvm_gguf *g, const mvm_tokenizer *t,
                                  mvm_chat_template **out)
{
    mvm_gguf_str s;
    if (mvm_gguf_get_str(g, "tokenizer.chat_template", &s) != MVM_OK)
        return make(mvm_chat_template_chatml, strlen(mvm_chat_template_chatml), 1, t, out);
    mvm_status st = make(s.ptr, (size_t)s.len, 0, t, out);
    if (st != MVM_OK)
        return mvm_fail_prefix(st, "tokenizer.chat_template");
    return st;
}

mvm_status mvm_chat_template_from_text(const char *src, size_t len, const mvm_tokenizer *t,
                                       mvm_chat_template **out)
{
    return make(src, len, 0, t, out);
}

void mvm_chat_template_free(mvm_chat_template *ct)
{
    if (!ct)
        return;
    mvm_jinja_free(ct->jinja);
    free(ct->src);
    free(ct->bos);
    free(ct->eos);
    free(ct);
}

int mvm_chat_template_builtin(const mvm_chat_template *ct) { return ct->builtin; }

const char *mvm_chat_template_source(const mvm_chat_template *ct) { return ct->src; }

static mvm_status check_messages(const cJSON *messages)
{
    if (!cJSON_IsArray(messages))
        return mvm_fail(MVM_ERR_INVALID, "messages: expected an array of {role, content}");
    int i = 0;
    for (const cJSON *m = messages->child; m; m = m->next, i++) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role))
            return mvm_fail(MVM_ERR_INVALID, "messages[%d]: expected an object with a string "
                            "\"role\"", i);
    }
    return MVM_OK;
}

mvm_status mvm_chat_template_apply(const mvm_chat_template *ct, const cJSON *messages,
                                   const cJSON *extra, int add_generation_prompt, char **out)
{
    *out = NULL;
    mvm_status st = check_messages(messages);
    if (st != MVM_OK)
        return st;
    if (extra && !cJSON_IsObject(extra))
        return mvm_fail(MVM_ERR_INVALID, "chat template variables: expected a JSON object");
    /* the variables: the caller's extras first, so the ones HF sets win */
    cJSON *vars = extra ? cJSON_Duplicate(extra, 1) : cJSON_CreateObject();
    cJSON *msgs = cJSON_Duplicate(messages, 1);
    if (!vars || !msgs) {
        cJSON_Delete(vars), cJSON_Delete(msgs);
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for the chat template's variables");
    }
    static const char *const ours[] = {"messages", "add_generation_prompt", "bos_token",
                                        "eos_token"};
    for (size_t i = 0; i < sizeof ours / sizeof *ours; i++)
        cJSON_DeleteItemFromObjectCaseSensitive(vars, ours[i]);
    cJSON_AddItemToObject(vars, "messages", msgs);
    cJSON_AddBoolToObject(vars, "add_generation_prompt", add_generation_prompt);
    cJSON_AddStringToObject(vars, "bos_token", ct->bos);
    cJSON_AddStringToObject(vars, "eos_token", ct->eos);
    size_t len = 0;
    st = mvm_jinja_render(ct->jinja, vars, out, &len);
    cJSON_Delete(vars);
    if (st != MVM_OK)
        return mvm_fail_prefix(st, "chat template");
    size_t nb = strlen(ct->bos);
    if (ct->add_bos && nb && len >= nb && memcmp(*out, ct->bos, nb) == 0)
        memmove(*out, *out + nb, len - nb + 1);
    return MVM_OK;
}
