/*
 * Clean-state digests of a cuda pool's chunks (vmm/digest.h): the digest of each chunk as
 * its last load left it (its mark), and at eviction a check of which chunks still have it;
 * only a page whose digest changed is copied home.
 *
 * Both run in batches, one kernel launch each (vmm/digest.cu): the marks of a batch of
 * loads go to the copy stream after the batch's copies, when the worker waits for them
 * (copy_wait), and the checks of one eviction go together, their answers coming back in one
 * read and one wait. A launch per page would stall the copy engine between the copies of a
 * batch and cost an eviction of a 176 MiB object 88 launches and their latencies.
 *
 * A mark must be complete before its page is mapped where the program's kernels could write
 * it, else it might digest their writes and a changed page would pass for clean: the
 * worker's wait for a batch covers its marks, and only then does the space map the pages.
 *
 * Device memory: the digests (two words per chunk), then two areas, one for marks and one
 * for checks, each with the batch's chunk ids and the kernel's accumulators (zeroed once
 * here, left zero by each launch), then the checks' answers. Each area has one writer at a time: marks are
 * made only by the space's migration worker, checks only under the space's lock; and all
 * launches go to the copy stream, so two launches on one area never overlap.
 *
 * The kernel comes from vmm/digest.cu as PTX embedded at build time (MVM_DIGEST_PTX). Where
 * the build had no nvcc, or the driver cannot load that PTX (a driver older than the
 * toolkit), the digests are off and every eviction writes back, as before. A mark or check
 * that cannot be launched leaves its pages "changed": they are copied home.
 */
#include <stdlib.h>
#include <string.h>

#include "vmm/backend_cuda.h"
#include "vmm/digest.h"
#include "vmm/error.h"

#ifdef MVM_DIGEST_PTX
#include "mvm_digest_ptx.h" /* generated: const char mvm_digest_ptx[] (embed_incbin.cmake) */
#endif

/* Words of device memory per chunk: its digest, in each area an id and the kernel's
 * accumulators (two sums and a count of blocks done), and an answer. */
enum { DIGEST_WORDS = 2, WORK_WORDS = 3, AREA_WORDS = 1 + WORK_WORDS, ANSWER_WORDS = 1 };

/* What one batch launch needs, on the device and staged on the host. */
struct area {
    CUdeviceptr ids, work;
    uint64_t *host_ids;
};

struct cuda_digest {
    CUmodule module;
    CUfunction fn;
    CUdeviceptr mem;          /* starts with the digests, [2 * n_chunks] words */
    CUdeviceptr view;         /* the pool view: chunk k at view + k * page */
    size_t page, n_chunks;
    struct area marks, checks;
    CUdeviceptr answers;      /* [n_chunks] the checks' answers, read back into host_answers */
    uint64_t *host_answers;
    bool *marked;   /* chunk has a mark after its last load */
    bool *due;      /* chunk loaded since the last flush: its mark is to come */
    size_t n_due;   /* entries of marks.host_ids in use */
};

static void release(cuda_backend *c, cuda_digest *d)
{
    if (d->mem)
        c->cu.MemFree(d->mem);
    if (d->module)
        c->cu.ModuleUnload(d->module);
    free(d->marks.host_ids), free(d->checks.host_ids), free(d->host_answers);
    free(d->marked), free(d->due);
    free(d);
}

static CUdeviceptr area_layout(struct area *a, CUdeviceptr at, size_t n)
{
    a->ids = at;
    a->work = a->ids + n * sizeof(uint64_t);
    return a->work + WORK_WORDS * n * sizeof(uint64_t);
}

cuda_digest *mvm_cuda_digest_open(cuda_backend *c, size_t n_chunks, CUdeviceptr view,
                                  size_t page)
{
#ifndef MVM_DIGEST_PTX
    (void)c, (void)n_chunks, (void)view, (void)page;
    mvm_log(MVM_LOG_DEBUG, "clean evictions off: built without nvcc (no digest kernel)");
    return NULL;
#else
    size_t n = n_chunks ? n_chunks : 1;
    cuda_digest *d = calloc(1, sizeof *d);
    if (!d || !(d->marked = calloc(n, sizeof *d->marked)) ||
        !(d->due = calloc(n, sizeof *d->due)) ||
        !(d->marks.host_ids = malloc(n * sizeof(uint64_t))) ||
        !(d->checks.host_ids = malloc(n * sizeof(uint64_t))) ||
        !(d->host_answers = malloc(n * sizeof(uint64_t)))) {
        if (d)
            release(c, d);
        mvm_log(MVM_LOG_DEBUG, "clean evictions off: out of memory");
        return NULL;
    }
    d->n_chunks = n_chunks, d->view = view, d->page = page;
    size_t bytes = (DIGEST_WORDS + 2 * AREA_WORDS + ANSWER_WORDS) * n * sizeof(uint64_t);
    const char *what = "cuModuleLoadData (digest kernel)";
    CUresult r = c->cu.ModuleLoadData(&d->module, mvm_digest_ptx);
    if (r == CUDA_SUCCESS) {
        what = "cuModuleGetFunction (mvm_digest_pages)";
        r = c->cu.ModuleGetFunction(&d->fn, d->module, "mvm_digest_pages");
    }
    if (r == CUDA_SUCCESS) {
        what = "cuMemAlloc (digests)";
        r = c->cu.MemAlloc(&d->mem, bytes);
    }
    if (r == CUDA_SUCCESS) { /* the accumulators start at zero, before any launch */
        what = "cuMemsetD8Async (digests)";
        r = c->cu.MemsetD8Async(d->mem, 0, bytes, c->copy_stream);
    }
    if (r != CUDA_SUCCESS) {
        mvm_cu_fail(&c->cu, r, what);
        mvm_log(MVM_LOG_DEBUG, "clean evictions off: %s", mvm_last_error());
        release(c, d);
        return NULL;
    }
    CUdeviceptr areas = d->mem + DIGEST_WORDS * n * sizeof(uint64_t);
    d->answers = area_layout(&d->checks, area_layout(&d->marks, areas, n), n);
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

/* Queues, on the copy stream, the upload of a's first n ids and the kernel over them:
 * marks when answers is 0, checks answering there otherwise. */
static CUresult launch(cuda_backend *c, cuda_digest *d, struct area *a, size_t n,
                       CUdeviceptr answers)
{
    CUresult r = c->cu.MemcpyHtoDAsync(a->ids, a->host_ids, n * sizeof(uint64_t),
                                       c->copy_stream);
    if (r != CUDA_SUCCESS)
        return r;
    mvm_digest_args args = {
        .base = d->view,
        .page_words = d->page / sizeof(uint64_t),
        .ids = a->ids,
        .n = n,
        .digests = d->mem,
        .work = a->work,
        .answers = answers,
    };
    void *params[] = {&args};
    unsigned pages = n < MVM_DIGEST_MAX_PAGES ? (unsigned)n : MVM_DIGEST_MAX_PAGES;
    return c->cu.LaunchKernel(d->fn, pages, mvm_digest_grid(args.page_words), 1,
                              MVM_DIGEST_BLOCK, 1, 1, 0, c->copy_stream, params, NULL);
}

void mvm_cuda_digest_loaded(cuda_digest *d, size_t chunk)
{
    if (!d || chunk >= d->n_chunks)
        return;
    d->marked[chunk] = false; /* until the mark of this load is queued */
    if (!d->due[chunk]) {
        d->due[chunk] = true;
        d->marks.host_ids[d->n_due++] = chunk;
    }
}

void mvm_cuda_digest_flush(cuda_backend *c, cuda_digest *d)
{
    if (!d || !d->n_due)
        return;
    CUresult r = launch(c, d, &d->marks, d->n_due, 0);
    for (size_t i = 0; i < d->n_due; i++) {
        size_t k = (size_t)d->marks.host_ids[i];
        d->due[k] = false;
        d->marked[k] = r == CUDA_SUCCESS;
    }
    if (r != CUDA_SUCCESS) {
        mvm_cu_fail(&c->cu, r, "digests after a load");
        mvm_log(MVM_LOG_DEBUG, "%zu loaded chunk(s) will be written back: %s", d->n_due,
                mvm_last_error());
    }
    d->n_due = 0;
}

int mvm_cuda_digest_unchanged(cuda_backend *c, cuda_digest *d, const size_t *chunks, size_t n,
                              bool *same)
{
    memset(same, 0, n * sizeof *same);
    /* Ask for every chunk with a mark (a repeat is asked twice); at most n_chunks fit in
     * the area, and more can only be repeats, copied home. */
    size_t m = 0;
    for (size_t i = 0; i < n && m < d->n_chunks; i++)
        if (chunks[i] < d->n_chunks && d->marked[chunks[i]])
            d->checks.host_ids[m++] = chunks[i];
    if (!m)
        return 0;
    const char *what = "launching the digest checks";
    CUresult r = launch(c, d, &d->checks, m, d->answers);
    if (r == CUDA_SUCCESS) {
        what = "cuMemcpyDtoHAsync (digest answers)";
        r = c->cu.MemcpyDtoHAsync(d->host_answers, d->answers,
                                  m * sizeof(uint64_t), c->copy_stream);
    }
    if (r == CUDA_SUCCESS) {
        what = "cuStreamSynchronize (digest answers)";
        r = c->cu.StreamSynchronize(c->copy_stream);
    }
    if (r != CUDA_SUCCESS) {
        mvm_cu_fail(&c->cu, r, what);
        return -1;
    }
    for (size_t i = 0, j = 0; i < n && j < m; i++)
        if (chunks[i] < d->n_chunks && d->marked[chunks[i]])
            same[i] = d->host_answers[j++] == 1;
    return 0;
}
