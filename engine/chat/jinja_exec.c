/*
 * Statements, with jinja2's scoping: a for loop's body runs in a frame of its own each
 * iteration (a `set` there is gone at the next one and after the loop: hence namespace()),
 * `if` opens none, a macro's frame sees the template's top level but not its caller's, and
 * block sets, filter blocks and generation blocks render in frames of their own.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/chat/jinja_impl.h"

mvm_status mvm_jinja_charge(jx *st, uint64_t steps)
{
    st->steps += steps;
    if (st->steps > JX_MAX_STEPS)
        return jx_fail(st, MVM_ERR_RANGE, "the template's work is over %u steps (loop iterations "
                       "and macro calls; items and bytes by the 16 and 256)", JX_MAX_STEPS);
    return MVM_OK;
}

mvm_status mvm_jinja_frame_set(jx *st, jframe *f, int32_t sym, jv v)
{
    for (size_t i = 0; i < f->n; i++)
        if (f->sym[i] == sym) {
            jv_drop(f->val[i]);
            f->val[i] = v;
            return MVM_OK;
        }
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 8;
        int32_t *s = realloc(f->sym, cap * sizeof *s);
        if (s)
            f->sym = s;
        jv *nv = s ? realloc(f->val, cap * sizeof *nv) : NULL;
        if (!nv) {
            jv_drop(v);
            return jx_nomem();
        }
        f->val = nv;
        f->cap = cap;
    }
    (void)st;
    f->sym[f->n] = sym;
    f->val[f->n++] = v;
    return MVM_OK;
}

static void frame_clear(jframe *f)
{
    for (size_t i = 0; i < f->n; i++)
        jv_drop(f->val[i]);
    f->n = 0;
}

static void frame_free(jframe *f)
{
    frame_clear(f);
    free(f->sym), free(f->val);
}

const jv *mvm_jinja_lookup(jx *st, int32_t sym, jframe **where)
{
    for (jframe *f = st->cur; f; f = f->parent)
        for (size_t i = f->n; i-- > 0;)
            if (f->sym[i] == sym) {
                if (where)
                    *where = f;
                return &f->val[i];
            }
    if (where)
        *where = NULL;
    return st->ctx[sym].t != JV_UNDEF ? &st->ctx[sym] : NULL;
}

/* Binds the targets of a for or set node to v (taken): one name, or v unpacked. */
static mvm_status assign(jx *st, jframe *f, const jnode *n, jv v)
{
    if (!n->unpack)
        return mvm_jinja_frame_set(st, f, n->syms[0], v);
    jlist *items;
    const char *type = jv_type_name(v);
    mvm_status rc = jx_iter(st, v, &items);
    jv_drop(v);
    if (rc != MVM_OK)
        return jx_fail(st, MVM_ERR_INVALID, "cannot unpack non-iterable %s object", type);
    if (items->n != n->nsyms)
        rc = jx_fail(st, MVM_ERR_INVALID, "%s values to unpack (expected %u, got %zu)",
                     items->n > n->nsyms ? "too many" : "not enough", n->nsyms, items->n);
    for (uint32_t i = 0; rc == MVM_OK && i < n->nsyms; i++)
        rc = mvm_jinja_frame_set(st, f, n->syms[i], jv_ref(items->v[i]));
    jv_drop(jv_of_list(items));
    return rc;
}

mvm_status mvm_jinja_capture(jx *st, const jnode *body, jv *out)
{
    jframe f = {.parent = st->cur};
    jbuf b = {0}, *saved_out = st->out;
    jframe *saved_cur = st->cur;
    st->out = &b;
    st->cur = &f;
    int flow = JX_NEXT;
    mvm_status rc = jbuf_put(st, &b, "", 0);
    if (rc == MVM_OK)
        rc = mvm_jinja_exec(st, body, &flow);
    st->out = saved_out;
    st->cur = saved_cur;
    frame_free(&f);
    return jbuf_finish(st, &b, rc, out);
}

/* The items a loop runs over: the iterable's, less those its `if` rejects (evaluated with
 * the targets bound, without `loop`). */
static mvm_status loop_items(jx *st, const jnode *n, jlist **out)
{
    jv seq;
    mvm_status rc = jx_eval(st, n->a, &seq);
    if (rc != MVM_OK)
        return rc;
    st->line = n->line;
    rc = jx_iter(st, seq, out);
    jv_drop(seq);
    if (rc != MVM_OK || !n->b)
        return rc;
    jlist *all = *out, *kept = jlist_new(JL_LIST, all->n);
    jframe f = {.parent = st->cur};
    st->cur = &f;
    for (size_t i = 0; kept && rc == MVM_OK && i < all->n; i++) {
        frame_clear(&f);
        jv c;
        rc = assign(st, &f, n, jv_ref(all->v[i]));
        if (rc == MVM_OK)
            rc = jx_eval(st, n->b, &c);
        if (rc == MVM_OK) {
            if (jv_truthy(c))
                kept->v[kept->n++] = jv_ref(all->v[i]);
            jv_drop(c);
        }
    }
    st->cur = f.parent;
    frame_free(&f);
    if (kept)
        kept->h.depth = all->h.depth;
    jv_drop(jv_of_list(all));
    if (!kept && rc == MVM_OK)
        rc = jx_nomem();
    if (rc != MVM_OK && kept)
        jv_drop(jv_of_list(kept));
    *out = rc == MVM_OK ? kept : NULL;
    return rc;
}

/* A break or continue in the loop's else body is the enclosing loop's (*outer_flow), as in
 * the Python jinja2 generates. */
static mvm_status exec_for(jx *st, const jnode *n, int *outer_flow)
{
    jlist *items;
    mvm_status rc = loop_items(st, n, &items);
    if (rc != MVM_OK)
        return rc;
    jloop *lp = NULL;
    if (st->t->sym_loop >= 0 && items->n) {
        lp = calloc(1, sizeof *lp);
        if (!lp) {
            jv_drop(jv_of_list(items));
            return jx_nomem();
        }
        lp->h.rc = 1;
        lp->seq = items;
        items->h.rc++;
    }
    jframe f = {.parent = st->cur};
    st->cur = &f;
    int flow = JX_NEXT;
    for (size_t i = 0; rc == MVM_OK && flow != JX_BREAK && i < items->n; i++) {
        frame_clear(&f);
        rc = mvm_jinja_step(st);
        if (rc == MVM_OK)
            rc = assign(st, &f, n, jv_ref(items->v[i]));
        if (rc == MVM_OK && lp) {
            lp->i = i;
            rc = mvm_jinja_frame_set(st, &f, st->t->sym_loop,
                                     jv_ref((jv){.t = JV_LOOP, .u.lp = lp}));
        }
        flow = JX_NEXT;
        if (rc == MVM_OK)
            rc = mvm_jinja_exec(st, n->c, &flow);
    }
    st->cur = f.parent;
    frame_free(&f);
    if (lp)
        jv_drop((jv){.t = JV_LOOP, .u.lp = lp});
    if (rc == MVM_OK && items->n == 0 && n->d) {
        jframe e = {.parent = st->cur};
        st->cur = &e;
        rc = mvm_jinja_exec(st, n->d, outer_flow);
        st->cur = e.parent;
        frame_free(&e);
    }
    jv_drop(jv_of_list(items));
    return rc;
}

static mvm_status exec_set(jx *st, const jnode *n)
{
    jv v;
    mvm_status rc;
    if (n->kind == JN_SETBLOCK) {
        jv body;
        rc = mvm_jinja_capture(st, n->b, &body);
        if (rc == MVM_OK && n->a) {
            rc = mvm_jinja_apply_filters(st, n->a, body, &v);
            jv_drop(body);
        } else {
            v = body;
        }
    } else {
        rc = jx_eval(st, n->a, &v);
    }
    if (rc != MVM_OK)
        return rc;
    st->line = n->line;
    if (n->lit.t != JV_STR)
        return assign(st, st->cur ? st->cur : st->root, n, v);
    const jv *ns = mvm_jinja_lookup(st, n->sym, NULL);
    if (!ns || ns->t != JV_NS) {
        jv_drop(v);
        return jx_fail(st, MVM_ERR_INVALID, "cannot assign attribute on non-namespace object");
    }
    return jns_set(st, ns->u.ns, n->lit.u.s->s, v);
}

mvm_status mvm_jinja_call_macro(jx *st, const jnode *m, jframe *scope, const jargs *a, jv *out)
{
    const char *name = m->lit.u.s->s;
    if (st->calls >= JX_MAX_CALLS)
        return jx_fail(st, MVM_ERR_RANGE, "macro calls nested deeper than %d", JX_MAX_CALLS);
    mvm_status rc = mvm_jinja_step(st);
    if (rc == MVM_OK && a->npos > m->nsyms)
        rc = jx_fail(st, MVM_ERR_INVALID, "macro '%s' takes not more than %u argument(s)", name,
                     m->nsyms);
    if (rc != MVM_OK)
        return rc;
    jframe f = {.parent = scope ? scope : st->root};
    for (size_t i = 0; rc == MVM_OK && i < a->npos; i++)
        rc = mvm_jinja_frame_set(st, &f, m->syms[i], jv_ref(a->pos[i]));
    uint64_t given = a->npos >= 64 ? ~0ull : (1ull << a->npos) - 1;
    for (size_t k = 0; rc == MVM_OK && k < a->nkw; k++) {
        uint32_t i = 0;
        while (i < m->nsyms && strcmp(st->t->syms[m->syms[i]], a->kwn[k]) != 0)
            i++;
        if (i == m->nsyms)
            rc = jx_fail(st, MVM_ERR_INVALID, "macro '%s' takes no keyword argument '%s'", name,
                         a->kwn[k]);
        else if (given & (1ull << i))
            rc = jx_fail(st, MVM_ERR_INVALID, "macro '%s' got multiple values for argument '%s'",
                         name, a->kwn[k]);
        else
            rc = mvm_jinja_frame_set(st, &f, m->syms[i], jv_ref(a->kwv[k])), given |= 1ull << i;
    }
    jframe *saved = st->cur;
    st->cur = &f;
    st->calls++;
    /* Defaults, in order, in the macro's frame: one may name the parameters before it. */
    for (uint32_t i = 0; rc == MVM_OK && i < m->nsyms; i++) {
        if (given & (1ull << i))
            continue;
        uint32_t first_default = m->nsyms - m->nkids;
        jv v = jv_hint(JU_NAME, 0, st->t->syms[m->syms[i]]);
        if (i >= first_default)
            rc = jx_eval(st, m->kids[i - first_default], &v);
        if (rc == MVM_OK)
            rc = mvm_jinja_frame_set(st, &f, m->syms[i], v);
    }
    jbuf b = {0}, *saved_out = st->out;
    st->out = &b;
    int flow = JX_NEXT;
    if (rc == MVM_OK)
        rc = jbuf_put(st, &b, "", 0);
    if (rc == MVM_OK)
        rc = mvm_jinja_exec(st, m->b, &flow);
    st->out = saved_out;
    st->cur = saved;
    st->calls--;
    frame_free(&f);
    return jbuf_finish(st, &b, rc, out);
}

static mvm_status exec_print(jx *st, const jnode *n)
{
    jv v;
    mvm_status rc = jx_eval(st, n->a, &v);
    if (rc != MVM_OK)
        return rc;
    rc = jx_write_str(st, st->out, v);
    jv_drop(v);
    return rc;
}

mvm_status mvm_jinja_exec(jx *st, const jnode *n, int *flow)
{
    jv v;
    mvm_status rc = MVM_OK;
    st->line = n->line;
    switch (n->kind) {
    case JN_BODY:
        for (uint32_t i = 0; rc == MVM_OK && *flow == JX_NEXT && i < n->nkids; i++)
            rc = mvm_jinja_exec(st, n->kids[i], flow);
        return rc;
    case JN_TEXT: return jbuf_put(st, st->out, n->lit.u.s->s, n->lit.u.s->len);
    case JN_PRINT: return exec_print(st, n);
    case JN_IF: {
        if ((rc = jx_eval(st, n->a, &v)) != MVM_OK)
            return rc;
        int yes = jv_truthy(v);
        jv_drop(v);
        if (yes)
            return mvm_jinja_exec(st, n->b, flow);
        return n->c ? mvm_jinja_exec(st, n->c, flow) : MVM_OK;
    }
    case JN_FOR: return exec_for(st, n, flow);
    case JN_SET: case JN_SETNS: case JN_SETBLOCK: return exec_set(st, n);
    case JN_MACRO:
        return mvm_jinja_frame_set(st, st->cur ? st->cur : st->root, n->sym,
                                   (jv){.t = JV_MACRO, .u.macro = n});
    case JN_FBLOCK: case JN_SCOPE: {
        jv body, res;
        if ((rc = mvm_jinja_capture(st, n->b, &body)) != MVM_OK)
            return rc;
        if (n->kind == JN_FBLOCK) {
            rc = mvm_jinja_apply_filters(st, n->a, body, &res);
            jv_drop(body);
            if (rc != MVM_OK)
                return rc;
            body = res;
        }
        rc = jx_write_str(st, st->out, body);
        jv_drop(body);
        return rc;
    }
    case JN_BREAK: *flow = JX_BREAK; return MVM_OK;
    case JN_CONTINUE: *flow = JX_CONTINUE; return MVM_OK;
    default: return jx_fail(st, MVM_ERR_INVALID, "an expression where a statement belongs");
    }
}
