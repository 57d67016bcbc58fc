/*
 * The GGUF reader's internal state, shared by the parser (gguf.c) and the accessors
 * (gguf_get.c). Nothing here is part of the API in gguf.h.
 */
#ifndef MVM_ENGINE_GGUF_GGUF_IMPL_H
#define MVM_ENGINE_GGUF_GGUF_IMPL_H

#include <stdint.h>
#include <string.h>

#include "engine/gguf/gguf.h"

typedef struct kv {
    const char *key;
    uint64_t key_len;
    uint32_t type;        /* the value's type; for arrays, the element type */
    int is_arr;
    uint64_t count;       /* elements of an array; 1 for a scalar */
    const uint8_t *data;  /* the value, or the first element; strings: their length prefix */
    const uint8_t **strs; /* string arrays: each element's length prefix, for O(1) access */
} kv;

/* A tensor with its name's length, which the name index needs. `pub` comes first so
 * that &tensors[i].pub is what mvm_gguf_tensor_at returns. */
typedef struct tensor {
    mvm_gguf_tensor pub;
    uint64_t name_len;
} tensor;

/* Open addressing over names: slot[h] holds an entry's index + 1, 0 when empty. Used to
 * find duplicates when opening and for lookups by name, both O(1) per name. */
typedef struct name_index {
    uint64_t *slot;
    uint64_t mask;
} name_index;

struct mvm_gguf {
    const uint8_t *base;
    uint64_t len;
    void *map; /* the mapping, when opened from a path */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;
    kv *kvs;
    uint64_t n_kv, cap_kv;
    tensor *tensors;
    uint64_t n_tensors, cap_tensors;
    char *names; /* the tensors' names, NUL-terminated, back to back */
    /* The overrides' keys and values (gguf_override.c), which their kvs entries point into. */
    uint8_t **owned;
    uint32_t n_owned;
    name_index key_ix, tensor_ix;
    /* A split model's other parts (gguf_split.c), whose tensors follow this file's. */
    mvm_gguf **parts;
    uint32_t n_parts;
};

static inline mvm_gguf_str str_at(const uint8_t *prefix)
{
    mvm_gguf_str s;
    memcpy(&s.len, prefix, 8);
    s.ptr = (const char *)prefix + 8;
    return s;
}

static inline mvm_gguf_str name_of(const mvm_gguf *g, int of_tensors, uint64_t i)
{
    if (of_tensors)
        return (mvm_gguf_str){g->tensors[i].pub.name, g->tensors[i].name_len};
    return (mvm_gguf_str){g->kvs[i].key, g->kvs[i].key_len};
}

/* A name from the file as it may appear in a message: at most 64 bytes, anything not
 * printable ASCII as '?'. */
const char *mvm_gguf_shown(const char *s, uint64_t n, char buf[72]);

/* arr (of elements of `size` bytes, *cap of them) with room for `need`: the same block, or
 * one twice as large (*cap updated); NULL without memory, arr left as it was. */
void *mvm_gguf_grow(void *arr, uint64_t *cap, uint64_t need, size_t size);

/* The entry named (s, n) among the keys (of_tensors = 0) or the tensors, or -1; *slot (if
 * non-NULL) is where it would be inserted. */
int64_t mvm_gguf_ix_probe(const mvm_gguf *g, int of_tensors, const char *s, uint64_t n,
                          uint64_t **slot);

/* Indexes the names of the keys (of_tensors = 0) or the tensors, replacing any index;
 * MVM_ERR_INVALID on a duplicate name, the message starting with `input`. */
mvm_status mvm_gguf_ix_build(mvm_gguf *g, int of_tensors, const char *input);

/* mvm_gguf_open of one file, without following a split model's parts. */
mvm_status mvm_gguf_open_file(const char *path, mvm_gguf **out);
/* If g (opened from `path`) is the first part of a split model, opens the other parts and
 * appends their tensors to g's; a part of one given alone is refused. */
mvm_status mvm_gguf_join_parts(mvm_gguf *g, const char *path);

#endif
