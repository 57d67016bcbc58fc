/*
 * Replacing a file whole: written to PATH.tmp, flushed to disk, then renamed over PATH, so
 * that a reader (or a crash) sees the old file or the complete new one, never half of it.
 * The GGUF writer, trace files and trained predictors all write this way.
 */
#ifndef MVM_VMM_FILE_REPLACE_H
#define MVM_VMM_FILE_REPLACE_H

#include <stdio.h>

#include "moevm/moevm.h"

typedef struct mvm_file_replace {
    FILE *f;          /* write here */
    char *tmp;        /* PATH.tmp, for messages */
    const char *path; /* the caller's, kept until commit */
} mvm_file_replace;

/* Creates PATH.tmp (mode "w" or "wb"). MVM_ERR_BACKEND naming it when it cannot be
 * created, MVM_ERR_NOMEM. */
mvm_status mvm_file_replace_open(mvm_file_replace *r, const char *path, const char *mode);

/* Ends the write. With st == MVM_OK and no write error on the stream: flushes, fsyncs,
 * closes and renames PATH.tmp over PATH (MVM_ERR_BACKEND naming what failed). Otherwise
 * (or when that fails) PATH.tmp is removed and PATH left as it was. Returns st when it
 * was an error already, else the commit's own status. */
mvm_status mvm_file_replace_commit(mvm_file_replace *r, mvm_status st);

#endif
