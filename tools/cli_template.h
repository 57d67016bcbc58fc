/*
 * llama.cpp's chat-template options, which `moevm chat` and `moevm serve` take
 * (tools/cli_template.c): the template in place of the model's (--chat-template-file FILE,
 * --chat-template SOURCE, where "chatml" is ChatML) and the variables every render gets
 * (--chat-template-kwargs JSON, --reasoning on|off|auto as enable_thinking,
 * --reasoning-effort LEVEL), under what a request gives.
 */
#ifndef MVM_TOOLS_CLI_TEMPLATE_H
#define MVM_TOOLS_CLI_TEMPLATE_H

#include <cjson/cJSON.h>
#include <stdio.h>

#include "moevm/engine.h"
#include "tools/cli.h"

enum {
    MVM_CLI_T_FILE = 1400, MVM_CLI_T_SOURCE, MVM_CLI_T_KWARGS, MVM_CLI_T_REASONING,
    MVM_CLI_T_EFFORT,
};

#define MVM_CLI_TEMPLATE_OPTS                                                                   \
    {"chat-template-file", 0, 1, MVM_CLI_T_FILE}, {"chat-template", 0, 1, MVM_CLI_T_SOURCE},   \
    {"chat-template-kwargs", 0, 1, MVM_CLI_T_KWARGS}, {"-rea", 0, 1, MVM_CLI_T_REASONING},      \
    {"reasoning", 0, 1, MVM_CLI_T_REASONING}, {"reasoning-effort", 0, 1, MVM_CLI_T_EFFORT}

typedef struct mvm_cli_template {
    const char *file;   /* --chat-template-file, or NULL */
    const char *source; /* --chat-template (the last of the two given wins), or NULL */
    cJSON *kwargs;      /* the variables every render gets; NULL: none */
} mvm_cli_template;

/* Option id (one of the rows) into t: 0, or 2 after a one-line error; -1 when it is not one
 * of them. */
int mvm_cli_template_option(const char *cmd, const mvm_cli_iter *it, mvm_cli_template *t);
/* The template text to put in place of the model's, read before the model loads (so that a
 * file that cannot be read fails first): *text malloc'd (NULL: the model's own), 0; or 2
 * after the line saying why. */
int mvm_cli_template_text(const char *cmd, const mvm_cli_template *t, char **text, size_t *len);
/* t's variables as one JSON object's text (malloc'd), or NULL when there are none. */
char *mvm_cli_template_kwargs(const mvm_cli_template *t);
void mvm_cli_template_usage(FILE *f);
void mvm_cli_template_free(mvm_cli_template *t);

#endif
