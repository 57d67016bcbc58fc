/*
 * Routed experts: which experts of a fused expert tensor a kernel will read. llama.cpp's
 * mul_mat_id kernels (mul_mat_vec_q with `ids`, and mmq/mmf with theirs) are handed the
 * base of the fused tensor and the routing ids the router's top-k kernel wrote into device
 * memory, and pick their experts from the ids on the device. No launch pointer says which.
 * Making the whole tensor resident moves every expert of the layer to run a few of them
 * (128 to run 8 in Qwen3-30B-A3B), and holds them all in the budget.
 *
 * So when a kernel launch names the base of a declared extent (a fused expert tensor whose
 * experts its GGUF file gives, gguf_src.c), this reads the ids before the launch: the
 * launch's stream is synchronised (the ids are then final: the kernels that wrote them came
 * before on it), and the kernel's other pointers into managed memory (not into fused
 * tensors) are read, up to 16 KiB each. Which one holds the ids is not known: llama.cpp's
 * live in its compute buffer, where ggml's allocator may have reused the bytes of an input
 * the program copied from the host, so no pointer is ruled out by how its bytes were
 * written. Each is taken as int32 ids: its leading run of values below the tensor's expert
 * count. A decode step's ids are a token's k experts; a batch's are every token's; a pointer
 * that holds no ids (activations: floats, whose bit patterns are no small integers) ends its
 * run at once, or names a few experts needlessly (zeros name expert 0). The launch then
 * names those experts' slices.
 *
 * Kernels whose ids reach them only through buffers the interposer does not manage (llama.cpp's
 * batched mmq gets per-expert bounds its helper kernel wrote into ggml's pool) find nothing:
 * the tensor is named whole, as without routing.
 *
 * What it costs: one stream synchronisation and one small device-to-host copy per launch
 * that names a fused tensor not wholly resident (the report's routed_reads and routing_ns),
 * which stalls the program's queue for that stream at every such launch. None when the
 * tensor is resident whole, or while a capture is under way (a sync would break it; the
 * tensor is named whole, and graph launches name their fused tensors whole too: their ids
 * are written inside the graph, after the interposer's last chance to read them).
 *
 * A wrong guess costs speed, never data: an expert the kernel reads that is not resident
 * is read from its host home through the mapping.
 */
#include <stdbool.h>
#include <stdlib.h>

#include "interpose/preload.h"

#define MAX_ROUTED 8         /* fused tensors one launch names (gate, up: 2 in llama.cpp) */
#define MAX_CANDIDATES 8     /* pointers read for ids */
#define ID_WORDS 4096        /* 16 KiB: 512 tokens of top-8 */

typedef struct scan {
    mvm_objset *set;
    mvm_obj *routed[MAX_ROUTED];
    uint64_t cand[MAX_CANDIDATES];
    uint32_t n_routed, n_cand;
} scan;

static void emit(void *ctx, uint64_t va)
{
    scan *s = ctx;
    mvm_alloc *a = mvm_heap_find(va);
    if (!a)
        return;
    mvm_obj *e = mvm_heap_extent(a, va);
    if (e->experts && e->slice && va == e->va) {
        for (uint32_t i = 0; i < s->n_routed; i++)
            if (s->routed[i] == e)
                return;
        if (s->n_routed < MAX_ROUTED) {
            s->routed[s->n_routed++] = e;
            return;
        }
    }
    mvm_objset_add_obj(s->set, mvm_slice_of(e, va));
    if (!e->experts && s->n_cand < MAX_CANDIDATES)
        s->cand[s->n_cand++] = va;
}

/* The leading run of ids below max_e in words[0, n), each new one added to r. */
static void take_ids(mvm_route *r, const int32_t *words, uint32_t n, uint32_t max_e,
                     uint8_t *seen)
{
    for (uint32_t w = 0; w < n; w++) {
        int32_t v = words[w];
        if (v < 0 || (uint32_t)v >= max_e)
            return;
        if (!(seen[v / 8u] & (1u << (v % 8u)))) {
            seen[v / 8u] |= (uint8_t)(1u << (v % 8u));
            r->expert[r->n++] = (uint16_t)v;
        }
    }
}

static void read_ids(mvm_route *r, const scan *s, uint32_t max_e)
{
    int32_t *words = malloc(ID_WORDS * sizeof *words); /* once per routed launch */
    uint8_t seen[MVM_ROUTE_MAX_EXPERTS / 8] = {0};
    uint64_t t0 = mvm_now_ns();
    r->read = true;
    r->n = 0;
    bool synced = words && s->n_cand && mvm_real_fn.cuStreamSynchronize &&
                  mvm_real_fn.cuMemcpyDtoH_v2 &&
                  mvm_real_fn.cuStreamSynchronize(r->stream) == CUDA_SUCCESS;
    for (uint32_t i = 0; synced && i < s->n_cand; i++) {
        mvm_alloc *a = mvm_heap_find(s->cand[i]);
        uint64_t left = a->va + a->bytes - s->cand[i], bytes = ID_WORDS * sizeof *words;
        bytes = (left < bytes ? left : bytes) / sizeof *words * sizeof *words;
        if (bytes && mvm_real_fn.cuMemcpyDtoH_v2(words, s->cand[i], bytes) == CUDA_SUCCESS)
            take_ids(r, words, (uint32_t)(bytes / sizeof *words), max_e, seen);
    }
    free(words);
    atomic_fetch_add_explicit(&mvm_interposer.routed_reads, 1, memory_order_relaxed);
    if (!r->n)
        atomic_fetch_add_explicit(&mvm_interposer.routed_whole, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&mvm_interposer.routed_experts, r->n, memory_order_relaxed);
    atomic_fetch_add_explicit(&mvm_interposer.routing_ns, mvm_now_ns() - t0, memory_order_relaxed);
}

void mvm_route_collect(mvm_route *r, CUfunction f, void **params, void **extra,
                       mvm_objset *set)
{
    scan s = {.set = set};
    mvm_scan_params(f, params, extra, emit, &s);
    if (!s.n_routed)
        return;
    /* Resident whole (the budget holds the layer), or mid-capture: no read. */
    if (mvm_paging_resident(s.routed, s.n_routed) ||
        atomic_load_explicit(&mvm_interposer.captures, memory_order_acquire)) {
        mvm_objset_append(set, s.routed, s.n_routed);
        return;
    }
    uint32_t max_e = 0;
    for (uint32_t i = 0; i < s.n_routed; i++)
        max_e = s.routed[i]->experts > max_e ? s.routed[i]->experts : max_e;
    if (!r->read)
        read_ids(r, &s, max_e < MVM_ROUTE_MAX_EXPERTS ? max_e : MVM_ROUTE_MAX_EXPERTS);
    if (!r->n) {
        mvm_objset_append(set, s.routed, s.n_routed);
        return;
    }
    for (uint32_t i = 0; i < s.n_routed; i++)
        for (uint32_t k = 0; k < r->n; k++)
            if (r->expert[k] < s.routed[i]->experts) {
                mvm_obj *slice = &s.routed[i]->slice[r->expert[k]];
                mvm_objset_append(set, &slice, 1);
            }
}
