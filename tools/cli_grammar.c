/* The grammar options (cli_grammar.h). */
#include "tools/cli_grammar.h"

#include <stdlib.h>
#include <string.h>

#include "engine/grammar/grammar.h"
#include "tools/cli.h"
#include "vmm/error.h"

int mvm_cli_grammar_option(const char *cmd, int id, const char *flag, const char *value,
                           mvm_cli_grammar *g)
{
    if (id < MVM_CLI_G_GRAMMAR || id > MVM_CLI_G_SCHEMA_FILE)
        return -1;
    if (g->id) { /* llama.cpp takes the last; two constraints are a mistake worth a line */
        fprintf(stderr, "moevm %s: %s and %s: give one grammar or one JSON schema\n", cmd,
                g->flag, flag);
        return 2;
    }
    *g = (mvm_cli_grammar){.id = id, .value = value};
    snprintf(g->flag, sizeof g->flag, "%s", flag);
    return 0;
}

int mvm_cli_grammar_load(const char *cmd, mvm_cli_grammar *g)
{
    if (!g->id)
        return 0;
    size_t len = strlen(g->value);
    char *text = NULL;
    const int file = g->id == MVM_CLI_G_GRAMMAR_FILE || g->id == MVM_CLI_G_SCHEMA_FILE;
    if (file && !(text = mvm_cli_read_text(cmd, g->value, &len)))
        return 2;
    const char *src = file ? text : g->value;
    mvm_status st = MVM_OK;
    const int schema = g->id == MVM_CLI_G_SCHEMA || g->id == MVM_CLI_G_SCHEMA_FILE;
    if (schema)
        st = mvm_json_schema_to_grammar(src, len, &g->gbnf);
    else if (!(g->gbnf = strdup(src)))
        st = mvm_fail(MVM_ERR_NOMEM, "no memory");
    free(text);
    mvm_grammar *check = NULL;
    if (st == MVM_OK && !schema) /* parsed now: a bad grammar fails before the model loads
                                  * (a schema's the converter has parsed) */
        st = mvm_grammar_parse(g->gbnf, &check);
    mvm_grammar_free(check);
    if (st != MVM_OK) {
        fprintf(stderr, "moevm %s: %s: %s\n", cmd, g->flag, mvm_last_error());
        free(g->gbnf);
        g->gbnf = NULL;
        return 2;
    }
    return 0;
}

int mvm_cli_grammar_attach(const char *cmd, const mvm_cli_grammar *g, const mvm_engine *e,
                           mvm_sampler *s, mvm_grammar **out)
{
    *out = NULL;
    if (!g->gbnf)
        return 0;
    if (mvm_grammar_create(e, g->gbnf, out) != MVM_OK ||
        mvm_sampler_set_grammar(s, *out) != MVM_OK) {
        fprintf(stderr, "moevm %s: %s: %s\n", cmd, g->flag, mvm_last_error());
        mvm_grammar_free(*out);
        *out = NULL;
        return 1;
    }
    return 0;
}

void mvm_cli_grammar_free(mvm_cli_grammar *g)
{
    free(g->gbnf);
    g->gbnf = NULL;
}

void mvm_cli_grammar_usage(FILE *f)
{
    fprintf(f,
            "  --grammar GBNF  replies are sentences of this grammar (llama.cpp's GBNF, rule\n"
            "                  `root` first to match); --grammar-file FILE: from a file\n"
            "  -j, --json-schema SCHEMA  replies are JSON texts this JSON Schema validates;\n"
            "                  -jf, --json-schema-file FILE: from a file (one of the four)\n");
}
