/*
 * llama.cpp's grammar options, in the commands that sample (run, chat, serve): the replies
 * are sentences of a GBNF grammar or JSON texts a JSON Schema validates
 * (engine/grammar/). Read and checked with the other options, so that a bad grammar fails
 * before the model loads.
 */
#ifndef MVM_TOOLS_CLI_GRAMMAR_H
#define MVM_TOOLS_CLI_GRAMMAR_H

#include <stdio.h>

#include "moevm/engine.h"

enum { MVM_CLI_G_GRAMMAR = 1100, MVM_CLI_G_GRAMMAR_FILE, MVM_CLI_G_SCHEMA, MVM_CLI_G_SCHEMA_FILE };

/* The rows, for a command's mvm_cli_opt table (llama.cpp's spellings). */
#define MVM_CLI_GRAMMAR_OPTS                                                                    \
    {"grammar", 0, 1, MVM_CLI_G_GRAMMAR}, {"grammar-file", 0, 1, MVM_CLI_G_GRAMMAR_FILE},       \
    {"json-schema", 'j', 1, MVM_CLI_G_SCHEMA}, {"json-schema-file", 0, 1, MVM_CLI_G_SCHEMA_FILE},\
    {"-jf", 0, 1, MVM_CLI_G_SCHEMA_FILE}

typedef struct mvm_cli_grammar {
    int id;            /* the option given, 0 for none */
    char flag[32];     /* as typed (the walker's copy is its own to reuse) */
    const char *value;
    char *gbnf;        /* after mvm_cli_grammar_load: the grammar (malloc'd), or NULL */
} mvm_cli_grammar;

/* id one of the rows: recorded, 0; 2 after a one-line error (a second of them); -1: not
 * one of them. */
int mvm_cli_grammar_option(const char *cmd, int id, const char *flag, const char *value,
                           mvm_cli_grammar *g);
/* After the options: the file read, the schema turned into GBNF, the grammar parsed, into
 * g->gbnf. 0, or 2 after a one-line error naming the option and the fault. */
int mvm_cli_grammar_load(const char *cmd, mvm_cli_grammar *g);
/* g->gbnf bound to e, constraining s (*out: the grammar to free after s; NULL without
 * one). 0, or 1 after a one-line error. */
int mvm_cli_grammar_attach(const char *cmd, const mvm_cli_grammar *g, const mvm_engine *e,
                           mvm_sampler *s, mvm_grammar **out);
void mvm_cli_grammar_free(mvm_cli_grammar *g);
/* The rows' help lines. */
void mvm_cli_grammar_usage(FILE *f);

#endif
