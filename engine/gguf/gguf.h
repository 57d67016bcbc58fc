/*
 * A GGUF reader (versions 2 and 3, little-endian), following ggml's gguf.cpp in structure
 * and in what it accepts, over a bounded cursor: a file is mapped read-only and everything
 * the reader returns — strings, array data, tensor data — points into the mapping. Nothing
 * is copied but the tensor names; a handle costs a few dozen bytes per key and tensor, plus
 * 8 per element of a string array (for O(1) access to vocabularies).
 *
 * Everything is validated when the file is opened, so that nothing read through a handle
 * can go out of bounds: every length, count and offset lies inside the file, keys and tensor
 * names are unique, tensor shapes and types are consistent and tensor data is aligned,
 * inside the file and non-overlapping. A file that fails gets MVM_ERR_INVALID (corrupt or
 * malformed) or MVM_ERR_UNSUPPORTED (GGUF version 1, a newer version, big-endian) and a
 * one-line message naming the file and the part that is wrong.
 *
 * Where this reader differs from ggml: ggml also requires the tensors to be packed in
 * order (offset i+1 = offset i + padded size i), while this reader requires only what
 * reading needs (aligned, inside the file, no overlap), so it accepts any file ggml does
 * in that respect. It rejects what ggml's asserts would abort on (an empty key, a
 * general.alignment that is not a u32) and what moevm's loader cannot use: tensors with
 * 0 dimensions or a dimension of 0, names with a NUL byte.
 */
#ifndef MVM_ENGINE_GGUF_GGUF_H
#define MVM_ENGINE_GGUF_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "engine/gguf/ggml_types.h"
#include "moevm/moevm.h"

/* GGUF value types, with the file's numeric values. */
enum mvm_gguf_type {
    MVM_GGUF_U8 = 0,
    MVM_GGUF_I8 = 1,
    MVM_GGUF_U16 = 2,
    MVM_GGUF_I16 = 3,
    MVM_GGUF_U32 = 4,
    MVM_GGUF_I32 = 5,
    MVM_GGUF_F32 = 6,
    MVM_GGUF_BOOL = 7,
    MVM_GGUF_STR = 8,
    MVM_GGUF_ARR = 9,
    MVM_GGUF_U64 = 10,
    MVM_GGUF_I64 = 11,
    MVM_GGUF_F64 = 12,
    MVM_GGUF_TYPE_COUNT = 13,
};

/* "u32", "str", "arr"...; "unknown" for a value outside the enum. */
const char *mvm_gguf_type_name(enum mvm_gguf_type t);
/* Bytes of one value of a numeric type (bool is 1); 0 for str, arr and unknown types. */
uint32_t mvm_gguf_type_size(enum mvm_gguf_type t);

#define MVM_GGUF_DEFAULT_ALIGNMENT 32
/* ggml's limits, kept so that this reader accepts what ggml accepts. */
#define MVM_GGUF_MAX_STRING (64ull << 20) /* bytes of one string */
#define MVM_GGUF_MAX_ARRAY (64ull << 20)  /* elements of one array */
#define MVM_GGUF_MAX_ALIGNMENT (1u << 20)
#define MVM_GGUF_MAX_NAME 64              /* tensor names are shorter than this */

/* A GGUF string: `len` bytes at `ptr`, inside the file, NOT NUL-terminated. */
typedef struct mvm_gguf_str {
    const char *ptr;
    uint64_t len;
} mvm_gguf_str;

/* Copies s into buf as a NUL-terminated string. MVM_ERR_RANGE when it does not fit `cap`
 * (nothing is truncated), MVM_ERR_INVALID when s contains a NUL byte. */
mvm_status mvm_gguf_str_copy(mvm_gguf_str s, char *buf, size_t cap);

typedef struct mvm_gguf_tensor {
    const char *name;         /* NUL-terminated, owned by the handle */
    uint32_t n_dims;          /* 1..4 */
    uint64_t ne[4];           /* elements per dimension, ne[0] innermost; 1 past n_dims */
    enum mvm_ggml_type type;
    uint64_t offset;          /* from the start of the data section; alignment-aligned */
    uint64_t nbytes;
    const void *data;         /* inside the mapping: file start + data offset + offset */
} mvm_gguf_tensor;

typedef struct mvm_gguf mvm_gguf;

/* Maps `path` read-only (MAP_PRIVATE) and parses it. Messages start with the path. The
 * first part of a split model (PREFIX-00001-of-0000N.gguf, llama.cpp's gguf-split) opens
 * the other parts too: the handle then lists every part's tensors (engine/gguf/gguf_split.c). */
mvm_status mvm_gguf_open(const char *path, mvm_gguf **out);
/* Parses a caller-owned buffer, which must outlive the handle. Messages start with "gguf
 * buffer". */
mvm_status mvm_gguf_from_memory(const void *data, size_t len, mvm_gguf **out);
/* Unmaps (when opened from a path) and frees. NULL is a no-op. */
void mvm_gguf_close(mvm_gguf *g);
/* The caller reads the file's bytes [p, p + n) no more (a tensor converted elsewhere): the
 * whole system pages inside them leave the process's resident memory. They stay readable
 * (a later read maps them from the file again); bytes of a buffer the handle does not map
 * are left alone. */
void mvm_gguf_release(const mvm_gguf *g, const void *p, size_t n);

uint32_t mvm_gguf_version(const mvm_gguf *g);
uint64_t mvm_gguf_n_keys(const mvm_gguf *g);
uint64_t mvm_gguf_n_tensors(const mvm_gguf *g);
uint32_t mvm_gguf_alignment(const mvm_gguf *g);
/* File offset of the data section (tensor offsets are relative to it). */
uint64_t mvm_gguf_data_offset(const mvm_gguf *g);

/* Index of `key`, or -1 if absent. */
int64_t mvm_gguf_find_key(const mvm_gguf *g, const char *key);
/* Name of key i ({NULL, 0} when i is out of range). */
mvm_gguf_str mvm_gguf_key_name(const mvm_gguf *g, uint64_t i);
/* Type of key i's value: MVM_GGUF_ARR for arrays (see mvm_gguf_get_arr for the element
 * type); MVM_GGUF_TYPE_COUNT when i is out of range. */
enum mvm_gguf_type mvm_gguf_key_type(const mvm_gguf *g, uint64_t i);

/*
 * Typed getters by key. A missing key is MVM_ERR_INVALID ("missing key 'x'"), a value of
 * another type MVM_ERR_INVALID naming the key and both types. The integer getters accept
 * any integer type (u8..i64) whose value fits the requested type, because writers differ
 * (MVM_ERR_RANGE when it does not fit); f32, bool and str take only their own type.
 */
mvm_status mvm_gguf_get_u32(const mvm_gguf *g, const char *key, uint32_t *out);
mvm_status mvm_gguf_get_i32(const mvm_gguf *g, const char *key, int32_t *out);
mvm_status mvm_gguf_get_u64(const mvm_gguf *g, const char *key, uint64_t *out);
mvm_status mvm_gguf_get_f32(const mvm_gguf *g, const char *key, float *out);
mvm_status mvm_gguf_get_bool(const mvm_gguf *g, const char *key, int *out);
mvm_status mvm_gguf_get_str(const mvm_gguf *g, const char *key, mvm_gguf_str *out);
/* An array's element type and length; MVM_ERR_INVALID when the key is missing or not an
 * array. Either output may be NULL. */
mvm_status mvm_gguf_get_arr(const mvm_gguf *g, const char *key, enum mvm_gguf_type *elem_type,
                            uint64_t *count);

/* Element i of the string array at key index `key_index` (from mvm_gguf_find_key), in
 * O(1). MVM_ERR_INVALID when the key is not a string array, MVM_ERR_RANGE when i is past
 * its end. */
mvm_status mvm_gguf_arr_str(const mvm_gguf *g, uint64_t key_index, uint64_t i,
                            mvm_gguf_str *out);
/* The elements of the numeric (or bool: one byte each, nonzero is true) array at
 * key_index: *data points into the file, little-endian and possibly UNALIGNED for its
 * element type — copy elements out with memcpy rather than dereferencing a cast pointer.
 * *data is NULL for an empty array. MVM_ERR_INVALID for a string array or a scalar. */
mvm_status mvm_gguf_arr_data(const mvm_gguf *g, uint64_t key_index,
                             enum mvm_gguf_type *elem_type, const void **data,
                             uint64_t *count);

/*
 * llama.cpp's --override-kv (engine/gguf/gguf_override.c): a scalar value that reads as the
 * file's own, in place of it or beside the file's keys. `s` points into the parsed spec.
 */
#define MVM_GGUF_OVERRIDE_KEY 255 /* bytes of a key, at most */
typedef struct mvm_gguf_override {
    char key[MVM_GGUF_OVERRIDE_KEY + 1];
    enum mvm_gguf_type type; /* MVM_GGUF_I64 (int), F32 (float), BOOL or STR */
    int64_t i;
    float f;
    int b;
    const char *s;
} mvm_gguf_override;
/* llama.cpp's KEY=TYPE:VALUE, TYPE int, float, bool (true or false) or str, into *o;
 * MVM_ERR_INVALID with a message quoting the spec and naming its fault. */
mvm_status mvm_gguf_override_parse(const char *spec, mvm_gguf_override *o);
/* Puts o's value in place of g's value for o->key, or adds the key. MVM_ERR_INVALID when
 * the file's value is an array or another kind of scalar (an integer type for int, f32 or
 * f64 for float), naming both; MVM_ERR_NOMEM. Before anything reads g: a value read
 * earlier stays what it was. */
mvm_status mvm_gguf_override_apply(mvm_gguf *g, const mvm_gguf_override *o);

/* Tensor i in file order (NULL when out of range). */
const mvm_gguf_tensor *mvm_gguf_tensor_at(const mvm_gguf *g, uint64_t i);
/* The tensor called `name`, or NULL. */
const mvm_gguf_tensor *mvm_gguf_find_tensor(const mvm_gguf *g, const char *name);

#endif
