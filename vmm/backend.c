/* Backend selection: AUTO prefers cuda and falls back to host, saying why at info level. */
#include "vmm/backend.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "vmm/error.h"

void *mvm_mmap_aligned(size_t bytes, size_t align, int prot, int flags)
{
    /* Over-map and trim, so the range starts on an `align` boundary (mmap promises only
     * the system page). */
    size_t total = bytes + align;
    char *p = mmap(NULL, total, prot, flags, -1, 0);
    if (p == MAP_FAILED)
        return MAP_FAILED;
    uintptr_t start = ((uintptr_t)p + align - 1) / align * align;
    if (start > (uintptr_t)p)
        munmap(p, start - (uintptr_t)p);
    size_t tail = (uintptr_t)p + total - (start + bytes);
    if (tail)
        munmap((char *)start + bytes, tail);
    return (void *)start;
}

size_t mvm_huge_page_for(const mvm_backend *b, size_t page, int shared)
{
    size_t huge = b->huge_homes ? mvm_topo_huge_page(shared) : 0;
    return huge && page % huge == 0 ? huge : 0;
}

int mvm_madvise_huge(void *p, size_t len)
{
    if (len == 0 || madvise(p, len, MADV_HUGEPAGE) == 0)
        return 1;
    mvm_log(MVM_LOG_DEBUG, "madvise(MADV_HUGEPAGE) of %zu bytes: %s", len, strerror(errno));
    return 0;
}

size_t mvm_advise_huge(const mvm_backend *b, void *p, size_t len, size_t page, int shared)
{
    size_t huge = mvm_huge_page_for(b, page, shared);
    return huge && mvm_madvise_huge(p, len) ? huge : (size_t)sysconf(_SC_PAGESIZE);
}

mvm_status mvm_backend_open(mvm_backend_kind kind, int device, mvm_backend **out)
{
    switch (kind) {
    case MVM_BACKEND_HOST: return mvm_backend_host_open(out);
    case MVM_BACKEND_CUDA: return mvm_backend_cuda_open(device, out);
    case MVM_BACKEND_AUTO: {
        mvm_status st = mvm_backend_cuda_open(device, out);
        if (st == MVM_OK)
            return st;
        mvm_log(MVM_LOG_INFO, "cuda backend unavailable (%s); using the host backend",
                mvm_last_error());
        return mvm_backend_host_open(out);
    }
    }
    return mvm_fail(MVM_ERR_INVALID, "unknown backend kind %d", (int)kind);
}
