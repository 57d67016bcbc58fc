/*
 * A vocabulary as grammars match it (grammar_impl.h): each token's bytes as
 * mvm_engine_token_piece_special gives them (a control token's text too, as llama.cpp's
 * grammars see it: a grammar's "<|tool_call_begin|>" is that token), decoded once into
 * code points. The engine keeps one for all its grammars (engine/api/engine.c's
 * mvm_grammar_create).
 */
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/grammar_impl.h"
#include "engine/grammar/stacks.h"
#include "vmm/error.h"

void gr_vocab_free(gr_vocab *v)
{
    if (!v)
        return;
    free(v->kind), free(v->bytes), free(v->byte_off);
    free(v->cp), free(v->cp_off), free(v->cp_end);
    free(v);
}

/* Each token's bytes, as mvm_engine_token_piece_special gives them, into v. */
static mvm_status vocab_bytes(const mvm_engine *e, gr_vocab *v)
{
    size_t total = 0, cap = 1 << 16;
    if (!(v->bytes = malloc(cap)))
        return mvm_fail(MVM_ERR_NOMEM, "grammar: no memory for the vocabulary");
    for (uint32_t id = 0; id < v->n; id++) {
        size_t len = mvm_engine_token_piece_special(e, (int32_t)id, NULL, 0);
        if (total + len > UINT32_MAX / 2)
            return mvm_fail(MVM_ERR_NOMEM, "grammar: a vocabulary of over 2 GiB of text");
        if (total + len > cap) {
            while (cap < total + len)
                cap *= 2;
            char *b = realloc(v->bytes, cap);
            if (!b)
                return mvm_fail(MVM_ERR_NOMEM, "grammar: no memory for the vocabulary");
            v->bytes = b;
        }
        mvm_engine_token_piece_special(e, (int32_t)id, v->bytes + total, len);
        v->byte_off[id] = (uint32_t)total;
        v->kind[id] = mvm_engine_is_eog(e, (int32_t)id)                  ? GR_TOK_EOG
                    : len == 0 || memchr(v->bytes + total, 0, len) ? GR_TOK_NEVER : GR_TOK_TEXT;
        total += len;
    }
    v->byte_off[v->n] = (uint32_t)total;
    return MVM_OK;
}

mvm_status gr_vocab_build(const mvm_engine *e, gr_vocab **out)
{
    *out = NULL;
    gr_vocab *v = calloc(1, sizeof *v);
    const uint32_t n = mvm_engine_n_vocab(e);
    if (v) {
        v->n = n;
        v->kind = malloc(n ? n : 1);
        v->byte_off = malloc(((size_t)n + 1) * sizeof *v->byte_off);
        v->cp_off = malloc(((size_t)n + 1) * sizeof *v->cp_off);
        v->cp_end = malloc((n ? n : 1) * sizeof *v->cp_end);
    }
    mvm_status st = v && v->kind && v->byte_off && v->cp_off && v->cp_end
                        ? vocab_bytes(e, v)
                        : mvm_fail(MVM_ERR_NOMEM, "grammar: no memory for a vocabulary of %u", n);
    /* at most one code point a byte, and a 0 a token */
    if (st == MVM_OK && !(v->cp = malloc((v->byte_off[n] + (size_t)n + 1) * sizeof *v->cp)))
        st = mvm_fail(MVM_ERR_NOMEM, "grammar: no memory for the vocabulary's characters");
    if (st != MVM_OK) {
        gr_vocab_free(v);
        return st;
    }
    uint32_t at = 0;
    for (uint32_t id = 0; id < n; id++) {
        v->cp_off[id] = at;
        at += gr_decode(v->bytes + v->byte_off[id], v->byte_off[id + 1] - v->byte_off[id],
                        (gr_partial){0, 0, 0}, v->cp + at, &v->cp_end[id]) + 1;
    }
    *out = v;
    return MVM_OK;
}
