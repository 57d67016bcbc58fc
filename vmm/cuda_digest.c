/*
 * Clean-state digests of a cuda pool's chunks (vmm/digest.h): after each load the copy
 * stream digests the chunk into a device slot; at eviction the same kernel digests it again
 * and compares, and only a page whose digest changed is copied home. A page costs one
 * kernel over device memory at load (queued, nothing waits for it) and one at eviction,
 * whose answers come back for all the evicted pages in one 8-byte-a-page read and one wait;
 * a write-back moves the whole page over PCIe.
 *
 * The kernel comes from vmm/digest.cu as PTX embedded at build time (MVM_DIGEST_PTX). Where
 * the build had no nvcc, or the driver cannot load that PTX (a driver older than the
 * toolkit), the digests are off and every eviction writes back, as before. Every launch
 * goes to the copy stream, so they never overlap (the kernel's block counter lives in the
 * module) and each mark lands after its chunk's load.
 */
#include <stdlib.h>
#include <string.h>

#include "vmm/backend_cuda.h"
#include "vmm/digest.h"
#include "vmm/error.h"

#ifdef MVM_DIGEST_PTX
#include "digest_ptx.h" /* generated: static const char mvm_digest_ptx[] */
#endif

struct cuda_digest {
    CUmodule module;
    CUfunction fn;
    CUdeviceptr slots; /* two words per chunk (its clean digest), then a word per chunk for
                          the answers of one batch of checks */
    size_t n_chunks;
    bool *marked;      /* chunk has a clean digest queued after its last load */
};

static void release(cuda_backend *c, cuda_digest *d)
{
    if (d->slots)
        c->cu.MemFree(d->slots);
    if (d->module)
        c->cu.ModuleUnload(d->module);
    free(d->marked);
    free(d);
}

cuda_digest *mvm_cuda_digest_open(cuda_backend *c, size_t n_chunks)
{
#ifndef MVM_DIGEST_PTX
    (void)c, (void)n_chunks;
    mvm_log(MVM_LOG_DEBUG, "clean evictions off: built without nvcc (no digest kernel)");
    return NULL;
#else
    cuda_digest *d = calloc(1, sizeof *d);
    if (!d || !(d->marked = calloc(n_chunks ? n_chunks : 1, sizeof *d->marked))) {
        free(d);
        mvm_log(MVM_LOG_DEBUG, "clean evictions off: out of memory");
        return NULL;
    }
    d->n_chunks = n_chunks;
    const char *what = "cuModuleLoadData (digest kernel)";
    CUresult r = c->cu.ModuleLoadData(&d->module, mvm_digest_ptx);
    if (r == CUDA_SUCCESS) {
        what = "cuModuleGetFunction (mvm_digest)";
        r = c->cu.ModuleGetFunction(&d->fn, d->module, "mvm_digest");
    }
    if (r == CUDA_SUCCESS) {
        what = "cuMemAlloc (digest slots)";
        r = c->cu.MemAlloc(&d->slots, (3 * n_chunks + 1) * sizeof(uint64_t));
    }
    if (r != CUDA_SUCCESS) {
        mvm_cu_fail(c, r, what);
        mvm_log(MVM_LOG_DEBUG, "clean evictions off: %s", mvm_last_error());
        release(c, d);
        return NULL;
    }
    return d;
#endif
}

void mvm_cuda_digest_close(cuda_backend *c, cuda_digest *d)
{
    if (!d)
        return;
    c->cu.CtxSetCurrent(c->ctx); /* cuMemFree needs it; the space may go from any thread */
    release(c, d);
}

static CUresult launch(cuda_backend *c, cuda_digest *d, CUdeviceptr va, size_t bytes,
                       CUdeviceptr out, CUdeviceptr expect)
{
    uint64_t n = bytes / sizeof(uint64_t);
    void *args[] = {&va, &n, &out, &expect};
    return c->cu.LaunchKernel(d->fn, mvm_digest_grid(n), 1, 1, MVM_DIGEST_BLOCK, 1, 1, 0,
                              c->copy_stream, args, NULL);
}

void mvm_cuda_digest_mark(cuda_backend *c, cuda_digest *d, size_t chunk, CUdeviceptr va,
                          size_t bytes)
{
    if (!d || chunk >= d->n_chunks)
        return;
    CUdeviceptr slot = d->slots + 2 * chunk * sizeof(uint64_t);
    CUresult r = launch(c, d, va, bytes, slot, 0);
    d->marked[chunk] = r == CUDA_SUCCESS;
    if (r != CUDA_SUCCESS) {
        mvm_cu_fail(c, r, "cuLaunchKernel (digest at load)");
        mvm_log(MVM_LOG_DEBUG, "chunk %zu will be written back: %s", chunk, mvm_last_error());
    }
}

int mvm_cuda_digest_unchanged(cuda_backend *c, cuda_digest *d, CUdeviceptr view, size_t page,
                              const size_t *chunks, size_t n, bool *same)
{
    memset(same, 0, n * sizeof *same);
    uint64_t *answer = malloc((n ? n : 1) * sizeof *answer);
    bool *asked = calloc(n ? n : 1, sizeof *asked);
    if (!answer || !asked) {
        free(answer);
        free(asked);
        return 0; /* all "changed": copied home */
    }
    /* Answer i lands in slot i of the answer area: one copy brings them all back. A chunk
     * whose check cannot be launched is simply copied home. */
    CUdeviceptr answers = d->slots + 2 * d->n_chunks * sizeof(uint64_t);
    size_t m = n < d->n_chunks ? n : d->n_chunks, n_asked = 0; /* more: repeats, copied */
    for (size_t i = 0; i < m; i++) {
        size_t k = chunks[i];
        if (k >= d->n_chunks || !d->marked[k])
            continue;
        asked[i] = launch(c, d, view + k * page, page, answers + i * sizeof(uint64_t),
                          d->slots + 2 * k * sizeof(uint64_t)) == CUDA_SUCCESS;
        n_asked += asked[i];
    }
    const char *what = "cuMemcpyDtoHAsync (digest answers)";
    CUresult r = CUDA_SUCCESS;
    if (n_asked)
        r = c->cu.MemcpyDtoHAsync(answer, answers, m * sizeof *answer, c->copy_stream);
    if (n_asked && r == CUDA_SUCCESS) {
        what = "cuStreamSynchronize (digest answers)";
        r = c->cu.StreamSynchronize(c->copy_stream);
    }
    for (size_t i = 0; r == CUDA_SUCCESS && i < m; i++)
        same[i] = asked[i] && answer[i] == 1;
    free(answer);
    free(asked);
    if (r != CUDA_SUCCESS) {
        mvm_cu_fail(c, r, what);
        return -1;
    }
    return 0;
}
