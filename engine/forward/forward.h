/*
 * The forward pass: an inference context (KV cache, scratch buffers, the residency manager
 * and the other policy modules) over a loaded model. Tokens are evaluated in batches of up
 * to n_batch (prefill) or one at a time (decode) through the same code, and a batch may hold
 * several sequences' tokens (a server's requests: mvm_ctx_eval_batch); the experts of every
 * MoE layer run through their fixed addresses in the expert space.
 *
 * The context computes where the model's expert space is: on the CPU, on the thread pool,
 * when its backend is host (forward_cpu.c); on the space's GPU when it is cuda
 * (forward_cuda.c: the non-expert weights and the KV cache are copied to the device, the
 * routing and the policy modules stay on the host). Both run the same MoE step
 * (moe_step.h), so a run's routing, residency and statistics mean the same on either.
 */
#ifndef MVM_ENGINE_FORWARD_FORWARD_H
#define MVM_ENGINE_FORWARD_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/compute/pool.h"
#include "engine/forward/prefetch.h"
#include "engine/forward/residency.h"
#include "engine/forward/substitute.h"
#include "engine/model/model.h"
#include "moevm/engine.h" /* mvm_engine_token: a batch's token, the API's and the context's */

/* One (token, MoE layer) as routed: what mvm_route_fn observers see. */
typedef struct mvm_route_record {
    uint32_t pos, layer, n_expert, k, n_embd;
    const float *probs;        /* [n_expert] the router's probabilities */
    const int *selected;       /* [k] the router's choice, best first */
    const float *weights;      /* [k] their weights */
    const int *ran;            /* [k] the experts computed, when the route module changed
                                  the row (best first); NULL when they are `selected` */
    const float *ran_weights;  /* [k] their weights as applied; NULL with ran */
    const float *hidden;       /* [n_embd] the router's input: the layer's MoE input after
                                  its norm (what predictors learn from) */
} mvm_route_record;

/* Called for every (token, MoE layer) once the layer's routing is final. */
typedef void (*mvm_route_fn)(void *ctx, const mvm_route_record *r);

typedef struct mvm_ctx mvm_ctx;

/* The policy modules a context runs (NULL names take the MOEVM_* options), how its steps
 * wait for copies, and its KV cache's type. */
typedef struct mvm_ctx_policies {
    mvm_resid_params residency;   /* evict (the shape fields are the model's) */
    mvm_prefetch_params prefetch; /* predict */
    mvm_route_params routing;     /* route */
    /* 1: each MoE step waits until its experts' copies have landed before computing them,
     * as a device reader must (and as the simulator models a GPU); 0: an expert still
     * loading runs from its home meanwhile (the CPU backend's way: no wait). On a GPU that
     * cannot read the homes (no HOST_NUMA VMM: mvm_space_info.home_mapped 0) steps always
     * wait, and a step whose experts do not all fit the budget runs in rounds. */
    int wait_loads;
    /* one of MVM_KV_TYPES (engine/forward/kv_cache.h); NULL: MOEVM_KV_TYPE */
    const char *kv_type;
    /* Sequences the context holds (0: 1), each its own n_ctx positions of KV cache: a
     * server's requests share one context, so one residency manager sees all their
     * routing and one budget holds their experts (mvm_ctx_select_seq). */
    uint32_t n_seq;
    /* Benchmarks only (`moevm bench --routing`): the token at position pos of MoE layer
     * `layer` runs the K experts sel[] with weights w[] that this writes instead of the
     * router's (valid expert ids, distinct); NULL: the model's own routing. It is asked
     * after the router has chosen, or before where decode routes on the device
     * (docs/engine.md): what it writes must not depend on what sel[] and w[] hold. */
    void (*route_override)(void *ctx, uint32_t layer, uint32_t pos, int *sel, float *w);
    void *route_override_ctx;
} mvm_ctx_policies;

/* Whether this build can compute on a GPU (it has the device kernels: built with nvcc). */
int mvm_ctx_device_available(void);
/* MVM_OK when the GPU pass can run on CUDA device `device`: this build has device kernels,
 * the cuda backend can open the device (mvm_cuda_probe), and the kernels load there (a
 * driver older than the toolkit that built them cannot JIT their PTX); else why not. What
 * MOEVM_BACKEND=auto asks before it chooses the GPU. *opened: the GPU it opened to find
 * out (close it with mvm_gpu_close), or NULL. */
struct mvm_gpu;
mvm_status mvm_ctx_device_usable(int device, struct mvm_gpu **opened);
/* The flags the engine opens its GPU with (mvm_gpu_open's: MOEVM_PDL's); an option that does
 * not read is an error, and *flags 0. */
mvm_status mvm_ctx_gpu_flags(unsigned *flags);
/* The device memory a context of m (n_ctx positions, batches of n_batch, a KV cache of
 * kv_type: one of kv_cache.h's MVM_KV_TYPES, "f16", "q8_0"..., or NULL for MOEVM_KV_TYPE;
 * the predict module `predict`, "name" or "name{k=v,...}" or NULL for MOEVM_PREDICT's,
 * whose SMoE speculative pass takes scratch of its own) takes on a GPU beside the experts' budget, as mvm_ctx_create would allocate it:
 * *weights, the weights besides the experts; *rest, the KV cache and scratch. m's space is
 * not needed (plan.h's mvm_plan_space sizes the automatic budget with it before making the
 * space; a probed model, mvm_model_probe, sizes *rest the same but may lack weights that
 * opening derives). MVM_ERR_UNSUPPORTED without the device kernels; an error naming a
 * predict module that is not one. */
mvm_status mvm_ctx_device_bytes(mvm_model *m, uint32_t n_ctx, uint32_t n_batch,
                                const char *kv_type, const char *predict, uint64_t *weights,
                                uint64_t *rest);

/* n_ctx: positions the KV cache holds (<= the model's context_length is not enforced:
 * RoPE extrapolates, as llama.cpp lets it); n_batch: tokens per forward call; policies:
 * NULL for the options' modules. pool: the CPU backend's threads (unused on a GPU).
 * MVM_ERR_UNSUPPORTED for a cuda space in a build without device kernels. */
mvm_status mvm_ctx_create(mvm_model *m, mvm_pool *pool, uint32_t n_ctx, uint32_t n_batch,
                          const mvm_ctx_policies *policies, mvm_ctx **out);
void mvm_ctx_free(mvm_ctx *c);
/* "cpu" or "cuda": where the context computes. */
const char *mvm_ctx_backend(const mvm_ctx *c);
/* Bytes of the context's KV cache (kv_cache.h: windowed blocks keep a ring, not n_ctx rows). */
uint64_t mvm_ctx_kv_bytes(const mvm_ctx *c);
/* "f16" or "f32": the type of its elements. */
const char *mvm_ctx_kv_type(const mvm_ctx *c);
/* The observer is called from the policies' steps (mvm_ctx_settle's note): set it to NULL
 * before freeing what it writes to, which settles first. */
void mvm_ctx_set_route_observer(mvm_ctx *c, mvm_route_fn fn, void *fn_ctx);
/* A decode token routed on the device (engine/forward/forward_cuda_route.c) shows its
 * steps to the policies (residency, prefetch, route modules, the route observer) while the
 * device computes the next token, or when this is called: the policies as they would be
 * had every step been shown in its batch. The readers below, the observer's setter and a
 * host-routed batch call it; mvm_ctx_free does not, so what the last token showed is lost
 * unless they, or this, ran after it. Returns the failure of a replay, which the next
 * evaluation also returns. */
mvm_status mvm_ctx_settle(mvm_ctx *c);

/* Evaluates n tokens of the selected sequence at its positions n_past.. (any n: batches of
 * n_batch inside). logits: n_vocab floats for the last token, or for every token when
 * all_logits (n * n_vocab); NULL for none. MVM_ERR_RANGE when the KV cache would overflow,
 * MVM_ERR_INVALID for a token id outside the vocabulary; on any failure every sequence's
 * cached positions are as before the call. */
mvm_status mvm_ctx_eval(mvm_ctx *c, const int32_t *tokens, uint32_t n, float *logits,
                        int all_logits);


/* Evaluates n tokens of any sequences together (a server's requests: each one's next token,
 * another's prompt), n_batch at a time: the matrix products read each weight once for the
 * batch and the MoE steps route, place and run the experts of all its tokens at once.
 * Whichever sequence is selected stays selected. logits: n_vocab floats for each token whose
 * `logits` is set, in the batch's order (NULL: none wanted). Errors as mvm_ctx_eval's, and
 * MVM_ERR_RANGE for a sequence out of range. A GPU context evaluates each run of one
 * sequence's consecutive tokens by itself (its kernels take one sequence a batch): the same
 * results, without the sharing. */
mvm_status mvm_ctx_eval_batch(mvm_ctx *c, const mvm_engine_token *t, uint32_t n, float *logits);
/* The time of experts[0..k) of `layer` (distinct, k <= top-k) on the device in one launch,
 * as a step launches its experts, each taking the same n <= n_batch tokens, x their inputs
 * (n rows of n_embd floats): from the quantization of the input to the end of the down
 * kernel, launched and finished (`moevm calibrate` fits t_gpu(n) to the time one more
 * expert adds). The experts are made resident and pinned before, not timed, and evicted
 * after unless they were resident; the KV cache and n_past are not touched.
 * MVM_ERR_UNSUPPORTED on a context computing on the CPU; MVM_ERR_INVALID for n, k or an
 * expert out of range, or an expert named twice. */
mvm_status mvm_ctx_time_experts(mvm_ctx *c, uint32_t layer, const int32_t *experts,
                                uint32_t k, const float *x, uint32_t n, double *seconds);
/* Experts computed elsewhere: the distributed mode's leader (dist.h) computes the experts
 * that other ranks hold there. The CPU pass sends a layer's rows of those experts before it
 * computes its own and gathers their results after; the context calls `tokens` after each
 * batch. */
struct mvm_moe;
typedef struct mvm_elsewhere {
    void *self;
    const uint8_t *remote; /* [L*E] 1 for the experts computed elsewhere (may change after
                              `tokens`: the array is read at each step) */
    /* the rows of s->active[n_active .. n_active + n_remote); xn: the tokens' expert input */
    mvm_status (*send)(void *self, struct mvm_moe *s, const float *xn, uint32_t n);
    /* waits for those rows' results and adds them into x ([n][n_embd]) */
    mvm_status (*gather)(void *self, struct mvm_moe *s, float *x, uint32_t n);
    mvm_status (*tokens)(void *self, const mvm_model *m, uint32_t n);
} mvm_elsewhere;
/* e NULL: every expert is computed here. On a GPU the step ends (its experts unpinned)
 * before `gather`, which may meanwhile call mvm_ctx_expert_rows on the same context. A
 * server that runs no steps of its own gives send and gather NULL: only the marks. */
mvm_status mvm_ctx_set_elsewhere(mvm_ctx *c, const mvm_elsewhere *e);
/* Rows another rank routed, for the distributed mode's server: n_tok tokens' expert input
 * `hidden` ([n_tok][n_embd], host), the rows of experts[0..n_exp) of `layer` (distinct, held
 * here), expert e's at off[e] .. off[e] + cnt[e] - 1 of row_tok (< n_tok) and row_w. */
typedef struct mvm_expert_rows {
    uint32_t layer, n_tok, n_exp;
    const int32_t *experts;
    const uint32_t *cnt, *off;  /* [n_expert] */
    const uint32_t *row_tok;
    const float *row_w;
    const float *hidden;
} mvm_expert_rows;
/* Each token's weighted sum of its rows into out ([n_tok][n_embd], host), computed on the
 * context's GPU as a step of its own: its experts made resident by the context's residency
 * policies, which observe it (without router scores); the predictor does not. Between the
 * context's own steps only (mvm_elsewhere's gather is). MVM_ERR_UNSUPPORTED on a context
 * computing on the CPU (whose caller computes from the addresses: experts_cpu.h);
 * MVM_ERR_INVALID for more tokens than its batch or a token with more than top-k rows. */
mvm_status mvm_ctx_expert_rows(mvm_ctx *c, const mvm_expert_rows *r, float *out);
/* Whether mvm_ctx_expert_rows computes on this context (it does where the context computes
 * on a GPU). */
bool mvm_ctx_serves_rows(const mvm_ctx *c);
/* The positions cached in the selected sequence. */
uint32_t mvm_ctx_n_past(const mvm_ctx *c);
/* Forgets the selected sequence's cached positions (a new request). */
void mvm_ctx_reset(mvm_ctx *c);
/* Keeps only the first n of the selected sequence's positions (n >= n_past: no change):
 * a conversation whose new prompt starts with what is cached evaluates only the rest. With
 * windowed blocks in rings, when more than n_batch positions past n were written, those
 * rows no longer hold n's window: it keeps none. mvm_ctx_n_past says what it kept. */
void mvm_ctx_truncate(mvm_ctx *c, uint32_t n);
/* Makes sequence s (< n_seq) the one mvm_ctx_eval extends; MVM_ERR_RANGE else. */
mvm_status mvm_ctx_select_seq(mvm_ctx *c, uint32_t s);
uint32_t mvm_ctx_n_seq(const mvm_ctx *c);
/* The positions cached in sequence s (selected or not); 0 for s out of range. */
uint32_t mvm_ctx_seq_n_past(const mvm_ctx *c, uint32_t s);
/* The context's policies, settled first (mvm_ctx_settle). */
const mvm_resid *mvm_ctx_residency(const mvm_ctx *c);
/* NULL when no predict module runs. */
const mvm_prefetcher *mvm_ctx_prefetcher(const mvm_ctx *c);
/* NULL when no route module runs. */
const mvm_substitutor *mvm_ctx_substitutor(const mvm_ctx *c);

#endif
