/*
 * The constraint a request asks for, in the fields llama.cpp's server reads (its
 * server-common.cpp): `grammar` (GBNF text), `json_schema` (a JSON Schema), and OpenAI's
 * `response_format` — {"type": "text"}, {"type": "json_object"} (any JSON object, or one
 * of its `schema`), {"type": "json_schema", "json_schema": {"schema": ...}}. A schema that
 * is an empty object means any JSON object, as there. A request with none of them gets the
 * command line's (--grammar, --json-schema). Each request made from the body (several
 * prompts, OpenAI's `n`) gets a grammar of its own: they advance apart.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/serve_api.h"
#include "vmm/error.h"

/* The schema response_format gives (*schema), or *any when it asks for a JSON object
 * without one; neither for none, or "text". -1 with a message. */
static int response_format(const cJSON *body, const cJSON **schema, int *any, char *bad,
                           size_t cap)
{
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(body, "response_format");
    *schema = NULL, *any = 0;
    if (!rf || cJSON_IsNull(rf))
        return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(rf, "type");
    const char *t = cJSON_IsObject(rf) && cJSON_IsString(type) ? type->valuestring : NULL;
    if (!t || (strcmp(t, "text") && strcmp(t, "json_object") && strcmp(t, "json_schema"))) {
        snprintf(bad, cap, "'response_format' must be {\"type\": \"text\"}, {\"type\": "
                 "\"json_object\"} or {\"type\": \"json_schema\", \"json_schema\": {\"schema\": "
                 "...}}");
        return -1;
    }
    if (!strcmp(t, "json_object"))
        *schema = cJSON_GetObjectItemCaseSensitive(rf, "schema");
    else if (!strcmp(t, "json_schema"))
        *schema = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(rf, "json_schema"), "schema");
    *any = strcmp(t, "text") && !*schema;
    return 0;
}

/* schema as GBNF (malloc'd); NULL with a message. */
static char *schema_grammar(const cJSON *schema, int any_object, const char *field, char *bad,
                            size_t cap)
{
    if (!any_object && !cJSON_IsObject(schema) && !cJSON_IsBool(schema)) {
        snprintf(bad, cap, "%s must be a JSON Schema (an object)", field);
        return NULL;
    }
    char *text = any_object || (cJSON_IsObject(schema) && !schema->child)
                     ? strdup("{\"type\":\"object\"}")
                     : cJSON_PrintUnformatted(schema);
    char *gbnf = NULL;
    if (text && mvm_json_schema_to_grammar(text, strlen(text), &gbnf) != MVM_OK)
        snprintf(bad, cap, "%s: %s", field, mvm_last_error());
    else if (!text)
        snprintf(bad, cap, "out of memory");
    free(text);
    return gbnf;
}

int serve_grammar_text(const serve_api *a, const cJSON *body, char **gbnf, char *bad,
                       size_t cap)
{
    *gbnf = NULL;
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(body, "grammar");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(body, "json_schema"), *rf_schema;
    if (g && !cJSON_IsNull(g) && !cJSON_IsString(g)) {
        snprintf(bad, cap, "'grammar' must be a string of GBNF");
        return -1;
    }
    const int has_g = g && cJSON_IsString(g) && g->valuestring[0];
    const int has_js = js && !cJSON_IsNull(js);
    int any;
    if (response_format(body, &rf_schema, &any, bad, cap))
        return -1;
    if (has_g + has_js + (rf_schema || any) > 1) {
        snprintf(bad, cap, "give one of 'grammar', 'json_schema' and a 'response_format' "
                 "with a schema, not several");
        return -1;
    }
    if (has_g)
        *gbnf = strdup(g->valuestring);
    else if (has_js)
        *gbnf = schema_grammar(js, 0, "'json_schema'", bad, cap);
    else if (rf_schema || any)
        *gbnf = schema_grammar(rf_schema, any, "'response_format'", bad, cap);
    else if (a->default_grammar)
        *gbnf = strdup(a->default_grammar);
    else
        return 0;
    if (!*gbnf && !bad[0])
        snprintf(bad, cap, "out of memory");
    return *gbnf ? 0 : -1;
}

int serve_grammar_bind(const serve_api *a, const char *gbnf, serve_req *r, char *bad,
                       size_t cap)
{
    if (!gbnf)
        return 0;
    if (mvm_grammar_create(a->e, gbnf, &r->grammar) != MVM_OK) {
        snprintf(bad, cap, "'grammar': %s", mvm_last_error());
        return -1;
    }
    return 0;
}
