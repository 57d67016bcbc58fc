/*
 * The JSON Schema converter (mvm_json_schema_to_grammar, engine/grammar/json_schema*.c):
 * its grammars against llama.cpp's, the texts they accept and refuse through the GBNF
 * matcher, the schemas it refuses and why, and its limits.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine/grammar/grammar.h"
#include "moevm/engine.h"
#include "vmm/error.h"

/* The tests' schemas are written with ' for " (none of them holds a '). */
static char *dq(const char *s)
{
    char *d = strdup(s);
    for (char *p = d; *p; p++)
        if (*p == '\'')
            *p = '"';
    return d;
}

/* The grammar of a schema (' for "), NULL when refused. */
static char *convert(const char *schema)
{
    char *s = dq(schema), *g = NULL;
    const mvm_status st = mvm_json_schema_to_grammar(s, strlen(s), &g);
    free(s);
    return st == MVM_OK ? g : NULL;
}

/* Whether the grammar's sentences include text: 1 or 0, -1 when it does not parse. */
static int grammar_matches(const char *gbnf, const char *text)
{
    mvm_grammar *g = NULL;
    if (mvm_grammar_parse(gbnf, &g) != MVM_OK) {
        fprintf(stderr, "grammar does not parse: %s\n%s", mvm_last_error(), gbnf);
        return -1;
    }
    const int ok = mvm_grammar_accept_text(g, text, strlen(text)) && mvm_grammar_complete(g);
    mvm_grammar_free(g);
    return ok;
}

/* ---- the grammars, as llama.cpp writes them ---------------------------------------------- */

/* Each schema's grammar as llama.cpp's converter of the version vendored by llama-cpp-python
 * 0.3.36 (common/json-schema-to-grammar.cpp, built from its source) writes it. */
static const struct {
    const char *name, *schema, *grammar;
} llama_cases[] = {
    {"object",
     "{'type':'object','properties':{'name':{'type':'string','maxLength':5},'age':{'type':'integer"
     "','minimum':3},'tags':{'type':'array','items':{'type':'string'},'minItems':1,'maxItems':3}},"
     "'required':['name','age'],'additionalProperties':false}",
     "age ::= ([1-2] [0-9]{1,15} | [3-9] [0-9]{0,15})\n"
     "age-kv ::= \"\\\"age\\\"\" space \":\" space age\n"
     "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
     "name ::= \"\\\"\" char{0,5} \"\\\"\"\n"
     "name-kv ::= \"\\\"name\\\"\" space \":\" space name\n"
     "root ::= \"{\" space name-kv \",\" space age-kv ( \",\" space ( tags-kv ) )? space \"}\"\n"
     "space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n"
     "string ::= \"\\\"\" char* \"\\\"\"\n"
     "tags ::= \"[\" space string (\",\" space string){0,2} space \"]\"\n"
     "tags-kv ::= \"\\\"tags\\\"\" space \":\" space tags\n"},
    {"recursive_ref",
     "{'$defs':{'node':{'type':'object','properties':{'value':{'type':'integer'},'next':{'$ref':'#"
     "/$defs/node'}},'required':['value']}},'$ref':'#/$defs/node'}",
     "integer ::= (\"-\"? integral-part)\n"
     "integral-part ::= [0] | [1-9] [0-9]{0,15}\n"
     "ref-defs-node ::= \"{\" space ref-defs-node-value-kv ( \",\" space ( ref-defs-node-next-kv )"
     " )? space \"}\"\n"
     "ref-defs-node-next ::= ref-defs-node\n"
     "ref-defs-node-next-kv ::= \"\\\"next\\\"\" space \":\" space ref-defs-node-next\n"
     "ref-defs-node-value-kv ::= \"\\\"value\\\"\" space \":\" space integer\n"
     "root ::= ref-defs-node\n"
     "space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n"},
    {"additional",
     "{'type':'object','properties':{'a':{'type':'number'},'ab':{'type':'boolean'},'b':{}},'additi"
     "onalProperties':true}",
     "a-kv ::= \"\\\"a\\\"\" space \":\" space number\n"
     "a-rest ::= ( \",\" space ab-kv )? ab-rest\n"
     "ab-kv ::= \"\\\"ab\\\"\" space \":\" space boolean\n"
     "ab-rest ::= ( \",\" space b-kv )? b-rest\n"
     "additional-k ::= [\"] ( [a] ([b] char+ | [^\"b] char*) | [b] char+ | [^\"ab] char* )? [\"]\n"
     "additional-kv ::= additional-k \":\" space value\n"
     "array ::= \"[\" space ( value (\",\" space value)* )? space \"]\"\n"
     "b ::= value\n"
     "b-kv ::= \"\\\"b\\\"\" space \":\" space b\n"
     "b-rest ::= ( \",\" space additional-kv )*\n"
     "boolean ::= (\"true\" | \"false\")\n"
     "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
     "decimal-part ::= [0-9]{1,16}\n"
     "integral-part ::= [0] | [1-9] [0-9]{0,15}\n"
     "null ::= \"null\"\n"
     "number ::= (\"-\"? integral-part) (\".\" decimal-part)? ([eE] [-+]? integral-part)?\n"
     "object ::= \"{\" space ( string \":\" space value (\",\" space string \":\" space value)* )?"
     " space \"}\"\n"
     "root ::= \"{\" space  (a-kv a-rest | ab-kv ab-rest | b-kv b-rest | additional-kv ( \",\" spa"
     "ce additional-kv )* )? space \"}\"\n"
     "space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n"
     "string ::= \"\\\"\" char* \"\\\"\"\n"
     "value ::= object | array | string | number | boolean | null\n"},
    {"additional_schema",
     "{'type':'object','additionalProperties':{'type':'null'}}",
     "additional-kv ::= string \":\" space null\n"
     "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
     "null ::= \"null\"\n"
     "root ::= \"{\" space  (additional-kv ( \",\" space additional-kv )* )? space \"}\"\n"
     "space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n"
     "string ::= \"\\\"\" char* \"\\\"\"\n"},
    {"enum_const",
     "{'type':'object','properties':{'e':{'enum':['a\\u0022b',1,2.5,null,true,{'k':[1,'x']}]},'c':"
     "{'const':'on\\n'},'t':{'type':['string','null']}}}",
     "c ::= \"\\\"on\\\\n\\\"\"\n"
     "c-kv ::= \"\\\"c\\\"\" space \":\" space c\n"
     "c-rest ::= ( \",\" space t-kv )?\n"
     "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
     "e ::= (\"\\\"a\\\\\\\"b\\\"\" | \"1\" | \"2.5\" | \"null\" | \"true\" | \"{\\\"k\\\":[1,\\\""
     "x\\\"]}\")\n"
     "e-kv ::= \"\\\"e\\\"\" space \":\" space e\n"
     "e-rest ::= ( \",\" space c-kv )? c-rest\n"
     "null ::= \"null\"\n"
     "root ::= \"{\" space  (e-kv e-rest | c-kv c-rest | t-kv )? space \"}\"\n"
     "space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n"
     "string ::= \"\\\"\" char* \"\\\"\"\n"
     "t ::= string | null\n"
     "t-kv ::= \"\\\"t\\\"\" space \":\" space t\n"},
    {"tuple_and_items",
     "{'type':'object','properties':{'pair':{'prefixItems':[{'type':'string'},{'type':'integer'}]}"
     ",'list':{'type':'array','items':{'type':'boolean'},'maxItems':2},'any':{'type':'array'}}}",
     "any-kv ::= \"\\\"any\\\"\" space \":\" space array\n"
     "array ::= \"[\" space ( value (\",\" space value)* )? space \"]\"\n"
     "boolean ::= (\"true\" | \"false\")\n"
     "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
     "decimal-part ::= [0-9]{1,16}\n"
     "integer ::= (\"-\"? integral-part)\n"
     "integral-part ::= [0] | [1-9] [0-9]{0,15}\n"
     "list ::= \"[\" space (boolean (\",\" space boolean)?)? space \"]\"\n"
     "list-kv ::= \"\\\"list\\\"\" space \":\" space list\n"
     "list-rest ::= ( \",\" space any-kv )?\n"
     "null ::= \"null\"\n"
     "number ::= (\"-\"? integral-part) (\".\" decimal-part)? ([eE] [-+]? integral-part)?\n"
     "object ::= \"{\" space ( string \":\" space value (\",\" space string \":\" space value)* )?"
     " space \"}\"\n"
     "pair ::= \"[\" space string \",\" space integer space \"]\"\n"
     "pair-kv ::= \"\\\"pair\\\"\" space \":\" space pair\n"
     "pair-rest ::= ( \",\" space list-kv )? list-rest\n"
     "root ::= \"{\" space  (pair-kv pair-rest | list-kv list-rest | any-kv )? space \"}\"\n"
     "space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n"
     "string ::= \"\\\"\" char* \"\\\"\"\n"
     "value ::= object | array | string | number | boolean | null\n"},
    {"unions",
     "{'oneOf':[{'type':'object','properties':{'kind':{'const':'a'}},'required':['kind']},{'anyOf'"
     ":[{'type':'integer'},{'type':'string','format':'uuid'}]}]}",
     "alternative-0 ::= \"{\" space alternative-0-kind-kv space \"}\"\n"
     "alternative-0-kind ::= \"\\\"a\\\"\"\n"
     "alternative-0-kind-kv ::= \"\\\"kind\\\"\" space \":\" space alternative-0-kind\n"
     "alternative-1 ::= integer | uuid\n"
     "integer ::= (\"-\"? integral-part)\n"
     "integral-part ::= [0] | [1-9] [0-9]{0,15}\n"
     "root ::= alternative-0 | alternative-1\n"
     "space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n"
     "uuid ::= \"\\\"\" [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]"
     "{4} \"-\" [0-9a-fA-F]{12} \"\\\"\"\n"},
    {"all_of",
     "{'allOf':[{'$ref':'#/definitions/base'},{'properties':{'extra':{'type':'string'}}},{'anyOf':"
     "[{'properties':{'c':{'type':'number'}}},{'properties':{'d':{'type':'number'}}}]}],'definitio"
     "ns':{'base':{'properties':{'id':{'type':'integer'}}}},'type':'object'}",
     "c-kv ::= \"\\\"c\\\"\" space \":\" space number\n"
     "c-rest ::= ( \",\" space d-kv )?\n"
     "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
     "d-kv ::= \"\\\"d\\\"\" space \":\" space number\n"
     "decimal-part ::= [0-9]{1,16}\n"
     "extra-kv ::= \"\\\"extra\\\"\" space \":\" space string\n"
     "id-kv ::= \"\\\"id\\\"\" space \":\" space integer\n"
     "integer ::= (\"-\"? integral-part)\n"
     "integral-part ::= [0] | [1-9] [0-9]{0,15}\n"
     "number ::= (\"-\"? integral-part) (\".\" decimal-part)? ([eE] [-+]? integral-part)?\n"
     "root ::= \"{\" space id-kv \",\" space extra-kv ( \",\" space ( c-kv c-rest | d-kv ) )? spac"
     "e \"}\"\n"
     "space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n"
     "string ::= \"\\\"\" char* \"\\\"\"\n"},
    {"all_of_enum",
     "{'allOf':[{'enum':['x','y','z']},{'enum':['z','y','w']}]}",
     "root ::= (\"\\\"y\\\"\" | \"\\\"z\\\"\")\n"
     "space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n"},
    {"string_formats",
     "{'type':'object','properties':{'d':{'type':'string','format':'date'},'t':{'type':'string','f"
     "ormat':'time'},'dt':{'type':'string','format':'date-time'},'u':{'type':'string','format':'uu"
     "id'},'s':{'type':'string','minLength':2,'maxLength':4}}}",
     "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
     "d ::= date-string\n"
     "d-kv ::= \"\\\"d\\\"\" space \":\" space d\n"
     "d-rest ::= ( \",\" space t-kv )? t-rest\n"
     "date ::= [0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [1-2] [0-9] | \""
     "3\" [0-1] )\n"
     "date-string ::= \"\\\"\" date \"\\\"\"\n"
     "date-time ::= date \"T\" time\n"
     "date-time-string ::= \"\\\"\" date-time \"\\\"\"\n"
     "dt ::= date-time-string\n"
     "dt-kv ::= \"\\\"dt\\\"\" space \":\" space dt\n"
     "dt-rest ::= ( \",\" space u-kv )? u-rest\n"
     "root ::= \"{\" space  (d-kv d-rest | t-kv t-rest | dt-kv dt-rest | u-kv u-rest | s-kv )? spa"
     "ce \"}\"\n"
     "s ::= \"\\\"\" char{2,4} \"\\\"\"\n"
     "s-kv ::= \"\\\"s\\\"\" space \":\" space s\n"
     "space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n"
     "t ::= time-string\n"
     "t-kv ::= \"\\\"t\\\"\" space \":\" space t\n"
     "t-rest ::= ( \",\" space dt-kv )? dt-rest\n"
     "time ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{3} )? "
     "( \"Z\" | ( \"+\" | \"-\" ) ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )\n"
     "time-string ::= \"\\\"\" time \"\\\"\"\n"
     "u-kv ::= \"\\\"u\\\"\" space \":\" space uuid\n"
     "u-rest ::= ( \",\" space s-kv )?\n"
     "uuid ::= \"\\\"\" [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]"
     "{4} \"-\" [0-9a-fA-F]{12} \"\\\"\"\n"},
    {"integer_ranges",
     "{'type':'object','properties':{'a':{'type':'integer','minimum':-5,'maximum':123},'b':{'type'"
     ":'integer','exclusiveMinimum':0},'c':{'type':'integer','maximum':25},'d':{'type':'integer','"
     "minimum':25}}}",
     "a ::= (\"-\" ([0-5]) | [0-9] | ([1-8] [0-9] | [9] [0-9]) | \"1\" ([0-1] [0-9] | [2] [0-3]))"
     "\n"
     "a-kv ::= \"\\\"a\\\"\" space \":\" space a\n"
     "a-rest ::= ( \",\" space b-kv )? b-rest\n"
     "b ::= ([1-9] [0-9]{0,15})\n"
     "b-kv ::= \"\\\"b\\\"\" space \":\" space b\n"
     "b-rest ::= ( \",\" space c-kv )? c-rest\n"
     "c ::= (\"-\" [1-9] [0-9]{0,15} | [0-9] | ([1] [0-9] | [2] [0-5]))\n"
     "c-kv ::= \"\\\"c\\\"\" space \":\" space c\n"
     "c-rest ::= ( \",\" space d-kv )?\n"
     "d ::= ([1] [0-9]{2,15} | [2] ([0-4] [0-9]{1,14} | [5-9] [0-9]{0,14}) | [3-9] [0-9]{1,15})\n"
     "d-kv ::= \"\\\"d\\\"\" space \":\" space d\n"
     "root ::= \"{\" space  (a-kv a-rest | b-kv b-rest | c-kv c-rest | d-kv )? space \"}\"\n"
     "space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n"},
    {"pattern",
     "{'type':'string','pattern':'^(\\\\+[0-9]{1,3})? ?[a-z]+(-[a-z]+)*\\\\.x{2,}$'}",
     "root ::= \"\\\"\" ((\"+\" root-1{1,3})? \" \"? [a-z]+ (\"-\" [a-z]+)* \".\" \"x\"{2,}) \"\\"
     "\"\"\n"
     "root-1 ::= [0-9]\n"
     "space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n"},
    {"any",
     "{}",
     "array ::= \"[\" space ( value (\",\" space value)* )? space \"]\"\n"
     "boolean ::= (\"true\" | \"false\")\n"
     "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
     "decimal-part ::= [0-9]{1,16}\n"
     "integral-part ::= [0] | [1-9] [0-9]{0,15}\n"
     "null ::= \"null\"\n"
     "number ::= (\"-\"? integral-part) (\".\" decimal-part)? ([eE] [-+]? integral-part)?\n"
     "object ::= \"{\" space ( string \":\" space value (\",\" space string \":\" space value)* )?"
     " space \"}\"\n"
     "root ::= value\n"
     "space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n"
     "string ::= \"\\\"\" char* \"\\\"\"\n"
     "value ::= object | array | string | number | boolean | null\n"},
    {"reserved_names",
     "{'type':'object','properties':{'string':{'type':'string'},'root':{'type':'integer'},'char':{"
     "'type':'boolean'}}}",
     "boolean ::= (\"true\" | \"false\")\n"
     "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
     "char-kv ::= \"\\\"char\\\"\" space \":\" space boolean\n"
     "integer ::= (\"-\"? integral-part)\n"
     "integral-part ::= [0] | [1-9] [0-9]{0,15}\n"
     "root ::= \"{\" space  (string-kv string-rest | root-kv root-rest | char-kv )? space \"}\"\n"
     "root-kv ::= \"\\\"root\\\"\" space \":\" space integer\n"
     "root-rest ::= ( \",\" space char-kv )?\n"
     "space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n"
     "string ::= \"\\\"\" char* \"\\\"\"\n"
     "string-kv ::= \"\\\"string\\\"\" space \":\" space string\n"
     "string-rest ::= ( \",\" space root-kv )? root-rest\n"},
};

static void test_llama_grammars(void)
{
    for (size_t i = 0; i < sizeof llama_cases / sizeof llama_cases[0]; i++) {
        char *g = convert(llama_cases[i].schema);
        CHECK(g != NULL);
        if (!g) {
            fprintf(stderr, "%s: %s\n", llama_cases[i].name, mvm_last_error());
            continue;
        }
        CHECK(strcmp(g, llama_cases[i].grammar) == 0);
        if (strcmp(g, llama_cases[i].grammar) != 0)
            fprintf(stderr, "%s: got\n%swanted\n%s", llama_cases[i].name, g,
                    llama_cases[i].grammar);
        CHECK(grammar_matches(g, "") >= 0); /* the matcher parses it */
        free(g);
    }
}

/* ---- where the grammar is not llama.cpp's ------------------------------------------------ */

/* Schemas whose llama.cpp grammar means something else than the schema; the mended text
 * (json_schema_rules.c lists why), llama.cpp's in a comment. */
static const struct {
    const char *schema, *grammar;
} mended[] = {
    /* llama.cpp: "-" ([0-4] ...: "-01" */
    {"{'type':'integer','maximum':-5}",
     "root ::= (\"-\" ([1-4] [0-9]{1,15} | [5-9] [0-9]{0,15}))\n"
     "space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n"},
    /* llama.cpp: [1] ([0-4] [0-9]{1,14} | [5-9] [0-9]{0,14}) | [2-9] [0-9]{2,15}: 100, 15 */
    {"{'type':'integer','minimum':105}",
     "root ::= ([1] (([0] ([5-9]) | [1-9] [0-9]) | [0-9]{3,15}) | [2-9] [0-9]{2,15})\n"
     "space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n"},
    /* llama.cpp: ("ab."+) */
    {"{'type':'string','pattern':'^ab\\\\.+$'}",
     "root ::= \"\\\"\" (\"ab\" \".\"+) \"\\\"\"\n"
     "space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n"},
    /* llama.cpp: ("1" | "2"), counting 1 twice */
    {"{'allOf':[{'enum':[1,1,2]},{'enum':[2,3]}]}",
     "root ::= (\"2\")\n"
     "space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n"},
};

static void test_mended(void)
{
    for (size_t i = 0; i < sizeof mended / sizeof mended[0]; i++) {
        char *g = convert(mended[i].schema);
        CHECK(g && strcmp(g, mended[i].grammar) == 0);
        if (g && strcmp(g, mended[i].grammar) != 0)
            fprintf(stderr, "%s: got\n%swanted\n%s", mended[i].schema, g, mended[i].grammar);
        free(g);
    }
    /* names with ']', '^' and a '-' between two characters in the keys' character classes
     * (llama.cpp: []] and [^], which do not parse, and [^"-a], a range) */
    char *g = convert("{'type':'object','properties':{'x-a':{},'xa':{},']':{},'^':{}},"
                      "'additionalProperties':true}");
    CHECK(g && strstr(g, "additional-k ::= [\"] ( [\\]] char+ | [\\x5E] char+ | [x] ([-] ([a] "
                         "char+ | [^\"a] char*) | [a] char+ | [^\"\\-a] char*) | [^\"\\]^x] "
                         "char* )? [\"]\n"));
    free(g);
}

/* ---- what the grammars accept ------------------------------------------------------------ */

/* A schema, texts its grammar must accept, texts it must refuse (NULL-terminated). */
typedef struct {
    const char *schema;
    const char *yes[6], *no[7];
} match_case;

static const match_case matches[] = {
    /* properties, required, optional, no others, llama.cpp's property order */
    {"{'type':'object','properties':{'a':{'type':'integer'},'b':{'type':'string'}},"
     "'required':['a'],'additionalProperties':false}",
     {"{\"a\":1}", "{ \"a\" : -5, \"b\" : \"x\" }", "{\"a\":0,\"b\":\"\"}"},
     {"{}", "{\"b\":\"x\"}", "{\"a\":1,\"c\":2}", "{\"a\":\"1\"}", "{\"b\":\"x\",\"a\":1}",
      "{\"a\":1.5}"}},
    /* additional properties: any, a schema, and keys other than the named ones */
    {"{'type':'object','properties':{'a':{'type':'integer'}},'additionalProperties':true}",
     {"{\"a\":1,\"zz\":[1,{}]}", "{\"q\":null}", "{}"},
     {"{\"a\":\"x\"}", "{\"a\":1,\"a\":\"x\"}"}},
    {"{'type':'object','properties':{'a':{'type':'integer'}},"
     "'additionalProperties':{'type':'string'}}",
     {"{\"a\":1,\"b\":\"x\"}", "{\"ab\":\"x\"}", "{\"b\":\"x\",\"c\":\"y\"}"},
     {"{\"a\":\"x\"}", "{\"b\":1}"}},
    {"{'type':'object'}", {"{}", "{\"k\":[true]}"}, {"[]", "{\"k\"}"}},
    /* arrays and tuples */
    {"{'type':'array','items':{'type':'integer'},'minItems':1,'maxItems':2}",
     {"[1]", "[1,2]", "[ 1, 2 ]"},
     {"[]", "[1,2,3]", "[\"a\"]", "[1,]", "[1 ,2]"}},
    {"{'prefixItems':[{'type':'string'},{'type':'integer'}]}",
     {"[\"a\",1]"},
     {"[\"a\"]", "[1,\"a\"]", "[\"a\",1,2]"}},
    {"{'type':'array','items':[{'type':'null'}],'additionalItems':false}", {"[null]"}, {"[]"}},
    {"{'prefixItems':[{'type':'null'},{'const':2}],'items':false}", {"[null,2]"},
     {"[null]", "[null,2,3]"}},
    /* enum, const, type arrays, unions */
    {"{'enum':['a',1,null]}", {"\"a\"", "1", "null"}, {"\"b\"", "2", "true"}},
    {"{'const':{'k':[1,2]}}", {"{\"k\":[1,2]}"}, {"{\"k\":[1,2,3]}", "{ \"k\":[1,2]}"}},
    {"{'type':['string','null']}", {"\"x\"", "null"}, {"1", "[]"}},
    {"{'type':['string','null'],'enum':['a',null],'title':'t'}", {"\"a\"", "null"},
     {"\"b\"", "\"\""}},
    {"{'anyOf':[{'type':'integer'},{'type':'boolean'}]}", {"1", "true"}, {"\"x\"", "1.5"}},
    {"{'oneOf':[{'type':'object','properties':{'k':{'const':'a'}},'required':['k']},"
     "{'type':'object','properties':{'k':{'const':'b'},'v':{'type':'number'}},"
     "'required':['k','v']}]}",
     {"{\"k\":\"a\"}", "{\"k\":\"b\",\"v\":1e5}"},
     {"{\"k\":\"b\"}", "{\"k\":\"c\"}"}},
    /* $ref: recursive, into definitions */
    {"{'$defs':{'node':{'type':'object','properties':{'value':{'type':'integer'},"
     "'next':{'$ref':'#/$defs/node'}},'required':['value']}},'$ref':'#/$defs/node'}",
     {"{\"value\":1,\"next\":{\"value\":2,\"next\":{\"value\":3}}}"},
     {"{\"value\":1,\"next\":{}}", "{\"next\":{\"value\":2}}"}},
    {"{'definitions':{'c':{'enum':['r','g']}},'type':'array','items':{'$ref':'#/definitions/c'}}",
     {"[\"r\",\"g\"]", "[]"},
     {"[\"b\"]"}},
    /* allOf: objects merged (all required), enums intersected */
    {"{'allOf':[{'properties':{'a':{'type':'integer'}}},{'properties':{'b':{'type':'boolean'}}}]}",
     {"{\"a\":1,\"b\":true}"},
     {"{\"a\":1}", "{\"b\":true}"}},
    {"{'allOf':[{'enum':['x','y','z']},{'enum':['z','y','w']}]}", {"\"y\"", "\"z\""},
     {"\"x\"", "\"w\""}},
    /* any value, and true as a schema */
    {"{}", {"1", "\"s\"", "[1,{\"a\":null}]", "-0.5e-3"}, {"{", "[1,]", "nul"}},
    {"true", {"1", "{\"a\":[]}"}, {"tru"}},
    {"{'type':'object','properties':{'a':true},'required':['a']}", {"{\"a\":[]}"}, {"{}"}},
    /* strings: lengths (an escape is one character), formats */
    {"{'type':'string','minLength':2,'maxLength':3}",
     {"\"ab\"", "\"abc\"", "\"a\\u00e9\"", "\"\\n\\t\""},
     {"\"a\"", "\"abcd\"", "\"a\nb\""}},
    {"{'type':'string','format':'date'}", {"\"2024-02-29\""}, {"\"2024-13-01\"", "\"24-01-01\""}},
    {"{'type':'string','format':'time'}", {"\"12:30:00Z\"", "\"23:59:59.123+02:00\""},
     {"\"24:00:00Z\"", "\"12:30:00\""}},
    {"{'type':'string','format':'date-time'}", {"\"2024-01-01T00:00:00Z\""},
     {"\"2024-01-01 00:00:00Z\""}},
    {"{'type':'string','format':'uuid'}", {"\"123e4567-e89b-12d3-a456-426614174000\""},
     {"\"123e4567\"", "\"123e4567-e89b-12d3-a456-42661417400g\""}},
    /* integers: llama.cpp's ranges, and the mended ones */
    {"{'type':'integer','minimum':-5,'maximum':123}", {"-5", "0", "99", "123"},
     {"-6", "124", "1000", "05", "1.0"}},
    {"{'type':'integer','exclusiveMinimum':0}", {"1", "42"}, {"0", "-1"}},
    {"{'type':'integer','minimum':0,'exclusiveMinimum':5,'exclusiveMaximum':9.5}",
     {"6", "9"}, {"5", "10", "0"}},
    {"{'type':'integer','maximum':-5}", {"-5", "-100"}, {"-4", "-05", "5"}},
    {"{'type':'integer','minimum':105}", {"105", "1000", "110"}, {"100", "15", "104"}},
    {"{'type':'integer','minimum':1139242}", {"1139242", "10227276"}, {"1139241", "999999"}},
    /* patterns */
    {"{'type':'string','pattern':'^[a-z]+-[0-9]{2,3}$'}", {"\"ab-12\"", "\"x-123\""},
     {"\"ab-1\"", "\"AB-12\"", "\"ab-1234\""}},
    {"{'type':'string','pattern':'^(ab|c)*d?\\\\.x$'}", {"\"ababc.x\"", "\"d.x\"", "\".x\""},
     {"\"a.x\"", "\"dd.x\"", "\"abx\""}},
    {"{'type':'string','pattern':'^ab\\\\.+$'}", {"\"ab.\"", "\"ab...\""}, {"\"ab.ab.\""}},
    /* rule names that are built-ins' */
    {"{'type':'object','properties':{'string':{'type':'integer'},'char':{'type':'boolean'}}}",
     {"{\"string\":1,\"char\":false}"},
     {"{\"string\":\"s\"}"}},
};

static void test_matches(void)
{
    for (size_t i = 0; i < sizeof matches / sizeof matches[0]; i++) {
        char *g = convert(matches[i].schema);
        CHECK(g != NULL);
        if (!g) {
            fprintf(stderr, "%s: %s\n", matches[i].schema, mvm_last_error());
            continue;
        }
        for (size_t k = 0; k < 6 && matches[i].yes[k]; k++) {
            CHECK(grammar_matches(g, matches[i].yes[k]) == 1);
            if (grammar_matches(g, matches[i].yes[k]) != 1)
                fprintf(stderr, "%s refuses %s\n", matches[i].schema, matches[i].yes[k]);
        }
        for (size_t k = 0; k < 7 && matches[i].no[k]; k++) {
            CHECK(grammar_matches(g, matches[i].no[k]) == 0);
            if (grammar_matches(g, matches[i].no[k]) != 0)
                fprintf(stderr, "%s accepts %s\n", matches[i].schema, matches[i].no[k]);
        }
        free(g);
    }
}

/* ---- what is refused --------------------------------------------------------------------- */

/* A schema (' for ", unless raw) and what its message must hold. */
static const struct {
    const char *schema, *message;
    int raw;
} refused[] = {
    {"", "malformed JSON at line 1, column 1"},
    {"{'type':\n 'string',}", "malformed JSON at line 2"},
    {"{'type':'string'} x", "more after the JSON value"},
    {"{\"a\":1,\"a\":2}", "repeats the key 'a'", 1},
    {"{\"const\":\"\\u0000\"}", "U+0000", 1},
    {"{\"const\":\"a\\u00(b\"}", "without four hex digits", 1},
    {"{\"const\":\"a\\qb\"}", "malformed JSON", 1},
    {"{\"const\":\"\xff\"}", "invalid UTF-8", 1},
    {"{\"const\":\"a\tb\"}", "control character", 1},
    {"{\"minimum\":01}", "malformed number", 1},
    {"{\"const\":1e999}", "out of a double's range", 1},
    {"[1,2]", "a schema must be an object or true"},
    {"{'properties':{'a':false}}",
     "the schema false (no value) is not supported at #/properties/a"},
    {"{'type':'strin'}", "unknown type 'strin'"},
    {"{'type':['string',3]}", "'type' must be one of"},
    {"{'foo':1}", "unknown keyword 'foo' at #"},
    {"{'type':'number','minimum':0}", "'minimum' is not supported on a number schema"},
    {"{'type':'object','properties':{'a':{'type':'array','items':{'multipleOf':2}}}}",
     "'multipleOf' is not supported on a schema without a type at #/properties/a/items"},
    {"{'not':{'type':'string'}}", "'not' is not supported"},
    {"{'type':'object','properties':{'a':{}},'patternProperties':{'x':{}}}",
     "'patternProperties' is not supported on an object schema"},
    {"{'type':'array','uniqueItems':true}", "'uniqueItems' is not supported"},
    {"{'type':'string','format':'email'}", "format 'email' is not supported"},
    {"{'type':'string','pattern':'^a+$','maxLength':3}", "'maxLength' is not supported beside "
                                                         "'pattern'"},
    {"{'type':'string','format':'date','minLength':3}", "'minLength' is not supported beside "
                                                        "'format'"},
    {"{'$ref':'#/$defs/a','minLength':1,'$defs':{'a':{'type':'string'}}}",
     "'minLength' is not supported beside '$ref'"},
    {"{'type':'string','enum':['a',1]}", "'type' refuses values its 'enum' allows"},
    {"{'anyOf':[{'type':'string'}],'oneOf':[{'type':'string'}]}", "'anyOf' is not supported"},
    {"{'enum':[]}", "enum must be a non-empty array"},
    {"{'$ref':'#/$defs/missing'}", "cannot resolve $ref #/$defs/missing"},
    {"{'$ref':'other.json#/a'}", "only a $ref into the same document"},
    {"{'type':'object','required':['b'],'properties':{'a':{}}}", "required property 'b' is not"},
    {"{'type':'object','properties':{'*':{}}}", "a property named '*'"},
    {"{'type':'object','additionalProperties':3}", "additionalProperties must be"},
    {"{'prefixItems':[{}],'items':{}}", "prefixItems beside items"},
    {"{'items':[{},{}],'minItems':3}", "contradicts the 2 items of the tuple"},
    {"{'type':'array','maxItems':2001}", "maxItems 2001 is above llama.cpp's limit of 2000"},
    {"{'type':'array','minItems':1.5}", "minItems must be a non-negative integer"},
    {"{'type':'string','minLength':5,'maxLength':2}", "minLength is above maxLength"},
    {"{'type':'integer','minimum':5,'maximum':2}", "the minimum is above the maximum"},
    {"{'type':'integer','minimum':10000000000000000}", "a minimum of 10^15 or more"},
    {"{'type':'integer','maximum':1e300}", "maximum beyond +-10^18"},
    {"{'type':'integer','minimum':1,'exclusiveMinimum':true}", "exclusiveMinimum must be a "
                                                               "number"},
    {"{'type':'string','pattern':'abc'}", "pattern 'abc' is not supported: it is not anchored"},
    {"{'type':'string','pattern':'^\\\\d+$'}", "pattern '^\\d+$' is not supported"},
    {"{'type':'string','pattern':'^(a$'}", "invalid pattern '^(a$': unbalanced parentheses"},
    {"{'type':'string','pattern':'^a{3,2}$'}", "{m,n} with m above n"},
    {"{'type':'string','pattern':'^a{2001}$'}", "above llama.cpp's limit of 2000"},
    {"{'allOf':[{'type':'string'}]}", "allOf of a string schema is not supported"},
    {"{'allOf':[{'enum':[1]},{'enum':[2]}]}", "allOf's enums have no value in common"},
    {"{'allOf':[{'enum':[1]},{'properties':{'a':{}}}]}", "both enums and objects"},
    {"{'allOf':[{'properties':{'a':{}}},{'properties':{'a':{}}}]}",
     "allOf declares property 'a' twice"},
    {"{'allOf':[{'properties':{'a':{}},'additionalProperties':false},"
     "{'properties':{'b':{}}}]}", "refuses the properties of the other allOf components"},
    {"{'allOf':[{'anyOf':[{'properties':{'a':{}},'required':['a']}]}]}",
     "an anyOf is supported only of objects that require and refuse no property"},
};

static void test_refused(void)
{
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        char *s = refused[i].raw ? strdup(refused[i].schema) : dq(refused[i].schema), *g = NULL;
        CHECK_ST(mvm_json_schema_to_grammar(s, strlen(s), &g), MVM_ERR_INVALID);
        CHECK(g == NULL);
        const char *msg = mvm_last_error();
        CHECK(strncmp(msg, "json_schema: ", 13) == 0 && strstr(msg, refused[i].message));
        if (!strstr(msg, refused[i].message))
            fprintf(stderr, "%s: got '%s', wanted '%s'\n", s, msg, refused[i].message);
        free(g);
        free(s);
    }
    char *g = NULL;
    CHECK_ST(mvm_json_schema_to_grammar("{}", 2, NULL), MVM_ERR_INVALID);
    CHECK_ST(mvm_json_schema_to_grammar(NULL, 3, &g), MVM_ERR_INVALID);
}

/* ---- limits: nothing nests, runs or writes without bound --------------------------------- */

/* A schema of depth items inside each other. */
static char *nested_items(int depth)
{
    char *s = (char *)malloc((size_t)depth * 40 + 64), *w = s;
    for (int i = 0; i < depth; i++)
        w += sprintf(w, "{\"type\":\"array\",\"items\":");
    w += sprintf(w, "{}");
    for (int i = 0; i < depth; i++)
        *w++ = '}';
    *w = 0;
    return s;
}

static void test_limits(void)
{
    char *g = NULL, *s = nested_items(60);
    CHECK_ST(mvm_json_schema_to_grammar(s, strlen(s), &g), MVM_OK);
    free(g);
    free(s);
    s = nested_items(70);
    CHECK_ST(mvm_json_schema_to_grammar(s, strlen(s), &g), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "nests deeper than 64 levels") != NULL);
    free(s);
    s = nested_items(5000); /* deeper than cJSON's own limit of 1000 */
    CHECK_ST(mvm_json_schema_to_grammar(s, strlen(s), &g), MVM_ERR_INVALID);
    free(s);
    /* 20 definitions, each an anyOf of the next twice beside a "type" to check: 2^20 */
    char *t = (char *)malloc(20 * 120 + 64), *w = t;
    w += sprintf(w, "{\"$ref\":\"#/$defs/d0\",\"$defs\":{");
    for (int i = 0; i < 20; i++)
        w += sprintf(w, "\"d%d\":{\"type\":\"string\",\"anyOf\":[{\"$ref\":\"#/$defs/d%d\"},"
                     "{\"$ref\":\"#/$defs/d%d\"}]},", i, i + 1, i + 1);
    w += sprintf(w, "\"d20\":{\"type\":\"string\"}}}");
    CHECK_ST(mvm_json_schema_to_grammar(t, strlen(t), &g), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "too complex") != NULL);
    free(t);
    /* a type array at each of 20 levels: its rules' names double a level */
    t = (char *)malloc(20 * 80 + 16), w = t;
    for (int i = 0; i < 20; i++)
        w += sprintf(w, "{\"type\":[\"object\",\"object\"],\"properties\":{\"a\":");
    w += sprintf(w, "{}");
    for (int i = 0; i < 20; i++)
        w += sprintf(w, "}}");
    CHECK_ST(mvm_json_schema_to_grammar(t, strlen(t), &g), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "would exceed 16 MiB") != NULL);
    free(t);
    /* a text over 1 MiB */
    const size_t big = (1u << 20) + 1;
    char *b = (char *)malloc(big + 1);
    memset(b, ' ', big);
    b[0] = '{';
    b[big - 1] = '}';
    b[big] = 0;
    CHECK_ST(mvm_json_schema_to_grammar(b, big, &g), MVM_ERR_INVALID);
    CHECK(strstr(mvm_last_error(), "over 1 MiB") != NULL);
    free(b);
}

/* The rule of keys other than the properties' names nests a group a byte of a name and
 * makes two rules a byte: the names that need more than llama.cpp's grammar parser allows
 * (2000 rules) are refused, and past 1024 bytes, where the parser would recurse deep. */
static void test_long_names(void)
{
    static const struct {
        int len, empty; /* empty: a property named "" too, which takes out the parser's limit */
        const char *message;
    } cases[] = {{999, 0, NULL}, {1000, 0, "over 2000 rules"}, {1024, 1, NULL},
                 {1025, 1, "over 1024 bytes"}};
    char *b = (char *)malloc(4096), *g = NULL;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        strcpy(b, cases[i].empty ? "{\"additionalProperties\":true,\"properties\":{\"\":{},\""
                                 : "{\"additionalProperties\":true,\"properties\":{\"");
        char *w = b + strlen(b);
        memset(w, 'k', (size_t)cases[i].len);
        strcpy(w + cases[i].len, "\":{}}}");
        const mvm_status st = mvm_json_schema_to_grammar(b, strlen(b), &g);
        CHECK(st == (cases[i].message ? MVM_ERR_INVALID : MVM_OK));
        if (cases[i].message)
            CHECK(strstr(mvm_last_error(), cases[i].message) != NULL);
        else if (!cases[i].empty)
            CHECK(g && grammar_matches(g, "{\"kx\":1}") == 1);
        free(g);
        g = NULL;
    }
    free(b);
}

/* A quoted string of s (from a random place on) replaced by a token of the schemas'
 * language, so that the text mostly stays JSON and the schema changes its meaning. */
static char *swap_token(const char *s, uint64_t *seed)
{
    static const char *const pool[] = {
        "\"type\"", "\"items\"", "\"properties\"", "\"minimum\"", "\"maxLength\"",
        "\"enum\"", "\"$ref\"", "\"#/$defs/node\"", "\"anyOf\"", "\"allOf\"", "\"const\"",
        "\"required\"", "\"additionalProperties\"", "\"pattern\"", "\"^a+$\"", "\"string\"",
        "\"object\"", "\"integer\"", "\"array\"", "5", "-1", "2.5", "1e3", "true", "false",
        "null", "[]", "{}", "[{}]", "[\"a\",1]", "{\"type\":\"null\"}", "\"\""};
    const size_t len = strlen(s);
    const char *q = strchr(s + check_rng_next(seed) % len, '"');
    if (!q)
        return strdup(s);
    const char *e = q + 1;
    while (*e && *e != '"')
        e += *e == '\\' && e[1] ? 2 : 1;
    const char *tok = pool[check_rng_next(seed) % (sizeof pool / sizeof pool[0])];
    char *out = (char *)malloc(len + strlen(tok) + 1);
    sprintf(out, "%.*s%s%s", (int)(q - s), s, tok, *e ? e + 1 : e);
    return out;
}

/* Mangled schemas, the cases above with characters changed, taken out or cut, or tokens
 * swapped: refused, or a grammar the matcher parses; never a crash (ASan/UBSan run this). */
static void test_mangled(void)
{
    uint64_t seed = 7;
    int parsed = 0;
    for (int round = 0; round < 4000; round++) {
        const size_t n_cases = sizeof llama_cases / sizeof llama_cases[0];
        char *s = dq(llama_cases[check_rng_next(&seed) % n_cases].schema);
        const int changes = 1 + (int)(check_rng_next(&seed) % 3);
        for (int k = 0; k < changes && round % 2; k++) {
            char *t = swap_token(s, &seed);
            free(s);
            s = t;
        }
        size_t len = strlen(s);
        for (int k = 0; k < changes && len > 1 && !(round % 2); k++) {
            const size_t at = (size_t)(check_rng_next(&seed) % len);
            const uint64_t what = check_rng_next(&seed) % 8;
            if (what < 4) /* a character changed */
                s[at] = "{}[]\",:0-9e.\\ ta\xc3"[check_rng_next(&seed) % 18];
            else if (what < 7) { /* one taken out */
                memmove(s + at, s + at + 1, len - at); /* the NUL too */
                len--;
            } else /* the text cut */
                len = at;
        }
        char *g = NULL;
        const mvm_status st = mvm_json_schema_to_grammar(s, len, &g);
        CHECK(st == MVM_OK || st == MVM_ERR_INVALID);
        if (st == MVM_OK) {
            CHECK(grammar_matches(g, "") >= 0);
            parsed++;
        }
        free(g);
        free(s);
    }
    CHECK(parsed > 150); /* the mangling leaves many schemas whole */
}

int main(void)
{
    RUN(test_llama_grammars);
    RUN(test_mended);
    RUN(test_matches);
    RUN(test_refused);
    RUN(test_limits);
    RUN(test_long_names);
    RUN(test_mangled);
    TEST_END();
}
