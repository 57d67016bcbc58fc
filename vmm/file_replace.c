/* Replacing a file whole (file_replace.h). */
#include "vmm/file_replace.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vmm/error.h"

mvm_status mvm_file_replace_open(mvm_file_replace *r, const char *path, const char *mode)
{
    *r = (mvm_file_replace){.path = path};
    size_t n = strlen(path);
    if (!(r->tmp = malloc(n + 5)))
        return mvm_fail(MVM_ERR_NOMEM, "%s: out of memory", path);
    memcpy(r->tmp, path, n);
    memcpy(r->tmp + n, ".tmp", 5);
    if (!(r->f = fopen(r->tmp, mode))) {
        mvm_status st = mvm_fail(MVM_ERR_BACKEND, "%s: cannot create: %s", r->tmp,
                                 strerror(errno));
        free(r->tmp);
        r->tmp = NULL;
        return st;
    }
    return MVM_OK;
}

mvm_status mvm_file_replace_commit(mvm_file_replace *r, mvm_status st)
{
    if (st == MVM_OK && ferror(r->f))
        st = mvm_fail(MVM_ERR_BACKEND, "%s: writing failed", r->tmp);
    /* fsync before the rename, so that the final name never refers to data still in
     * flight: after a crash it is the old file or the complete new one. */
    if (st == MVM_OK && (fflush(r->f) != 0 || fsync(fileno(r->f)) != 0))
        st = mvm_fail(MVM_ERR_BACKEND, "%s: writing failed: %s", r->tmp, strerror(errno));
    if (fclose(r->f) != 0 && st == MVM_OK)
        st = mvm_fail(MVM_ERR_BACKEND, "%s: closing failed: %s", r->tmp, strerror(errno));
    if (st == MVM_OK && rename(r->tmp, r->path) != 0)
        st = mvm_fail(MVM_ERR_BACKEND, "renaming %s to %s failed: %s", r->tmp, r->path,
                      strerror(errno));
    if (st != MVM_OK)
        unlink(r->tmp);
    free(r->tmp);
    *r = (mvm_file_replace){0};
    return st;
}
