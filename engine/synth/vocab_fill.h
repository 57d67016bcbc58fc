/*
 * The texts that fill a built-in vocabulary past what the corpus teaches (vocab_build.h).
 *
 * The corpus yields about 2400 learned tokens while real shapes have 32000 to 201088 rows.
 * Rows that decode to nothing ("[PAD]" tokens) make a random-weight model's reply empty,
 * since sampling picks mostly them; so the rest of the vocabulary is words instead, every
 * one of which prints, all from the corpus's own words (runs of ASCII letters, most
 * frequent first, ties alphabetical), in this order:
 *  - each word as " word", " Word", "word" and "Word";
 *  - word pieces, syllable-sized: each prefix after a space, and each suffix, of two
 *    letters or more that leaves two or more (" gover", "ment");
 *  - " word" followed by each of , . ; : ! ?;
 *  - the corpus's word pairs, " word word" where one space parts them ("of the");
 *  - any two different words, " word word", by the sum of their frequency ranks;
 *  - numbers, " 0", " 1", ..., which never run out.
 * Texts are plain bytes (spaces as spaces): the vocabulary spells them its own way.
 */
#ifndef MVM_ENGINE_SYNTH_VOCAB_FILL_H
#define MVM_ENGINE_SYNTH_VOCAB_FILL_H

#include <stdint.h>

#include "engine/tokenizer/tokenizer_impl.h"
#include "moevm/moevm.h"

/* Fills `out`, an empty table, with the first n distinct texts, indexed for
 * tok_strtab_find: the same n gives the same texts. MVM_ERR_NOMEM; the caller frees `out`
 * either way. */
mvm_status mvm_vocab_fill_texts(uint32_t n, tok_strtab *out);

#endif
