/* The corpus the built-in vocabularies are trained on (vocab_build.h); its text is the table
 * in vocab_corpus.inc. */
#include "engine/synth/vocab_build.h"

const char *const mvm_vocab_corpus[] = {
#include "engine/synth/vocab_corpus.inc"
};

const size_t mvm_vocab_corpus_n = sizeof mvm_vocab_corpus / sizeof *mvm_vocab_corpus;
