/*
 * Expressions. Every evaluation returns a new reference in *out (or an error, with nothing
 * to release); `and`/`or` return an operand as Python does, comparisons chain, and an
 * undefined name is a value (printed as nothing, falsy) until something needs what it
 * would hold.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/chat/jinja_impl.h"

static mvm_status eval_seq(jx *st, const jnode *n, int kind, jv *out)
{
    jlist *l = jlist_new(kind, n->nkids);
    if (!l)
        return jx_nomem();
    for (uint32_t i = 0; i < n->nkids; i++) {
        jv v;
        mvm_status rc = jx_eval(st, n->kids[i], &v);
        if (rc == MVM_OK)
            rc = jlist_push(st, l, v);
        if (rc != MVM_OK) {
            jv_drop(jv_of_list(l));
            return rc;
        }
    }
    *out = jv_of_list(l);
    return MVM_OK;
}

static mvm_status eval_dict(jx *st, const jnode *n, jv *out)
{
    jdict *d = jdict_new();
    if (!d)
        return jx_nomem();
    mvm_status rc = MVM_OK;
    for (uint32_t i = 0; rc == MVM_OK && i + 1 < n->nkids; i += 2) {
        jv k, v;
        rc = jx_eval(st, n->kids[i], &k);
        if (rc != MVM_OK)
            break;
        rc = jx_eval(st, n->kids[i + 1], &v);
        if (rc != MVM_OK) {
            jv_drop(k);
            break;
        }
        rc = jdict_set(st, d, k, v);
    }
    if (rc != MVM_OK) {
        jv_drop(jv_of_dict(d));
        return rc;
    }
    *out = jv_of_dict(d);
    return MVM_OK;
}

static mvm_status eval_call(jx *st, const jnode *n, jv *out)
{
    const jnode *f = n->a;
    jframe *scope = NULL;
    if (f->kind == JN_NAME) /* a macro called by name sees the frame that holds it */
        mvm_jinja_lookup(st, f->sym, &scope);
    jv obj;
    mvm_status rc = jx_eval(st, f->kind == JN_ATTR ? f->a : f, &obj);
    if (rc != MVM_OK)
        return rc;
    jargs a;
    rc = mvm_jinja_eval_args(st, n, &a);
    if (rc == MVM_OK) {
        if (f->kind == JN_ATTR)
            rc = mvm_jinja_call_method(st, obj, f->lit.u.s->s, &a, out);
        else if (obj.t == JV_MACRO)
            rc = mvm_jinja_call_macro(st, obj.u.macro, scope, &a, out);
        else
            rc = mvm_jinja_call(st, obj, &a, out);
        mvm_jinja_args_drop(&a);
    }
    jv_drop(obj);
    return rc;
}

/* A filter node applied: its operand is n->a, or (a filter block's chain, n->a NULL) the
 * given operand. */
mvm_status mvm_jinja_apply_filters(jx *st, const jnode *n, jv operand, jv *out)
{
    jv in;
    mvm_status rc;
    if (!n->a)
        in = jv_ref(operand), rc = MVM_OK;
    else if (n->a->kind == JN_FILTER)
        rc = mvm_jinja_apply_filters(st, n->a, operand, &in);
    else
        rc = jx_eval(st, n->a, &in);
    if (rc != MVM_OK)
        return rc;
    jargs a;
    rc = mvm_jinja_eval_args(st, n, &a);
    if (rc == MVM_OK) {
        rc = mvm_jinja_filter(st, n->op, in, &a, out);
        mvm_jinja_args_drop(&a);
    }
    jv_drop(in);
    return rc;
}

static mvm_status eval_test(jx *st, const jnode *n, jv *out)
{
    jv in;
    mvm_status rc = jx_eval(st, n->a, &in);
    if (rc != MVM_OK)
        return rc;
    jargs a;
    rc = mvm_jinja_eval_args(st, n, &a);
    if (rc == MVM_OK) {
        int res = 0;
        rc = mvm_jinja_test(st, n->op, in, &a, &res);
        *out = jv_bool(res);
        mvm_jinja_args_drop(&a);
    }
    jv_drop(in);
    return rc;
}

static mvm_status eval_concat(jx *st, const jnode *n, jv *out)
{
    jbuf b = {0};
    mvm_status rc = jbuf_put(st, &b, "", 0);
    for (uint32_t i = 0; rc == MVM_OK && i < n->nkids; i++) {
        jv v;
        rc = jx_eval(st, n->kids[i], &v);
        if (rc == MVM_OK) {
            rc = jx_write_str(st, &b, v);
            jv_drop(v);
        }
    }
    return jbuf_finish(st, &b, rc, out);
}

static mvm_status eval_cmp(jx *st, const jnode *n, jv *out)
{
    jv left;
    mvm_status rc = jx_eval(st, n->a, &left);
    if (rc != MVM_OK)
        return rc;
    int res = 1;
    for (uint32_t i = 0; res && i < n->nkids; i++) {
        jv right;
        rc = jx_eval(st, n->kids[i], &right);
        if (rc != MVM_OK)
            break;
        st->line = n->line;
        int op = n->ops[i];
        if (op == JCMP_IN || op == JCMP_NOTIN) {
            rc = mvm_jinja_contains(st, right, left, &res);
            res = op == JCMP_IN ? res : !res;
        } else {
            rc = mvm_jinja_compare(st, op, left, right, &res);
        }
        jv_drop(left);
        left = right;
        if (rc != MVM_OK)
            break;
    }
    jv_drop(left);
    *out = jv_bool(res);
    return rc;
}

static mvm_status eval_slice(jx *st, const jnode *n, jv *out)
{
    jv obj, b[3] = {jv_none(), jv_none(), jv_none()};
    const jnode *parts[3] = {n->b, n->c, n->d};
    mvm_status rc = jx_eval(st, n->a, &obj);
    if (rc != MVM_OK)
        return rc;
    for (int i = 0; rc == MVM_OK && i < 3; i++)
        if (parts[i])
            rc = jx_eval(st, parts[i], &b[i]);
    if (rc == MVM_OK) {
        rc = mvm_jinja_slice(st, obj, b, out);
    }
    for (int i = 0; i < 3; i++)
        jv_drop(b[i]);
    jv_drop(obj);
    return rc;
}

static mvm_status unary(jx *st, const jnode *n, jv v, jv *out)
{
    if (v.t == JV_UNDEF)
        return jx_undef_err(st, v);
    if (v.t == JV_FLOAT) {
        *out = jv_float(n->kind == JN_NEG ? -v.u.f : v.u.f);
        return MVM_OK;
    }
    if (v.t == JV_INT || v.t == JV_BOOL) {
        if (n->kind == JN_NEG && v.u.i == INT64_MIN)
            return jx_fail(st, MVM_ERR_INVALID, "integer overflow (64-bit integers only)");
        *out = jv_int(n->kind == JN_NEG ? -v.u.i : v.u.i);
        return MVM_OK;
    }
    return jx_fail(st, MVM_ERR_INVALID, "bad operand type for unary %c: '%s'",
                   n->kind == JN_NEG ? '-' : '+', jv_type_name(v));
}

/* Evaluates a and b, then combines them with f. */
static mvm_status two(jx *st, const jnode *n, jv *a, jv *b)
{
    mvm_status rc = jx_eval(st, n->a, a);
    if (rc != MVM_OK)
        return rc;
    rc = jx_eval(st, n->b, b);
    if (rc != MVM_OK)
        jv_drop(*a);
    st->line = n->line;
    return rc;
}

mvm_status mvm_jinja_eval(jx *st, const jnode *n, jv *out)
{
    jv a, b;
    mvm_status rc;
    st->line = n->line;
    switch (n->kind) {
    case JN_LIT: *out = n->lit; return MVM_OK; /* immortal */
    case JN_NAME: {
        const jv *v = mvm_jinja_lookup(st, n->sym, NULL);
        *out = v ? jv_ref(*v) : jv_hint(JU_NAME, 0, st->t->syms[n->sym]);
        return MVM_OK;
    }
    case JN_LIST: return eval_seq(st, n, JL_LIST, out);
    case JN_TUPLE: return eval_seq(st, n, JL_TUPLE, out);
    case JN_DICT: return eval_dict(st, n, out);
    case JN_ATTR:
        if ((rc = jx_eval(st, n->a, &a)) != MVM_OK)
            return rc;
        st->line = n->line;
        rc = mvm_jinja_getattr(st, a, n->lit.u.s->s, n->lit.u.s->len, out);
        break;
    case JN_ITEM:
        if ((rc = two(st, n, &a, &b)) != MVM_OK)
            return rc;
        rc = mvm_jinja_getitem(st, a, b, out);
        jv_drop(b);
        break;
    case JN_SLICE: return eval_slice(st, n, out);
    case JN_CALL: return eval_call(st, n, out);
    case JN_FILTER: return mvm_jinja_apply_filters(st, n, jv_none(), out);
    case JN_TEST: return eval_test(st, n, out);
    case JN_BIN:
        if ((rc = two(st, n, &a, &b)) != MVM_OK)
            return rc;
        rc = mvm_jinja_binop(st, n->op, a, b, out);
        jv_drop(b);
        break;
    case JN_NEG: case JN_POS:
        if ((rc = jx_eval(st, n->a, &a)) != MVM_OK)
            return rc;
        rc = unary(st, n, a, out);
        break;
    case JN_NOT:
        if ((rc = jx_eval(st, n->a, &a)) != MVM_OK)
            return rc;
        *out = jv_bool(!jv_truthy(a));
        break;
    case JN_AND: case JN_OR:
        if ((rc = jx_eval(st, n->a, &a)) != MVM_OK)
            return rc;
        if (jv_truthy(a) == (n->kind == JN_OR)) {
            *out = a;
            return MVM_OK;
        }
        jv_drop(a);
        return jx_eval(st, n->b, out);
    case JN_COND:
        if ((rc = jx_eval(st, n->b, &a)) != MVM_OK)
            return rc;
        if (jv_truthy(a)) {
            jv_drop(a);
            return jx_eval(st, n->a, out);
        }
        jv_drop(a);
        if (n->c)
            return jx_eval(st, n->c, out);
        *out = jv_hint(JU_MSG, 0, "the inline if-expression evaluated to false and no else "
                                  "section was defined");
        return MVM_OK;
    case JN_CONCAT: return eval_concat(st, n, out);
    case JN_CMP: return eval_cmp(st, n, out);
    default: return jx_fail(st, MVM_ERR_INVALID, "a statement where an expression belongs");
    }
    jv_drop(a);
    return rc;
}
