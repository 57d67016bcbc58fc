/*
 * `moevm run --logits-out` (logits_out.h).
 */
#include "tools/logits_out.h"

#include <errno.h>
#include <string.h>

/* A write that fails keeps its reason: a full disk shows when a full buffer is flushed, and
 * errno is gone by the close. */
static void put(mvm_logits_out *lf, const void *p, size_t bytes)
{
    errno = 0;
    if (fwrite(p, 1, bytes, lf->f) != bytes && !lf->err)
        lf->err = errno ? errno : EIO;
}

int mvm_logits_open(mvm_logits_out *lf, const char *path, uint32_t n_vocab)
{
    lf->n_vocab = n_vocab;
    lf->rows = 0;
    lf->err = 0;
    if (!(lf->f = fopen(path, "wb"))) {
        fprintf(stderr, "moevm run: --logits-out %s: %s\n", path, strerror(errno));
        return 1;
    }
    uint32_t hdr[4] = {0, 1, n_vocab, 0};
    memcpy(hdr, "MVML", 4);
    put(lf, hdr, sizeof hdr);
    return 0;
}

void mvm_logits_add(mvm_logits_out *lf, const int32_t *tokens, uint32_t pos0, uint32_t n,
                    const float *logits)
{
    for (uint32_t i = 0; i < n && lf->f; i++) {
        int32_t rec[2] = {tokens[i], (int32_t)(pos0 + i)};
        put(lf, rec, sizeof rec);
        put(lf, logits + (size_t)i * lf->n_vocab, sizeof(float) * lf->n_vocab);
        lf->rows++;
    }
}

int mvm_logits_close(mvm_logits_out *lf, const char *path)
{
    if (!lf->f)
        return 0;
    /* The first failure's reason: a row's, else the seek's (it flushes what the rows left
     * buffered), else the close's (what the count left). */
    int err = lf->err;
    errno = 0;
    if (!err && (fseek(lf->f, 12, SEEK_SET) != 0 || fwrite(&lf->rows, 4, 1, lf->f) != 1))
        err = errno ? errno : EIO;
    errno = 0;
    if (fclose(lf->f) != 0 && !err)
        err = errno ? errno : EIO;
    if (err)
        fprintf(stderr, "moevm run: --logits-out %s: write failed: %s\n", path, strerror(err));
    return err != 0;
}
