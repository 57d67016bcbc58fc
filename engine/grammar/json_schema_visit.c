/*
 * Schemas to rules, as llama.cpp's common_chat_schema_converter::visit writes them: each
 * schema is classified (json_schema_kind.c) where it is visited, and its kind's rule
 * written under the name its place gives it. Mended here, where llama.cpp's grammar means
 * something else than the schema: an allOf's enums are intersected (values in every enum,
 * where llama.cpp counts occurrences), and its objects may not declare a property twice
 * (llama.cpp would require it twice) nor hold another's out with additionalProperties.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/json_schema_impl.h"

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* An enum's values as sorted literals into *out; their count. */
static size_t enum_literals(js_ctx *c, const cJSON *e, const char ***out)
{
    const size_t len = (size_t)cJSON_GetArraySize(e);
    const char **lit = (const char **)js_alloc(c, (len ? len : 1) * sizeof *lit);
    size_t n = 0;
    for (const cJSON *v = e->child; v && lit; v = v->next) {
        js_sb b = {c, NULL, 0, 0};
        js_dump(&b, v);
        lit[n++] = js_literal(c, js_sb_done(&b));
    }
    if (c->st != MVM_OK)
        return 0;
    qsort(lit, n, sizeof *lit, cmp_str);
    *out = lit;
    return n;
}

/* The enums' common values as literals, in their byte order (llama.cpp's std::map), joined
 * " | ". */
static char *allof_enum(js_ctx *c, const js_allof *p, const js_path *at)
{
    const char ***lit = (const char ***)js_alloc(c, p->n * sizeof *lit);
    size_t *n = (size_t *)js_alloc(c, p->n * sizeof *n), common = 0;
    for (size_t k = 0; lit && n && k < p->n; k++)
        n[k] = enum_literals(c, p->comp[k].arg, &lit[k]);
    if (c->st != MVM_OK)
        return NULL;
    js_sb b = {c, NULL, 0, 0};
    js_sb_add(&b, "(");
    for (size_t i = 0; i < n[0]; i++) {
        int everywhere = !i || strcmp(lit[0][i], lit[0][i - 1]) != 0;
        for (size_t k = 1; k < p->n && everywhere; k++)
            everywhere = bsearch(&lit[0][i], lit[k], n[k], sizeof *lit[k], cmp_str) != NULL;
        if (!everywhere)
            continue;
        js_sb_add(&b, common++ ? " | " : "");
        js_sb_add(&b, lit[0][i]);
    }
    js_sb_add(&b, ")");
    if (!common)
        js_fail(c, at, "allOf's enums have no value in common");
    return js_sb_done(&b);
}

/* ---- objects ----------------------------------------------------------------------------- */

typedef struct js_prop {
    const char *name;
    const cJSON *s;
    const js_path *at;
    int required;
} js_prop;

/* The properties of an object schema n, at its path. */
static js_prop *object_props(js_ctx *c, const js_node *n, const js_path *at, int required_all,
                             js_prop *props, size_t *np)
{
    const cJSON *req = js_item(n->s, "required");
    const size_t n_req = (size_t)cJSON_GetArraySize(req);
    const char **required = (const char **)js_alloc(c, (n_req + 1) * sizeof *required);
    js_path *pp = (js_path *)js_alloc(c, sizeof *pp);
    if (!pp || !required)
        return NULL;
    *pp = (js_path){at, "properties", 0};
    size_t k = 0;
    for (const cJSON *q = req ? req->child : NULL; q; q = q->next)
        required[k++] = q->valuestring;
    qsort(required, n_req, sizeof *required, cmp_str); /* a large object's names are many */
    for (const cJSON *p = n->arg ? n->arg->child : NULL; p; p = p->next) {
        js_path *pa = (js_path *)js_alloc(c, sizeof *pa);
        if (!pa)
            return NULL;
        *pa = (js_path){pp, p->string, 0};
        const int r = required_all ||
                      bsearch(&p->string, required, n_req, sizeof *required, cmp_str) != NULL;
        props[(*np)++] = (js_prop){p->string, p, pa, r};
    }
    return props;
}

/* llama.cpp's _build_object_rule: the required properties in order, then any of the
 * optional ones in order, each rest of them a rule ("<name>-<key>-rest") written once. */
static char *object_rule(js_ctx *c, const js_prop *props, size_t np, const char *name,
                         const cJSON *additional, const js_path *at, int depth)
{
    const char *sep = *name ? "-" : "";
    const char **kv = (const char **)js_alloc(c, (np + 1) * sizeof *kv);
    const char **names = (const char **)js_alloc(c, (np + 1) * sizeof *names);
    size_t *req = (size_t *)js_alloc(c, (np + 1) * sizeof *req), n_req = 0;
    size_t *opt = (size_t *)js_alloc(c, (np + 1) * sizeof *opt), n_opt = 0;
    for (size_t i = 0; i < np && opt; i++) {
        const char *pname = JS_CAT(c, name, sep, props[i].name);
        const char *rule = js_visit(c, props[i].s, pname, props[i].at, depth + 1);
        js_sb key = {c, NULL, 0, 0};
        js_dump(&key, &(cJSON){.type = cJSON_String, .valuestring = (char *)props[i].name});
        kv[i] = js_add_rule(c, JS_CAT(c, pname, "-kv"),
                            JS_CAT(c, js_literal(c, js_sb_done(&key)), " space \":\" space ",
                                   rule));
        names[i] = props[i].name;
        if (props[i].required)
            req[n_req++] = i;
        else
            opt[n_opt++] = i;
    }
    if (additional && c->st == MVM_OK) {
        const char *sub = JS_CAT(c, name, sep, "additional");
        js_path pa = {at, "additionalProperties", 0};
        js_node an;
        const char *value = !js_classify(c, additional, NULL, &pa, depth + 1, &an) ? NULL
                            : an.kind == JK_ANY ? js_add_primitive(c, "value", "value")
                                : js_visit(c, additional, JS_CAT(c, sub, "-value"), &pa, depth + 1);
        const char *key = !np ? js_add_primitive(c, "string", "string")
                              : js_add_rule(c, JS_CAT(c, sub, "-k"), js_not_strings(c, names, np));
        kv[np] = js_add_rule(c, JS_CAT(c, sub, "-kv"), JS_CAT(c, key, " \":\" space ", value));
        names[np] = "*";
        opt[n_opt++] = np;
    }
    if (c->st != MVM_OK)
        return NULL;
    if (!n_req && !n_opt)
        return js_str(c, "\"{\" space \"}\"");
    js_sb b = {c, NULL, 0, 0};
    js_sb_add(&b, "\"{\" space ");
    for (size_t i = 0; i < n_req; i++) {
        if (i)
            js_sb_add(&b, " \",\" space ");
        js_sb_add(&b, kv[req[i]]);
    }
    if (n_opt) {
        js_sb_add(&b, n_req ? " ( \",\" space ( " : " (");
        /* rest[j]: the rule of "any of opt[j..] after a comma", named after opt[j - 1] */
        const char **rest = (const char **)js_alloc(c, (n_opt + 1) * sizeof *rest);
        for (size_t j = n_opt - 1; rest && j >= 1; j--) {
            const int star = opt[j] == np && additional;
            const char *r = JS_CAT(c, "( \",\" space ", kv[opt[j]], " )", star ? "*" : "?",
                                   j + 1 < n_opt ? " " : "", j + 1 < n_opt ? rest[j + 1] : "");
            rest[j] = js_add_rule(c, JS_CAT(c, name, sep, names[opt[j - 1]], "-rest"), r);
        }
        for (size_t i = 0; rest && i < n_opt; i++) {
            const int star = opt[i] == np && additional;
            js_sb_add(&b, i ? " | " : "");
            js_sb_add(&b, kv[opt[i]]);
            if (star)
                js_sb_add(&b, JS_CAT(c, " ( \",\" space ", kv[opt[i]], " )*"));
            if (i + 1 < n_opt)
                js_sb_add(&b, JS_CAT(c, " ", rest[i + 1]));
        }
        js_sb_add(&b, n_req ? " ) )?" : " )?");
    }
    js_sb_add(&b, " space \"}\"");
    return js_sb_done(&b);
}

static char *visit_as(js_ctx *c, const cJSON *s, const char *tover, const char *name,
                      const js_path *at, int depth);

char *js_visit(js_ctx *c, const cJSON *s, const char *name, const js_path *at, int depth)
{
    return visit_as(c, s, NULL, name, at, depth);
}

static int cmp_prop(const void *a, const void *b)
{
    return strcmp(((const js_prop *)a)->name, ((const js_prop *)b)->name);
}

/* llama.cpp's _visit_all_of: one object of every component's properties, or the enums'
 * common values. */
static char *visit_all_of(js_ctx *c, const js_node *n, const char *name, const char *rule_name,
                          const js_path *at, int depth)
{
    js_allof p;
    if (!js_allof_plan(c, n, at, depth, &p))
        return NULL;
    if (p.n_enum)
        return js_add_rule(c, rule_name, allof_enum(c, &p, at));
    size_t total = 0, np = 0;
    for (size_t k = 0; k < p.n; k++)
        total += (size_t)cJSON_GetArraySize(p.comp[k].arg);
    js_prop *props = (js_prop *)js_alloc(c, (total + 1) * sizeof *props);
    js_prop *sorted = (js_prop *)js_alloc(c, (total + 1) * sizeof *sorted);
    for (size_t k = 0; k < p.n && sorted; k++)
        if (!object_props(c, &p.comp[k], p.at[k], !p.opt[k], props, &np))
            return NULL;
    if (!sorted)
        return NULL;
    memcpy(sorted, props, np * sizeof *props);
    qsort(sorted, np, sizeof *sorted, cmp_prop);
    for (size_t i = 1; i < np; i++)
        if (strcmp(sorted[i - 1].name, sorted[i].name) == 0) {
            js_fail(c, at, "allOf declares property '%.60s' twice", sorted[i].name);
            return NULL;
        }
    /* a component's additionalProperties would refuse what another adds (llama.cpp drops it):
     * any property not its own, declared twice being refused above */
    for (size_t k = 0; k < p.n; k++)
        if (js_closed(p.comp[k].s) && (size_t)cJSON_GetArraySize(p.comp[k].arg) != np) {
            js_fail(c, p.at[k], "its additionalProperties refuses the properties of the other "
                    "allOf components");
            return NULL;
        }
    return js_add_rule(c, rule_name, object_rule(c, props, np, name, NULL, at, depth));
}

/* llama.cpp's _resolve_ref: the target's rule, "ref" and the escaped fragment, written once
 * (a $ref back into one being written names it). */
static char *resolve_ref(js_ctx *c, const js_node *n, int depth)
{
    const char *hash = strchr(n->ref, '#');
    char *name = JS_CAT(c, "ref", js_rule_name(c, hash ? hash + 1 : n->ref));
    int busy = 0;
    for (size_t i = 0; i < c->n_resolving; i++)
        busy |= strcmp(c->resolving[i], n->ref) == 0;
    if (!name || busy || js_rule_get(c, name))
        return name;
    if (c->n_resolving > JS_MAX_DEPTH) {
        js_fail(c, NULL, "$refs nest deeper than %d levels", JS_MAX_DEPTH);
        return NULL;
    }
    const js_path at = {NULL, n->ref, 0};
    c->resolving[c->n_resolving++] = n->ref;
    name = visit_as(c, n->arg, NULL, name, &at, depth + 1);
    c->n_resolving--;
    return name;
}

/* llama.cpp's _generate_union_rule: the alternatives, named "<name>-<i>". */
static char *union_rule(js_ctx *c, const js_node *n, const char *name, const js_path *at,
                        int depth)
{
    js_sb b = {c, NULL, 0, 0};
    const js_path pk = {at, n->kind == JK_TYPES ? "type" : n->arg_key, 0};
    size_t i = 0;
    for (const cJSON *v = n->arg->child; v && c->st == MVM_OK; v = v->next, i++) {
        const js_path pi = {&pk, NULL, i};
        const char *alt = js_fmt(c, "%s%s%zu", name, *name ? "-" : "alternative-", i);
        js_sb_add(&b, i ? " | " : "");
        js_sb_add(&b, n->kind == JK_TYPES ? visit_as(c, n->s, v->valuestring, alt, &pi, depth + 1)
                                          : visit_as(c, v, NULL, alt, &pi, depth + 1));
    }
    return js_sb_done(&b);
}

/* A const's literal, or an enum's literals in parentheses. */
static char *enum_rule(js_ctx *c, const js_node *n)
{
    js_sb b = {c, NULL, 0, 0};
    if (n->kind == JK_CONST) {
        js_dump(&b, n->arg);
        return js_literal(c, js_sb_done(&b));
    }
    js_sb_add(&b, "(");
    for (const cJSON *v = n->arg->child; v; v = v->next) {
        js_sb d = {c, NULL, 0, 0};
        js_dump(&d, v);
        js_sb_add(&b, v == n->arg->child ? "" : " | ");
        js_sb_add(&b, js_literal(c, js_sb_done(&d)));
    }
    js_sb_add(&b, ")");
    return js_sb_done(&b);
}

/* llama.cpp's _visit_primitive: the root's rule, else the built-in under its own name. */
static char *primitive(js_ctx *c, const char *rule_name, const char *type)
{
    return js_add_primitive(c, strcmp(rule_name, "root") == 0 ? "root" : type, type);
}

static char *visit_object(js_ctx *c, const js_node *n, const char *name, const char *rule_name,
                          const js_path *at, int depth)
{
    if (!(n->arg && n->arg->child) && n->additional) {
        const js_path pa = {at, "additionalProperties", 0};
        js_node an;
        if (!js_classify(c, n->additional, NULL, &pa, depth + 1, &an))
            return NULL;
        if (an.kind == JK_ANY)
            return js_add_rule(c, rule_name, js_add_primitive(c, "object", "object"));
    }
    size_t np = 0;
    js_prop *props = (js_prop *)js_alloc(c, ((size_t)cJSON_GetArraySize(n->arg) + 1) *
                                                sizeof *props);
    if (!props || !object_props(c, n, at, 0, props, &np))
        return NULL;
    return js_add_rule(c, rule_name, object_rule(c, props, np, name, n->additional, at, depth));
}

static char *visit_array(js_ctx *c, const js_node *n, const char *name, const char *rule_name,
                         const js_path *at, int depth)
{
    const char *sub = *name ? JS_CAT(c, name, "-") : "";
    const js_path pk = {at, n->arg_key, 0};
    if (n->kind == JK_TUPLE) {
        js_sb b = {c, NULL, 0, 0};
        js_sb_add(&b, "\"[\" space ");
        size_t i = 0;
        for (const cJSON *v = n->arg->child; v && c->st == MVM_OK; v = v->next, i++) {
            const js_path pi = {&pk, NULL, i};
            js_sb_add(&b, i ? " \",\" space " : "");
            js_sb_add(&b, visit_as(c, v, NULL, js_fmt(c, "%stuple-%zu", sub, i), &pi, depth + 1));
        }
        js_sb_add(&b, " space \"]\"");
        return js_add_rule(c, rule_name, js_sb_done(&b));
    }
    js_node in;
    if (!js_classify(c, n->arg, NULL, &pk, depth + 1, &in))
        return NULL;
    if (in.kind == JK_ANY && n->lo == 0 && n->hi < 0)
        return primitive(c, rule_name, "array");
    const char *item_rule = visit_as(c, n->arg, NULL, JS_CAT(c, sub, "item"), &pk, depth + 1);
    const char *rep = js_repetition(c, item_rule, (int)n->lo,
                                    n->hi < 0 ? JS_UNBOUNDED : (int)n->hi, "\",\" space");
    return js_add_rule(c, rule_name, JS_CAT(c, "\"[\" space ", rep, " space \"]\""));
}

static char *visit_string(js_ctx *c, const js_node *n, const char *rule_name, const js_path *at)
{
    if (n->pattern)
        return js_pattern(c, n->pattern, rule_name, at);
    if (n->format == FMT_UUID)
        return primitive(c, rule_name, "uuid");
    if (n->format != FMT_NONE) {
        const char *f = n->format == FMT_DATE   ? "date-string"
                        : n->format == FMT_TIME ? "time-string"
                                                : "date-time-string";
        return js_add_rule(c, rule_name, js_add_primitive(c, f, f));
    }
    if (n->lo > 0 || n->hi >= 0) {
        const char *ch = js_add_primitive(c, "char", "char");
        const char *rep = js_repetition(c, ch, (int)n->lo, n->hi < 0 ? JS_UNBOUNDED : (int)n->hi,
                                        "");
        return js_add_rule(c, rule_name, JS_CAT(c, "\"\\\"\" ", rep, " \"\\\"\""));
    }
    return primitive(c, rule_name, "string");
}

/* llama.cpp's visit: s (read as type tover when an alternative of a type array) under the
 * name its place gives it; "root" for the document, a built-in's name with a '-' after. */
static char *visit_as(js_ctx *c, const cJSON *s, const char *tover, const char *name,
                      const js_path *at, int depth)
{
    js_node n;
    if (!name || !js_classify(c, s, tover, at, depth, &n))
        return NULL;
    const char *rule_name = js_is_reserved(name) ? JS_CAT(c, name, "-") : *name ? name : "root";
    switch (n.kind) {
    case JK_REF:
        return js_add_rule(c, rule_name, resolve_ref(c, &n, depth));
    case JK_ANY_OF:
    case JK_TYPES:
        return js_add_rule(c, rule_name, union_rule(c, &n, name, at, depth));
    case JK_ALL_OF:
        return visit_all_of(c, &n, name, rule_name, at, depth);
    case JK_CONST:
    case JK_ENUM:
        return js_add_rule(c, rule_name, enum_rule(c, &n));
    case JK_OBJECT:
        return visit_object(c, &n, name, rule_name, at, depth);
    case JK_ARRAY:
    case JK_TUPLE:
        return visit_array(c, &n, name, rule_name, at, depth);
    case JK_STRING:
        return visit_string(c, &n, rule_name, at);
    case JK_INTEGER:
        if (n.lo == INT64_MIN && n.hi == INT64_MAX)
            return primitive(c, rule_name, "integer");
        return js_add_rule(c, rule_name, js_int_range(c, n.lo, n.hi));
    case JK_NUMBER:
        return primitive(c, rule_name, "number");
    case JK_BOOLEAN:
        return primitive(c, rule_name, "boolean");
    case JK_NULL:
        return primitive(c, rule_name, "null");
    default:
        return js_add_rule(c, rule_name, js_add_primitive(c, "value", "value"));
    }
}
