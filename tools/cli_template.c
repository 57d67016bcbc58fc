/*
 * llama.cpp's chat-template options (tools/cli_template.h), read as its common/arg.cpp and
 * common/chat.cpp read them with Jinja on (moevm always renders with Jinja): --chat-template
 * is the template's source, and "chatml" llama.cpp's ChatML; its other built-in names
 * (llama3, mistral-v7, ...) are formats of its C++ formatter, which Jinja has no source
 * for, so they are refused with the way to give one. --reasoning on|off (and llama.cpp's
 * other spellings: enabled, true, 1 ...) sets enable_thinking, auto takes it away;
 * --reasoning-effort LEVEL sets reasoning_effort, "default" takes it away; each applies in
 * the order given, as there.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/chat/chat_template.h"
#include "tools/cli_template.h"

static cJSON *vars(mvm_cli_template *t)
{
    if (!t->kwargs)
        t->kwargs = cJSON_CreateObject();
    return t->kwargs;
}

/* Puts v (taken) at key in t's variables; NULL v removes the key. 0, or 2 out of memory. */
static int set(const char *cmd, mvm_cli_template *t, const char *key, cJSON *v)
{
    cJSON *kw = vars(t);
    if (kw)
        cJSON_DeleteItemFromObjectCaseSensitive(kw, key);
    if (kw && (!v || cJSON_AddItemToObject(kw, key, v)))
        return 0;
    cJSON_Delete(v);
    fprintf(stderr, "moevm %s: out of memory\n", cmd);
    return 2;
}

static int kwargs(const char *cmd, const mvm_cli_iter *it, mvm_cli_template *t)
{
    cJSON *obj = cJSON_Parse(it->value);
    if (!cJSON_IsObject(obj)) {
        fprintf(stderr, "moevm %s: %s: expected a JSON object, {\"key\": value, ...}\n", cmd,
                it->flag);
        cJSON_Delete(obj);
        return 2;
    }
    int rc = 0;
    while (!rc && obj->child) {
        cJSON *item = cJSON_DetachItemViaPointer(obj, obj->child);
        rc = set(cmd, t, item->string, item);
    }
    cJSON_Delete(obj);
    return rc;
}

static int reasoning(const char *cmd, const mvm_cli_iter *it, mvm_cli_template *t)
{
    static const char *const on[] = {"on", "enabled", "true", "1"},
                             *const off[] = {"off", "disabled", "false", "0"};
    const char *v = it->value;
    for (int i = 0; i < 4; i++) {
        if (!strcmp(v, on[i]) || !strcmp(v, off[i]))
            return set(cmd, t, "enable_thinking", cJSON_CreateBool(!strcmp(v, on[i])));
    }
    if (!strcmp(v, "auto") || !strcmp(v, "-1"))
        return t->kwargs ? set(cmd, t, "enable_thinking", NULL) : 0;
    fprintf(stderr, "moevm %s: %s %s: expected on, off or auto\n", cmd, it->flag, v);
    return 2;
}

int mvm_cli_template_option(const char *cmd, const mvm_cli_iter *it, mvm_cli_template *t)
{
    switch (it->id) {
    case MVM_CLI_T_FILE:
        t->file = it->value, t->source = NULL;
        return 0;
    case MVM_CLI_T_SOURCE:
        t->source = it->value, t->file = NULL;
        return 0;
    case MVM_CLI_T_KWARGS:
        return kwargs(cmd, it, t);
    case MVM_CLI_T_REASONING:
        return reasoning(cmd, it, t);
    case MVM_CLI_T_EFFORT:
        if (!it->value[0]) {
            fprintf(stderr, "moevm %s: %s: an empty level\n", cmd, it->flag);
            return 2;
        }
        if (!strcmp(it->value, "default"))
            return t->kwargs ? set(cmd, t, "reasoning_effort", NULL) : 0;
        return set(cmd, t, "reasoning_effort", cJSON_CreateString(it->value));
    default:
        return -1;
    }
}

/* A word that names one of llama.cpp's built-in formats rather than a template's source. */
static int a_name(const char *s)
{
    if (!*s || strlen(s) > 32)
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-' || *s == '.' ||
              *s == '_'))
            return 0;
    return 1;
}

int mvm_cli_template_text(const char *cmd, const mvm_cli_template *t, char **text, size_t *len)
{
    *text = NULL, *len = 0;
    if (t->file)
        return (*text = mvm_cli_read_text(cmd, t->file, len)) ? 0 : 2;
    if (!t->source)
        return 0;
    const char *src = !strcmp(t->source, "chatml") ? mvm_chat_template_chatml : t->source;
    if (src == t->source && a_name(src)) {
        fprintf(stderr, "moevm %s: --chat-template %s: one of llama.cpp's built-in formats, which "
                "moevm does not have (moevm renders Jinja templates: give the template's "
                "source, or --chat-template-file FILE; \"chatml\" is ChatML)\n", cmd, src);
        return 2;
    }
    if (!(*text = strdup(src))) {
        fprintf(stderr, "moevm %s: out of memory\n", cmd);
        return 2;
    }
    *len = strlen(src);
    return 0;
}

char *mvm_cli_template_kwargs(const mvm_cli_template *t)
{
    return t->kwargs && t->kwargs->child ? cJSON_PrintUnformatted(t->kwargs) : NULL;
}

void mvm_cli_template_usage(FILE *f)
{
    fprintf(f,
            "  --chat-template-file FILE  a Jinja chat template to use instead of the model's\n"
            "  --chat-template SOURCE  the same, given as its source (\"chatml\": ChatML)\n"
            "  --chat-template-kwargs JSON  variables every render gets, {\"key\": value, ...}\n"
            "                  (a request's own chat_template_kwargs over them)\n"
            "  --reasoning, -rea on|off|auto  llama.cpp's: the template's enable_thinking\n"
            "                  true or false (auto: the template's default)\n"
            "  --reasoning-effort LEVEL  the template's reasoning_effort (default: none)\n");
}

void mvm_cli_template_free(mvm_cli_template *t)
{
    cJSON_Delete(t->kwargs);
    t->kwargs = NULL;
}
