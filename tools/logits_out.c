/*
 * `moevm run --logits-out` (logits_out.h).
 */
#include "tools/logits_out.h"

#include <errno.h>
#include <string.h>

int mvm_logits_open(mvm_logits_out *lf, const char *path, uint32_t n_vocab)
{
    lf->n_vocab = n_vocab;
    lf->rows = 0;
    if (!(lf->f = fopen(path, "wb"))) {
        fprintf(stderr, "moevm run: --logits-out %s: %s\n", path, strerror(errno));
        return 1;
    }
    uint32_t hdr[4] = {0, 1, n_vocab, 0};
    memcpy(hdr, "MVML", 4);
    fwrite(hdr, sizeof hdr, 1, lf->f);
    return 0;
}

void mvm_logits_add(mvm_logits_out *lf, const int32_t *tokens, uint32_t pos0, uint32_t n,
                    const float *logits)
{
    for (uint32_t i = 0; i < n && lf->f; i++) {
        int32_t rec[2] = {tokens[i], (int32_t)(pos0 + i)};
        fwrite(rec, sizeof rec, 1, lf->f);
        fwrite(logits + (size_t)i * lf->n_vocab, sizeof(float), lf->n_vocab, lf->f);
        lf->rows++;
    }
}

int mvm_logits_close(mvm_logits_out *lf, const char *path)
{
    if (!lf->f)
        return 0;
    int bad = fseek(lf->f, 12, SEEK_SET) != 0 || fwrite(&lf->rows, 4, 1, lf->f) != 1;
    bad |= ferror(lf->f) != 0;
    bad |= fclose(lf->f) != 0;
    if (bad)
        fprintf(stderr, "moevm run: --logits-out %s: write failed\n", path);
    return bad;
}
