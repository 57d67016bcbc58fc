/* The ggml type table (see ggml_types.h). Block sizes and bytes are ggml's type_traits
 * (ggml/src/ggml.c) and block structs (ggml/src/ggml-common.h); QK_K is 256. */
#include "engine/gguf/ggml_types.h"

#include "vmm/error.h"

static const mvm_ggml_type_info types[MVM_GGML_TYPE_COUNT] = {
    [MVM_GGML_F32] = {"f32", 1, 4},
    [MVM_GGML_F16] = {"f16", 1, 2},
    [MVM_GGML_Q4_0] = {"q4_0", 32, 18},
    [MVM_GGML_Q4_1] = {"q4_1", 32, 20},
    [MVM_GGML_Q5_0] = {"q5_0", 32, 22},
    [MVM_GGML_Q5_1] = {"q5_1", 32, 24},
    [MVM_GGML_Q8_0] = {"q8_0", 32, 34},
    [MVM_GGML_Q8_1] = {"q8_1", 32, 36},
    [MVM_GGML_Q2_K] = {"q2_K", 256, 84},
    [MVM_GGML_Q3_K] = {"q3_K", 256, 110},
    [MVM_GGML_Q4_K] = {"q4_K", 256, 144},
    [MVM_GGML_Q5_K] = {"q5_K", 256, 176},
    [MVM_GGML_Q6_K] = {"q6_K", 256, 210},
    [MVM_GGML_Q8_K] = {"q8_K", 256, 292},
    [MVM_GGML_IQ2_XXS] = {"iq2_xxs", 256, 66},
    [MVM_GGML_IQ2_XS] = {"iq2_xs", 256, 74},
    [MVM_GGML_IQ3_XXS] = {"iq3_xxs", 256, 98},
    [MVM_GGML_IQ1_S] = {"iq1_s", 256, 50},
    [MVM_GGML_IQ4_NL] = {"iq4_nl", 32, 18},
    [MVM_GGML_IQ3_S] = {"iq3_s", 256, 110},
    [MVM_GGML_IQ2_S] = {"iq2_s", 256, 82},
    [MVM_GGML_IQ4_XS] = {"iq4_xs", 256, 136},
    [MVM_GGML_I8] = {"i8", 1, 1},
    [MVM_GGML_I16] = {"i16", 1, 2},
    [MVM_GGML_I32] = {"i32", 1, 4},
    [MVM_GGML_I64] = {"i64", 1, 8},
    [MVM_GGML_F64] = {"f64", 1, 8},
    [MVM_GGML_IQ1_M] = {"iq1_m", 256, 56},
    [MVM_GGML_BF16] = {"bf16", 1, 2},
    [MVM_GGML_TQ1_0] = {"tq1_0", 256, 54},
    [MVM_GGML_TQ2_0] = {"tq2_0", 256, 66},
    [MVM_GGML_MXFP4] = {"mxfp4", 32, 17},
    [MVM_GGML_NVFP4] = {"nvfp4", 64, 36},
    [MVM_GGML_Q1_0] = {"q1_0", 128, 18},
};

const mvm_ggml_type_info *mvm_ggml_type_get(enum mvm_ggml_type type)
{
    /* Compared as unsigned so that a negative value read from a file is out of range too;
     * the removed types are the table's empty (block 0) entries. */
    if ((unsigned)type >= MVM_GGML_TYPE_COUNT || types[type].block == 0)
        return NULL;
    return &types[type];
}

const char *mvm_ggml_type_name(enum mvm_ggml_type type)
{
    const mvm_ggml_type_info *t = mvm_ggml_type_get(type);
    return t ? t->name : "unknown";
}

mvm_status mvm_ggml_row_bytes(enum mvm_ggml_type type, uint64_t n_elements, uint64_t *bytes)
{
    const mvm_ggml_type_info *t = mvm_ggml_type_get(type);
    if (!t)
        return mvm_fail(MVM_ERR_INVALID, "unknown ggml type %u", (unsigned)type);
    if (n_elements % t->block)
        return mvm_fail(MVM_ERR_INVALID,
                        "%llu elements of type %s are not a whole number of %u-element blocks",
                        (unsigned long long)n_elements, t->name, t->block);
    uint64_t blocks = n_elements / t->block;
    if (blocks > UINT64_MAX / t->block_bytes)
        return mvm_fail(MVM_ERR_RANGE, "%llu elements of type %s need more than 2^64 bytes",
                        (unsigned long long)n_elements, t->name);
    *bytes = blocks * t->block_bytes;
    return MVM_OK;
}
