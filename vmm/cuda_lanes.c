/*
 * The cuda backend's copy lanes: PreScope's AsyncIO (PreScope, section 4.4), loads split
 * across several streams so that one expert's bytes can use more than one copy engine.
 *
 * MOEVM_COPY_STREAMS = 1 (the default) keeps every load on the backend's copy stream, with
 * no extra driver call. With n > 1 each load is cut at page boundaries into up to n stripes,
 * each on the next lane in turn; a load of one page goes whole on the next lane, so the
 * experts of a batch spread over the lanes too. The paper splits an expert by weight matrix
 * (W1, W2, W3 on three streams); a page-aligned split is our reading: it needs no knowledge
 * of the expert's layout, and a page is what the digest marks (vmm/cuda_digest.c) and the
 * remaps deal in.
 *
 * The copy stream stays the one place the rest of the backend orders against: a join records
 * an event on each lane used since the last one and makes the copy stream wait for it
 * (cuStreamWaitEvent), so the digest marks, the fences and a wait on the copy stream come
 * after every load started before them. The lanes never wait for the copy stream: a load
 * never depends on anything but its source, which is host memory the worker owns.
 */
#include "vmm/backend_cuda.h"
#include "vmm/error.h"
#include "vmm/options.h"

mvm_status mvm_cuda_lanes_open(cuda_backend *c)
{
    mvm_option_value v;
    mvm_status st = mvm_option_read(&mvm_opt_copy_streams, &v);
    if (st != MVM_OK)
        return st;
    struct copy_lanes *l = &c->lanes;
    l->n = 1;
    for (unsigned i = 0; v.i > 1 && i < (unsigned)v.i; i++) {
        CU(c, c->cu.EventCreate(&l->end[i], CU_EVENT_DISABLE_TIMING), "cuEventCreate (copy lane)");
        CU(c, c->cu.StreamCreate(&l->s[i], CU_STREAM_NON_BLOCKING), "cuStreamCreate (copy lane)");
    }
    l->n = (unsigned)v.i;
    return MVM_OK;
}

/* Also after a failed open: whatever was made. */
void mvm_cuda_lanes_close(cuda_backend *c)
{
    struct copy_lanes *l = &c->lanes;
    for (unsigned i = 0; i < MVM_COPY_LANES_MAX; i++) {
        if (l->s[i])
            c->cu.StreamDestroy(l->s[i]);
        if (l->end[i])
            c->cu.EventDestroy(l->end[i]);
        l->s[i] = NULL;
        l->end[i] = NULL;
    }
    l->n = 1;
}

mvm_status mvm_cuda_lanes_copy(cuda_backend *c, CUdeviceptr dst, const void *src, size_t len,
                               size_t page)
{
    struct copy_lanes *l = &c->lanes;
    if (l->n == 1) {
        CU(c, c->cu.MemcpyHtoDAsync(dst, src, len, c->copy_stream), "cuMemcpyHtoDAsync");
        return MVM_OK;
    }
    size_t pages = (len + page - 1) / page;
    size_t stripes = pages < l->n ? pages : l->n;
    size_t off = 0;
    for (size_t k = 0; k < stripes; k++) {
        size_t n = pages / stripes + (k < pages % stripes);
        size_t bytes = k + 1 == stripes ? len - off : n * page;
        unsigned lane = l->next;
        CU(c, c->cu.MemcpyHtoDAsync(dst + off, (const char *)src + off, bytes, l->s[lane]),
           "cuMemcpyHtoDAsync");
        l->used |= 1u << lane;
        l->next = (lane + 1) % l->n;
        off += bytes;
    }
    return MVM_OK;
}

mvm_status mvm_cuda_lanes_join(cuda_backend *c)
{
    struct copy_lanes *l = &c->lanes;
    for (unsigned i = 0; i < l->n && l->used; i++) {
        if (!(l->used & 1u << i))
            continue;
        CU(c, c->cu.EventRecord(l->end[i], l->s[i]), "cuEventRecord (copy lane)");
        CU(c, c->cu.StreamWaitEvent(c->copy_stream, l->end[i], 0),
           "cuStreamWaitEvent (copy lanes)");
        l->used &= ~(1u << i);
    }
    return MVM_OK;
}

mvm_status mvm_cuda_lanes_sync(cuda_backend *c)
{
    struct copy_lanes *l = &c->lanes;
    mvm_status st = MVM_OK;
    for (unsigned i = 0; l->n > 1 && i < l->n; i++) {
        CUresult r = c->cu.StreamSynchronize(l->s[i]);
        if (r != CUDA_SUCCESS && st == MVM_OK)
            st = mvm_cu_fail(&c->cu, r, "cuStreamSynchronize (copy lane)");
    }
    if (st == MVM_OK)
        l->used = 0;
    return st;
}
