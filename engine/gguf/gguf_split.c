/*
 * Split GGUF models, as llama.cpp's gguf-split writes them: N files named
 * PREFIX-00001-of-0000N.gguf .. PREFIX-0000N-of-0000N.gguf, each a valid GGUF file with
 * split.no (0-based) and split.count; the first holds the model's metadata and
 * split.tensors.count, the number of tensors in all of them. The big MoE models (Mixtral
 * 8x22B, Qwen3-235B, DeepSeek) are published this way, so opening the first part opens the
 * others and joins their tensors to its handle: callers see one model. A tensor's data
 * points into its own part's mapping, and its offset is within that part.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf/gguf_impl.h"
#include "vmm/error.h"

/* More parts than gguf-split's five-digit names can number is not a split model. */
#define MAX_PARTS 99999u

/* split.no and split.count of g (0 and 1 where absent). */
static mvm_status split_keys(const mvm_gguf *g, const char *path, uint32_t *no,
                             uint32_t *count)
{
    *no = 0;
    *count = 1;
    char msg[400];
    if ((mvm_gguf_find_key(g, "split.count") >= 0 &&
         mvm_gguf_get_u32(g, "split.count", count) != MVM_OK) ||
        (mvm_gguf_find_key(g, "split.no") >= 0 && mvm_gguf_get_u32(g, "split.no", no) != MVM_OK)) {
        snprintf(msg, sizeof msg, "%s", mvm_last_error());
        return mvm_fail(MVM_ERR_INVALID, "%s: %s", path, msg);
    }
    if (*count == 0 || *count > MAX_PARTS || *no >= *count)
        return mvm_fail(MVM_ERR_INVALID, "%s: split.no %u of split.count %u is not a part of a "
                        "split model", path, *no, *count);
    return MVM_OK;
}

/* Opens part `no` (0-based) of `count`, named after the first part's path (whose name
 * ends in the first part's suffix, `suffix_len` bytes), and checks that it says so. */
static mvm_status open_part(const char *first, size_t suffix_len, uint32_t no, uint32_t count,
                            mvm_gguf **out)
{
    size_t prefix_len = strlen(first) - suffix_len;
    size_t size = prefix_len + 32;
    char *path = malloc(size);
    if (!path)
        return mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", first);
    snprintf(path, size, "%.*s-%05u-of-%05u.gguf", (int)prefix_len, first, no + 1, count);
    mvm_status st = mvm_gguf_open_file(path, out);
    uint32_t its_no, its_count;
    if (st == MVM_OK && (st = split_keys(*out, path, &its_no, &its_count)) == MVM_OK &&
        (its_no != no || its_count != count))
        st = mvm_fail(MVM_ERR_INVALID, "%s: says it is part %u of %u, not part %u of %u", path,
                      its_no + 1, its_count, no + 1, count);
    if (st != MVM_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", mvm_last_error());
        mvm_gguf_close(*out);
        *out = NULL;
        st = mvm_fail(st, "%s: part %u of %u of this split model: %s", first, no + 1, count,
                      msg);
    }
    free(path);
    return st;
}

/* Appends part's tensors to g's (their names stay in the part, which g keeps open). */
static mvm_status adopt_tensors(mvm_gguf *g, const mvm_gguf *part, const char *path)
{
    uint64_t n = g->n_tensors + part->n_tensors;
    if (n > g->cap_tensors) {
        tensor *t = realloc(g->tensors, n * sizeof *t);
        if (!t)
            return mvm_fail(MVM_ERR_NOMEM, "%s: cannot allocate %llu tensors", path,
                            (unsigned long long)n);
        g->tensors = t;
        g->cap_tensors = n;
    }
    memcpy(g->tensors + g->n_tensors, part->tensors, part->n_tensors * sizeof *part->tensors);
    g->n_tensors = n;
    return MVM_OK;
}

mvm_status mvm_gguf_join_parts(mvm_gguf *g, const char *path)
{
    uint32_t no, count;
    mvm_status st = split_keys(g, path, &no, &count);
    if (st != MVM_OK || count == 1)
        return st;
    char suffix[32];
    snprintf(suffix, sizeof suffix, "-%05u-of-%05u.gguf", no + 1, count);
    size_t len = strlen(path), slen = strlen(suffix);
    if (len <= slen || strcmp(path + len - slen, suffix) != 0)
        return mvm_fail(MVM_ERR_INVALID, "%s: part %u of a split model of %u, but not named "
                        "PREFIX%s as gguf-split names them, so the other parts cannot be found",
                        path, no + 1, count, suffix);
    if (no != 0)
        return mvm_fail(MVM_ERR_INVALID, "%s is part %u of %u of a split model: open the first, "
                        "%.*s-00001-of-%05u.gguf", path, no + 1, count, (int)(len - slen), path,
                        count);
    if (!(g->parts = calloc(count - 1, sizeof *g->parts)))
        return mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", path);
    for (uint32_t i = 1; i < count && st == MVM_OK; i++) {
        st = open_part(path, slen, i, count, &g->parts[i - 1]);
        if (st == MVM_OK) {
            g->n_parts = i;
            st = adopt_tensors(g, g->parts[i - 1], path);
        }
    }
    if (st == MVM_OK)
        st = mvm_gguf_ix_build(g, 1, path); /* a name in two parts fails here */
    uint32_t total = 0;
    if (st != MVM_OK || mvm_gguf_find_key(g, "split.tensors.count") < 0)
        return st;
    if (mvm_gguf_get_u32(g, "split.tensors.count", &total) != MVM_OK) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s", mvm_last_error());
        return mvm_fail(MVM_ERR_INVALID, "%s: %s", path, msg);
    }
    if (total != g->n_tensors)
        return mvm_fail(MVM_ERR_INVALID, "%s: split.tensors.count is %u but the %u parts hold "
                        "%llu tensors", path, total, count, (unsigned long long)g->n_tensors);
    return MVM_OK;
}
