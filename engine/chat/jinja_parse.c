/*
 * The parser's statements, as jinja2's parser.py: text and {{ }} between tags; if/elif/
 * else, for (targets, `if` filter, else), set (a name, a tuple, a namespace attribute, a
 * block with filters), macro, filter blocks, print, break/continue (jinja2.ext.loopcontrols)
 * and generation (Hugging Face's AssistantTracker, which renders its body). The nodes live
 * in the template's arena.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/chat/jinja_impl.h"

/* ---- the arena ------------------------------------------------------------------------------ */

typedef struct jchunk {
    struct jchunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char mem[];
} jchunk;

void *mvm_jinja_alloc(jarena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    jchunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        c = malloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
    }
    void *p = c->mem + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

jstr *mvm_jinja_const_str(jarena *a, const char *s, size_t len)
{
    jstr *str = mvm_jinja_alloc(a, sizeof *str + len + 1);
    if (!str)
        return NULL;
    str->h.rc = -1;
    str->len = len;
    memcpy(str->s, s, len);
    str->s[len] = 0;
    str->ncp = mvm_jinja_utf8_count(s, len);
    return str;
}

static void arena_free(jarena *a)
{
    while (a->head) {
        jchunk *next = a->head->next;
        free(a->head);
        a->head = next;
    }
}

/* ---- helpers --------------------------------------------------------------------------------- */

mvm_status mvm_jinja_parse_fail(jparser *p, const char *fmt, ...)
{
    char where[48];
    snprintf(where, sizeof where, "template line %d", jp_cur(p)->line);
    va_list ap;
    va_start(ap, fmt);
    mvm_failv(MVM_ERR_INVALID, where, fmt, ap);
    va_end(ap);
    return MVM_ERR_INVALID;
}
#define jp_fail mvm_jinja_parse_fail

jnode *mvm_jinja_node(jparser *p, int kind, int line)
{
    jnode *n = mvm_jinja_alloc(&p->t->arena, sizeof *n);
    if (n) {
        n->kind = (uint8_t)kind;
        n->line = line;
        n->sym = -1;
    }
    return n;
}

int32_t mvm_jinja_intern(jparser *p, const char *s, size_t len)
{
    mvm_jinja *t = p->t;
    for (int32_t i = 0; i < t->nsym; i++)
        if (strlen(t->syms[i]) == len && memcmp(t->syms[i], s, len) == 0)
            return i;
    if (t->nsym == t->capsym) {
        int32_t cap = t->capsym ? t->capsym * 2 : 32;
        char **v = realloc(t->syms, (size_t)cap * sizeof *v);
        if (!v)
            return -1;
        t->syms = v;
        t->capsym = cap;
    }
    char *name = mvm_jinja_alloc(&t->arena, len + 1);
    if (!name)
        return -1;
    memcpy(name, s, len);
    t->syms[t->nsym] = name;
    return t->nsym++;
}

mvm_status mvm_jinja_nodes_push(jparser *p, jnodes *l, jnode *n)
{
    (void)p;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        jnode **v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return jx_nomem();
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = n;
    return MVM_OK;
}

mvm_status mvm_jinja_nodes_done(jparser *p, jnodes *l, jnode ***out, uint32_t *n)
{
    *out = NULL;
    *n = (uint32_t)l->n;
    if (l->n) {
        *out = mvm_jinja_alloc(&p->t->arena, l->n * sizeof **out);
        if (*out)
            memcpy(*out, l->v, l->n * sizeof **out);
    }
    free(l->v);
    memset(l, 0, sizeof *l);
    return *n && !*out ? jx_nomem() : MVM_OK;
}

mvm_status mvm_jinja_node_of(jparser *p, int kind, int line, mvm_status rc, jnodes *l,
                             jnode **out)
{
    if (rc == MVM_OK && !(*out = mvm_jinja_node(p, kind, line)))
        rc = jx_nomem();
    if (rc != MVM_OK) {
        free(l->v);
        return rc;
    }
    return mvm_jinja_nodes_done(p, l, &(*out)->kids, &(*out)->nkids);
}

int mvm_jinja_tok_is(jparser *p, const jtok *t, const char *name)
{
    size_t k = strlen(name);
    return t->type == JT_NAME && t->len == k && memcmp(p->toks->src + t->at, name, k) == 0;
}

int mvm_jinja_tok_op(const jtok *t, int op) { return t->type == JT_OP && t->op == op; }

#define is_name mvm_jinja_tok_is
#define is_op mvm_jinja_tok_op

static mvm_status expect_end(jparser *p)
{
    if (jp_cur(p)->type != JT_BLOCK_END)
        return jp_fail(p, "expected the end of the statement");
    p->at++;
    return MVM_OK;
}

static mvm_status name_sym(jparser *p, int32_t *sym)
{
    jtok *t = jp_cur(p);
    if (t->type != JT_NAME)
        return jp_fail(p, "expected a name");
    *sym = mvm_jinja_intern(p, p->toks->src + t->at, t->len);
    p->at++;
    return *sym < 0 ? jx_nomem() : MVM_OK;
}

/* ---- bodies ------------------------------------------------------------------------------ */

static mvm_status parse_statement(jparser *p, jnode **out);

/* Statements up to a tag named one of `ends` (left current), as jinja2's subparse; `what`
 * names the block for the message at the end of the template. */
static mvm_status subparse(jparser *p, const char *const *ends, const char *what, jnode **out)
{
    if (++p->nest > JX_MAX_NEST)
        return jp_fail(p, "blocks nested deeper than %d", JX_MAX_NEST);
    jnodes body = {0};
    mvm_status rc = MVM_OK;
    int line = jp_cur(p)->line;
    for (;;) {
        jtok *t = jp_cur(p);
        jnode *n = NULL;
        if (t->type == JT_EOF) {
            if (ends)
                rc = jp_fail(p, "unexpected end of template: '%s' is not closed", what);
            break;
        }
        if (t->type == JT_DATA) {
            n = mvm_jinja_node(p, JN_TEXT, t->line);
            jstr *s = n ? mvm_jinja_const_str(&p->t->arena, p->toks->src + t->at, t->len) : NULL;
            if (s)
                n->lit = jv_of_str(s);
            rc = s ? MVM_OK : jx_nomem();
            p->at++;
        } else if (t->type == JT_VAR_BEGIN) {
            p->at++;
            n = mvm_jinja_node(p, JN_PRINT, t->line);
            rc = n ? mvm_jinja_parse_tuple(p, 1, &n->a) : jx_nomem();
            if (rc == MVM_OK && jp_cur(p)->type != JT_VAR_END)
                rc = jp_fail(p, "expected the end of the print statement");
            p->at += rc == MVM_OK; /* never past the end */
        } else if (t->type == JT_BLOCK_BEGIN) {
            p->at++;
            int end = 0;
            for (size_t i = 0; ends && ends[i] && !end; i++)
                end = is_name(p, jp_cur(p), ends[i]);
            if (end)
                break;
            rc = parse_statement(p, &n);
            if (rc == MVM_OK)
                rc = expect_end(p);
        } else {
            rc = jp_fail(p, "unexpected '%.*s'", (int)t->len, p->toks->src + t->at);
        }
        if (rc == MVM_OK && n)
            rc = mvm_jinja_nodes_push(p, &body, n);
        if (rc != MVM_OK)
            break;
    }
    p->nest--;
    return mvm_jinja_node_of(p, JN_BODY, line, rc, &body, out);
}

/* `%}` then statements up to one of `ends`; with drop, the end's name is skipped. */
static mvm_status statements(jparser *p, const char *const *ends, int drop, jnode **out)
{
    if (is_op(jp_cur(p), JO_COLON))
        p->at++;
    mvm_status rc = expect_end(p);
    if (rc == MVM_OK)
        rc = subparse(p, ends, ends[0] + 3, out);
    if (rc == MVM_OK && drop)
        p->at++;
    return rc;
}

/* ---- statements -------------------------------------------------------------------------- */

static mvm_status parse_if(jparser *p, jnode *n)
{
    static const char *const ends[] = {"endif", "elif", "else", NULL};
    static const char *const endif[] = {"endif", NULL};
    mvm_status rc = mvm_jinja_parse_tuple(p, 0, &n->a);
    if (rc == MVM_OK)
        rc = statements(p, ends, 0, &n->b);
    if (rc != MVM_OK)
        return rc;
    jtok *t = jp_cur(p);
    p->at++;
    if (is_name(p, t, "elif")) {
        n->c = mvm_jinja_node(p, JN_IF, jp_cur(p)->line);
        return n->c ? parse_if(p, n->c) : jx_nomem();
    }
    if (is_name(p, t, "else"))
        return statements(p, endif, 1, &n->c);
    return MVM_OK;
}

/* Assignment targets: a name, names separated by commas (*unpack set), or those in
 * parentheses; `until` ends them besides a comma ("in" for loops, "=" for set). */
static mvm_status targets(jparser *p, jnode *n, const char *until)
{
    int paren = is_op(jp_cur(p), JO_LPAREN);
    p->at += paren;
    int32_t syms[16];
    uint32_t k = 0;
    for (;;) {
        if (k == 16)
            return jp_fail(p, "more than 16 assignment targets");
        mvm_status rc = name_sym(p, &syms[k]);
        if (rc != MVM_OK)
            return rc;
        k++;
        if (!is_op(jp_cur(p), JO_COMMA))
            break;
        n->unpack = 1;
        p->at++;
        jtok *t = jp_cur(p);
        if ((paren && is_op(t, JO_RPAREN)) || (until[0] == '=' ? is_op(t, JO_ASSIGN)
                                                               : is_name(p, t, until)))
            break;
    }
    if (paren) {
        if (!is_op(jp_cur(p), JO_RPAREN))
            return jp_fail(p, "expected ')' after the targets");
        p->at++;
        n->unpack |= k > 1;
    }
    n->syms = mvm_jinja_alloc(&p->t->arena, k * sizeof *n->syms);
    if (!n->syms)
        return jx_nomem();
    memcpy(n->syms, syms, k * sizeof *syms);
    n->nsyms = k;
    return MVM_OK;
}

static mvm_status parse_for(jparser *p, jnode *n)
{
    static const char *const ends[] = {"endfor", "else", NULL};
    static const char *const endfor[] = {"endfor", NULL};
    mvm_status rc = targets(p, n, "in");
    if (rc != MVM_OK)
        return rc;
    if (!is_name(p, jp_cur(p), "in"))
        return jp_fail(p, "expected 'in' after the loop's targets");
    p->at++;
    rc = mvm_jinja_parse_tuple(p, 0, &n->a);
    if (rc == MVM_OK && is_name(p, jp_cur(p), "if")) {
        p->at++;
        rc = mvm_jinja_parse_expr(p, &n->b);
    }
    if (rc == MVM_OK && is_name(p, jp_cur(p), "recursive"))
        return jp_fail(p, "recursive loops are not supported");
    int in_loop = p->in_loop;
    p->in_loop = 1;
    if (rc == MVM_OK)
        rc = statements(p, ends, 0, &n->c);
    p->in_loop = in_loop;
    if (rc != MVM_OK)
        return rc;
    jtok *t = jp_cur(p);
    p->at++;
    if (is_name(p, t, "else"))
        rc = statements(p, endfor, 1, &n->d);
    return rc;
}

static mvm_status parse_set(jparser *p, jnode *n)
{
    static const char *const endset[] = {"endset", NULL};
    mvm_status rc;
    if (jp_cur(p)->type == JT_NAME && is_op(jp_peek(p), JO_DOT)) {
        rc = name_sym(p, &n->sym);
        p->at++;
        jtok *a = jp_cur(p);
        if (rc == MVM_OK && a->type != JT_NAME)
            rc = jp_fail(p, "expected an attribute name after '.'");
        jstr *s = rc == MVM_OK ? mvm_jinja_const_str(&p->t->arena, p->toks->src + a->at, a->len)
                               : NULL;
        if (rc == MVM_OK && !s)
            rc = jx_nomem();
        if (rc != MVM_OK)
            return rc;
        n->lit = jv_of_str(s);
        p->at++;
        n->kind = JN_SETNS;
    } else {
        rc = targets(p, n, "=");
        n->kind = JN_SET;
    }
    if (rc != MVM_OK)
        return rc;
    if (is_op(jp_cur(p), JO_ASSIGN)) {
        p->at++;
        return mvm_jinja_parse_tuple(p, 1, &n->a);
    }
    if (n->unpack)
        return jp_fail(p, "a block set assigns to one name");
    n->kind = JN_SETBLOCK;
    if (is_op(jp_cur(p), JO_PIPE)) {
        rc = mvm_jinja_parse_filter(p, NULL, 0, &n->a);
        if (rc != MVM_OK)
            return rc;
    }
    if (n->lit.t != JV_STR)
        n->sym = n->syms[0];
    return statements(p, endset, 1, &n->b);
}

static mvm_status parse_macro(jparser *p, jnode *n)
{
    static const char *const endmacro[] = {"endmacro", NULL};
    jtok *name = jp_cur(p);
    mvm_status rc = name_sym(p, &n->sym);
    if (rc != MVM_OK)
        return rc;
    jstr *s = mvm_jinja_const_str(&p->t->arena, p->toks->src + name->at, name->len);
    if (!s)
        return jx_nomem();
    n->lit = jv_of_str(s);
    if (!is_op(jp_cur(p), JO_LPAREN))
        return jp_fail(p, "expected '(' after the macro's name");
    p->at++;
    int32_t params[64];
    jnodes defs = {0};
    uint32_t k = 0;
    while (rc == MVM_OK && !is_op(jp_cur(p), JO_RPAREN)) {
        if (k && !is_op(jp_cur(p), JO_COMMA)) {
            rc = jp_fail(p, "expected ',' between the macro's parameters");
            break;
        }
        p->at += k != 0;
        if (k == 64)
            rc = jp_fail(p, "a macro of more than 64 parameters");
        if (rc == MVM_OK)
            rc = name_sym(p, &params[k]);
        if (rc == MVM_OK && is_op(jp_cur(p), JO_ASSIGN)) {
            jnode *d = NULL;
            p->at++;
            rc = mvm_jinja_parse_expr(p, &d);
            if (rc == MVM_OK)
                rc = mvm_jinja_nodes_push(p, &defs, d);
        } else if (rc == MVM_OK && defs.n) {
            rc = jp_fail(p, "non-default argument follows default argument");
        }
        k++;
    }
    if (rc == MVM_OK) {
        p->at++;
        n->syms = mvm_jinja_alloc(&p->t->arena, (k ? k : 1) * sizeof *n->syms);
        rc = n->syms ? MVM_OK : jx_nomem();
    }
    if (rc != MVM_OK) {
        free(defs.v);
        return rc;
    }
    memcpy(n->syms, params, k * sizeof *params);
    n->nsyms = k;
    rc = mvm_jinja_nodes_done(p, &defs, &n->kids, &n->nkids);
    int in_loop = p->in_loop;
    p->in_loop = 0;
    if (rc == MVM_OK)
        rc = statements(p, endmacro, 1, &n->b);
    p->in_loop = in_loop;
    return rc;
}

static mvm_status parse_print(jparser *p, jnode **out)
{
    jnodes items = {0};
    mvm_status rc = MVM_OK;
    int line = jp_cur(p)->line;
    while (rc == MVM_OK && jp_cur(p)->type != JT_BLOCK_END) {
        if (items.n && !is_op(jp_cur(p), JO_COMMA)) {
            rc = jp_fail(p, "expected ','");
            break;
        }
        p->at += items.n != 0;
        jnode *n = mvm_jinja_node(p, JN_PRINT, line);
        rc = n ? mvm_jinja_parse_expr(p, &n->a) : jx_nomem();
        if (rc == MVM_OK)
            rc = mvm_jinja_nodes_push(p, &items, n);
    }
    if (rc != MVM_OK) {
        free(items.v);
        return rc;
    }
    *out = mvm_jinja_node(p, JN_BODY, line);
    if (!*out) {
        free(items.v);
        return jx_nomem();
    }
    return mvm_jinja_nodes_done(p, &items, &(*out)->kids, &(*out)->nkids);
}

static mvm_status parse_statement(jparser *p, jnode **out)
{
    static const char *const endfilter[] = {"endfilter", NULL};
    static const char *const endgeneration[] = {"endgeneration", NULL};
    static const char *const unsupported[] = {"block", "extends", "include", "import", "from",
                                              "with", "autoescape", "call", NULL};
    jtok *t = jp_cur(p);
    if (t->type != JT_NAME)
        return jp_fail(p, "tag name expected");
    if (is_name(p, t, "print")) {
        p->at++;
        return parse_print(p, out);
    }
    static const struct { const char *name; int kind; } kinds[] = {
        {"if", JN_IF},         {"for", JN_FOR},       {"set", JN_SET},
        {"macro", JN_MACRO},   {"filter", JN_FBLOCK}, {"generation", JN_SCOPE},
        {"break", JN_BREAK},   {"continue", JN_CONTINUE},
    };
    int kind = -1;
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds && kind < 0; i++)
        if (is_name(p, t, kinds[i].name))
            kind = kinds[i].kind;
    if (kind < 0) {
        for (size_t i = 0; unsupported[i]; i++)
            if (is_name(p, t, unsupported[i]))
                return jp_fail(p, "the tag '%s' is not supported", unsupported[i]);
        return jp_fail(p, "Encountered unknown tag '%.*s'", (int)t->len, p->toks->src + t->at);
    }
    if ((kind == JN_BREAK || kind == JN_CONTINUE) && !p->in_loop)
        return jp_fail(p, "'%.*s' outside of a loop", (int)t->len, p->toks->src + t->at);
    jnode *n = mvm_jinja_node(p, kind, t->line);
    if (!n)
        return jx_nomem();
    *out = n;
    p->at++;
    switch (kind) {
    case JN_IF: return parse_if(p, n);
    case JN_FOR: return parse_for(p, n);
    case JN_SET: return parse_set(p, n);
    case JN_MACRO: return parse_macro(p, n);
    case JN_FBLOCK: {
        mvm_status rc = mvm_jinja_parse_filter(p, NULL, 1, &n->a);
        return rc == MVM_OK ? statements(p, endfilter, 1, &n->b) : rc;
    }
    case JN_SCOPE: return statements(p, endgeneration, 1, &n->b);
    default: return MVM_OK;
    }
}

/* ---- the API ------------------------------------------------------------------------------ */

void mvm_jinja_free(mvm_jinja *t)
{
    if (!t)
        return;
    free(t->syms);
    arena_free(&t->arena);
    free(t);
}

mvm_status mvm_jinja_parse(const char *src, size_t len, mvm_jinja **out)
{
    if (!out || (!src && len))
        return mvm_fail(MVM_ERR_INVALID, "mvm_jinja_parse: NULL argument");
    *out = NULL;
    mvm_jinja *t = calloc(1, sizeof *t);
    if (!t)
        return jx_nomem();
    jtoks toks;
    mvm_status rc = mvm_jinja_lex(src ? src : "", len, &t->arena, &toks);
    if (rc == MVM_OK) {
        jparser p = {.t = t, .toks = &toks};
        rc = subparse(&p, NULL, NULL, &t->root);
    }
    mvm_jinja_toks_free(&toks);
    t->sym_loop = -1;
    for (int32_t i = 0; i < t->nsym; i++)
        if (strcmp(t->syms[i], "loop") == 0)
            t->sym_loop = i;
    if (rc != MVM_OK) {
        mvm_jinja_free(t);
        return rc;
    }
    *out = t;
    return MVM_OK;
}
