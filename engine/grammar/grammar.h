/*
 * Grammar-constrained sampling: llama.cpp's GBNF grammars and JSON Schemas, so that what
 * `--grammar`, `--json-schema` and a server request's `grammar`, `json_schema` or
 * `response_format` ask for comes out exactly as with llama.cpp. The public half (a
 * grammar bound to an engine's vocabulary, and the sampler's use of it) is declared in
 * include/moevm/engine.h; this header adds the text-level matcher that tests and the
 * JSON Schema converter's checks use without a model.
 *
 * Why our own: GBNF is llama.cpp's format and lives inside llama.cpp (C++, not a library
 * one can link without the rest); the alternatives (llguidance, outlines) are Rust and
 * Python. The matcher is llama.cpp's pushdown design (llama-grammar.cpp), so grammars
 * written for it accept and reject the same texts.
 */
#ifndef MVM_ENGINE_GRAMMAR_GRAMMAR_H
#define MVM_ENGINE_GRAMMAR_GRAMMAR_H

#include <stddef.h>

#include "moevm/engine.h"

/* Parses GBNF text (its start rule `root`) into a grammar with no vocabulary: text can be
 * matched against it (mvm_grammar_accept_text) but it constrains no sampler.
 * MVM_ERR_INVALID with a message naming the line and column of the fault. */
mvm_status mvm_grammar_parse(const char *gbnf, mvm_grammar **out);

/* Advances over text[0..len) (UTF-8; a character may be split between calls). Returns 1
 * when the grammar accepts the text as a continuation; 0 when it cannot (the state is then
 * as before the call). */
int mvm_grammar_accept_text(mvm_grammar *g, const char *text, size_t len);

/* Whether what has been accepted so far is a whole sentence of the grammar (an
 * end-of-generation token would be allowed now). mvm_grammar_finished (engine.h): whether
 * nothing else may follow. */
int mvm_grammar_complete(const mvm_grammar *g);

#endif
