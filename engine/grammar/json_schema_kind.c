/*
 * What a schema is, as llama.cpp's common_chat_schema_builder decides it (json-schema.cpp):
 * its kind from $ref, anyOf/oneOf, a type array, const, enum, then its type or, without one,
 * the keywords it has; and what its kind makes of each of its keywords.
 *
 * What llama.cpp ignores is refused here when it would let through a value the schema
 * refuses: every keyword of a schema is either honoured by its kind, an annotation, or
 * vacuous for the values that kind allows (maxLength on an integer; "type" beside an enum
 * whose values all have that type); anything else fails, naming the keyword. So do the
 * shapes llama.cpp mistranslates: an allOf of anything but objects or enums, an anyOf in an
 * allOf whose alternatives require or refuse a property (llama.cpp makes their properties
 * optional), `required` naming no property, prefixItems beside items, minItems beside a
 * tuple that it contradicts. Mended: minimum beside exclusiveMinimum gives the tighter
 * bound (llama.cpp reads minimum only), and `true` is a schema (any value), where llama.cpp
 * wants an object.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/json_schema_impl.h"

/* The keywords known, by what they constrain: any value, or strings, numbers, arrays,
 * objects only; annotations constrain nothing. */
enum { KC_ANY, KC_STR, KC_NUM, KC_ARR, KC_OBJ };
enum {
    KW_TYPE, KW_ENUM, KW_CONST, KW_REF, KW_ANY_OF, KW_ONE_OF, KW_ALL_OF, KW_NOT, KW_IF, KW_THEN,
    KW_ELSE, KW_DYN_REF, KW_REC_REF, KW_MIN_LEN, KW_MAX_LEN, KW_PATTERN, KW_FORMAT,
    KW_CONTENT_SCHEMA, KW_MIN, KW_MAX, KW_XMIN, KW_XMAX, KW_MULTIPLE, KW_ITEMS, KW_PREFIX,
    KW_ADD_ITEMS, KW_MIN_ITEMS, KW_MAX_ITEMS, KW_UNIQUE, KW_CONTAINS, KW_MIN_CONTAINS,
    KW_MAX_CONTAINS, KW_UNEVAL_ITEMS, KW_PROPS, KW_REQUIRED, KW_ADD_PROPS, KW_PATTERN_PROPS,
    KW_PROP_NAMES, KW_MIN_PROPS, KW_MAX_PROPS, KW_DEP_REQUIRED, KW_DEP_SCHEMAS, KW_DEPS,
    KW_UNEVAL_PROPS, KW_NOTES,
};
static const struct {
    const char *name;
    unsigned char cls;
} keywords[] = {
    [KW_TYPE] = {"type", KC_ANY}, [KW_ENUM] = {"enum", KC_ANY}, [KW_CONST] = {"const", KC_ANY},
    [KW_REF] = {"$ref", KC_ANY}, [KW_ANY_OF] = {"anyOf", KC_ANY},
    [KW_ONE_OF] = {"oneOf", KC_ANY}, [KW_ALL_OF] = {"allOf", KC_ANY},
    [KW_NOT] = {"not", KC_ANY}, [KW_IF] = {"if", KC_ANY}, [KW_THEN] = {"then", KC_ANY},
    [KW_ELSE] = {"else", KC_ANY}, [KW_DYN_REF] = {"$dynamicRef", KC_ANY},
    [KW_REC_REF] = {"$recursiveRef", KC_ANY}, [KW_MIN_LEN] = {"minLength", KC_STR},
    [KW_MAX_LEN] = {"maxLength", KC_STR}, [KW_PATTERN] = {"pattern", KC_STR},
    [KW_FORMAT] = {"format", KC_STR}, [KW_CONTENT_SCHEMA] = {"contentSchema", KC_STR},
    [KW_MIN] = {"minimum", KC_NUM}, [KW_MAX] = {"maximum", KC_NUM},
    [KW_XMIN] = {"exclusiveMinimum", KC_NUM}, [KW_XMAX] = {"exclusiveMaximum", KC_NUM},
    [KW_MULTIPLE] = {"multipleOf", KC_NUM}, [KW_ITEMS] = {"items", KC_ARR},
    [KW_PREFIX] = {"prefixItems", KC_ARR}, [KW_ADD_ITEMS] = {"additionalItems", KC_ARR},
    [KW_MIN_ITEMS] = {"minItems", KC_ARR}, [KW_MAX_ITEMS] = {"maxItems", KC_ARR},
    [KW_UNIQUE] = {"uniqueItems", KC_ARR}, [KW_CONTAINS] = {"contains", KC_ARR},
    [KW_MIN_CONTAINS] = {"minContains", KC_ARR}, [KW_MAX_CONTAINS] = {"maxContains", KC_ARR},
    [KW_UNEVAL_ITEMS] = {"unevaluatedItems", KC_ARR}, [KW_PROPS] = {"properties", KC_OBJ},
    [KW_REQUIRED] = {"required", KC_OBJ}, [KW_ADD_PROPS] = {"additionalProperties", KC_OBJ},
    [KW_PATTERN_PROPS] = {"patternProperties", KC_OBJ},
    [KW_PROP_NAMES] = {"propertyNames", KC_OBJ}, [KW_MIN_PROPS] = {"minProperties", KC_OBJ},
    [KW_MAX_PROPS] = {"maxProperties", KC_OBJ},
    [KW_DEP_REQUIRED] = {"dependentRequired", KC_OBJ},
    [KW_DEP_SCHEMAS] = {"dependentSchemas", KC_OBJ}, [KW_DEPS] = {"dependencies", KC_OBJ},
    [KW_UNEVAL_PROPS] = {"unevaluatedProperties", KC_OBJ},
};
/* Annotations: JSON Schema's, and OpenAPI's example and discriminator (which names the
 * property that tells a oneOf's alternatives apart, and constrains nothing itself). */
static const char *const notes[] = {
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "$defs",
    "definitions", "deprecated", "readOnly", "writeOnly", "$anchor", "$dynamicAnchor",
    "$recursiveAnchor", "$vocabulary", "contentMediaType", "contentEncoding", "example",
    "discriminator"};

const cJSON js_any = {.type = cJSON_True};

const cJSON *js_item(const cJSON *s, const char *key)
{
    return cJSON_IsObject(s) ? cJSON_GetObjectItemCaseSensitive(s, key) : NULL;
}

static unsigned value_types(const js_ctx *c, const cJSON *v)
{
    return cJSON_IsNull(v)     ? T_NULL
           : cJSON_IsBool(v)   ? T_BOOL
           : cJSON_IsNumber(v) ? (js_is_integral(c, v) ? T_INT : T_FRAC)
           : cJSON_IsString(v) ? T_STR
           : cJSON_IsArray(v)  ? T_ARR
                               : T_OBJ;
}

/* The types a "type" keyword allows; 0 (failed) when malformed. */
static unsigned type_set(js_ctx *c, const cJSON *t, const js_path *at)
{
    static const struct {
        const char *name;
        unsigned bits;
    } names[] = {{"null", T_NULL},      {"boolean", T_BOOL},       {"integer", T_INT},
                 {"number", T_INT | T_FRAC}, {"string", T_STR}, {"array", T_ARR},
                 {"object", T_OBJ}};
    unsigned bits = 0;
    const cJSON *one = cJSON_IsArray(t) ? t->child : t;
    for (; one; one = cJSON_IsArray(t) ? one->next : NULL) {
        unsigned b = 0;
        for (size_t i = 0; cJSON_IsString(one) && i < sizeof names / sizeof names[0]; i++)
            if (strcmp(one->valuestring, names[i].name) == 0)
                b = names[i].bits;
        if (!b) {
            js_fail(c, at, "'type' must be one of llama.cpp's type names or an array of them");
            return 0;
        }
        bits |= b;
    }
    if (!bits)
        js_fail(c, at, "'type' must not be empty");
    return bits;
}

/* ---- classifying a schema ----------------------------------------------------------------- */

/* A count keyword (minItems, maxLength, ...) into *out (def when absent); 0 on failure. */
static int get_count(js_ctx *c, const cJSON *s, const char *key, int64_t def, const js_path *at,
                     int64_t *out)
{
    const cJSON *v = js_item(s, key);
    *out = def;
    if (!v)
        return 1;
    if (!cJSON_IsNumber(v) || !js_is_int_literal(c, v) || v->valuedouble < 0) {
        js_fail(c, at, "%s must be a non-negative integer", key);
        return 0;
    }
    if (v->valuedouble > JS_MAX_REPEAT) {
        js_fail(c, at, "%s %.0f is above llama.cpp's limit of %d repetitions", key,
                v->valuedouble, JS_MAX_REPEAT);
        return 0;
    }
    *out = (int64_t)v->valuedouble;
    return 1;
}

static int get_format(js_ctx *c, const cJSON *s, const js_path *at)
{
    const cJSON *v = js_item(s, "format");
    if (!v)
        return FMT_NONE;
    if (!cJSON_IsString(v)) {
        js_fail(c, at, "format must be a string");
        return FMT_NONE;
    }
    const char *f = v->valuestring;
    if (strcmp(f, "date") == 0)
        return FMT_DATE;
    if (strcmp(f, "time") == 0)
        return FMT_TIME;
    if (strcmp(f, "date-time") == 0)
        return FMT_DATE_TIME;
    if (strcmp(f, "uuid") == 0 ||
        (strlen(f) == 5 && strncmp(f, "uuid", 4) == 0 && f[4] >= '1' && f[4] <= '5'))
        return FMT_UUID;
    return FMT_OTHER;
}

/* llama.cpp's resolve_ref: a JSON pointer into the document, its tokens as written. */
static const cJSON *resolve(js_ctx *c, const char *ref, const js_path *at)
{
    const cJSON *t = c->root;
    for (const char *p = ref + 2;; p++) {
        const char *e = strchr(p, '/');
        char *tok = js_strn(c, p, e ? (size_t)(e - p) : strlen(p));
        if (!tok)
            return NULL;
        const cJSON *next = cJSON_IsObject(t) ? cJSON_GetObjectItemCaseSensitive(t, tok) : NULL;
        if (!next && cJSON_IsArray(t)) {
            size_t idx = 0, k = 0;
            for (; tok[k] >= '0' && tok[k] <= '9' && idx < 100000000; k++)
                idx = idx * 10 + (size_t)(tok[k] - '0');
            next = k && !tok[k] ? cJSON_GetArrayItem(t, (int)idx) : NULL;
        }
        if (!next) {
            js_fail(c, at, "cannot resolve $ref %.80s: '%.40s' not found", ref, tok);
            return NULL;
        }
        t = next;
        if (!e)
            return t;
        p = e;
    }
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void classify_object(js_ctx *c, js_node *n, const js_path *at)
{
    const cJSON *s = n->s, *props = js_item(s, "properties"), *req = js_item(s, "required");
    const cJSON *add = js_item(s, "additionalProperties");
    n->kind = JK_OBJECT;
    n->used |= 1ull << KW_PROPS | 1ull << KW_REQUIRED | 1ull << KW_ADD_PROPS;
    if (props && !cJSON_IsObject(props)) {
        js_fail(c, at, "properties must be an object");
        return;
    }
    n->arg = props;
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next)
        if (strcmp(p->string, "*") == 0) {
            js_fail(c, at, "a property named '*' is not supported");
            return;
        }
    if (req && !cJSON_IsArray(req)) {
        js_fail(c, at, "required must be an array of strings");
        return;
    }
    const size_t n_props = (size_t)cJSON_GetArraySize(props);
    const char **names = (const char **)js_alloc(c, (n_props + 1) * sizeof *names);
    size_t k = 0;
    for (const cJSON *p = props ? props->child : NULL; p && names; p = p->next)
        names[k++] = p->string;
    if (!names)
        return;
    qsort(names, n_props, sizeof *names, cmp_str); /* a large object's names are many */
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next) {
        if (!cJSON_IsString(r)) {
            js_fail(c, at, "required must be an array of strings");
            return;
        }
        if (!bsearch(&r->valuestring, names, n_props, sizeof *names, cmp_str)) {
            js_fail(c, at, "required property '%.60s' is not among the properties",
                    r->valuestring);
            return;
        }
    }
    if (add && !cJSON_IsBool(add) && !cJSON_IsObject(add)) {
        js_fail(c, at, "additionalProperties must be a boolean or a schema");
        return;
    }
    /* absent: any, on a bare {"type": "object"}; none, beside properties (llama.cpp's) */
    n->additional = add ? (cJSON_IsFalse(add) ? NULL : cJSON_IsTrue(add) ? &js_any : add)
                        : (props ? NULL : &js_any);
}

static void classify_array(js_ctx *c, js_node *n, const js_path *at)
{
    const cJSON *s = n->s, *items = js_item(s, "items"), *prefix = js_item(s, "prefixItems");
    const cJSON *v = items ? items : prefix;
    n->kind = JK_ARRAY;
    if (items && prefix && cJSON_IsArray(prefix) && cJSON_IsFalse(items)) {
        v = prefix; /* 2020-12's closed tuple: llama.cpp's tuples admit no more items */
        n->used |= 1ull << KW_ITEMS;
    } else if (items && prefix) {
        js_fail(c, at, "prefixItems beside items is not supported (llama.cpp reads items only)");
        return;
    }
    n->used |= 1ull << (v == prefix ? KW_PREFIX : KW_ITEMS);
    if (!get_count(c, s, "minItems", 0, at, &n->lo) ||
        !get_count(c, s, "maxItems", -1, at, &n->hi))
        return;
    if (n->hi >= 0 && n->lo > n->hi) {
        js_fail(c, at, "minItems is above maxItems");
        return;
    }
    n->arg = v ? v : &js_any;
    n->arg_key = v == prefix ? "prefixItems" : "items";
    n->used |= 1ull << KW_MIN_ITEMS | 1ull << KW_MAX_ITEMS;
    if (!cJSON_IsArray(v))
        return;
    n->kind = JK_TUPLE; /* exactly its items, so additionalItems holds whatever it says */
    n->used |= 1ull << KW_ADD_ITEMS;
    const int64_t len = cJSON_GetArraySize(v);
    if (n->lo > len || (n->hi >= 0 && n->hi < len))
        js_fail(c, at, "minItems or maxItems contradicts the %lld items of the tuple",
                (long long)len);
}

static void classify_string(js_ctx *c, js_node *n, const js_path *at)
{
    const cJSON *s = n->s, *pattern = js_item(s, "pattern");
    n->kind = JK_STRING;
    if (pattern && !cJSON_IsString(pattern)) {
        js_fail(c, at, "pattern must be a string");
        return;
    }
    n->pattern = pattern && *pattern->valuestring ? pattern->valuestring : NULL;
    n->format = get_format(c, s, at);
    if (!get_count(c, s, "minLength", 0, at, &n->lo) ||
        !get_count(c, s, "maxLength", -1, at, &n->hi))
        return;
    if (n->hi >= 0 && n->lo > n->hi) {
        js_fail(c, at, "minLength is above maxLength");
        return;
    }
    n->used |= 1ull << KW_PATTERN; /* honoured, or empty: llama.cpp's "absent" */
    if (n->pattern)
        return;
    if (n->format != FMT_NONE && n->format != FMT_OTHER) {
        n->used |= 1ull << KW_FORMAT;
        return;
    }
    n->used |= 1ull << KW_MIN_LEN | 1ull << KW_MAX_LEN;
}

/* One bound of an integer (llama.cpp's get_bound, a fractional one rounded inwards). */
static int bound(js_ctx *c, const cJSON *v, const char *key, int up, int64_t *out,
                 const js_path *at)
{
    if (!cJSON_IsNumber(v)) {
        js_fail(c, at, "%s must be a number", key);
        return 0;
    }
    if (!js_number_bound(c, v, up, out) || *out < -1000000000000000000ll ||
        *out > 1000000000000000000ll) {
        js_fail(c, at, "%s beyond +-10^18 is not supported", key);
        return 0;
    }
    return 1;
}

static void classify_integer(js_ctx *c, js_node *n, const js_path *at)
{
    const cJSON *s = n->s, *v;
    int64_t b;
    n->kind = JK_INTEGER;
    n->lo = INT64_MIN;
    n->hi = INT64_MAX;
    n->used |= 1ull << KW_MIN | 1ull << KW_MAX | 1ull << KW_XMIN | 1ull << KW_XMAX;
    if ((v = js_item(s, "minimum")) && bound(c, v, "minimum", 1, &b, at))
        n->lo = b;
    if ((v = js_item(s, "exclusiveMinimum")) && bound(c, v, "exclusiveMinimum", 0, &b, at))
        n->lo = n->lo > b + 1 ? n->lo : b + 1;
    if ((v = js_item(s, "maximum")) && bound(c, v, "maximum", 0, &b, at))
        n->hi = b;
    if ((v = js_item(s, "exclusiveMaximum")) && bound(c, v, "exclusiveMaximum", 1, &b, at))
        n->hi = n->hi < b - 1 ? n->hi : b - 1;
    if (c->st != MVM_OK)
        return;
    /* past 15 digits llama.cpp's open ranges write repetitions like {16,15} */
    if (n->hi == INT64_MAX && n->lo != INT64_MIN && n->lo >= 1000000000000000ll) {
        js_fail(c, at, "a minimum of 10^15 or more needs a maximum");
        return;
    }
    if (n->lo == INT64_MIN && n->hi != INT64_MAX && n->hi <= -1000000000000000ll) {
        js_fail(c, at, "a maximum of -10^15 or less needs a minimum");
        return;
    }
    if (n->lo != INT64_MIN && n->hi != INT64_MAX && n->lo > n->hi)
        js_fail(c, at, "the minimum is above the maximum: no integer validates");
}

/* llama.cpp's kinds of a schema with neither $ref, anyOf/oneOf, a type array, const or enum:
 * its type, else the keywords it has, in llama.cpp's order. */
static void classify_typed(js_ctx *c, js_node *n, const char *type, const js_path *at)
{
    const cJSON *s = n->s, *add = js_item(s, "additionalProperties");
    const int props = js_item(s, "properties") || (add && !cJSON_IsTrue(add));
    const cJSON *all = js_item(s, "allOf");
    if (!type) {
        if (props)
            return classify_object(c, n, at);
        if (!all && (js_item(s, "items") || js_item(s, "prefixItems")))
            return classify_array(c, n, at);
        if (!all && (js_item(s, "pattern") || js_item(s, "minLength") || js_item(s, "maxLength") ||
                     get_format(c, s, at) != FMT_NONE))
            return classify_string(c, n, at);
        n->kind = all ? JK_ALL_OF : JK_ANY;
    } else if (strcmp(type, "object") == 0 || strcmp(type, "string") == 0) {
        if (all && (type[0] == 's' || !props))
            n->kind = JK_ALL_OF; /* "type" is then checked as any other keyword */
        else if (type[0] == 'o')
            classify_object(c, n, at);
        else
            classify_string(c, n, at);
    } else if (strcmp(type, "array") == 0)
        classify_array(c, n, at);
    else if (strcmp(type, "integer") == 0)
        classify_integer(c, n, at);
    else if (strcmp(type, "number") == 0)
        n->kind = JK_NUMBER;
    else if (strcmp(type, "boolean") == 0)
        n->kind = JK_BOOLEAN;
    else if (strcmp(type, "null") == 0)
        n->kind = JK_NULL;
    else {
        js_fail(c, at, "unknown type '%.40s'", type);
        return;
    }
    if (n->kind == JK_ALL_OF) {
        n->arg = all;
        n->arg_key = "allOf";
        n->used |= 1ull << KW_ALL_OF;
        if (!cJSON_IsArray(all) || !all->child)
            js_fail(c, at, "allOf must be a non-empty array of schemas");
    } else if (type)
        n->used |= 1ull << KW_TYPE;
}

/* Keywords whose value constrains nothing, beside any kind. */
static int vacuous(int kw, const cJSON *v)
{
    switch (kw) {
    case KW_UNIQUE:
        return cJSON_IsFalse(v);
    case KW_MIN_PROPS:
    case KW_MIN_CONTAINS:
        return cJSON_IsNumber(v) && v->valuedouble == 0;
    case KW_REQUIRED:
        return cJSON_IsArray(v) && !v->child;
    case KW_ADD_ITEMS:
    case KW_UNEVAL_ITEMS:
    case KW_UNEVAL_PROPS:
    case KW_PROP_NAMES:
        return cJSON_IsTrue(v) || (cJSON_IsObject(v) && !v->child);
    default:
        return 0;
    }
}

/* Every keyword of the schema: honoured, an annotation, or vacuous for what it allows. */
static int check_keywords(js_ctx *c, const js_node *n, const js_path *at, int depth)
{
    unsigned types = 0, have = 0;
    for (const cJSON *k = cJSON_IsObject(n->s) ? n->s->child : NULL; k; k = k->next) {
        int kw = -1;
        for (int i = 0; i < KW_NOTES && kw < 0; i++)
            kw = strcmp(k->string, keywords[i].name) == 0 ? i : -1;
        int note = strncmp(k->string, "x-", 2) == 0; /* extensions, by convention */
        for (size_t i = 0; kw < 0 && i < sizeof notes / sizeof notes[0] && !note; i++)
            note = strcmp(k->string, notes[i]) == 0;
        if (note || (kw >= 0 && ((n->used >> kw & 1) || vacuous(kw, k))))
            continue;
        if (kw < 0) {
            js_fail(c, at, "unknown keyword '%.60s'", k->string);
            return 0;
        }
        if (!have++ && !(types = js_node_types(c, n, at, depth)) && c->st != MVM_OK)
            return 0;
        if (kw == KW_TYPE) {
            const unsigned want = type_set(c, k, at);
            if (want && !(types & ~want))
                continue;
            if (want)
                js_fail(c, at, "'type' refuses values its '%s' allows",
                        n->kind == JK_REF     ? "$ref"
                        : n->kind == JK_CONST ? "const"
                        : n->kind == JK_ENUM  ? "enum"
                                              : n->arg_key);
            return 0;
        }
        const unsigned cls = keywords[kw].cls;
        const unsigned mask = cls == KC_STR   ? T_STR
                              : cls == KC_NUM ? T_INT | T_FRAC
                              : cls == KC_ARR ? T_ARR
                              : cls == KC_OBJ ? T_OBJ
                                              : T_ALL;
        if (!(types & mask))
            continue;
        if (kw == KW_FORMAT && get_format(c, n->s, at) == FMT_OTHER)
            js_fail(c, at, "format '%.40s' is not supported (llama.cpp's: date, time, "
                    "date-time, uuid)", k->valuestring);
        else
            js_fail(c, at, "'%s' is not supported %s", k->string, js_kind_text(n));
        return 0;
    }
    return 1;
}

/* llama.cpp's build_node: what kind s is (read as type tover when an alternative of a type
 * array), every keyword checked; 0 on failure. */
int js_classify(js_ctx *c, const cJSON *s, const char *tover, const js_path *at, int depth,
                js_node *n)
{
    memset(n, 0, sizeof *n);
    n->s = s;
    if (depth > JS_MAX_DEPTH)
        js_fail(c, at, "the schema nests deeper than %d levels", JS_MAX_DEPTH);
    else if (++c->work > JS_MAX_WORK)
        js_fail(c, at, "the schema is too complex (over %lu schemas to visit)", JS_MAX_WORK);
    else if (cJSON_IsFalse(s))
        js_fail(c, at, "the schema false (no value) is not supported");
    else if (!cJSON_IsTrue(s) && !cJSON_IsObject(s))
        js_fail(c, at, "a schema must be an object or true");
    if (c->st != MVM_OK || cJSON_IsTrue(s))
        return c->st == MVM_OK;
    const cJSON *v, *t = js_item(s, "type");
    if ((v = js_item(s, "$ref"))) {
        n->kind = JK_REF;
        n->used |= 1ull << KW_REF;
        if (!cJSON_IsString(v) || strncmp(v->valuestring, "#/", 2) != 0)
            js_fail(c, at, "only a $ref into the same document (\"#/...\") is supported");
        else if ((n->arg = resolve(c, v->valuestring, at)))
            n->ref = v->valuestring;
    } else if ((v = js_item(s, "oneOf")) || (v = js_item(s, "anyOf"))) {
        n->kind = JK_ANY_OF;
        n->arg = v;
        n->arg_key = v->string;
        n->used |= 1ull << (v->string[0] == 'o' ? KW_ONE_OF : KW_ANY_OF);
        if (!cJSON_IsArray(v) || !v->child)
            js_fail(c, at, "%s must be a non-empty array of schemas", v->string);
    } else if (!tover && cJSON_IsArray(t)) {
        n->kind = JK_TYPES; /* each alternative's keywords are checked where it is visited */
        n->arg = t;
        return type_set(c, t, at) != 0;
    } else if ((v = js_item(s, "const")) || (v = js_item(s, "enum"))) {
        n->kind = v->string[0] == 'c' ? JK_CONST : JK_ENUM;
        n->arg = v;
        n->used |= 1ull << (n->kind == JK_CONST ? KW_CONST : KW_ENUM);
        if (n->kind == JK_ENUM && (!cJSON_IsArray(v) || !v->child))
            js_fail(c, at, "enum must be a non-empty array");
    } else if (t && !tover && !cJSON_IsString(t))
        js_fail(c, at, "type must be a string or an array of strings");
    else
        classify_typed(c, n, tover ? tover : t ? t->valuestring : NULL, at);
    return c->st == MVM_OK && check_keywords(c, n, at, depth);
}

/* How an error names the schema a keyword is not supported on, or beside. */
const char *js_kind_text(const js_node *n)
{
    static const char *const text[] = {
        [JK_ANY] = "on a schema without a type", [JK_REF] = "beside '$ref'",
        [JK_ANY_OF] = "beside anyOf/oneOf", [JK_TYPES] = "beside a type array",
        [JK_ALL_OF] = "beside 'allOf'", [JK_CONST] = "beside 'const'",
        [JK_ENUM] = "beside 'enum'", [JK_NULL] = "on a null schema",
        [JK_BOOLEAN] = "on a boolean schema", [JK_NUMBER] = "on a number schema",
        [JK_INTEGER] = "on an integer schema", [JK_STRING] = "on a string schema",
        [JK_ARRAY] = "on an array schema", [JK_TUPLE] = "beside a tuple's items",
        [JK_OBJECT] = "on an object schema"};
    if (n->kind == JK_STRING && n->pattern)
        return "beside 'pattern'";
    if (n->kind == JK_STRING && (n->used >> KW_FORMAT & 1))
        return "beside 'format'";
    return text[n->kind];
}

/* ---- allOf ------------------------------------------------------------------------------ */

int js_closed(const cJSON *s)
{
    const cJSON *add = js_item(s, "additionalProperties");
    return add && !cJSON_IsTrue(add) && !(cJSON_IsObject(add) && !add->child);
}

static const js_path *path_to(js_ctx *c, const js_path *up, const char *key, size_t idx)
{
    js_path *p = (js_path *)js_alloc(c, sizeof *p);
    if (p)
        *p = (js_path){up, key, idx};
    return p;
}

/* s, or what its $refs lead to, into *k; *ka where that is. */
static int through_refs(js_ctx *c, const cJSON *s, const js_path *at, int depth, js_node *k,
                        const js_path **ka)
{
    *ka = at;
    if (!at || !js_classify(c, s, NULL, at, depth, k))
        return 0;
    for (int d = depth + 1; k->kind == JK_REF; d++)
        if (!(*ka = path_to(c, NULL, k->ref, 0)) || !js_classify(c, k->arg, NULL, *ka, d, k))
            return 0;
    return 1;
}

static void allof_push(js_ctx *c, js_allof *p, const js_node *k, const js_path *at, int opt)
{
    if (p->n == p->cap) {
        const size_t cap = p->cap ? p->cap * 2 : 8;
        js_node *comp = (js_node *)js_alloc(c, cap * sizeof *comp);
        const js_path **pat = (const js_path **)js_alloc(c, cap * sizeof *pat);
        unsigned char *po = (unsigned char *)js_alloc(c, cap);
        if (!comp || !pat || !po)
            return;
        if (p->n) {
            memcpy(comp, p->comp, p->n * sizeof *comp);
            memcpy(pat, p->at, p->n * sizeof *pat);
            memcpy(po, p->opt, p->n);
        }
        p->comp = comp;
        p->at = pat;
        p->opt = po;
        p->cap = cap;
    }
    p->comp[p->n] = *k;
    p->at[p->n] = at;
    p->opt[p->n++] = (unsigned char)opt;
    if (k->kind == JK_ENUM)
        p->n_enum++;
    else
        p->n_obj++;
}

/* An anyOf among an allOf's components: llama.cpp makes its alternatives' properties
 * optional, which is what it means only where none requires a property or refuses another. */
static int allof_any_of(js_ctx *c, js_allof *p, const js_node *k, const js_path *at, int depth)
{
    const js_path *pk = path_to(c, at, k->arg_key, 0);
    size_t j = 0;
    for (const cJSON *alt = k->arg->child; alt; alt = alt->next, j++) {
        js_node a;
        const js_path *pj = path_to(c, pk, NULL, j), *aa;
        if (!through_refs(c, alt, pj, depth, &a, &aa))
            return 0;
        if (a.kind == JK_ANY)
            continue;
        const cJSON *req = js_item(a.s, "required");
        if (a.kind != JK_OBJECT || (req && req->child) || js_closed(a.s)) {
            js_fail(c, pj, "inside allOf, an anyOf is supported only of objects that require "
                    "and refuse no property (llama.cpp makes their properties optional)");
            return 0;
        }
        allof_push(c, p, &a, aa, 1);
    }
    return c->st == MVM_OK;
}

int js_allof_plan(js_ctx *c, const js_node *n, const js_path *at, int depth, js_allof *p)
{
    memset(p, 0, sizeof *p);
    const js_path *pa = path_to(c, at, "allOf", 0);
    size_t i = 0;
    for (const cJSON *s = n->arg->child; s; s = s->next, i++) {
        js_node k;
        const js_path *pi = pa ? path_to(c, pa, NULL, i) : NULL, *ka;
        if (!through_refs(c, s, pi, depth + 1, &k, &ka))
            return 0;
        if (k.kind == JK_ANY_OF && !allof_any_of(c, p, &k, ka, depth + 2))
            return 0;
        if (k.kind == JK_OBJECT || k.kind == JK_ENUM)
            allof_push(c, p, &k, ka, 0);
        else if (k.kind != JK_ANY && k.kind != JK_ANY_OF) {
            static const char *const what[] = {
                [JK_TYPES] = "a type array", [JK_ALL_OF] = "an allOf", [JK_CONST] = "a const",
                [JK_NULL] = "a null schema", [JK_BOOLEAN] = "a boolean schema",
                [JK_NUMBER] = "a number schema", [JK_INTEGER] = "an integer schema",
                [JK_STRING] = "a string schema", [JK_ARRAY] = "an array schema",
                [JK_TUPLE] = "a tuple"};
            js_fail(c, pi, "allOf of %s is not supported (llama.cpp merges objects and "
                    "intersects enums only)", what[k.kind]);
            return 0;
        }
    }
    if (c->st != MVM_OK)
        return 0;
    if (p->n_enum && p->n_obj) {
        js_fail(c, at, "an allOf of both enums and objects is not supported");
        return 0;
    }
    if (!p->n) {
        js_fail(c, at, "an allOf without an object or an enum is not supported");
        return 0;
    }
    return 1;
}

static unsigned types_of(js_ctx *c, const cJSON *s, const char *tover, const js_path *at,
                         int depth)
{
    js_node k;
    return js_classify(c, s, tover, at, depth, &k) ? js_node_types(c, &k, at, depth) : 0;
}

/* llama.cpp's value_types, for the keywords beside a schema's kind: a $ref back into one
 * whose types are being found adds none. */
unsigned js_node_types(js_ctx *c, const js_node *n, const js_path *at, int depth)
{
    static const unsigned fixed[] = {
        [JK_ANY] = T_ALL, [JK_NULL] = T_NULL, [JK_BOOLEAN] = T_BOOL,
        [JK_NUMBER] = T_INT | T_FRAC, [JK_INTEGER] = T_INT, [JK_STRING] = T_STR,
        [JK_ARRAY] = T_ARR, [JK_TUPLE] = T_ARR, [JK_OBJECT] = T_OBJ};
    unsigned t = 0;
    size_t i = 0;
    js_path pk = {at, n->kind == JK_TYPES ? "type" : n->arg_key, 0}, pi = {&pk, NULL, 0};
    switch (n->kind) {
    case JK_CONST:
        return value_types(c, n->arg);
    case JK_ENUM:
        for (const cJSON *v = n->arg->child; v; v = v->next)
            t |= value_types(c, v);
        return t;
    case JK_REF: {
        for (i = 0; i < c->n_typing; i++)
            if (c->typing[i] == n->arg)
                return 0;
        if (c->n_typing > JS_MAX_DEPTH)
            return T_ALL;
        const js_path pr = {NULL, n->ref, 0};
        c->typing[c->n_typing++] = n->arg;
        t = types_of(c, n->arg, NULL, &pr, depth + 1);
        c->n_typing--;
        return t;
    }
    case JK_ANY_OF:
    case JK_TYPES:
        for (const cJSON *v = n->arg->child; v && c->st == MVM_OK; v = v->next, i++) {
            pi.idx = i;
            t |= n->kind == JK_TYPES ? types_of(c, n->s, v->valuestring, &pi, depth + 1)
                                     : types_of(c, v, NULL, &pi, depth + 1);
        }
        return t;
    case JK_ALL_OF: {
        js_allof p;
        if (!js_allof_plan(c, n, at, depth, &p))
            return 0;
        t = p.n_enum ? T_ALL : T_OBJ; /* the enums' common values: of types all of them have */
        for (i = 0; p.n_enum && i < p.n; i++)
            t &= js_node_types(c, &p.comp[i], p.at[i], depth + 1);
        return t;
    }
    default:
        return fixed[n->kind];
    }
}
