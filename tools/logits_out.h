/*
 * The logits `moevm run --logits-out FILE` writes, every evaluated position's (what
 * tests/ref/check_forward.py compares with the NumPy reference): "MVML", u32 version 1,
 * u32 n_vocab, u32 n_rows, then n_rows records of {i32 token, i32 pos, f32 logits[n_vocab]}.
 * n_rows is patched in when the file is closed.
 */
#ifndef MVM_TOOLS_LOGITS_OUT_H
#define MVM_TOOLS_LOGITS_OUT_H

#include <stdint.h>
#include <stdio.h>

typedef struct mvm_logits_out {
    FILE *f;                    /* NULL: not writing */
    uint32_t n_vocab, rows;
    int err;                    /* errno of the first write that failed, 0 while none has */
} mvm_logits_out;

/* Creates `path` with the header; 1 after a one-line error ("moevm run: --logits-out ..."). */
int mvm_logits_open(mvm_logits_out *lf, const char *path, uint32_t n_vocab);
/* Records n rows: tokens[i] at position pos0 + i, its logits at logits + i * n_vocab. */
void mvm_logits_add(mvm_logits_out *lf, const int32_t *tokens, uint32_t pos0, uint32_t n,
                    const float *logits);
/* Patches the row count in and closes; 1 after a one-line error when a write failed. */
int mvm_logits_close(mvm_logits_out *lf, const char *path);

#endif
