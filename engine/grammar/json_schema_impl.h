/*
 * The JSON Schema converter (mvm_json_schema_to_grammar), a port of llama.cpp's
 * json-schema-to-grammar (common/json-schema.cpp decides what a schema is,
 * common/json-schema-to-grammar.cpp writes its rules), shared by its files:
 *   json_schema.c        the entry; failures, the arena, the rule table, llama.cpp's built-in
 *                        rules and the grammar's text
 *   json_schema_json.c   the schema's JSON (cJSON, held to nlohmann's strictness, numbers
 *                        kept as written); values as nlohmann's dump() writes them
 *   json_schema_kind.c   what kind a schema is and which of its keywords are honoured
 *   json_schema_visit.c  schemas to rules: the rules of each kind
 *   json_schema_rules.c  rule texts: repetitions, integer ranges, keys other than a set of
 *                        names, regular expressions
 *
 * The output is llama.cpp's, rule for rule, where llama.cpp's grammar means what the schema
 * means. Where llama.cpp would silently accept values the schema refuses (a keyword it
 * ignores, such as a number's minimum, or a `not`), the schema is refused instead; a few
 * of its slips are mended (each file's head lists its own).
 */
#ifndef MVM_ENGINE_GRAMMAR_JSON_SCHEMA_IMPL_H
#define MVM_ENGINE_GRAMMAR_JSON_SCHEMA_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "moevm/engine.h"
#include "vmm/error.h"

/* ---- limits: no input runs long, nests deep or writes much -------------------------------- */

#define JS_MAX_INPUT (1u << 20)     /* the schema's text */
#define JS_MAX_OUTPUT (16u << 20)   /* the grammar's text */
#define JS_MAX_ARENA (256u << 20)   /* everything built on the way */
#define JS_MAX_JSON_DEPTH 128       /* arrays and objects inside each other */
#define JS_MAX_DEPTH 64             /* schemas inside schemas, through $ref too */
#define JS_MAX_WORK 200000ul        /* schemas classified, each time one is looked at */
#define JS_MAX_REPEAT 2000          /* llama.cpp's grammar parser: MAX_REPETITION_THRESHOLD */
#define JS_MAX_KEY 1024             /* a property name beside additionalProperties, whose rule
                                       nests a group a byte: the GBNF parser recurses */

/* ---- the conversion's state ------------------------------------------------------------- */

typedef struct js_chunk js_chunk;

typedef struct js_rule {
    const char *name; /* NULL: an empty slot */
    const char *body;
} js_rule;

typedef struct js_ctx {
    const cJSON *root;
    const char *text;      /* the schema's text, where its numbers are read */
    size_t *num_at;        /* each number's offset and length in text, in document order; */
    uint32_t *num_len;     /* a number node's valueint is its index here */
    size_t n_num;
    js_rule *rules;        /* open addressing on the name */
    size_t n_rules, cap_rules, out_bytes;
    const char *resolving[JS_MAX_DEPTH + 1]; /* the $refs whose rules are being written */
    size_t n_resolving;
    const cJSON *typing[JS_MAX_DEPTH + 1];   /* the $ref targets whose types are being found */
    size_t n_typing;
    js_chunk *arena;
    size_t arena_bytes;
    unsigned long work;
    mvm_status st;         /* the first failure; every function returns NULL after it */
} js_ctx;

/* Where in the schema: "#", then keys and indices; a $ref's target starts at the $ref. */
typedef struct js_path {
    const struct js_path *up;
    const char *key; /* NULL: idx */
    size_t idx;
} js_path;

/* ---- json_schema.c ---------------------------------------------------------------------- */

/* Fails the conversion (the first failure wins): "json_schema: <message> at <path>". */
void js_fail(js_ctx *c, const js_path *at, const char *fmt, ...)
    MVM_PRINTF(3, 4);

/* Arena memory (never freed one by one), NULL once the conversion failed. */
void *js_alloc(js_ctx *c, size_t n);
char *js_strn(js_ctx *c, const char *s, size_t n);
char *js_str(js_ctx *c, const char *s);
char *js_fmt(js_ctx *c, const char *fmt, ...) MVM_PRINTF(2, 3);
/* The concatenation of n strings; NULL when one of them is (a failure before). */
char *js_catn(js_ctx *c, const char *const *parts, size_t n);
#define JS_CAT(c, ...)                                                                         \
    js_catn((c), (const char *const[]){__VA_ARGS__},                                           \
            sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *))

/* A growing string in the arena. */
typedef struct js_sb {
    js_ctx *c;
    char *p;
    size_t n, cap;
} js_sb;
void js_sb_addn(js_sb *b, const char *s, size_t n);
void js_sb_add(js_sb *b, const char *s); /* s NULL: the string fails */
void js_sb_addf(js_sb *b, const char *fmt, ...) MVM_PRINTF(2, 3);
char *js_sb_done(js_sb *b); /* NUL-terminated, or NULL after a failure */

/* A growing array of pointers in the arena. */
typedef struct js_vec {
    const void **p;
    size_t n, cap;
} js_vec;
void js_vec_push(js_ctx *c, js_vec *v, const void *x);

/* llama.cpp's _add_rule: body under name (js_rule_name), numbered when the name holds
 * another body; the name used. */
char *js_add_rule(js_ctx *c, const char *name, const char *body);
/* name with runs of characters other than [a-zA-Z0-9-] made one '-'. */
char *js_rule_name(js_ctx *c, const char *name);
const char *js_rule_get(js_ctx *c, const char *name);

/* The built-in rules: llama.cpp's PRIMITIVE_RULES, then STRING_FORMAT_RULES. */
typedef struct js_builtin {
    const char *name, *body;
    const char *deps[7];
} js_builtin;
const js_builtin *js_builtin_find(const char *name);
int js_is_reserved(const char *name);
/* llama.cpp's _add_primitive: the rule under name, its dependencies under their own. */
char *js_add_primitive(js_ctx *c, const char *name, const char *builtin);

/* ---- json_schema_json.c ----------------------------------------------------------------- */

/* The schema's text parsed (its numbers recorded), NULL on failure (c->st). */
cJSON *js_parse(js_ctx *c, const char *s, size_t len);
/* A JSON value as nlohmann's dump() writes it (compact; numbers as parsed). */
void js_dump(js_sb *b, const cJSON *v);
/* Whether a number node is integral (JSON Schema's integer: 1.0 is one). */
int js_is_integral(const js_ctx *c, const cJSON *num);
/* A number node as an int64_t, rounded up or down when fractional; 0 when out of range. */
int js_number_bound(const js_ctx *c, const cJSON *num, int round_up, int64_t *out);
/* Whether a number node is written as an integer (no fraction, no exponent). */
int js_is_int_literal(const js_ctx *c, const cJSON *num);
/* llama.cpp's format_literal: a GBNF string literal of s. */
char *js_literal(js_ctx *c, const char *s);

/* ---- json_schema_kind.c ----------------------------------------------------------------- */

/* What values a schema may produce, as bits; an integral number is T_INT (JSON Schema's
 * integer: 1.0 is one). */
enum {
    T_NULL = 1,
    T_BOOL = 2,
    T_INT = 4,
    T_FRAC = 8,
    T_STR = 16,
    T_ARR = 32,
    T_OBJ = 64,
    T_ALL = 127,
};

typedef enum js_kind {
    JK_ANY, JK_REF, JK_ANY_OF, JK_TYPES, JK_ALL_OF, JK_CONST, JK_ENUM, JK_NULL, JK_BOOLEAN,
    JK_NUMBER, JK_INTEGER, JK_STRING, JK_ARRAY, JK_TUPLE, JK_OBJECT,
} js_kind;

enum { FMT_NONE, FMT_UUID, FMT_DATE, FMT_TIME, FMT_DATE_TIME, FMT_OTHER };


typedef struct js_node {
    const cJSON *s;      /* the schema: an object, or true */
    js_kind kind;
    const cJSON *arg;    /* REF: the target; ANY_OF, ALL_OF, TYPES, ENUM, TUPLE: the array;
                            CONST: the value; ARRAY: the items' schema; OBJECT: properties */
    const char *arg_key; /* the keyword arg is under */
    const char *ref;
    const cJSON *additional; /* OBJECT: additional properties' schema, NULL: none allowed */
    int64_t lo, hi;      /* INTEGER's bounds; ARRAY's item counts, STRING's lengths (hi -1:
                            none) */
    const char *pattern; /* STRING: a non-empty pattern */
    int format;          /* STRING: FMT_* */
    uint64_t used;       /* the keywords honoured, bits KW_* */
} js_node;


/* The schema true: additional properties or items that may be anything. */
extern const cJSON js_any;

/* s[key] when s is an object, else NULL. */
const cJSON *js_item(const cJSON *s, const char *key);
/* llama.cpp's build_node: what kind s is (read as type tover when an alternative of a type
 * array, else NULL), every keyword checked; 0 on failure. */
int js_classify(js_ctx *c, const cJSON *s, const char *tover, const js_path *at, int depth,
                js_node *n);
/* The types of the values n allows, T_* (0: none, or a failure). */
unsigned js_node_types(js_ctx *c, const js_node *n, const js_path *at, int depth);
/* How an error names n: "on a string schema", "beside 'enum'", ... */
const char *js_kind_text(const js_node *n);

/* The components of an allOf as llama.cpp's _visit_all_of merges them: through $refs, to
 * objects (their properties merged, all required but an anyOf's, opt) or enums
 * (intersected); {} and other annotations-only schemas constrain nothing and are left out. */
typedef struct js_allof {
    js_node *comp;
    const js_path **at;
    unsigned char *opt;
    size_t n, cap, n_enum, n_obj;
} js_allof;
int js_allof_plan(js_ctx *c, const js_node *n, const js_path *at, int depth, js_allof *p);
/* Whether the object schema s refuses the properties it does not declare. */
int js_closed(const cJSON *s);

/* ---- json_schema_visit.c ---------------------------------------------------------------- */

/* llama.cpp's visit: the rule of the schema s (an object, or true) named after name ("" for
 * the root); the rule's name. */
char *js_visit(js_ctx *c, const cJSON *s, const char *name, const js_path *at, int depth);

/* ---- json_schema_rules.c ---------------------------------------------------------------- */

#define JS_UNBOUNDED 0x7fffffff /* llama.cpp's std::numeric_limits<int>::max() */

/* llama.cpp's build_repetition (separator "" for none). */
char *js_repetition(js_ctx *c, const char *item, int min, int max, const char *separator);
/* llama.cpp's build_min_max_int, in parentheses (INT64_MIN / INT64_MAX: no bound). */
char *js_int_range(js_ctx *c, int64_t min, int64_t max);
/* llama.cpp's _not_strings: a JSON string other than any of the n names. */
char *js_not_strings(js_ctx *c, const char *const *names, size_t n);
/* llama.cpp's _visit_pattern: the rule (named name) of strings matching the regular
 * expression; a pattern it cannot convert fails, naming why. */
char *js_pattern(js_ctx *c, const char *pattern, const char *name, const js_path *at);

#endif
