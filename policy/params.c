/*
 * Module parameters (policy.h): "name=value,name=value" from the command line or
 * MOEVM_<ROLE>_ARGS. The syntax is strict, so a typo fails loudly instead of silently
 * leaving a default in place: names are [A-Za-z_][A-Za-z0-9_]*, values are finite decimal
 * numbers (strtod's syntax without leading blanks, infinities or NaN), items are separated
 * by single commas, no blanks anywhere, no empty items, no name twice.
 *
 * mvm_pparams_check validates the whole text and knows the module's name, so a module that
 * calls it first (as every module does in create) reports any mistake with the module and the
 * parameter named; mvm_pparam_double then only looks the value up.
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/policy.h"
#include "vmm/error.h"

typedef struct item {
    const char *name, *value;
    size_t name_len, value_len;
} item;

/* Longest value text accepted: a double needs at most ~25 characters; more is a mistake. */
#define VALUE_MAX 64

static int is_name_start(char c) { return isalpha((unsigned char)c) || c == '_'; }
static int is_name_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* The next item of the text at *s: 1 and *it filled, 0 at the end of the text, or a
 * status other than MVM_OK in *st with the message set (`who` names the module). */
static int next_item(const char **s, item *it, const char *who, mvm_status *st)
{
    const char *p = *s;
    if (!*p)
        return 0;
    it->name = p;
    if (!is_name_start(*p)) {
        *st = mvm_fail(MVM_ERR_INVALID, "%s: parameters '%s': expected a name at '%s' "
                       "(syntax: name=value,name=value)", who, *s, p);
        return -1;
    }
    while (is_name_char(*p))
        p++;
    it->name_len = (size_t)(p - it->name);
    if (*p != '=') {
        *st = mvm_fail(MVM_ERR_INVALID, "%s: parameter '%.*s': expected '=' after the name%s",
                       who, (int)it->name_len, it->name, *p ? "" : ", found the end");
        return -1;
    }
    it->value = ++p;
    while (*p && *p != ',')
        p++;
    it->value_len = (size_t)(p - it->value);
    if (*p == ',' && !p[1]) {
        *st = mvm_fail(MVM_ERR_INVALID, "%s: parameters end with ',' (no item after it)", who);
        return -1;
    }
    *s = *p ? p + 1 : p;
    return 1;
}

static int name_is(const item *it, const char *name)
{
    return strlen(name) == it->name_len && memcmp(it->name, name, it->name_len) == 0;
}

static mvm_status item_value(const item *it, const char *who, double *out)
{
    char buf[VALUE_MAX + 1];
    const char *why = NULL;
    if (it->value_len == 0)
        why = "is empty";
    else if (it->value_len > VALUE_MAX)
        why = "is too long";
    if (!why) {
        memcpy(buf, it->value, it->value_len);
        buf[it->value_len] = '\0';
        char *end;
        /* strtod skips leading blanks: refuse them here, the syntax has none. */
        double v = isspace((unsigned char)buf[0]) ? NAN : strtod(buf, &end);
        if (isspace((unsigned char)buf[0]) || *end || !isfinite(v))
            why = "is not a finite number";
        else
            *out = v;
    }
    if (why)
        return mvm_fail(MVM_ERR_INVALID, "%s: parameter '%.*s': value '%.*s' %s", who,
                        (int)it->name_len, it->name, (int)it->value_len, it->value, why);
    return MVM_OK;
}

mvm_status mvm_pparam_double(const mvm_pparams *p, const char *name, double def, double *out)
{
    *out = def;
    const char *s = p && p->text ? p->text : "";
    item it;
    mvm_status st = MVM_OK;
    int r;
    while ((r = next_item(&s, &it, "policy parameters", &st)) > 0)
        if (name_is(&it, name))
            return item_value(&it, "policy parameters", out);
    return r < 0 ? st : MVM_OK;
}

static int known_name(const item *it, const char *const *known)
{
    for (; *known; known++)
        if (name_is(it, *known))
            return 1;
    return 0;
}

/* "a, b, c" of the NULL-terminated list, for messages. */
static void list_names(const char *const *known, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    for (; *known && n < cap; known++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", *known);
    if (!buf[0])
        snprintf(buf, cap, "none");
}

mvm_status mvm_pparams_check(const mvm_pparams *p, const char *const *known, const char *module)
{
    const char *text = p && p->text ? p->text : "";
    const char *s = text;
    item it;
    mvm_status st = MVM_OK;
    int r;
    while ((r = next_item(&s, &it, module, &st)) > 0) {
        if (!known_name(&it, known)) {
            char names[256];
            list_names(known, names, sizeof names);
            return mvm_fail(MVM_ERR_INVALID, "%s: unknown parameter '%.*s' (known: %s)", module,
                            (int)it.name_len, it.name, names);
        }
        double v;
        if ((st = item_value(&it, module, &v)) != MVM_OK)
            return st;
        /* A repeated name: which one wins would be a guess. */
        const char *t = text;
        item earlier;
        while (next_item(&t, &earlier, module, &st) > 0 && earlier.name != it.name)
            if (earlier.name_len == it.name_len &&
                memcmp(earlier.name, it.name, it.name_len) == 0)
                return mvm_fail(MVM_ERR_INVALID, "%s: parameter '%.*s' given twice", module,
                                (int)it.name_len, it.name);
    }
    return r < 0 ? st : MVM_OK;
}
