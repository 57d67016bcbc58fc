/*
 * The parser's expressions, jinja2's precedence from loosest to tightest: a if b else c;
 * or; and; not; comparisons and in/not in; + -; ~; * / // %; ** (left-associative, as
 * jinja2 has it); unary - + (binding tighter than **: -2**2 is 4); then a primary with its
 * .attr, [item], [a:b:c] and (calls), and |filters and `is` tests.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/chat/jinja_impl.h"

#define jp_fail mvm_jinja_parse_fail
#define is_name mvm_jinja_tok_is
#define is_op mvm_jinja_tok_op

static mvm_status parse_unary(jparser *p, int with_filter, jnode **out);
static mvm_status parse_primary(jparser *p, jnode **out);

static jnode *node2(jparser *p, int kind, int line, jnode *a, jnode *b)
{
    jnode *n = mvm_jinja_node(p, kind, line);
    if (n)
        n->a = a, n->b = b;
    return n;
}

static int tuple_end(jparser *p)
{
    jtok *t = jp_cur(p);
    return t->type == JT_VAR_END || t->type == JT_BLOCK_END || is_op(t, JO_RPAREN);
}

/* Expressions separated by commas: one is itself, several (or a trailing comma) a tuple. */
static mvm_status tuple_ex(jparser *p, int condexpr, int explicit_paren, jnode **out)
{
    int line = jp_cur(p)->line, is_tuple = 0;
    jnodes items = {0};
    mvm_status rc = MVM_OK;
    for (;;) {
        if (items.n) {
            if (!is_op(jp_cur(p), JO_COMMA)) {
                rc = jp_fail(p, "expected ','");
                break;
            }
            p->at++;
        }
        if (tuple_end(p))
            break;
        jnode *n = NULL;
        rc = condexpr ? mvm_jinja_parse_expr(p, &n) : mvm_jinja_parse_or(p, &n);
        if (rc == MVM_OK)
            rc = mvm_jinja_nodes_push(p, &items, n);
        if (rc != MVM_OK || !is_op(jp_cur(p), JO_COMMA))
            break;
        is_tuple = 1;
    }
    if (rc == MVM_OK && !is_tuple) {
        if (items.n) {
            *out = items.v[0];
            free(items.v);
            return MVM_OK;
        }
        if (!explicit_paren)
            rc = jp_fail(p, "expected an expression");
    }
    return mvm_jinja_node_of(p, JN_TUPLE, line, rc, &items, out);
}

mvm_status mvm_jinja_parse_tuple(jparser *p, int condexpr, jnode **out)
{
    return tuple_ex(p, condexpr, 0, out);
}

mvm_status mvm_jinja_parse_expr(jparser *p, jnode **out)
{
    int line = jp_cur(p)->line;
    mvm_status rc = mvm_jinja_parse_or(p, out);
    while (rc == MVM_OK && is_name(p, jp_cur(p), "if")) {
        p->at++;
        jnode *n = mvm_jinja_node(p, JN_COND, line);
        if (!n)
            return jx_nomem();
        n->a = *out;
        rc = mvm_jinja_parse_or(p, &n->b);
        if (rc == MVM_OK && is_name(p, jp_cur(p), "else")) {
            p->at++;
            rc = mvm_jinja_parse_expr(p, &n->c);
        }
        *out = n;
        line = jp_cur(p)->line;
    }
    return rc;
}

static mvm_status parse_not(jparser *p, jnode **out);

static mvm_status parse_and(jparser *p, jnode **out)
{
    mvm_status rc = parse_not(p, out);
    while (rc == MVM_OK && is_name(p, jp_cur(p), "and")) {
        int line = jp_cur(p)->line;
        p->at++;
        jnode *b = NULL;
        rc = parse_not(p, &b);
        if (rc == MVM_OK && !(*out = node2(p, JN_AND, line, *out, b)))
            rc = jx_nomem();
    }
    return rc;
}

mvm_status mvm_jinja_parse_or(jparser *p, jnode **out)
{
    mvm_status rc = parse_and(p, out);
    while (rc == MVM_OK && is_name(p, jp_cur(p), "or")) {
        int line = jp_cur(p)->line;
        p->at++;
        jnode *b = NULL;
        rc = parse_and(p, &b);
        if (rc == MVM_OK && !(*out = node2(p, JN_OR, line, *out, b)))
            rc = jx_nomem();
    }
    return rc;
}

static mvm_status parse_math1(jparser *p, jnode **out);

static mvm_status parse_compare(jparser *p, jnode **out)
{
    int line = jp_cur(p)->line;
    mvm_status rc = parse_math1(p, out);
    jnodes rhs = {0};
    uint8_t ops[64];
    while (rc == MVM_OK) {
        jtok *t = jp_cur(p);
        static const int tok_ops[] = {JO_EQ, JO_NE, JO_LT, JO_LTEQ, JO_GT, JO_GTEQ};
        static const int cmp_ops[] = {JCMP_EQ, JCMP_NE, JCMP_LT, JCMP_LE, JCMP_GT, JCMP_GE};
        int op = -1;
        for (int i = 0; i < 6 && op < 0; i++)
            if (is_op(t, tok_ops[i]))
                op = cmp_ops[i];
        if (op < 0 && is_name(p, t, "in"))
            op = JCMP_IN;
        if (op < 0 && is_name(p, t, "not") && is_name(p, jp_peek(p), "in"))
            op = JCMP_NOTIN, p->at++;
        if (op < 0)
            break;
        if (rhs.n == 64) {
            rc = jp_fail(p, "more than 64 comparisons in a chain");
            break;
        }
        p->at++;
        ops[rhs.n] = (uint8_t)op;
        jnode *b = NULL;
        rc = parse_math1(p, &b);
        if (rc == MVM_OK)
            rc = mvm_jinja_nodes_push(p, &rhs, b);
    }
    if (rc != MVM_OK || !rhs.n) {
        free(rhs.v);
        return rc;
    }
    jnode *n = mvm_jinja_node(p, JN_CMP, line);
    uint8_t *o = n ? mvm_jinja_alloc(&p->t->arena, rhs.n) : NULL;
    if (!o) {
        free(rhs.v);
        return jx_nomem();
    }
    memcpy(o, ops, rhs.n);
    n->a = *out;
    n->ops = o;
    *out = n;
    return mvm_jinja_nodes_done(p, &rhs, &n->kids, &n->nkids);
}

static mvm_status parse_not(jparser *p, jnode **out)
{
    if (!is_name(p, jp_cur(p), "not"))
        return parse_compare(p, out);
    int line = jp_cur(p)->line;
    p->at++;
    if (++p->nest > JX_MAX_NEST)
        return jp_fail(p, "expression nested deeper than %d", JX_MAX_NEST);
    jnode *a = NULL;
    mvm_status rc = parse_not(p, &a);
    p->nest--;
    if (rc == MVM_OK && !(*out = node2(p, JN_NOT, line, a, NULL)))
        rc = jx_nomem();
    return rc;
}

/* A left-associative level: operands from `next`, operators tok[i] -> binop[i]. */
typedef mvm_status (*level_fn)(jparser *, jnode **);
static mvm_status binary_level(jparser *p, level_fn next, const int *tok, const int *binop,
                               int n, jnode **out)
{
    mvm_status rc = next(p, out);
    for (;;) {
        int op = -1;
        for (int i = 0; i < n && op < 0; i++)
            if (is_op(jp_cur(p), tok[i]))
                op = binop[i];
        if (rc != MVM_OK || op < 0)
            return rc;
        int line = jp_cur(p)->line;
        p->at++;
        jnode *b = NULL;
        rc = next(p, &b);
        jnode *bin = rc == MVM_OK ? node2(p, JN_BIN, line, *out, b) : NULL;
        if (rc == MVM_OK && !bin)
            return jx_nomem();
        if (bin) {
            bin->op = (uint8_t)op;
            *out = bin;
        }
    }
}

static mvm_status parse_unary_filtered(jparser *p, jnode **out) { return parse_unary(p, 1, out); }

static mvm_status parse_pow(jparser *p, jnode **out)
{
    static const int tok[] = {JO_POW}, op[] = {JOP_POW};
    return binary_level(p, parse_unary_filtered, tok, op, 1, out);
}

static mvm_status parse_math2(jparser *p, jnode **out)
{
    static const int tok[] = {JO_MUL, JO_DIV, JO_FLOORDIV, JO_MOD};
    static const int op[] = {JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD};
    return binary_level(p, parse_pow, tok, op, 4, out);
}

static mvm_status parse_concat(jparser *p, jnode **out)
{
    int line = jp_cur(p)->line;
    mvm_status rc = parse_math2(p, out);
    if (rc != MVM_OK || !is_op(jp_cur(p), JO_TILDE))
        return rc;
    jnodes args = {0};
    rc = mvm_jinja_nodes_push(p, &args, *out);
    while (rc == MVM_OK && is_op(jp_cur(p), JO_TILDE)) {
        p->at++;
        jnode *b = NULL;
        rc = parse_math2(p, &b);
        if (rc == MVM_OK)
            rc = mvm_jinja_nodes_push(p, &args, b);
    }
    jnode *n = rc == MVM_OK ? mvm_jinja_node(p, JN_CONCAT, line) : NULL;
    if (!n) {
        free(args.v);
        return rc == MVM_OK ? jx_nomem() : rc;
    }
    *out = n;
    return mvm_jinja_nodes_done(p, &args, &n->kids, &n->nkids);
}

static mvm_status parse_math1(jparser *p, jnode **out)
{
    static const int tok[] = {JO_ADD, JO_SUB}, op[] = {JOP_ADD, JOP_SUB};
    return binary_level(p, parse_concat, tok, op, 2, out);
}

/* ---- calls, subscripts, filters, tests ------------------------------------------------------ */

/* (args, name=value, ...) into n's kids and kw. */
static mvm_status call_args(jparser *p, jnode *n)
{
    p->at++; /* ( */
    jnodes pos = {0}, kw = {0};
    const char *names[64];
    mvm_status rc = MVM_OK;
    while (rc == MVM_OK && !is_op(jp_cur(p), JO_RPAREN)) {
        if (pos.n + kw.n) {
            if (!is_op(jp_cur(p), JO_COMMA)) {
                rc = jp_fail(p, "expected ',' between arguments");
                break;
            }
            p->at++;
            if (is_op(jp_cur(p), JO_RPAREN))
                break;
        }
        jtok *t = jp_cur(p);
        jnode *v = NULL;
        if (is_op(t, JO_MUL) || is_op(t, JO_POW)) {
            rc = jp_fail(p, "*args and **kwargs in calls are not supported");
        } else if (t->type == JT_NAME && is_op(jp_peek(p), JO_ASSIGN)) {
            if (kw.n == 64) {
                rc = jp_fail(p, "more than 64 keyword arguments");
                break;
            }
            char *name = mvm_jinja_alloc(&p->t->arena, t->len + 1);
            if (!name) {
                rc = jx_nomem();
                break;
            }
            memcpy(name, p->toks->src + t->at, t->len);
            names[kw.n] = name;
            p->at += 2;
            rc = mvm_jinja_parse_expr(p, &v);
            if (rc == MVM_OK)
                rc = mvm_jinja_nodes_push(p, &kw, v);
        } else if (kw.n) {
            rc = jp_fail(p, "invalid syntax for function call expression");
        } else {
            rc = mvm_jinja_parse_expr(p, &v);
            if (rc == MVM_OK)
                rc = mvm_jinja_nodes_push(p, &pos, v);
        }
    }
    if (rc == MVM_OK) {
        p->at++; /* ) */
        n->kwname = kw.n ? mvm_jinja_alloc(&p->t->arena, kw.n * sizeof *names) : NULL;
        if (kw.n && !n->kwname)
            rc = jx_nomem();
    }
    if (rc != MVM_OK) {
        free(pos.v), free(kw.v);
        return rc;
    }
    if (kw.n)
        memcpy((void *)n->kwname, names, kw.n * sizeof *names);
    rc = mvm_jinja_nodes_done(p, &pos, &n->kids, &n->nkids);
    if (rc == MVM_OK)
        rc = mvm_jinja_nodes_done(p, &kw, &n->kw, &n->nkw);
    free(kw.v);
    return rc;
}

/* A filter's or test's name, dotted parts joined, into buf. */
static mvm_status dotted_name(jparser *p, char *buf, size_t cap)
{
    size_t k = 0;
    for (;;) {
        jtok *t = jp_cur(p);
        if (t->type != JT_NAME)
            return jp_fail(p, "expected a filter or test name");
        if (k + t->len + 2 > cap)
            return jp_fail(p, "a filter or test name too long");
        memcpy(buf + k, p->toks->src + t->at, t->len);
        k += t->len;
        p->at++;
        if (!is_op(jp_cur(p), JO_DOT))
            break;
        buf[k++] = '.';
        p->at++;
    }
    buf[k] = 0;
    return MVM_OK;
}

mvm_status mvm_jinja_parse_filter(jparser *p, jnode *operand, int inline_first, jnode **out)
{
    *out = operand;
    while (inline_first || is_op(jp_cur(p), JO_PIPE)) {
        p->at += !inline_first;
        inline_first = 0;
        int line = jp_cur(p)->line;
        char name[64];
        mvm_status rc = dotted_name(p, name, sizeof name);
        if (rc != MVM_OK)
            return rc;
        int id = mvm_jinja_filter_id(name);
        if (id < 0)
            return jp_fail(p, "No filter named '%s'.", name);
        jnode *n = node2(p, JN_FILTER, line, *out, NULL);
        if (!n)
            return jx_nomem();
        n->op = (uint8_t)id;
        if (is_op(jp_cur(p), JO_LPAREN) && (rc = call_args(p, n)) != MVM_OK)
            return rc;
        *out = n;
    }
    return MVM_OK;
}

static mvm_status parse_test(jparser *p, jnode **out)
{
    int line = jp_cur(p)->line;
    p->at++; /* is */
    int negated = is_name(p, jp_cur(p), "not");
    p->at += negated;
    char name[64];
    mvm_status rc = dotted_name(p, name, sizeof name);
    if (rc != MVM_OK)
        return rc;
    int id = mvm_jinja_test_id(name);
    if (id < 0)
        return jp_fail(p, "No test named '%s'.", name);
    jnode *n = node2(p, JN_TEST, line, *out, NULL);
    if (!n)
        return jx_nomem();
    n->op = (uint8_t)id;
    jtok *t = jp_cur(p);
    if (is_op(t, JO_LPAREN)) {
        rc = call_args(p, n);
    } else if ((t->type == JT_NAME || t->type == JT_STRING || t->type == JT_INT ||
                t->type == JT_FLOAT || is_op(t, JO_LBRACKET) || is_op(t, JO_LBRACE)) &&
               !is_name(p, t, "else") && !is_name(p, t, "or") && !is_name(p, t, "and")) {
        if (is_name(p, t, "is"))
            return jp_fail(p, "You cannot chain multiple tests with is");
        jnode *arg = NULL;
        rc = parse_primary(p, &arg);
        n->kids = rc == MVM_OK ? mvm_jinja_alloc(&p->t->arena, sizeof *n->kids) : NULL;
        if (rc == MVM_OK && !n->kids)
            rc = jx_nomem();
        if (rc == MVM_OK)
            n->kids[0] = arg, n->nkids = 1;
    }
    *out = n;
    if (rc == MVM_OK && negated && !(*out = node2(p, JN_NOT, line, n, NULL)))
        rc = jx_nomem();
    return rc;
}

/* [a:b:c]'s bounds after the '['; b NULL where a part is missing. */
static mvm_status slice_part(jparser *p, jnode **part, int more)
{
    jtok *t = jp_cur(p);
    *part = NULL;
    if (is_op(t, JO_RBRACKET) || is_op(t, JO_COMMA) || (more && is_op(t, JO_COLON)))
        return MVM_OK;
    return mvm_jinja_parse_expr(p, part);
}

static mvm_status parse_subscript(jparser *p, jnode **out)
{
    jtok *t = jp_cur(p);
    int line = t->line;
    p->at++;
    if (is_op(t, JO_DOT)) {
        jtok *a = jp_cur(p);
        p->at++;
        if (a->type == JT_NAME) {
            jnode *n = node2(p, JN_ATTR, line, *out, NULL);
            jstr *s = n ? mvm_jinja_const_str(&p->t->arena, p->toks->src + a->at, a->len) : NULL;
            if (!s)
                return jx_nomem();
            n->lit = jv_of_str(s);
            *out = n;
            return MVM_OK;
        }
        if (a->type != JT_INT)
            return jp_fail(p, "expected name or number");
        jnode *k = mvm_jinja_node(p, JN_LIT, line);
        if (!k || !(*out = node2(p, JN_ITEM, line, *out, k)))
            return jx_nomem();
        k->lit = jv_int(a->i);
        return MVM_OK;
    }
    jnode *lo = NULL, *hi = NULL, *step = NULL;
    int slice = 0;
    mvm_status rc = slice_part(p, &lo, 1);
    if (rc == MVM_OK && is_op(jp_cur(p), JO_COLON)) {
        slice = 1;
        p->at++;
        rc = slice_part(p, &hi, 1);
        if (rc == MVM_OK && is_op(jp_cur(p), JO_COLON)) {
            p->at++;
            rc = slice_part(p, &step, 0);
        }
    }
    if (rc != MVM_OK)
        return rc;
    if (!slice && !lo)
        return jp_fail(p, "expected a subscript");
    if (!is_op(jp_cur(p), JO_RBRACKET))
        return jp_fail(p, "expected ']' (subscripts by tuples are not supported)");
    p->at++;
    jnode *n = node2(p, slice ? JN_SLICE : JN_ITEM, line, *out, lo);
    if (!n)
        return jx_nomem();
    n->c = hi, n->d = step;
    *out = n;
    return MVM_OK;
}

static mvm_status postfix(jparser *p, jnode **out, int with_filter)
{
    mvm_status rc = MVM_OK;
    while (rc == MVM_OK) {
        jtok *t = jp_cur(p);
        if (is_op(t, JO_DOT) || is_op(t, JO_LBRACKET)) {
            if (with_filter == 2)
                break;
            rc = parse_subscript(p, out);
        } else if (is_op(t, JO_LPAREN)) {
            jnode *n = node2(p, JN_CALL, t->line, *out, NULL);
            if (!n)
                return jx_nomem();
            rc = call_args(p, n);
            *out = n;
        } else if (with_filter && is_op(t, JO_PIPE)) {
            rc = mvm_jinja_parse_filter(p, *out, 0, out);
        } else if (with_filter && is_name(p, t, "is")) {
            rc = parse_test(p, out);
        } else {
            break;
        }
    }
    return rc;
}

static mvm_status parse_unary(jparser *p, int with_filter, jnode **out)
{
    if (++p->nest > JX_MAX_NEST)
        return jp_fail(p, "expression nested deeper than %d", JX_MAX_NEST);
    jtok *t = jp_cur(p);
    mvm_status rc;
    if (is_op(t, JO_SUB) || is_op(t, JO_ADD)) {
        p->at++;
        jnode *a = NULL;
        rc = parse_unary(p, 0, &a);
        if (rc == MVM_OK && !(*out = node2(p, is_op(t, JO_SUB) ? JN_NEG : JN_POS, t->line, a, NULL)))
            rc = jx_nomem();
    } else {
        rc = parse_primary(p, out);
    }
    if (rc == MVM_OK)
        rc = postfix(p, out, 0);
    if (rc == MVM_OK && with_filter)
        rc = postfix(p, out, 2);
    p->nest--;
    return rc;
}

/* [a, b] and {k: v}: items up to the closer, a trailing comma allowed. */
static mvm_status parse_items(jparser *p, int dict, jnode **out)
{
    int line = jp_cur(p)->line;
    int closer = dict ? JO_RBRACE : JO_RBRACKET;
    p->at++;
    jnodes items = {0};
    mvm_status rc = MVM_OK;
    while (rc == MVM_OK && !is_op(jp_cur(p), closer)) {
        if (items.n) {
            if (!is_op(jp_cur(p), JO_COMMA)) {
                rc = jp_fail(p, "expected ',' between items");
                break;
            }
            p->at++;
            if (is_op(jp_cur(p), closer))
                break;
        }
        jnode *k = NULL, *v = NULL;
        rc = mvm_jinja_parse_expr(p, &k);
        if (rc == MVM_OK)
            rc = mvm_jinja_nodes_push(p, &items, k);
        if (rc == MVM_OK && dict) {
            if (!is_op(jp_cur(p), JO_COLON)) {
                rc = jp_fail(p, "expected ':' after a dict key");
                break;
            }
            p->at++;
            rc = mvm_jinja_parse_expr(p, &v);
            if (rc == MVM_OK)
                rc = mvm_jinja_nodes_push(p, &items, v);
        }
    }
    jnode *n = rc == MVM_OK ? mvm_jinja_node(p, dict ? JN_DICT : JN_LIST, line) : NULL;
    if (!n) {
        free(items.v);
        return rc == MVM_OK ? jx_nomem() : rc;
    }
    p->at++;
    *out = n;
    return mvm_jinja_nodes_done(p, &items, &n->kids, &n->nkids);
}

/* Adjacent string literals, joined. */
static mvm_status strings(jparser *p, jnode *n)
{
    size_t total = 0, k = p->at;
    for (; p->toks->t[k].type == JT_STRING; k++)
        total += p->toks->t[k].str->len;
    if (k == p->at + 1) {
        n->lit = jv_of_str(jp_cur(p)->str);
        p->at++;
        return MVM_OK;
    }
    char *buf = malloc(total + 1);
    if (!buf)
        return jx_nomem();
    size_t at = 0;
    for (; p->at < k; p->at++) {
        jstr *s = jp_cur(p)->str;
        memcpy(buf + at, s->s, s->len);
        at += s->len;
    }
    jstr *s = mvm_jinja_const_str(&p->t->arena, buf, total);
    free(buf);
    if (!s)
        return jx_nomem();
    n->lit = jv_of_str(s);
    return MVM_OK;
}

static mvm_status parse_primary(jparser *p, jnode **out)
{
    jtok *t = jp_cur(p);
    if (is_op(t, JO_LBRACKET) || is_op(t, JO_LBRACE))
        return parse_items(p, is_op(t, JO_LBRACE), out);
    if (is_op(t, JO_LPAREN)) {
        p->at++;
        mvm_status rc = tuple_ex(p, 1, 1, out);
        if (rc == MVM_OK && !is_op(jp_cur(p), JO_RPAREN))
            return jp_fail(p, "expected ')'");
        p->at += rc == MVM_OK; /* a failure may have stopped at the end: no token past it */
        return rc;
    }
    jnode *n = mvm_jinja_node(p, JN_LIT, t->line);
    if (!n)
        return jx_nomem();
    *out = n;
    switch (t->type) {
    case JT_STRING: return strings(p, n);
    case JT_INT: n->lit = jv_int(t->i); break;
    case JT_FLOAT: n->lit = jv_float(t->f); break;
    case JT_NAME:
        if (is_name(p, t, "true") || is_name(p, t, "True")) {
            n->lit = jv_bool(1);
        } else if (is_name(p, t, "false") || is_name(p, t, "False")) {
            n->lit = jv_bool(0);
        } else if (is_name(p, t, "none") || is_name(p, t, "None")) {
            n->lit = jv_none();
        } else {
            n->kind = JN_NAME;
            n->sym = mvm_jinja_intern(p, p->toks->src + t->at, t->len);
            if (n->sym < 0)
                return jx_nomem();
        }
        break;
    case JT_EOF: return jp_fail(p, "unexpected end of template");
    case JT_VAR_END: case JT_BLOCK_END: return jp_fail(p, "expected an expression");
    default:
        return jp_fail(p, "unexpected '%.*s'", (int)t->len, p->toks->src + t->at);
    }
    p->at++;
    return MVM_OK;
}
