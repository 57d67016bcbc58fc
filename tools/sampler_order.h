/*
 * The order of the sampler chain's steps (mvm_sampler_params.order) as llama.cpp spells it:
 * `--samplers`' and the server's `samplers` names, `--sampling-seq`'s letters. Shared by the
 * command line (cli_sampling.c) and the server (serve_sampling.c, serve_llama.c).
 */
#ifndef MVM_TOOLS_SAMPLER_ORDER_H
#define MVM_TOOLS_SAMPLER_ORDER_H

#include <stddef.h>
#include <stdint.h>

#include "moevm/engine.h"

/* The steps' order (mvm_sampler_params.order) from llama.cpp's names for them (its
 * canonical ones, "top_k", and their spellings "top-k", "topk"; "temp", "nucleus", "typ"),
 * names[0..n), or from its letters (chars: "edskypmxt"): 0; -1 with a message in bad for
 * a name it does not know, one moevm does not have (infill, adaptive_p), none, or more
 * than MVM_SAMPLER_MAX_STEPS. */
int mvm_cli_sampler_names(const char *const *names, size_t n, uint8_t *order, char *bad,
                          size_t cap);
int mvm_cli_sampler_chars(const char *chars, uint8_t *order, char *bad, size_t cap);
/* The canonical name of step (an MVM_SAMPLER_*), llama.cpp's. */
const char *mvm_cli_sampler_name(int step);

#endif
