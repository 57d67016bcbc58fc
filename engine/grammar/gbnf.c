/*
 * The GBNF parser: llama.cpp's grammar format (its grammars/README.md) into the rule
 * encoding of grammar_impl.h, as llama-grammar.cpp's parser builds it, so that a grammar
 * written for llama.cpp means the same here:
 *
 *   name ::= alternates          a rule; `root` is where a sentence starts
 *   "text"  [a-z0-9_]  [^"\\]  . a literal, a class, a negated class, any character
 *   ( ... )  a | b               a group (a helper rule), alternatives
 *   x*  x+  x?  x{m}  x{m,}  x{m,n}   repetitions, rewritten into helper rules
 *   # comment                    to the end of the line
 *
 * Escapes: \n \r \t \\ \" \[ \] \- \xHH \uHHHH \UHHHHHHHH. A rule ends at a newline
 * outside parentheses. What llama.cpp's parser refuses is refused here, with the line and
 * column: an undefined rule, a repetition of nothing, more than 2000 repetitions (its
 * MAX_REPETITION_THRESHOLD), and left recursion (the matcher would loop); and, which
 * llama.cpp's would overflow its stack on, groups nested over 2048 deep. Token
 * references (`<[id]>`, `<think>`), llama.cpp's newest addition, are refused by name.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/grammar_impl.h"
#include "vmm/error.h"

#define MAX_REPETITION 2000u    /* llama.cpp's MAX_REPETITION_THRESHOLD */
#define MAX_RULES (1u << 16)    /* beyond any real grammar; keeps checks' work bounded */
#define MAX_ELEMS (1u << 22)
#define MAX_NESTING 2048u       /* groups in groups: each a level of the parser's recursion */

typedef struct evec {
    gr_elem *v;
    uint32_t n, cap;
} evec;

typedef struct parser {
    const char *src;
    struct sym {
        const char *name; /* into src; NULL for a helper rule */
        uint32_t len;
        uint32_t owner;   /* the named rule a helper was made for (errors name it) */
    } *syms;
    uint32_t current; /* the named rule being parsed */
    uint32_t depth;   /* groups open */
    uint32_t n_syms, cap;
    evec *rules;      /* rules[id]; n == 0 while undefined */
    uint32_t n_elems; /* over every rule, bounded by MAX_ELEMS */
    mvm_status status;
} parser;

/* Records the first fault, with where it is; returns NULL for the callers to pass up. */
static const char *fail(parser *p, const char *at, const char *fmt, ...)
{
    if (p->status != MVM_OK)
        return NULL;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!at) {
        p->status = mvm_fail(MVM_ERR_INVALID, "grammar: %s", msg);
        return NULL;
    }
    unsigned line = 1, col = 1;
    for (const char *c = p->src; c < at; c++)
        col = *c == '\n' ? (line++, 1) : col + 1;
    p->status = mvm_fail(MVM_ERR_INVALID, "grammar: line %u, column %u: %s", line, col, msg);
    return NULL;
}

static const char *nomem(parser *p)
{
    if (p->status == MVM_OK)
        p->status = mvm_fail(MVM_ERR_NOMEM, "grammar: no memory");
    return NULL;
}

static int push(parser *p, evec *r, uint32_t type, uint32_t value)
{
    if (++p->n_elems > MAX_ELEMS) {
        fail(p, NULL, "over %u elements: the grammar is too large", MAX_ELEMS);
        return 0;
    }
    if (r->n == r->cap) {
        uint32_t cap = r->cap ? 2 * r->cap : 16;
        gr_elem *v = realloc(r->v, cap * sizeof *v);
        if (!v)
            return nomem(p), 0;
        r->v = v, r->cap = cap;
    }
    r->v[r->n++] = (gr_elem){type, value};
    return 1;
}

/* A new symbol (name NULL: a helper rule); UINT32_MAX on failure. */
static uint32_t new_symbol(parser *p, const char *name, uint32_t len)
{
    if (p->n_syms == MAX_RULES) {
        fail(p, name, "over %u rules: the grammar is too large", MAX_RULES);
        return UINT32_MAX;
    }
    if (p->n_syms == p->cap) {
        uint32_t cap = p->cap ? 2 * p->cap : 32;
        struct sym *s = realloc(p->syms, cap * sizeof *s);
        evec *r = s ? realloc(p->rules, cap * sizeof *r) : NULL;
        if (s)
            p->syms = s;
        if (!r)
            return nomem(p), UINT32_MAX;
        memset(r + p->cap, 0, (cap - p->cap) * sizeof *r);
        p->rules = r, p->cap = cap;
    }
    p->syms[p->n_syms] = (struct sym){name, len, name ? p->n_syms : p->current};
    return p->n_syms++;
}

static uint32_t symbol_id(parser *p, const char *name, uint32_t len)
{
    for (uint32_t i = 0; i < p->n_syms; i++)
        if (p->syms[i].name && p->syms[i].len == len && !memcmp(p->syms[i].name, name, len))
            return i;
    return new_symbol(p, name, len);
}

/* Gives rule id its elements (a later definition replaces an earlier, as in llama.cpp). */
static void set_rule(parser *p, uint32_t id, evec *r)
{
    p->n_elems -= p->rules[id].n;
    free(p->rules[id].v);
    p->rules[id] = *r;
    *r = (evec){0};
}

static int is_word_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-';
}

static const char *skip_space(const char *s, int newline_ok)
{
    while (*s == ' ' || *s == '\t' || *s == '#' || (newline_ok && (*s == '\r' || *s == '\n')))
        if (*s == '#')
            while (*s && *s != '\r' && *s != '\n')
                s++;
        else
            s++;
    return s;
}

static const char *parse_hex(parser *p, const char *s, int digits, uint32_t *out)
{
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return fail(p, s, "expecting %d hex digits", digits);
        v = v << 4 | (uint32_t)d;
    }
    *out = v;
    return s + digits;
}

/* One UTF-8 character as llama.cpp decodes a grammar's text (a malformed sequence is taken
 * as far as it goes, never past the end). */
static const char *decode_one(const char *s, uint32_t *out)
{
    static const int len_of[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    uint8_t first = (uint8_t)*s;
    int len = len_of[first >> 4];
    uint32_t v = first & ((1u << (8 - len)) - 1);
    const char *end = s + len, *c = s + 1;
    for (; c < end && *c; c++)
        v = (v << 6) + ((uint8_t)*c & 0x3F);
    *out = v;
    return c;
}

static const char *parse_char(parser *p, const char *s, uint32_t *out)
{
    if (*s != '\\') {
        if (!*s)
            return fail(p, s, "unexpected end of input");
        return decode_one(s, out);
    }
    switch (s[1]) {
    case 'x': return parse_hex(p, s + 2, 2, out);
    case 'u': return parse_hex(p, s + 2, 4, out);
    case 'U': return parse_hex(p, s + 2, 8, out);
    case 't': *out = '\t'; return s + 2;
    case 'r': *out = '\r'; return s + 2;
    case 'n': *out = '\n'; return s + 2;
    case '\\': case '"': case '[': case ']': case '-': *out = (uint8_t)s[1]; return s + 2;
    default: return fail(p, s, "unknown escape '\\%c'", s[1] ? s[1] : '0');
    }
}

/* S{min,max} after its elements rule[first..): llama.cpp's rewrite, S repeated min times
 * then a chain of max - min optional helper rules (one right-recursive helper when max
 * is unbounded, UINT32_MAX). n_prev counts the rules S stands for, so that nested
 * repetitions that would multiply into millions of rules are refused. */
static int repeat(parser *p, const char *at, evec *rule, uint32_t first, uint32_t min,
                  uint32_t max, uint64_t *n_prev)
{
    const int unbounded = max == UINT32_MAX;
    if (first == rule->n)
        return fail(p, at, "expecting something before the repetition"), 0;
    uint64_t total = !unbounded && max > 0 ? max : min > 0 ? min : 1;
    if (*n_prev * total > MAX_REPETITION)
        return fail(p, at, "repetitions that would make over %u rules", MAX_REPETITION), 0;
    evec sym = {.n = rule->n - first};
    if (!(sym.v = malloc(sym.n * sizeof *sym.v)))
        return nomem(p), 0;
    memcpy(sym.v, rule->v + first, sym.n * sizeof *sym.v);
    if (min == 0)
        p->n_elems -= rule->n - first, rule->n = first;
    for (uint32_t k = 1; k < min; k++)
        for (uint32_t i = 0; i < sym.n; i++)
            if (!push(p, rule, sym.v[i].type, sym.v[i].value))
                return free(sym.v), 0;
    uint32_t n_opt = unbounded ? 1 : max - min, last = 0;
    for (uint32_t k = 0; k < n_opt; k++) {
        uint32_t id = new_symbol(p, NULL, 0);
        evec rec = {0};
        int ok = id != UINT32_MAX;
        for (uint32_t i = 0; ok && i < sym.n; i++)
            ok = push(p, &rec, sym.v[i].type, sym.v[i].value);
        if (ok && (k > 0 || unbounded))
            ok = push(p, &rec, GR_RULE_REF, unbounded ? id : last);
        ok = ok && push(p, &rec, GR_ALT, 0) && push(p, &rec, GR_END, 0);
        if (!ok)
            return free(rec.v), free(sym.v), 0;
        set_rule(p, id, &rec);
        last = id;
    }
    free(sym.v);
    if (n_opt > 0 && !push(p, rule, GR_RULE_REF, last))
        return 0;
    *n_prev *= total;
    return 1;
}

static const char *parse_alternates(parser *p, const char *s, uint32_t id, int nested);

/* Digits into *v (saturating past the limits that matter); NULL when there are none. */
static const char *parse_count(const char *s, unsigned long *v)
{
    const char *d = s;
    for (*v = 0; *s >= '0' && *s <= '9'; s++)
        *v = *v > 1000000 ? *v : *v * 10 + (unsigned long)(*s - '0');
    return s == d ? NULL : s;
}

/* "{m}", "{m,}" or "{m,n}" after the '{'. */
static const char *parse_braces(parser *p, const char *s, int nested, uint32_t *min,
                                uint32_t *max)
{
    unsigned long lo, hi = ULONG_MAX;
    const char *q = parse_count(s, &lo);
    if (!q)
        return fail(p, s, "expecting an integer");
    s = skip_space(q, nested);
    if (*s == '}') {
        hi = lo;
    } else if (*s == ',') {
        s = skip_space(s + 1, nested);
        unsigned long v;
        if ((q = parse_count(s, &v)))
            s = skip_space(q, nested), hi = v;
        if (*s != '}')
            return fail(p, s, "expecting '}'");
    } else {
        return fail(p, s, "expecting ',' or '}'");
    }
    if (lo > MAX_REPETITION)
        return fail(p, s, "over %u repetitions", MAX_REPETITION);
    if (hi < lo)
        return fail(p, s, "a repetition {%lu,%lu} whose maximum is below its minimum", lo, hi);
    *min = (uint32_t)lo;
    *max = hi > MAX_REPETITION ? UINT32_MAX : (uint32_t)hi; /* as llama.cpp: no maximum */
    return skip_space(s + 1, nested);
}

/* A literal "..." or a class [...] after its opening character. */
static const char *parse_chars(parser *p, const char *s, evec *rule, int nested, int literal)
{
    uint32_t first = rule->n, type = GR_CHAR;
    if (!literal && *s == '^')
        s++, type = GR_CHAR_NOT;
    const char close = literal ? '"' : ']';
    while (*s != close) {
        uint32_t c;
        if (!(s = parse_char(p, s, &c)))
            return NULL;
        uint32_t t = literal ? GR_CHAR : rule->n > first ? GR_CHAR_ALT : type;
        if (!push(p, rule, t, c))
            return NULL;
        if (!literal && s[0] == '-' && s[1] != ']') {
            if (!(s = parse_char(p, s + 1, &c)) || !push(p, rule, GR_CHAR_RNG_UPPER, c))
                return NULL;
        }
    }
    if (!literal && rule->n == first) /* llama.cpp takes [] and then cannot match it */
        return fail(p, s, "an empty character class []");
    return skip_space(s + 1, nested);
}

static const char *parse_sequence(parser *p, const char *s, evec *rule, int nested)
{
    uint32_t last_start = rule->n;
    uint64_t n_prev = 1;
    while (s && *s) {
        const char *at = s;
        uint32_t min = 0, max = UINT32_MAX;
        if (*s == '"' || *s == '[') {
            last_start = rule->n, n_prev = 1;
            s = parse_chars(p, s + 1, rule, nested, *s == '"');
        } else if (is_word_char(*s)) {
            const char *end = s;
            while (is_word_char(*end))
                end++;
            uint32_t id = symbol_id(p, s, (uint32_t)(end - s));
            last_start = rule->n, n_prev = 1;
            s = id == UINT32_MAX || !push(p, rule, GR_RULE_REF, id) ? NULL
                                                                     : skip_space(end, nested);
        } else if (*s == '(') {
            if (p->depth == MAX_NESTING)
                return fail(p, s, "groups nested over %u deep", MAX_NESTING);
            uint32_t before = p->n_syms, id = new_symbol(p, NULL, 0);
            p->depth++;
            s = id == UINT32_MAX ? NULL : parse_alternates(p, skip_space(s + 1, 1), id, 1);
            p->depth--;
            if (!s)
                return NULL;
            n_prev = p->n_syms - before;
            last_start = rule->n;
            if (*s != ')')
                return fail(p, s, "expecting ')'");
            s = push(p, rule, GR_RULE_REF, id) ? skip_space(s + 1, nested) : NULL;
        } else if (*s == '.') {
            last_start = rule->n, n_prev = 1;
            s = push(p, rule, GR_CHAR_ANY, 0) ? skip_space(s + 1, nested) : NULL;
        } else if (*s == '<' || *s == '!') {
            return fail(p, s, "token references (<...>, !<...>) are not supported");
        } else if (*s == '*' || *s == '+' || *s == '?' || *s == '{') {
            if (*s == '{')
                s = parse_braces(p, skip_space(s + 1, nested), nested, &min, &max);
            else
                min = *s == '+', max = *s == '?' ? 1 : UINT32_MAX,
                s = skip_space(s + 1, nested);
            if (s && !repeat(p, at, rule, last_start, min, max, &n_prev))
                return NULL;
        } else {
            break;
        }
    }
    return s;
}

static const char *parse_alternates(parser *p, const char *s, uint32_t id, int nested)
{
    evec rule = {0};
    s = parse_sequence(p, s, &rule, nested);
    while (s && *s == '|') {
        if (!push(p, &rule, GR_ALT, 0))
            s = NULL;
        else
            s = parse_sequence(p, skip_space(s + 1, 1), &rule, nested);
    }
    if (s && push(p, &rule, GR_END, 0))
        set_rule(p, id, &rule);
    else
        s = NULL;
    free(rule.v);
    return s;
}

static const char *parse_rule(parser *p, const char *s)
{
    const char *end = s;
    while (is_word_char(*end))
        end++;
    if (end == s)
        return fail(p, s, "expecting a rule name");
    const char *q = skip_space(end, 0);
    if (strncmp(q, "::=", 3) != 0)
        return fail(p, q, "expecting ::= after the rule name");
    uint32_t id = symbol_id(p, s, (uint32_t)(end - s));
    p->current = id;
    if (id == UINT32_MAX || !(q = parse_alternates(p, skip_space(q + 3, 1), id, 0)))
        return NULL;
    if (*q == '\r')
        q += q[1] == '\n' ? 2 : 1;
    else if (*q == '\n')
        q++;
    else if (*q)
        return fail(p, q, "expecting the end of the line");
    return skip_space(q, 1);
}

/* Whether rule r may match the empty text, and left recursion (a rule reachable from its
 * own start without a character between): llama.cpp's check, with an explicit stack so
 * that long chains of rules cannot overflow the C stack. Returns the first rule found in
 * a left-recursive cycle, UINT32_MAX when none. */
static uint32_t left_recursion(const gr_rules *g)
{
    enum { UNSEEN, ACTIVE, DONE };
    uint8_t *state = calloc(g->n_rules, 1), *empty = calloc(g->n_rules, 1);
    struct frame { uint32_t rule, at; int lead; } *st = malloc(g->n_rules * sizeof *st);
    uint32_t found = UINT32_MAX - 1; /* no memory: reported as a fault by the caller */
    if (!state || !empty || !st)
        goto out;
    found = UINT32_MAX;
    for (uint32_t r0 = 0; r0 < g->n_rules && found == UINT32_MAX; r0++) {
        if (state[r0] != UNSEEN)
            continue;
        uint32_t depth = 0;
        st[depth++] = (struct frame){r0, g->start[r0], 1};
        state[r0] = ACTIVE;
        while (depth && found == UINT32_MAX) {
            struct frame *f = &st[depth - 1];
            const gr_elem *e = &g->elems[f->at];
            if (f->at == g->start[f->rule]) /* first visit: may the rule be empty? */
                for (const gr_elem *x = e, *alt = e;; x++)
                    if (x->type == GR_END || x->type == GR_ALT) {
                        if (x == alt)
                            empty[f->rule] = 1;
                        if (x->type == GR_END)
                            break;
                        alt = x + 1;
                    }
            if (e->type == GR_END) {
                state[f->rule] = DONE;
                depth--;
                if (depth) /* the parent's reference: past it only if this may be empty */
                    st[depth - 1].lead = empty[f->rule], st[depth - 1].at++;
                continue;
            }
            if (e->type == GR_RULE_REF && f->lead) {
                if (state[e->value] == ACTIVE)
                    found = e->value;
                else if (state[e->value] == UNSEEN)
                    state[e->value] = ACTIVE,
                    st[depth++] = (struct frame){e->value, g->start[e->value], 1};
                else
                    f->lead = empty[e->value], f->at++;
                continue;
            }
            f->lead = e->type == GR_ALT;
            f->at++;
        }
    }
out:
    free(state), free(empty), free(st);
    return found;
}

/* Flattens the parsed rules into out (elements of rule r from out->start[r]). */
static mvm_status flatten(parser *p, gr_rules *out)
{
    out->n_rules = p->n_syms;
    out->start = malloc((p->n_syms ? p->n_syms : 1) * sizeof *out->start);
    out->elems = malloc((p->n_elems ? p->n_elems : 1) * sizeof *out->elems);
    if (!out->start || !out->elems)
        return nomem(p), p->status;
    uint32_t at = 0;
    for (uint32_t r = 0; r < p->n_syms; r++) {
        out->start[r] = at;
        memcpy(out->elems + at, p->rules[r].v, p->rules[r].n * sizeof *out->elems);
        at += p->rules[r].n;
    }
    out->n_elems = at;
    return MVM_OK;
}

static mvm_status check(parser *p, gr_rules *out)
{
    for (uint32_t r = 0; r < p->n_syms; r++)
        if (p->rules[r].n == 0)
            return fail(p, p->syms[r].name, "undefined rule '%.*s'", (int)p->syms[r].len,
                        p->syms[r].name), p->status;
    uint32_t root = UINT32_MAX;
    for (uint32_t r = 0; r < p->n_syms && root == UINT32_MAX; r++)
        if (p->syms[r].name && p->syms[r].len == 4 && !memcmp(p->syms[r].name, "root", 4))
            root = r;
    if (root == UINT32_MAX)
        return fail(p, NULL, "no rule 'root' (where a sentence starts)"), p->status;
    if (flatten(p, out) != MVM_OK)
        return p->status;
    out->root = root;
    uint32_t lr = left_recursion(out);
    if (lr == UINT32_MAX - 1)
        return nomem(p), p->status;
    if (lr != UINT32_MAX) {
        lr = p->syms[lr].owner; /* a helper rule: name the rule it was made for */
        return fail(p, p->syms[lr].name, "rule '%.*s' is left-recursive (the matcher "
                    "would loop)", (int)p->syms[lr].len, p->syms[lr].name), p->status;
    }
    return MVM_OK;
}

mvm_status gr_parse(const char *src, gr_rules *out)
{
    *out = (gr_rules){0};
    parser p = {.src = src};
    for (const char *s = skip_space(src, 1); s && *s;)
        s = parse_rule(&p, s);
    if (p.status == MVM_OK)
        check(&p, out);
    for (uint32_t r = 0; r < p.n_syms; r++)
        free(p.rules[r].v);
    free(p.rules);
    free(p.syms);
    if (p.status != MVM_OK)
        gr_rules_free(out);
    return p.status;
}

void gr_rules_free(gr_rules *r)
{
    free(r->elems);
    free(r->start);
    *r = (gr_rules){0};
}
