/*
 * llama.cpp's --override-kv: a metadata value put in place of the file's, or added where the
 * file has none, before anything reads the file (gguf.h). The spec is llama.cpp's
 * KEY=TYPE:VALUE (common/common.cpp's string_parse_kv_override), TYPE int, float, bool or
 * str, and the value then reads as if the file held it, an int as an i64, a float as an f32
 * (the getters moevm reads floats with).
 *
 * Where this differs from llama.cpp (chosen as a user would expect): a value must be all
 * number (llama.cpp's atol reads "10k" as 10 and "x" as 0); a string may be longer than
 * llama.cpp's 127 bytes (a chat template); and the kind is checked against the file's value
 * when the override is applied, not when a key is read, so that a float given for an
 * integer key fails at once, naming both, even for keys moevm reads only in some paths.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf/gguf_impl.h"
#include "vmm/error.h"

static mvm_status malformed(const char *spec, const char *why)
{
    char shown[72];
    return mvm_fail(MVM_ERR_INVALID, "--override-kv '%s': %s (llama.cpp's KEY=TYPE:VALUE, TYPE "
                    "int, float, bool or str)", mvm_gguf_shown(spec, strlen(spec), shown), why);
}

/* An int (all of v, in range) or a finite float (past float's range is not; below it, 0). */
static int numeric_value(const char *v, const char *type, mvm_gguf_override *o)
{
    char *end = NULL;
    int ok;
    errno = 0;
    if (!strcmp(type, "int")) {
        o->type = MVM_GGUF_I64;
        o->i = strtoll(v, &end, 10);
        ok = errno == 0;
    } else {
        o->type = MVM_GGUF_F32;
        o->f = (float)strtod(v, &end);
        ok = isfinite(o->f);
    }
    return ok && *v && !isspace((unsigned char)*v) && end && !*end;
}

mvm_status mvm_gguf_override_parse(const char *spec, mvm_gguf_override *o)
{
    *o = (mvm_gguf_override){0};
    const char *eq = strchr(spec, '='), *colon = eq ? strchr(eq + 1, ':') : NULL;
    if (!eq || eq == spec)
        return malformed(spec, eq ? "no key before '='" : "no '='");
    for (const char *c = spec; c < eq; c++)
        if ((unsigned char)*c <= ' ' || *c == 0x7f)
            return malformed(spec, "a key holds no space or control character");
    if ((size_t)(eq - spec) > MVM_GGUF_OVERRIDE_KEY)
        return malformed(spec, "the key is longer than 255 bytes");
    if (!colon)
        return malformed(spec, "no ':' after the type");
    char type[8];
    const size_t tn = (size_t)(colon - eq - 1);
    if (tn >= sizeof type)
        return malformed(spec, "the type is not int, float, bool or str");
    memcpy(type, eq + 1, tn);
    type[tn] = '\0';
    const char *v = colon + 1;
    memcpy(o->key, spec, (size_t)(eq - spec));
    o->key[eq - spec] = '\0';
    if (!strcmp(type, "int") || !strcmp(type, "float")) {
        if (!numeric_value(v, type, o))
            return malformed(spec, !strcmp(type, "int") ? "the value is not a 64-bit integer"
                                                        : "the value is not a finite float");
    } else if (!strcmp(type, "bool")) {
        o->type = MVM_GGUF_BOOL;
        o->b = !strcmp(v, "true");
        if (!o->b && strcmp(v, "false"))
            return malformed(spec, "a bool is true or false");
    } else if (!strcmp(type, "str")) {
        o->type = MVM_GGUF_STR;
        o->s = v;
    } else {
        return malformed(spec, "the type is not int, float, bool or str");
    }
    return MVM_OK;
}

/* Whether a value of file type t (a scalar) is of the override's kind. */
static int same_kind(uint32_t t, enum mvm_gguf_type want)
{
    switch (want) {
    case MVM_GGUF_I64:
        return t <= MVM_GGUF_I32 || t == MVM_GGUF_U64 || t == MVM_GGUF_I64;
    case MVM_GGUF_F32:
        return t == MVM_GGUF_F32 || t == MVM_GGUF_F64;
    default:
        return t == (uint32_t)want;
    }
}

static const char *kind_name(enum mvm_gguf_type t)
{
    return t == MVM_GGUF_I64 ? "int" : t == MVM_GGUF_F32 ? "float" : mvm_gguf_type_name(t);
}

/* The value's bytes as the file would hold them, after a copy of the key, in one block. */
static uint8_t *encode(const mvm_gguf_override *o, size_t key_len, const uint8_t **value)
{
    const uint64_t slen = o->type == MVM_GGUF_STR ? strlen(o->s) : 0;
    const size_t vsize = o->type == MVM_GGUF_STR ? 8 + slen : 8;
    uint8_t *b = malloc(key_len + 1 + vsize);
    if (!b)
        return NULL;
    memcpy(b, o->key, key_len + 1);
    uint8_t *v = b + key_len + 1;
    if (o->type == MVM_GGUF_I64)
        memcpy(v, &o->i, 8); /* the host is little-endian, as the files */
    else if (o->type == MVM_GGUF_F32)
        memcpy(v, &o->f, 4);
    else if (o->type == MVM_GGUF_BOOL)
        v[0] = (uint8_t)o->b;
    else
        memcpy(v, &slen, 8), memcpy(v + 8, o->s, slen);
    *value = v;
    return b;
}

mvm_status mvm_gguf_override_apply(mvm_gguf *g, const mvm_gguf_override *o)
{
    const size_t key_len = strlen(o->key);
    const int64_t at = mvm_gguf_ix_probe(g, 0, o->key, key_len, NULL);
    if (at >= 0) {
        const kv *e = &g->kvs[at];
        if (e->is_arr || !same_kind(e->type, o->type))
            return mvm_fail(MVM_ERR_INVALID, "--override-kv %s: the file's value is of type "
                            "%s%s%s, not %s", o->key, e->is_arr ? "arr[" : "",
                            mvm_gguf_type_name(e->type), e->is_arr ? "]" : "",
                            kind_name(o->type));
    }
    uint8_t **owned = realloc(g->owned, (g->n_owned + 1) * sizeof *owned);
    if (owned)
        g->owned = owned;
    const uint8_t *value = NULL;
    uint8_t *block = owned ? encode(o, key_len, &value) : NULL;
    if (!block)
        return mvm_fail(MVM_ERR_NOMEM, "--override-kv %s: out of memory", o->key);
    g->owned[g->n_owned++] = block;
    const kv e = {.key = (const char *)block, .key_len = key_len, .type = o->type, .count = 1,
                  .data = value};
    if (at >= 0) {
        g->kvs[at] = e;
        return MVM_OK;
    }
    kv *kvs = mvm_gguf_grow(g->kvs, &g->cap_kv, g->n_kv + 1, sizeof *kvs);
    if (!kvs)
        return mvm_fail(MVM_ERR_NOMEM, "--override-kv %s: out of memory", o->key);
    g->kvs = kvs;
    g->kvs[g->n_kv++] = e;
    return mvm_gguf_ix_build(g, 0, "--override-kv"); /* out of memory fails the load */
}
