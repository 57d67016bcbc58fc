/*
 * The chat templates' Jinja2 interpreter, shared by its files:
 *   jinja_lex.c      source -> tokens (trim_blocks, lstrip_blocks, whitespace control, raw)
 *   jinja_parse.c    tokens -> statements; jinja_parse_expr.c: expressions
 *   jinja_value.c    values: strings, lists, dicts, namespaces; references; equality, order
 *   jinja_repr.c     str() and repr() as Python prints them; tojson as json.dumps
 *   jinja_unicode.c  UTF-8, Python's case mappings and whitespace (jinja_case.inc)
 *   jinja_str.c      Python's str methods
 *   jinja_exec.c     statements: output, if, for, set, macros; jinja_eval.c: expressions
 *   jinja_call.c     calls: globals, macros, methods; jinja_ops.c: operators
 *   jinja_filters.c, jinja_seq.c (filters over sequences), jinja_tests.c
 *   jinja.c          the API: parse, render (the JSON variables), free
 *
 * The subset (what Hugging Face's chat templates use): {{ }}, {% %}, {# #}, '-' and '+'
 * whitespace control; if/elif/else, for (unpacking, an inline `if`, else, loop.*,
 * break/continue), set (names, tuples, namespace attributes, blocks), macro and calls,
 * raw, filter blocks, generation. Expressions with Python's operators and semantics on
 * none, bool, 64-bit int, float, str, list, tuple, dict, namespace; jinja2's Undefined;
 * the filters of jinja_filters.c/jinja_seq.c, the tests of jinja_tests.c, the str, dict and
 * list methods of jinja_call.c. Not: extends/include/import/block, call blocks, with,
 * recursive loops, loop.changed, a macro's caller/varargs/kwargs, %-formatting, str.format
 * and the filters format/batch/slice/groupby/... (an error when they run), the attributes
 * of numbers (1.5.real), big integers (an overflow is an error), list.pop/clear (the
 * sandbox refuses the other mutating methods, as here). Where jinja2 evaluates lazily
 * (generators), errors come at once here. The variables are cJSON's: a JSON number is an
 * int when integral (1.0 reads as 1), strings end at a NUL.
 *
 * Values are refcounted; lists and dicts never change once built (the sandbox allows no
 * mutation), so only namespaces can form cycles: a render ends by emptying the ones left.
 */
#ifndef MVM_ENGINE_CHAT_JINJA_IMPL_H
#define MVM_ENGINE_CHAT_JINJA_IMPL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/chat/jinja.h"
#include "vmm/error.h"

/* ---- limits ---------------------------------------------------------------------------- */

#define JX_MAX_BYTES (64u << 20) /* any string, the output included */
#define JX_MAX_ITEMS (1u << 22)  /* items of a list or dict */
/* The work of one render, so that no template runs for long: a loop iteration or a macro
 * call is a step, so are 16 items iterated or made and 256 bytes written. */
#define JX_MAX_STEPS 4000000u
#define JX_MAX_CALLS 200         /* macro calls in progress */
#define JX_MAX_DEPTH 500         /* containers inside containers */
#define JX_MAX_NEST 200          /* the parser: blocks and expressions inside each other */
#define JX_MAX_RANGE 100000      /* range()'s length, as the sandbox's MAX_RANGE */

/* ---- values ------------------------------------------------------------------------------ */

typedef enum jv_type {
    JV_UNDEF,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_MACRO, /* a macro of the template (u.macro) */
    JV_STR,   /* from here on: refcounted objects */
    JV_LIST,
    JV_DICT,
    JV_NS,
    JV_FUNC, /* a global function or a bound method */
    JV_LOOP,
} jv_type;

/* What an undefined value says when used (jv.sub; jv.aux the object's type). */
enum { JU_PLAIN, JU_NAME, JU_ATTR, JU_ITEM, JU_UNSAFE, JU_MSG };

typedef struct jhdr {
    int32_t rc;     /* < 0: immortal (the template's constants) */
    uint32_t depth; /* containers: how deep others nest inside */
} jhdr;

typedef struct jstr {
    jhdr h;
    uint8_t markup; /* |safe, |escape: escaping it again is a no-op */
    size_t len;     /* bytes */
    size_t ncp;     /* code points (== len: ASCII) */
    char s[];       /* NUL-terminated */
} jstr;

/* Lists, and what Python has as other types with a list's items. */
enum { JL_LIST, JL_TUPLE, JL_ITER, JL_RANGE, JL_ITEMS, JL_KEYS, JL_VALUES };

struct jv;
typedef struct jlist {
    jhdr h;
    uint8_t kind;
    size_t n, cap;
    size_t pos; /* JL_ITER: items before pos are consumed (a generator is iterated once) */
    struct jv *v;
    int64_t r_start, r_stop, r_step; /* JL_RANGE, for its repr */
} jlist;

typedef struct jdict {
    jhdr h;
    size_t n, cap;
    struct jv *k, *v; /* insertion order */
    uint32_t *idx;    /* open addressing over the entries (+1; 0 empty), past 8 entries */
    size_t icap;
} jdict;

typedef struct jns {
    jhdr h;
    jdict *attrs;
    struct jns *prev, *next; /* the render's live namespaces */
    int busy;                /* being printed: a cycle prints as {...} */
} jns;

struct jfunc;
struct jloop;

typedef struct jv {
    uint8_t t;   /* jv_type */
    uint8_t sub; /* JV_UNDEF: JU_*; JV_BOOL: the value */
    uint8_t aux; /* JV_UNDEF: the type of the object that lacked the attribute */
    union {
        int64_t i;
        double f;
        jhdr *h;
        jstr *s;
        jlist *l;
        jdict *d;
        jns *ns;
        struct jfunc *fn;
        struct jloop *lp;
        const struct jnode *macro;
        const char *hint; /* JV_UNDEF: the name, or the message (JU_MSG) */
    } u;
} jv;

typedef struct jfunc {
    jhdr h;
    int id; /* what it calls: jinja_call.c's JF_* */
    jv self_;
} jfunc;

typedef struct jloop {
    jhdr h;
    size_t i;    /* index0 */
    jlist *seq;  /* the loop's items */
} jloop;

static inline jv jv_undef(void) { return (jv){.t = JV_UNDEF}; }
static inline jv jv_none(void) { return (jv){.t = JV_NONE}; }
static inline jv jv_bool(int b) { return (jv){.t = JV_BOOL, .u.i = b != 0}; }
static inline jv jv_int(int64_t i) { return (jv){.t = JV_INT, .u.i = i}; }
static inline jv jv_float(double f) { return (jv){.t = JV_FLOAT, .u.f = f}; }
static inline jv jv_hint(int sub, int aux, const char *hint)
{
    return (jv){.t = JV_UNDEF, .sub = (uint8_t)sub, .aux = (uint8_t)aux, .u.hint = hint};
}
static inline jv jv_of_str(jstr *s) { return (jv){.t = JV_STR, .u.s = s}; }
static inline jv jv_of_list(jlist *l) { return (jv){.t = JV_LIST, .u.l = l}; }
static inline jv jv_of_dict(jdict *d) { return (jv){.t = JV_DICT, .u.d = d}; }

static inline jv jv_ref(jv v)
{
    if (v.t >= JV_STR && v.u.h->rc >= 0)
        v.u.h->rc++;
    return v;
}
void mvm_jinja_drop(jv v);
#define jv_drop mvm_jinja_drop

/* Python's int-like view of bool and int (1 with *i set), for arithmetic and indices. */
static inline int jv_as_int(jv v, int64_t *i)
{
    if (v.t != JV_INT && v.t != JV_BOOL)
        return 0;
    *i = v.u.i;
    return 1;
}
static inline int jv_is_num(jv v) { return v.t == JV_INT || v.t == JV_BOOL || v.t == JV_FLOAT; }
static inline double jv_num(jv v) { return v.t == JV_FLOAT ? v.u.f : (double)v.u.i; }

/* ---- the render's state ------------------------------------------------------------------ */

typedef struct jbuf {
    char *p;
    size_t n, cap;
} jbuf;

typedef struct jframe {
    struct jframe *parent;
    size_t n, cap;
    int32_t *sym;
    jv *val;
} jframe;

typedef struct jx {
    const struct mvm_jinja *t;
    jv *ctx;          /* per symbol: the variable of `vars`, else the global, else undefined */
    jframe *root;     /* the template's top level: macros see it, not their caller's frames */
    jframe *cur;
    jbuf *out;
    uint64_t steps;
    int calls;
    int line;         /* of what is being evaluated, for messages */
    jns live_ns;      /* the head of the live namespaces' list */
} jx;

/* Fails with "template line L: ..." (st->line). */
mvm_status mvm_jinja_fail(jx *st, mvm_status s, const char *fmt, ...) MVM_PRINTF(3, 4);
#define jx_fail mvm_jinja_fail
mvm_status mvm_jinja_nomem(void);
#define jx_nomem mvm_jinja_nomem

/* ---- strings and buffers (jinja_value.c) -------------------------------------------------- */

jstr *mvm_jinja_str_new(const char *s, size_t len); /* NULL: no memory */
#define jstr_new mvm_jinja_str_new
/* A new string value (NOMEM, or RANGE past JX_MAX_BYTES). */
mvm_status mvm_jinja_str_value(jx *st, const char *s, size_t len, jv *out);
#define jx_strv mvm_jinja_str_value
mvm_status mvm_jinja_buf_put(jx *st, jbuf *b, const char *s, size_t n);
#define jbuf_put mvm_jinja_buf_put
static inline mvm_status jbuf_puts(jx *st, jbuf *b, const char *s);
/* The buffer as a string value; the buffer is emptied. */
mvm_status mvm_jinja_buf_value(jx *st, jbuf *b, jv *out);
#define jbuf_value mvm_jinja_buf_value
/* Ends a buffer written under status rc: its string value when rc is MVM_OK, else the
 * buffer freed and rc returned. */
mvm_status mvm_jinja_buf_finish(jx *st, jbuf *b, mvm_status rc, jv *out);
#define jbuf_finish mvm_jinja_buf_finish

/* ---- lists and dicts ---------------------------------------------------------------------- */

jlist *mvm_jinja_list_new(int kind, size_t cap);
#define jlist_new mvm_jinja_list_new
/* Appends v (taken, dropped on failure). */
mvm_status mvm_jinja_list_push(jx *st, jlist *l, jv v);
#define jlist_push mvm_jinja_list_push
jdict *mvm_jinja_dict_new(void);
#define jdict_new mvm_jinja_dict_new
/* Sets k to v (both taken). TypeError on an unhashable key. */
mvm_status mvm_jinja_dict_set(jx *st, jdict *d, jv k, jv v);
#define jdict_set mvm_jinja_dict_set
/* The value of key k (borrowed) or NULL; *unhashable set when k cannot be a key. */
jv *mvm_jinja_dict_get(const jdict *d, jv k, int *unhashable);
#define jdict_get mvm_jinja_dict_get
jv *mvm_jinja_dict_get_str(const jdict *d, const char *s, size_t len);
#define jdict_gets mvm_jinja_dict_get_str
jns *mvm_jinja_ns_new(jx *st);
#define jns_new mvm_jinja_ns_new
mvm_status mvm_jinja_ns_set(jx *st, jns *ns, const char *name, jv v);
#define jns_set mvm_jinja_ns_set
/* A bound method or global function (self taken). */
mvm_status mvm_jinja_func_value(int id, jv self_, jv *out);
#define jx_funcv mvm_jinja_func_value
/* Every live namespace emptied: breaks the cycles they may form (the render's end). */
void mvm_jinja_ns_release_all(jx *st);

/* ---- Python semantics (jinja_value.c) ------------------------------------------------------ */

int mvm_jinja_truthy(jv v);
#define jv_truthy mvm_jinja_truthy
int mvm_jinja_equal(jv a, jv b);
#define jv_equal mvm_jinja_equal
/* a < b as Python orders: *lt set; TypeError between types Python does not order. */
mvm_status mvm_jinja_less(jx *st, jv a, jv b, int *lt);
#define jv_less mvm_jinja_less
int mvm_jinja_hashable(jv v);
uint64_t mvm_jinja_hash(jv v);
/* Python's type name: 'str', 'dict', 'NoneType', ... */
const char *mvm_jinja_type_name(jv v);
#define jv_type_name mvm_jinja_type_name
/* The items that iterating v gives, as a new list (strings: characters, dicts: keys,
 * undefined: none, generators: the rest, consumed). TypeError when v is not iterable. */
mvm_status mvm_jinja_iterate(jx *st, jv v, jlist **out);
#define jx_iter mvm_jinja_iterate
/* len(v) into *n; TypeError when v has none. */
mvm_status mvm_jinja_len(jx *st, jv v, size_t *n);
#define jx_len mvm_jinja_len

/* ---- str() and repr() (jinja_repr.c) ------------------------------------------------------- */

/* str(v) appended to b: how {{ v }} and ~ print it. */
mvm_status mvm_jinja_write_str(jx *st, jbuf *b, jv v);
#define jx_write_str mvm_jinja_write_str
mvm_status mvm_jinja_write_repr(jx *st, jbuf *b, jv v);
#define jx_write_repr mvm_jinja_write_repr
/* str(v) as a string value (a string is returned with a new reference). */
mvm_status mvm_jinja_to_str(jx *st, jv v, jv *out);
#define jx_to_str mvm_jinja_to_str
/* Python's repr of a float (shortest round trip: 0.1, 1e+16, 1.0) into buf[32]. */
size_t mvm_jinja_float_repr(double f, char *buf);
typedef struct jjson_opts {
    const char *indent; /* NULL: one line */
    const char *item_sep, *key_sep;
    int sort_keys, ascii;
} jjson_opts;
mvm_status mvm_jinja_write_json(jx *st, jbuf *b, jv v, const jjson_opts *o);

/* ---- Unicode and Python's str methods (jinja_unicode.c, jinja_str.c) ----------------------- */

size_t mvm_jinja_utf8_next(const char *s, size_t n, uint32_t *cp); /* bytes of the code point */
size_t mvm_jinja_utf8_put(uint32_t cp, char *out);                 /* 1..4 bytes */
size_t mvm_jinja_utf8_count(const char *s, size_t n);
/* Byte offset of code point index i (0..ncp) of s. */
size_t mvm_jinja_cp_offset(const jstr *s, size_t i);
int mvm_jinja_isspace(uint32_t cp);   /* str.isspace */
int mvm_jinja_isword(uint32_t cp);    /* re's \w */
int mvm_jinja_printable(uint32_t cp); /* str.isprintable */
enum { JCASE_UPPER, JCASE_LOWER, JCASE_TITLE, JCASE_CAPITALIZE, JCASE_TITLE_WORDS };
/* str.upper/lower/title/capitalize of s[0..n) appended to b. */
mvm_status mvm_jinja_case(jx *st, jbuf *b, const char *s, size_t n, int how);
/* The same as a new string value. */
mvm_status mvm_jinja_case_value(jx *st, const char *s, size_t n, int how, jv *out);
/* The str method of that name (-1: none here), then Python's str.method(args) on s. */
int mvm_jinja_str_method_id(const char *name);
struct jargs;
mvm_status mvm_jinja_str_method(jx *st, int id, jstr *s, const struct jargs *a, jv *out);
/* s.strip(chars) (how: 1 left, 2 right, 3 both; chars NULL: whitespace) as a value. */
mvm_status mvm_jinja_strip(jx *st, jstr *s, const jstr *chars, int how, jv *out);
/* s.replace(old, new, count) (count < 0: all). */
mvm_status mvm_jinja_replace(jx *st, jstr *s, const jstr *old, const jstr *new_, int64_t count,
                             jv *out);

/* ---- the template ------------------------------------------------------------------------ */

enum jnode_kind {
    /* expressions */
    JN_LIT,    /* lit */
    JN_NAME,   /* sym */
    JN_LIST,   /* kids: items */
    JN_TUPLE,  /* kids: items */
    JN_DICT,   /* kids: key, value, key, value, ... */
    JN_ATTR,   /* a.lit */
    JN_ITEM,   /* a[b] */
    JN_SLICE,  /* a[b:c:d], each of b, c, d may be NULL */
    JN_CALL,   /* a(kids..., kw...) */
    JN_FILTER, /* a|op(kids..., kw...); a NULL: a filter block's body */
    JN_TEST,   /* a is op(kids...) */
    JN_BIN,    /* a op b */
    JN_NEG,    /* -a */
    JN_POS,    /* +a */
    JN_NOT,    /* not a */
    JN_AND,    /* a and b */
    JN_OR,     /* a or b */
    JN_COND,   /* a if b else c (c NULL: undefined) */
    JN_CONCAT, /* kids[0] ~ kids[1] ~ ... */
    JN_CMP,    /* a ops[0] kids[0] ops[1] kids[1] ... */
    /* statements */
    JN_BODY,     /* kids */
    JN_TEXT,     /* lit */
    JN_PRINT,    /* {{ a }} */
    JN_IF,       /* if a: b (a body) else c (a body, an elif's JN_IF, or NULL) */
    JN_FOR,      /* for syms in a if b: c else d */
    JN_SET,      /* set syms = a */
    JN_SETNS,    /* set sym.lit = a */
    JN_SETBLOCK, /* set syms[0] (or sym.lit when lit is a string) | a: b */
    JN_MACRO,    /* macro sym(syms; kids: the last params' defaults): b; lit its name */
    JN_FBLOCK,   /* filter a: b */
    JN_SCOPE,    /* generation: b in a scope of its own */
    JN_BREAK,
    JN_CONTINUE,
};

enum { JOP_ADD, JOP_SUB, JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD, JOP_POW };
enum { JCMP_EQ, JCMP_NE, JCMP_LT, JCMP_LE, JCMP_GT, JCMP_GE, JCMP_IN, JCMP_NOTIN };

typedef struct jnode jnode;
struct jnode {
    uint8_t kind;
    uint8_t op;     /* JN_BIN, JN_FILTER, JN_TEST */
    uint8_t unpack; /* JN_FOR, JN_SET: the targets are a tuple */
    int32_t line;
    int32_t sym;
    jv lit;
    jnode *a, *b, *c, *d;
    jnode **kids;
    uint32_t nkids;
    jnode **kw; /* keyword arguments' values */
    const char **kwname;
    uint32_t nkw;
    int32_t *syms;
    uint32_t nsyms;
    uint8_t *ops; /* JN_CMP */
};

/* Memory for a template's nodes and constants, freed with it. */
typedef struct jarena {
    struct jchunk *head;
} jarena;
void *mvm_jinja_alloc(jarena *a, size_t n); /* zeroed; NULL: no memory */
/* An immortal string in the arena. */
jstr *mvm_jinja_const_str(jarena *a, const char *s, size_t len);

struct mvm_jinja {
    jnode *root;
    char **syms; /* the names the template uses, by symbol */
    int32_t nsym, capsym;
    int32_t sym_loop; /* "loop", or -1 when the template never names it */
    jarena arena;
};

/* ---- lexing and parsing (jinja_lex.c, jinja_parse*.c) ---------------------------------------- */

enum jtok_type {
    JT_DATA, JT_VAR_BEGIN, JT_VAR_END, JT_BLOCK_BEGIN, JT_BLOCK_END,
    JT_NAME, JT_STRING, JT_INT, JT_FLOAT, JT_OP, JT_EOF,
};
/* Operators, as JT_OP's op. */
enum {
    JO_ADD, JO_SUB, JO_DIV, JO_FLOORDIV, JO_MUL, JO_MOD, JO_POW, JO_TILDE, JO_LBRACKET,
    JO_RBRACKET, JO_LPAREN, JO_RPAREN, JO_LBRACE, JO_RBRACE, JO_EQ, JO_NE, JO_GT, JO_GTEQ,
    JO_LT, JO_LTEQ, JO_ASSIGN, JO_DOT, JO_COLON, JO_PIPE, JO_COMMA, JO_SEMICOLON,
};

typedef struct jtok {
    uint8_t type, op;
    int32_t line;
    size_t at, len; /* JT_DATA, JT_NAME: the text in the (normalised) source */
    jstr *str;      /* JT_STRING: the unescaped value (in the arena) */
    int64_t i;      /* JT_INT */
    double f;       /* JT_FLOAT */
} jtok;

typedef struct jtoks {
    jtok *t;
    size_t n, cap;
    char *src; /* the source with newlines normalised and one trailing newline dropped */
    size_t len;
} jtoks;

mvm_status mvm_jinja_lex(const char *src, size_t len, jarena *arena, jtoks *out);
void mvm_jinja_toks_free(jtoks *t);

typedef struct jparser {
    mvm_jinja *t;
    jtoks *toks;
    size_t at;
    int nest; /* blocks and expressions open */
    int in_loop; /* break/continue allowed */
} jparser;

mvm_status mvm_jinja_parse_fail(jparser *p, const char *fmt, ...) MVM_PRINTF(2, 3);
jnode *mvm_jinja_node(jparser *p, int kind, int line);
int32_t mvm_jinja_intern(jparser *p, const char *s, size_t len); /* -1: no memory */
/* jinja_parse_expr.c */
mvm_status mvm_jinja_parse_expr(jparser *p, jnode **out);          /* with `a if b else c` */
mvm_status mvm_jinja_parse_or(jparser *p, jnode **out);            /* without */
mvm_status mvm_jinja_parse_tuple(jparser *p, int condexpr, jnode **out);
mvm_status mvm_jinja_parse_filter(jparser *p, jnode *operand, int inline_first, jnode **out);
/* Node lists: built in a growing array, then copied into the arena. */
typedef struct jnodes {
    jnode **v;
    size_t n, cap;
} jnodes;
mvm_status mvm_jinja_nodes_push(jparser *p, jnodes *l, jnode *n);
mvm_status mvm_jinja_nodes_done(jparser *p, jnodes *l, jnode ***out, uint32_t *n);
/* A node of `kind` whose kids are l's, when rc (the parse of l) is MVM_OK; l is freed
 * either way. */
mvm_status mvm_jinja_node_of(jparser *p, int kind, int line, mvm_status rc, jnodes *l,
                             jnode **out);
static inline jtok *jp_cur(jparser *p) { return &p->toks->t[p->at]; }
static inline jtok *jp_peek(jparser *p) { return &p->toks->t[p->at + (p->toks->t[p->at].type != JT_EOF)]; }
int mvm_jinja_tok_is(jparser *p, const jtok *t, const char *name); /* a JT_NAME spelled name */
int mvm_jinja_tok_op(const jtok *t, int op);

/* ---- evaluation (jinja_eval.c, jinja_exec.c, jinja_call.c, jinja_ops.c) ------------------- */

typedef struct jargs {
    jv *pos;
    size_t npos;
    jv *kwv;
    const char **kwn;
    size_t nkw;
} jargs;

mvm_status mvm_jinja_eval(jx *st, const jnode *n, jv *out);
#define jx_eval mvm_jinja_eval
/* A filter node applied; a filter block's chain (its innermost operand NULL) to operand. */
mvm_status mvm_jinja_apply_filters(jx *st, const jnode *n, jv operand, jv *out);
/* Evaluates a call's arguments (kids, kw) into a; jx_args_drop releases them. On success
 * st->line is n's, so that what the call raises names the call's line. */
mvm_status mvm_jinja_eval_args(jx *st, const jnode *n, jargs *a);
void mvm_jinja_args_drop(jargs *a);
/* Python's argument binding: positional, then by name; given bit i set for names[i]. Values
 * are borrowed. */
mvm_status mvm_jinja_bind(jx *st, const char *fn, const jargs *a, const char *const *names,
                          size_t n, jv *vals, uint32_t *given);
mvm_status mvm_jinja_binop(jx *st, int op, jv a, jv b, jv *out);
mvm_status mvm_jinja_compare(jx *st, int op, jv a, jv b, int *res);
mvm_status mvm_jinja_contains(jx *st, jv seq, jv item, int *res);
/* obj.name and obj[key], as the sandbox's getattr/getitem. */
mvm_status mvm_jinja_getattr(jx *st, jv obj, const char *name, size_t len, jv *out);
mvm_status mvm_jinja_getitem(jx *st, jv obj, jv key, jv *out);
mvm_status mvm_jinja_slice(jx *st, jv obj, const jv *bounds, jv *out);
/* fn(args): macros, global functions, bound methods. */
mvm_status mvm_jinja_call(jx *st, jv fn, const jargs *a, jv *out);
mvm_status mvm_jinja_call_method(jx *st, jv self_, const char *name, const jargs *a, jv *out);
/* The error that using an undefined value (attribute, item, call, arithmetic) raises. */
mvm_status mvm_jinja_undefined_error(jx *st, jv u);
#define jx_undef_err mvm_jinja_undefined_error
/* Renders body into st->out; returns JX_BREAK/JX_CONTINUE through *flow. */
enum { JX_NEXT, JX_BREAK, JX_CONTINUE };
mvm_status mvm_jinja_exec(jx *st, const jnode *n, int *flow);
/* Renders a body into a new string value, in a frame of its own. */
mvm_status mvm_jinja_capture(jx *st, const jnode *body, jv *out);
/* A macro's frame sees `scope` (the frame that holds the macro, when it is called by its
 * name, which is alive then; else the top level). */
mvm_status mvm_jinja_call_macro(jx *st, const jnode *m, jframe *scope, const jargs *a, jv *out);
mvm_status mvm_jinja_frame_set(jx *st, jframe *f, int32_t sym, jv v); /* v taken */
/* The value of a name (borrowed), or NULL; *where (when not NULL) the frame holding it,
 * NULL for the variables and globals. */
const jv *mvm_jinja_lookup(jx *st, int32_t sym, jframe **where);
/* Counts work against JX_MAX_STEPS: RANGE past it. */
mvm_status mvm_jinja_charge(jx *st, uint64_t steps);
#define mvm_jinja_step(st) mvm_jinja_charge(st, 1)

/* What a JV_FUNC calls (jinja_call.c): the globals, then the methods of dicts, lists and
 * strings (JF_STR + mvm_jinja_str_method_id). */
enum {
    JF_NONE, JF_UNSAFE, /* mvm_jinja_method_id's answers: no such method; one that mutates */
    JF_RANGE, JF_NAMESPACE, JF_DICT, JF_RAISE, JF_STRFTIME, JF_CYCLE,
    JF_ITEMS, JF_KEYS, JF_VALUES, JF_GET, JF_COPY, JF_INDEX, JF_COUNT,
    JF_STR = 64,
};
int mvm_jinja_method_id(jv obj, const char *name);
mvm_status mvm_jinja_loop_attr(jx *st, jloop *lp, const char *name, jv *out);

/* Filters and tests by name (-1: none such), applied to v with arguments a. */
int mvm_jinja_filter_id(const char *name);
int mvm_jinja_test_id(const char *name);
mvm_status mvm_jinja_filter(jx *st, int id, jv v, const jargs *a, jv *out);
mvm_status mvm_jinja_test(jx *st, int id, jv v, const jargs *a, int *res);
/* Filters over sequences (jinja_seq.c), called by mvm_jinja_filter. */
enum {
    JFS_FIRST = 100, JFS_LAST, JFS_LENGTH, JFS_LIST, JFS_JOIN, JFS_REVERSE, JFS_SORT,
    JFS_UNIQUE, JFS_MAP, JFS_SELECT, JFS_REJECT, JFS_SELECTATTR, JFS_REJECTATTR, JFS_ITEMS,
    JFS_DICTSORT, JFS_SUM, JFS_MIN, JFS_MAX,
};
mvm_status mvm_jinja_seq_filter(jx *st, int id, jv v, const jargs *a, jv *out);
/* make_attrgetter: "a.b.0" looked up in item as jinja2 does (getitem per part). */
mvm_status mvm_jinja_attr_path(jx *st, jv item, jv attr, jv *out);
/* str.lower() of a string (others unchanged), for the filters that ignore case. */
mvm_status mvm_jinja_fold(jx *st, jv v, jv *out);

static inline mvm_status jbuf_puts(jx *st, jbuf *b, const char *s)
{
    size_t n = 0;
    while (s[n])
        n++;
    return jbuf_put(st, b, s, n);
}

#endif
