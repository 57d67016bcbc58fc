/* The XML syntaxes' calls in the grammars that force one (cr_xml_call, chat_reply_impl.h),
 * written as their chat templates write them, so that the reader (chat_reply_calls.c) reads
 * them back:
 *   qwen3-coder  <function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n...</function>\n
 *   glm-4.5      NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n...
 *   minimax-m2   <invoke name="NAME">\n<parameter name="KEY">VALUE</parameter>\n...</invoke>\n
 * A value is what the reader types by the schema: a string parameter's raw text (one of its
 * enum's values, else any text without the value's closing tag), any other the JSON its
 * schema validates (the converter's grammar of the property's schema, with the parameters'
 * $defs). The parameters come in any order, each at most once, the required ones always,
 * and no others: templates write a call's arguments in the order the call has them (ours
 * sort them), and a model may not keep the schema's. That takes a rule for each subset
 * written so far, so beyond XML_ANY_ORDER parameters they come in the schema's order
 * instead, as the JSON Schema converter orders an object's. A string with a minLength or
 * maxLength is that many characters none of which is '<' (a count and the closing tag's
 * watch together would take a rule per character); its pattern and format are not held.
 */
#include "engine/chat/chat_reply_impl.h"

#include <stdio.h>
#include <string.h>

/* the most parameters that may come in any order: 2^8 rules of up to 8 alternates */
#define XML_ANY_ORDER 8

typedef struct xml_form {
    const char *call_pre, *call_post, *call_end;    /* around the name; after the params */
    const char *param_pre, *param_post, *param_end; /* around a key; after its value */
    const char *value_end;                          /* what a raw value may not hold */
} xml_form;

static const xml_form *form_of(mvm_chat_syntax s)
{
    static const xml_form qwen3_coder = {"<function=", ">\n", "</function>\n", "<parameter=",
                                         ">\n", "\n</parameter>\n", "</parameter>"};
    static const xml_form glm45 = {"", "\n", "", "<arg_key>", "</arg_key>\n<arg_value>",
                                   "</arg_value>\n", "</arg_value>"};
    static const xml_form minimax = {"<invoke name=\"", "\">\n", "</invoke>\n",
                                     "<parameter name=\"", "\">", "</parameter>\n",
                                     "</parameter>"};
    return s == MVM_CHAT_QWEN3_CODER ? &qwen3_coder : s == MVM_CHAT_GLM45 ? &glm45 : &minimax;
}

/* p(a) "a" p(b)... as one GBNF literal. */
static void add_literal3(cr_text *t, const char *a, const char *b, const char *c)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s%s%s", a, b, c);
    cr_add_literal(t, buf);
}

/* A GBNF character class of everything but the characters of `not`. */
static void add_class_not(cr_text *t, const char *not)
{
    cr_add(t, "[^");
    for (const char *c = not; *c; c++)
        cr_add(t, "%s%c", strchr("]\\^-", *c) ? "\\" : "", *c);
    cr_add(t, "]");
}

/* NAME ::= any text without `end` (its first character found nowhere else in it): state j
 * has matched end's first j characters, and may not match them all. */
static void add_raw_text(cr_text *t, const char *name, const char *end)
{
    const size_t m = strlen(end);
    cr_add(t, "%s ::= %s-x0\n", name, name);
    for (size_t j = 0; j < m; j++) {
        char not[3] = {end[0], j ? end[j] : 0, 0};
        cr_add(t, "%s-x%zu ::= \"\" | ", name, j);
        add_class_not(t, not);
        cr_add(t, " %s-x0 | ", name);
        cr_add_literal(t, (char[]){end[0], 0});
        cr_add(t, " %s-x1", name);
        if (j && j + 1 < m) {
            cr_add(t, " | ");
            cr_add_literal(t, (char[]){end[j], 0});
            cr_add(t, " %s-x%zu", name, j + 1);
        }
        cr_add(t, "\n");
    }
}

/* Whether a name can stand in the markup. */
static int plain_name(const char *s)
{
    return *s && strlen(s) <= 256 && !strpbrk(s, "<>\"\n");
}

/* t<i>-p<j>-root ::= the value of parameter `key` (schema `ps`). */
static int add_value(cr_text *t, const xml_form *f, const char *rule, const char *key,
                     const cJSON *ps, const cJSON *params, char *bad, size_t cap)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(ps, "type");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(ps, "enum"), *v;
    if (cJSON_IsString(type) && !strcmp(type->valuestring, "string")) {
        const cJSON *lo = cJSON_GetObjectItemCaseSensitive(ps, "minLength");
        const cJSON *hi = cJSON_GetObjectItemCaseSensitive(ps, "maxLength");
        const double min = cJSON_IsNumber(lo) && lo->valuedouble > 0 ? lo->valuedouble : 0;
        if ((cJSON_IsNumber(hi) || min > 0) && (!cJSON_IsArray(e) || !e->child)) {
            const double max = cJSON_IsNumber(hi) ? hi->valuedouble : -1;
            if (max > 100000 || min > 100000 || (max >= 0 && max < min)) {
                snprintf(bad, cap, "tools: parameter '%s': its length bounds cannot be held",
                         key);
                return -1;
            }
            cr_add(t, "%s ::= [^<]{%.0f,", rule, min);
            if (max >= 0)
                cr_add(t, "%.0f", max);
            cr_add(t, "}\n");
            return 0;
        }
        if (!cJSON_IsArray(e) || !e->child) {
            add_raw_text(t, rule, f->value_end);
            return 0;
        }
        cr_add(t, "%s ::= ", rule);
        const char *sep = "";
        cJSON_ArrayForEach(v, e)
            if (cJSON_IsString(v) && !strstr(v->valuestring, f->value_end)) {
                cr_add(t, "%s", sep), sep = " | ";
                cr_add_literal(t, v->valuestring);
            }
        cr_add(t, "\n");
        if (*sep)
            return 0;
        snprintf(bad, cap, "tools: parameter '%s': no value of its enum can be written", key);
        return -1;
    }
    /* the JSON the schema validates, its $refs resolved against the parameters' $defs */
    cJSON *s = cJSON_IsObject(ps) ? cJSON_Duplicate(ps, 1) : cJSON_CreateObject();
    static const char *const defs[] = {"$defs", "definitions"};
    for (size_t d = 0; s && d < 2; d++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(params, defs[d]);
        if (x && !cJSON_GetObjectItemCaseSensitive(s, defs[d]))
            cJSON_AddItemToObject(s, defs[d], cJSON_Duplicate(x, 1));
    }
    char prefix[64], what[400];
    snprintf(prefix, sizeof prefix, "%.*s", (int)(strlen(rule) - 4), rule); /* less "root" */
    snprintf(what, sizeof what, "parameter '%s'", key);
    const int rc = cr_add_schema(t, s, prefix, what, bad, cap);
    cJSON_Delete(s);
    return rc;
}

int cr_xml_call(cr_text *t, mvm_chat_syntax s, size_t i, const cJSON *fn, char *bad, size_t cap)
{
    const xml_form *f = form_of(s);
    const char *name = cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring;
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(params, "properties");
    const cJSON *required = cJSON_GetObjectItemCaseSensitive(params, "required"), *p, *r;
    if (!plain_name(name)) {
        snprintf(bad, cap, "tools: the name '%.256s' holds markup: its call cannot be forced",
                 name);
        return -1;
    }
    if (props && !cJSON_IsObject(props)) {
        snprintf(bad, cap, "tools: the parameters' properties of '%s' must be an object", name);
        return -1;
    }
    cr_add(t, "call-%zu ::= ", i);
    add_literal3(t, f->call_pre, name, f->call_post);
    const size_t n = (size_t)cJSON_GetArraySize(props);
    unsigned need = 0; /* the required parameters, by their place */
    size_t j = 0;
    cJSON_ArrayForEach(p, props)
    {
        int needed = 0;
        cJSON_ArrayForEach(r, required)
            needed |= cJSON_IsString(r) && !strcmp(r->valuestring, p->string);
        if (n > XML_ANY_ORDER)
            cr_add(t, " t%zu-p%zu%s", i, j, needed ? "" : "?");
        else
            need |= (unsigned)needed << j;
        j++;
    }
    if (n <= XML_ANY_ORDER)
        cr_add(t, " t%zu-s0", i);
    cr_add(t, " ");
    cr_add_literal(t, f->call_end);
    cr_add(t, "\n");
    /* t<i>-s<written> ::= a parameter not written yet, then the rest; or the end once every
     * required one is written */
    for (unsigned w = 0; n <= XML_ANY_ORDER && w < 1u << n; w++) {
        cr_add(t, "t%zu-s%u ::=", i, w);
        const char *sep = " ";
        for (size_t k = 0; k < n; k++)
            if (!(w & 1u << k))
                cr_add(t, "%st%zu-p%zu t%zu-s%u", sep, i, k, i, w | 1u << k), sep = " | ";
        if ((w & need) == need)
            cr_add(t, "%s\"\"", sep);
        cr_add(t, "\n");
    }
    j = 0;
    cJSON_ArrayForEach(p, props)
    {
        if (!plain_name(p->string)) {
            snprintf(bad, cap, "tools: '%s' has a parameter named '%.256s', which holds markup: "
                     "its call cannot be forced", name, p->string);
            return -1;
        }
        char rule[48];
        snprintf(rule, sizeof rule, "t%zu-p%zu-root", i, j);
        cr_add(t, "t%zu-p%zu ::= ", i, j++);
        add_literal3(t, f->param_pre, p->string, f->param_post);
        cr_add(t, " %s ", rule);
        cr_add_literal(t, f->param_end);
        cr_add(t, "\n");
        if (add_value(t, f, rule, p->string, p, params, bad, cap))
            return -1;
    }
    return 0;
}
