/*
 * Writes the GGUF fuzzer's seed corpus into the directory argv[1]: small valid files that
 * between them use every value type, string arrays, a non-default alignment and several
 * tensor types, so that mutations start from inputs that reach every part of the reader.
 */
#include <stdio.h>
#include <string.h>

#include "engine/gguf/gguf_write.h"
#include "moevm/moevm.h"

static uint8_t bytes[4096];

static mvm_status finish(mvm_gguf_writer *w, const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    mvm_status st = mvm_gguf_writer_write(w, path);
    mvm_gguf_writer_free(w);
    return st;
}

static mvm_status empty_file(const char *dir)
{
    mvm_gguf_writer *w;
    mvm_status st = mvm_gguf_writer_new(&w);
    return st != MVM_OK ? st : finish(w, dir, "empty.gguf");
}

/* The shape of a model: architecture keys, a vocabulary, f32 and q8_0 tensors. */
static mvm_status tiny_model(const char *dir)
{
    static const char *const tokens[] = {"<unk>", "<s>", "</s>", "a", "b", "ab"};
    static const float scores[] = {0, 0, 0, -1, -2, -3};
    static const int32_t types[] = {2, 3, 3, 1, 1, 1};
    uint64_t ne_norm[] = {32}, ne_up[] = {32, 4, 2};
    mvm_gguf_writer *w;
    mvm_status st = mvm_gguf_writer_new(&w);
    if (st != MVM_OK)
        return st;
    if ((st = mvm_gguf_writer_set_str(w, "general.architecture", "mixtral")) != MVM_OK ||
        (st = mvm_gguf_writer_set_u32(w, "mixtral.block_count", 1)) != MVM_OK ||
        (st = mvm_gguf_writer_set_u32(w, "mixtral.expert_count", 2)) != MVM_OK ||
        (st = mvm_gguf_writer_set_f32(w, "mixtral.rope.freq_base", 1e6f)) != MVM_OK ||
        (st = mvm_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", 1)) != MVM_OK ||
        (st = mvm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, 6)) != MVM_OK ||
        (st = mvm_gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", scores, 6)) != MVM_OK ||
        (st = mvm_gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", types, 6)) != MVM_OK ||
        (st = mvm_gguf_writer_add_tensor(w, "blk.0.attn_norm.weight", MVM_GGML_F32, 1, ne_norm,
                                         bytes, 128)) != MVM_OK ||
        (st = mvm_gguf_writer_add_tensor(w, "blk.0.ffn_up_exps.weight", MVM_GGML_Q8_0, 3, ne_up,
                                         bytes, 8 * 34)) != MVM_OK) {
        mvm_gguf_writer_free(w);
        return st;
    }
    return finish(w, dir, "tiny_model.gguf");
}

/* Every scalar and numeric array type, an empty array, alignment 64. */
static mvm_status all_values(const char *dir)
{
    static const char *const names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool",
                                        NULL, NULL, "u64", "i64", "f64"};
    static const uint8_t values[8 * 4] = {1, 2, 3, 4, 5, 6, 7, 8, 0xff, 0xfe, 0x80, 0x7f};
    static const char *const strs[] = {"x", ""};
    uint64_t ne[] = {2, 2};
    mvm_gguf_writer *w;
    mvm_status st = mvm_gguf_writer_new(&w);
    if (st == MVM_OK)
        st = mvm_gguf_writer_set_u32(w, "general.alignment", 64);
    for (int t = 0; t < MVM_GGUF_TYPE_COUNT && st == MVM_OK; t++) {
        if (!names[t])
            continue;
        char key[32];
        snprintf(key, sizeof key, "v.%s", names[t]);
        st = mvm_gguf_writer_set_val(w, key, (enum mvm_gguf_type)t, values);
        snprintf(key, sizeof key, "a.%s", names[t]);
        if (st == MVM_OK)
            st = mvm_gguf_writer_set_arr(w, key, (enum mvm_gguf_type)t, values, 3);
    }
    if (st == MVM_OK)
        st = mvm_gguf_writer_set_str(w, "v.str", "string");
    if (st == MVM_OK)
        st = mvm_gguf_writer_set_arr_str(w, "a.str", strs, 2);
    if (st == MVM_OK)
        st = mvm_gguf_writer_set_arr(w, "a.empty", MVM_GGUF_U64, NULL, 0);
    if (st == MVM_OK)
        st = mvm_gguf_writer_add_tensor(w, "t", MVM_GGML_F16, 2, ne, bytes, 8);
    if (st != MVM_OK) {
        mvm_gguf_writer_free(w);
        return st;
    }
    return finish(w, dir, "all_values.gguf");
}

/* Block-quantized and 4-dimensional tensors, no keys. */
static mvm_status quant_tensors(const char *dir)
{
    uint64_t ne_q4[] = {64, 1, 1, 2}, ne_k[] = {256}, ne_bf[] = {3, 5};
    mvm_gguf_writer *w;
    mvm_status st = mvm_gguf_writer_new(&w);
    if (st == MVM_OK)
        st = mvm_gguf_writer_add_tensor(w, "q4_0", MVM_GGML_Q4_0, 4, ne_q4, bytes, 4 * 18);
    if (st == MVM_OK)
        st = mvm_gguf_writer_add_tensor(w, "q4_K", MVM_GGML_Q4_K, 1, ne_k, bytes, 144);
    if (st == MVM_OK)
        st = mvm_gguf_writer_add_tensor(w, "bf16", MVM_GGML_BF16, 2, ne_bf, bytes, 30);
    if (st != MVM_OK) {
        mvm_gguf_writer_free(w);
        return st;
    }
    return finish(w, dir, "quant_tensors.gguf");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gguf_seeds <dir>\n");
        return 2;
    }
    for (size_t i = 0; i < sizeof bytes; i++)
        bytes[i] = (uint8_t)(i * 131 + 7);
    mvm_status st;
    if ((st = empty_file(argv[1])) != MVM_OK || (st = tiny_model(argv[1])) != MVM_OK ||
        (st = all_values(argv[1])) != MVM_OK || (st = quant_tensors(argv[1])) != MVM_OK) {
        fprintf(stderr, "gguf_seeds: %s\n", mvm_last_error());
        return 1;
    }
    return 0;
}
