/*
 * The ggml tensor types as GGUF files store them. The numeric values are ggml's
 * (ggml/include/ggml.h) because they are the on-disk encoding; the gaps are types ggml has
 * removed (Q4_2/Q4_3, the Q4_0_x_y and IQ4_NL_x_y repackings), which no reader accepts any
 * more, so they are "unknown" here too.
 */
#ifndef MVM_ENGINE_GGUF_GGML_TYPES_H
#define MVM_ENGINE_GGUF_GGML_TYPES_H

#include <stdint.h>

#include "moevm/moevm.h"

enum mvm_ggml_type {
    MVM_GGML_F32 = 0,
    MVM_GGML_F16 = 1,
    MVM_GGML_Q4_0 = 2,
    MVM_GGML_Q4_1 = 3,
    MVM_GGML_Q5_0 = 6,
    MVM_GGML_Q5_1 = 7,
    MVM_GGML_Q8_0 = 8,
    MVM_GGML_Q8_1 = 9,
    MVM_GGML_Q2_K = 10,
    MVM_GGML_Q3_K = 11,
    MVM_GGML_Q4_K = 12,
    MVM_GGML_Q5_K = 13,
    MVM_GGML_Q6_K = 14,
    MVM_GGML_Q8_K = 15,
    MVM_GGML_IQ2_XXS = 16,
    MVM_GGML_IQ2_XS = 17,
    MVM_GGML_IQ3_XXS = 18,
    MVM_GGML_IQ1_S = 19,
    MVM_GGML_IQ4_NL = 20,
    MVM_GGML_IQ3_S = 21,
    MVM_GGML_IQ2_S = 22,
    MVM_GGML_IQ4_XS = 23,
    MVM_GGML_I8 = 24,
    MVM_GGML_I16 = 25,
    MVM_GGML_I32 = 26,
    MVM_GGML_I64 = 27,
    MVM_GGML_F64 = 28,
    MVM_GGML_IQ1_M = 29,
    MVM_GGML_BF16 = 30,
    MVM_GGML_TQ1_0 = 34,
    MVM_GGML_TQ2_0 = 35,
    MVM_GGML_MXFP4 = 39,
    MVM_GGML_NVFP4 = 40,
    MVM_GGML_Q1_0 = 41,
    MVM_GGML_TYPE_COUNT = 42, /* one past the largest value; not every value below is a type */
};

typedef struct mvm_ggml_type_info {
    const char *name;    /* ggml's name: "f32", "q8_0", "q4_K" */
    uint32_t block;      /* elements per block */
    uint32_t block_bytes;/* bytes per block */
} mvm_ggml_type_info;

/* The type's entry, or NULL when `type` is not a ggml type (any value, including ones read
 * from a file, may be passed). */
const mvm_ggml_type_info *mvm_ggml_type_get(enum mvm_ggml_type type);

/* ggml's name of the type, or "unknown". */
const char *mvm_ggml_type_name(enum mvm_ggml_type type);

/* Bytes of n_elements consecutive elements of `type` (a row, or a whole tensor).
 * MVM_ERR_INVALID for an unknown type or a count that is not a whole number of blocks;
 * MVM_ERR_RANGE when the byte count does not fit 64 bits. */
mvm_status mvm_ggml_row_bytes(enum mvm_ggml_type type, uint64_t n_elements, uint64_t *bytes);

#endif
