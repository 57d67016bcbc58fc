/*
 * The tests of `x is name(args)`, as jinja2's tests.py: types as Python's isinstance sees
 * them (a bool is a number, not an integer), sequence and iterable as len()/iter() would
 * take the value (undefined is both), the comparison tests, divisibleby, in.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/chat/jinja_impl.h"

enum {
    JT_ODD, JT_EVEN, JT_DIVISIBLEBY, JT_DEFINED, JT_UNDEFINED, JT_NONE, JT_BOOLEAN, JT_FALSE,
    JT_TRUE, JT_INTEGER, JT_FLOAT_, JT_LOWER, JT_UPPER, JT_STRING_, JT_MAPPING, JT_NUMBER,
    JT_SEQUENCE, JT_ITERABLE, JT_CALLABLE, JT_SAMEAS, JT_ESCAPED, JT_IN, JT_FILTER, JT_TEST,
    JT_CMP, /* + JCMP_* */
};

static const struct { const char *name; int id; } TESTS[] = {
    {"odd", JT_ODD}, {"even", JT_EVEN}, {"divisibleby", JT_DIVISIBLEBY},
    {"defined", JT_DEFINED}, {"undefined", JT_UNDEFINED}, {"none", JT_NONE},
    {"boolean", JT_BOOLEAN}, {"false", JT_FALSE}, {"true", JT_TRUE}, {"integer", JT_INTEGER},
    {"float", JT_FLOAT_}, {"lower", JT_LOWER}, {"upper", JT_UPPER}, {"string", JT_STRING_},
    {"mapping", JT_MAPPING}, {"number", JT_NUMBER}, {"sequence", JT_SEQUENCE},
    {"iterable", JT_ITERABLE}, {"callable", JT_CALLABLE}, {"sameas", JT_SAMEAS},
    {"escaped", JT_ESCAPED}, {"in", JT_IN}, {"filter", JT_FILTER}, {"test", JT_TEST},
    {"==", JT_CMP + JCMP_EQ}, {"eq", JT_CMP + JCMP_EQ}, {"equalto", JT_CMP + JCMP_EQ},
    {"!=", JT_CMP + JCMP_NE}, {"ne", JT_CMP + JCMP_NE}, {">", JT_CMP + JCMP_GT},
    {"gt", JT_CMP + JCMP_GT}, {"greaterthan", JT_CMP + JCMP_GT}, {"ge", JT_CMP + JCMP_GE},
    {">=", JT_CMP + JCMP_GE}, {"<", JT_CMP + JCMP_LT}, {"lt", JT_CMP + JCMP_LT},
    {"lessthan", JT_CMP + JCMP_LT}, {"<=", JT_CMP + JCMP_LE}, {"le", JT_CMP + JCMP_LE},
};
#define NTESTS (sizeof TESTS / sizeof *TESTS)

int mvm_jinja_test_id(const char *name)
{
    for (size_t i = 0; i < NTESTS; i++)
        if (strcmp(name, TESTS[i].name) == 0)
            return (int)i;
    return -1;
}

/* str.islower()/isupper(): a cased character, and none of the other case. A character is
 * lowercase when upper() changes it, uppercase when lower() does. */
static mvm_status case_test(jx *st, jv v, int upper, int *res)
{
    jv s;
    mvm_status rc = jx_to_str(st, v, &s);
    if (rc != MVM_OK)
        return rc;
    jbuf a = {0}, b = {0};
    *res = 0;
    rc = jbuf_put(st, &a, "", 0);
    if (rc == MVM_OK)
        rc = jbuf_put(st, &b, "", 0);
    int any = 0, other = 0;
    for (size_t at = 0; rc == MVM_OK && at < s.u.s->len;) {
        uint32_t cp;
        size_t len = mvm_jinja_utf8_next(s.u.s->s + at, s.u.s->len - at, &cp);
        a.n = b.n = 0;
        rc = mvm_jinja_case(st, &a, s.u.s->s + at, len, JCASE_UPPER);
        if (rc == MVM_OK)
            rc = mvm_jinja_case(st, &b, s.u.s->s + at, len, JCASE_LOWER);
        int is_lower = a.n != len || memcmp(a.p, s.u.s->s + at, len) != 0;
        int is_upper = b.n != len || memcmp(b.p, s.u.s->s + at, len) != 0;
        any |= upper ? is_upper : is_lower;
        other |= upper ? is_lower : is_upper;
        at += len;
    }
    free(a.p), free(b.p);
    jv_drop(s);
    *res = any && !other;
    return rc;
}

static int is_sequence(jv v)
{
    switch (v.t) {
    case JV_UNDEF: case JV_STR: case JV_DICT: return 1;
    case JV_LIST: return v.u.l->kind <= JL_RANGE && v.u.l->kind != JL_ITER;
    default: return 0;
    }
}

static mvm_status modulo_is(jx *st, jv v, jv by, int want_zero, int *res)
{
    jv r;
    mvm_status rc = mvm_jinja_binop(st, JOP_MOD, v, by, &r);
    if (rc != MVM_OK)
        return rc;
    jv one = jv_int(1);
    *res = jv_equal(r, want_zero ? jv_int(0) : one);
    jv_drop(r);
    return MVM_OK;
}

mvm_status mvm_jinja_test(jx *st, int id, jv v, const jargs *a, int *res)
{
    int t = TESTS[id].id;
    size_t want = t == JT_DIVISIBLEBY || t == JT_SAMEAS || t == JT_IN || t >= JT_CMP;
    if (a->nkw || a->npos != want)
        return jx_fail(st, MVM_ERR_INVALID, "the test '%s' takes %zu argument(s)", TESTS[id].name,
                       want);
    jv arg = want ? a->pos[0] : jv_none();
    switch (t) {
    case JT_ODD: case JT_EVEN: return modulo_is(st, v, jv_int(2), t == JT_EVEN, res);
    case JT_DIVISIBLEBY: return modulo_is(st, v, arg, 1, res);
    case JT_DEFINED: *res = v.t != JV_UNDEF; break;
    case JT_UNDEFINED: *res = v.t == JV_UNDEF; break;
    case JT_NONE: *res = v.t == JV_NONE; break;
    case JT_BOOLEAN: *res = v.t == JV_BOOL; break;
    case JT_FALSE: *res = v.t == JV_BOOL && !v.u.i; break;
    case JT_TRUE: *res = v.t == JV_BOOL && v.u.i; break;
    case JT_INTEGER: *res = v.t == JV_INT; break;
    case JT_FLOAT_: *res = v.t == JV_FLOAT; break;
    case JT_LOWER: case JT_UPPER: return case_test(st, v, t == JT_UPPER, res);
    case JT_STRING_: *res = v.t == JV_STR; break;
    case JT_MAPPING: *res = v.t == JV_DICT; break;
    case JT_NUMBER: *res = jv_is_num(v); break;
    case JT_SEQUENCE: *res = is_sequence(v); break;
    case JT_ITERABLE: *res = v.t == JV_UNDEF || v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT ||
                             v.t == JV_LOOP;
        break;
    case JT_CALLABLE: *res = v.t == JV_MACRO || v.t == JV_FUNC || v.t == JV_UNDEF || v.t == JV_LOOP;
        break;
    case JT_SAMEAS:
        *res = v.t == arg.t && (v.t == JV_NONE || v.t == JV_UNDEF ? 1
                                : v.t == JV_BOOL || v.t == JV_INT ? v.u.i == arg.u.i
                                : v.t == JV_FLOAT ? 0 : v.u.h == arg.u.h);
        break;
    case JT_ESCAPED: *res = v.t == JV_STR && v.u.s->markup; break;
    case JT_IN: return mvm_jinja_contains(st, arg, v, res);
    case JT_FILTER: case JT_TEST:
        *res = v.t == JV_STR && (t == JT_FILTER ? mvm_jinja_filter_id(v.u.s->s)
                                                : mvm_jinja_test_id(v.u.s->s)) >= 0;
        break;
    default: return mvm_jinja_compare(st, t - JT_CMP, v, arg, res);
    }
    return MVM_OK;
}
