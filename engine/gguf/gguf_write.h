/*
 * A GGUF v3 writer: `moevm mkmodel` and the tests build models with it. Keys and tensor
 * descriptions are collected, checked as they are added (so a mistake is reported where it
 * is made), and written in one go by mvm_gguf_writer_write, which writes `path`.tmp and
 * renames it: a failed write never leaves a partial model under the final name.
 *
 * Layout: header, keys in the order first set, tensor infos in the order added, padding to
 * the alignment (32, or general.alignment), then each tensor's data padded to the alignment
 * — the packed layout ggml itself writes and requires.
 */
#ifndef MVM_ENGINE_GGUF_GGUF_WRITE_H
#define MVM_ENGINE_GGUF_GGUF_WRITE_H

#include <stdint.h>
#include <stdio.h>

#include "engine/gguf/ggml_types.h"
#include "engine/gguf/gguf.h"
#include "moevm/moevm.h"

typedef struct mvm_gguf_writer mvm_gguf_writer;

/* Writes tensor `tensor_index`'s data to f at the current position: exactly the nbytes
 * given to add_tensor (the writer checks). Used for tensors added with data == NULL, so
 * that models larger than memory can be generated while they are written. */
typedef mvm_status (*mvm_gguf_write_data_fn)(void *ctx, uint64_t tensor_index, FILE *f);

mvm_status mvm_gguf_writer_new(mvm_gguf_writer **out);
/* NULL is a no-op. */
void mvm_gguf_writer_free(mvm_gguf_writer *w);

/*
 * Setting a key again replaces its value (and keeps its position). Keys and values are
 * copied. "general.alignment" must be set as a u32 power of two up to
 * MVM_GGUF_MAX_ALIGNMENT. Errors: MVM_ERR_INVALID (empty or NULL key, bad alignment, array
 * or string over ggml's limits), MVM_ERR_NOMEM.
 */
mvm_status mvm_gguf_writer_set_u32(mvm_gguf_writer *w, const char *key, uint32_t v);
mvm_status mvm_gguf_writer_set_i32(mvm_gguf_writer *w, const char *key, int32_t v);
mvm_status mvm_gguf_writer_set_u64(mvm_gguf_writer *w, const char *key, uint64_t v);
mvm_status mvm_gguf_writer_set_f32(mvm_gguf_writer *w, const char *key, float v);
mvm_status mvm_gguf_writer_set_bool(mvm_gguf_writer *w, const char *key, int v);
mvm_status mvm_gguf_writer_set_str(mvm_gguf_writer *w, const char *key, const char *v);
/* A scalar of any numeric type (u8..f64, bool): `value` points to one value of it. */
mvm_status mvm_gguf_writer_set_val(mvm_gguf_writer *w, const char *key, enum mvm_gguf_type type,
                                   const void *value);
/* An array of n values of any numeric type (bool: one byte each). */
mvm_status mvm_gguf_writer_set_arr(mvm_gguf_writer *w, const char *key,
                                   enum mvm_gguf_type elem_type, const void *values, uint64_t n);
mvm_status mvm_gguf_writer_set_arr_f32(mvm_gguf_writer *w, const char *key,
                                       const float *values, uint64_t n);
mvm_status mvm_gguf_writer_set_arr_i32(mvm_gguf_writer *w, const char *key,
                                       const int32_t *values, uint64_t n);
mvm_status mvm_gguf_writer_set_arr_str(mvm_gguf_writer *w, const char *key,
                                       const char *const *strs, uint64_t n);

/* The callback for tensors added without data. */
void mvm_gguf_writer_set_data_fn(mvm_gguf_writer *w, mvm_gguf_write_data_fn fn, void *ctx);

/*
 * Adds a tensor of n_dims (1..4) dimensions ne[0..n_dims) (ne[0] innermost). nbytes must be
 * what the shape takes in `type` (see mvm_ggml_row_bytes); the name must be unique and
 * shorter than MVM_GGUF_MAX_NAME. `data` is REFERENCED, not copied: it must stay valid
 * until mvm_gguf_writer_write returns. data == NULL: the data function supplies it.
 * MVM_ERR_INVALID with a message naming the tensor for any inconsistency.
 */
mvm_status mvm_gguf_writer_add_tensor(mvm_gguf_writer *w, const char *name,
                                      enum mvm_ggml_type type, uint32_t n_dims,
                                      const uint64_t *ne, const void *data, uint64_t nbytes);

/* Writes the file (see above). MVM_ERR_BACKEND naming the failed call (the message
 * includes the OS error), or the data function's status. Can be called more than once. */
mvm_status mvm_gguf_writer_write(mvm_gguf_writer *w, const char *path);

#endif
