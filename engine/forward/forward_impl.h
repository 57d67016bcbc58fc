/*
 * What the forward pass's front (forward.c: the context, its checks and batching) and its
 * backends (forward_cpu.c on the thread pool, forward_cuda.c on the device) share. A
 * backend computes one batch at a time; the MoE steps' host side is mvm_moe (moe_step.h).
 */
#ifndef MVM_ENGINE_FORWARD_FORWARD_IMPL_H
#define MVM_ENGINE_FORWARD_FORWARD_IMPL_H

#include <stdlib.h>

#include "engine/forward/forward.h"
#include "engine/forward/kv_cache.h"
#include "engine/forward/moe_step.h"

struct mvm_ctx {
    mvm_model *m;
    mvm_pool *pool;
    mvm_moe *moe;
    uint32_t n_ctx, n_batch;
    mvm_kv_layout kv;           /* the KV cache's rows, which the backend allocates */
    uint32_t seq;               /* the sequence selected: kv.blocks are its */
    uint32_t *n_past;           /* [kv.n_seq] the positions each sequence has cached */
    uint32_t *n_new;            /* [kv.n_seq] scratch: a call's tokens of each sequence */
    /* scratch of one batch (mvm_fwd_batch's arrays) and of mvm_ctx_eval's tokens */
    int32_t *b_tok;
    uint32_t *b_pos, *b_seq, *b_out;
    mvm_engine_token *b_in;
    const struct mvm_fwd_backend *be;
    void *state;                /* the backend's */
};

/* One batch as a backend takes it: n <= n_batch tokens, token i of sequence seq[i] at
 * position pos[i] (a sequence's tokens in order, at consecutive positions); the logits of
 * rows out[0 .. n_out), ascending, are wanted, in consecutive rows of n_vocab floats.
 * Sequence s's rows of the cache are mvm_kv_seq_block(&kv, s, ...), whichever is selected. */
typedef struct mvm_fwd_batch {
    const int32_t *tokens;
    const uint32_t *pos, *seq, *out;
    uint32_t n, n_out;
} mvm_fwd_batch;

struct mvm_fwd_backend {
    const char *name;           /* mvm_ctx_backend() */
    mvm_status (*create)(mvm_ctx *c, void **state);
    void (*destroy)(void *state);
    /* logits: NULL when b->n_out is 0 */
    mvm_status (*eval)(mvm_ctx *c, const mvm_fwd_batch *b, float *logits);
    /* mvm_ctx_settle: the policies' work that eval left for later, done; NULL where it
     * leaves none */
    mvm_status (*settle)(const mvm_ctx *c);
    /* mvm_ctx_time_experts, checked; NULL where the backend has no device to time */
    mvm_status (*time_experts)(mvm_ctx *c, uint32_t layer, const int32_t *experts, uint32_t k,
                               const float *x, uint32_t n, double *seconds);
    /* mvm_ctx_expert_rows, its batch checked; NULL on the CPU */
    mvm_status (*expert_rows)(mvm_ctx *c, const mvm_expert_rows *r, float *out);
};

/* Host buffers of the CPU code: 64-byte aligned, for the SIMD kernels. *ok is cleared
 * when one cannot be had (the caller checks once after a series). */
#define MVM_ALIGN64(n) (((n) + 63) & ~(size_t)63)
static inline void *mvm_buf64(size_t n, int *ok)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64) != 0)
        *ok = 0;
    return p;
}

/* The n tokens' embedding rows, dequantised into out ([n][n_embd] floats): both passes
 * start from them on the host. */
void mvm_embed_tokens(const mvm_model *m, const int32_t *tokens, uint32_t n, float *out);

extern const struct mvm_fwd_backend mvm_fwd_cpu;
/* Only in builds with the device kernels (MVM_ENGINE_PTX): see mvm_ctx_device_available. */
extern const struct mvm_fwd_backend mvm_fwd_cuda;
/* The same: the device bytes a context of m with n_ctx positions in batches of n_batch and
 * this KV layout allocates (with SMoE's speculative pass where `speculates`), counted by the
 * code that allocates them (forward_cuda.c), without a device or m's space: *weights for the
 * weights besides the experts, *rest for the KV cache and scratch. */
mvm_status mvm_cuda_fwd_context_bytes(mvm_model *m, uint32_t n_ctx, uint32_t n_batch,
                                      const mvm_kv_layout *kv, int speculates,
                                      uint64_t *weights, uint64_t *rest);

#endif
