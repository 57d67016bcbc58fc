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
 * written. Each is taken as int32 ids laid out as ggml lays them out: a row of E words (the
 * tensor's experts) per token, whose first k (the file's expert_used_count) are the token's
 * experts, distinct and below E; rows are read while they are such. So a decode step's row
 * names its k experts even where the rest of the row holds the argsort's other experts, and
 * a pointer that holds no ids (activations: floats, whose bit patterns are no small
 * integers; zeros, which repeat) names none. The first pointer that holds ids is the
 * launch's (read_ids says why). A file that gives no k falls back to each pointer's leading
 * run of values below E, which can name experts needlessly. The launch then names those
 * experts' slices.
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

static void add_id(mvm_route *r, uint32_t v, uint8_t *seen)
{
    if (!(seen[v / 8u] & (1u << (v % 8u)))) {
        seen[v / 8u] |= (uint8_t)(1u << (v % 8u));
        r->expert[r->n++] = (uint16_t)v;
    }
}

/* Without the file's top-k: the leading run of ids below max_e in words[0, n). */
static void take_run(mvm_route *r, const int32_t *words, uint32_t n, uint32_t max_e,
                     uint8_t *seen)
{
    for (uint32_t w = 0; w < n && words[w] >= 0 && (uint32_t)words[w] < max_e; w++)
        add_id(r, (uint32_t)words[w], seen);
}

/* With it: ggml's layout of the ids, a row of `experts` words per token whose first k are
 * the token's experts (llama.cpp's top-k is a view of the first k columns of the argsort of
 * every expert's score; its fused top-k kernel writes just those k of each row). Rows are
 * taken while their k are distinct ids below `experts`; the rest of a row (the argsort's
 * other experts, or whatever the fused kernel left there) is never read as ids, so a
 * decode step names its k experts, not all of them, and a buffer of zeros names none. */
static void take_rows(mvm_route *r, const int32_t *words, uint32_t n, uint32_t experts,
                      uint32_t k, uint8_t *seen)
{
    for (uint64_t at = 0; at + k <= n; at += experts) {
        const int32_t *id = words + at;
        for (uint32_t j = 0; j < k; j++) {
            if (id[j] < 0 || (uint32_t)id[j] >= experts)
                return;
            for (uint32_t i = 0; i < j; i++)
                if (id[i] == id[j])
                    return;
        }
        for (uint32_t j = 0; j < k; j++)
            add_id(r, (uint32_t)id[j], seen);
    }
}

/* The ids of the launch: the first candidate pointer, in parameter order, whose words are
 * ids, read as rows of `experts` words when the file gave the top-k (`used`), else as a
 * leading run of values below `experts`. The first, because ggml's kernels take their ids
 * before their output (mul_mat_vec_q, mul_mat_vec_f and mul_mat_f: weights, activations,
 * ids, ..., output), and an output's bytes are the compute buffer's reused ones, which may
 * still hold an earlier layer's ids. */
static void read_ids(mvm_route *r, const scan *s, uint32_t experts, uint32_t used)
{
    int32_t *words = malloc(ID_WORDS * sizeof *words); /* once per routed launch */
    uint8_t seen[MVM_ROUTE_MAX_EXPERTS / 8] = {0};
    uint64_t t0 = mvm_now_ns();
    r->read = true;
    r->n = 0;
    bool synced = words && s->n_cand && mvm_real_fn.cuStreamSynchronize &&
                  mvm_real_fn.cuMemcpyDtoH_v2 &&
                  mvm_real_fn.cuStreamSynchronize(r->stream) == CUDA_SUCCESS;
    for (uint32_t i = 0; synced && i < s->n_cand && !r->n; i++) {
        mvm_alloc *a = mvm_heap_find(s->cand[i]);
        uint64_t left = a->va + a->bytes - s->cand[i], bytes = ID_WORDS * sizeof *words;
        bytes = (left < bytes ? left : bytes) / sizeof *words * sizeof *words;
        if (!bytes)
            continue;
        if (mvm_real_fn.cuMemcpyDtoH_v2(words, s->cand[i], bytes) != CUDA_SUCCESS)
            break; /* a later pointer might be the output's stale bytes: name it whole */
        if (used)
            take_rows(r, words, (uint32_t)(bytes / sizeof *words), experts, used, seen);
        else
            take_run(r, words, (uint32_t)(bytes / sizeof *words), experts, seen);
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
    /* Rows need one shape: every routed tensor of the launch with the same experts and
     * top-k (a layer's gate, up and down have), within what a route holds. */
    uint32_t max_e = 0, used = s.routed[0]->used;
    for (uint32_t i = 0; i < s.n_routed; i++) {
        max_e = s.routed[i]->experts > max_e ? s.routed[i]->experts : max_e;
        if (s.routed[i]->used != used || s.routed[i]->experts != s.routed[0]->experts)
            used = 0;
    }
    if (max_e > MVM_ROUTE_MAX_EXPERTS)
        max_e = MVM_ROUTE_MAX_EXPERTS, used = 0;
    if (!r->read)
        read_ids(r, &s, max_e, used);
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
