/*
 * The device forward pass's state and the helpers its files share: forward_cuda.c (the MoE
 * step, the whole pass), forward_cuda_ops.c (the products and small ops, the FFNs),
 * forward_cuda_attn.c (attention: grouped-query, and deepseek2's latent attention),
 * forward_cuda_setup.c (the weights' upload, the context's memory), forward_cuda_gemm.c
 * (large batches on the tensor cores), forward_cuda_route.c (decode routed on the device)
 * and forward_cuda_prompt.c (prompt batches routed on the device). Nothing here is part of
 * forward.h's API.
 */
#ifndef MVM_ENGINE_FORWARD_FORWARD_CUDA_IMPL_H
#define MVM_ENGINE_FORWARD_FORWARD_CUDA_IMPL_H

#include <stdint.h>

#include "engine/compute/gpu.h"
#include "engine/forward/experts_cpu.h"
#include "engine/forward/forward_impl.h"

#define TRY(expr)                                                                              \
    do {                                                                                       \
        mvm_status try_st_ = (expr);                                                           \
        if (try_st_ != MVM_OK)                                                                 \
            return try_st_;                                                                    \
    } while (0)

struct dev_weight {
    mvm_dptr p;                 /* 0: the model has no such weight */
    int type;
    uint32_t rows, cols;
    uint64_t row_bytes;
};

/* A block on the device: a MoE block, or one of the dense blocks before them. */
struct dev_block {
    mvm_dptr attn_norm, ffn_norm, bq, bk, bv, q_norm, k_norm;
    struct dev_weight wq, wk, wv, wo, router;
    struct dev_weight wq_a, wq_b, wkv_a, wk_b, wv_b; /* MLA (model.h says how) */
    mvm_dptr q_a_norm, kv_a_norm;
    struct dev_weight ffn_w1, ffn_w3, ffn_w2;        /* a dense block's FFN */
    struct dev_weight shexp_gate, shexp_w1, shexp_w3, shexp_w2; /* shared expert; gate: qwen2moe */
    mvm_dptr experts;           /* expert 0's fixed address; the others expert_stride apart */
    mvm_dptr choose_bias;       /* exp_probs_b, for the device's routing (0: none) */
    mvm_dptr bo, sinks, router_bias, down_bias; /* gpt-oss (model.h says how) */
    uint32_t swa;               /* gpt-oss: the attention's window, 0 for none */
};

/* A run of the batch: its tokens i0 .. i0 + n - 1, of sequence seq at positions pos0 ..
 * (forward_impl.h: a sequence's tokens come in order). The products, norms and MoE steps take
 * the whole batch; what depends on the position or reads a sequence's cache (the rotary
 * embedding, the KV store, attention) takes each run. */
struct cuda_run {
    uint32_t i0, n, pos0, seq;
};

/* The phases of a host-routed batch's host time (forward_cuda_laps.c). */
enum mvm_lap {
    MVM_LAP_QUEUE,    /* queueing kernels and copies */
    MVM_LAP_OBSERVE,  /* the step before shown to the policies, the device computing */
    MVM_LAP_DEVICE,   /* waiting for the device: a layer's router logits, the logits */
    MVM_LAP_POLICIES, /* the step before ended (the evict module, prefetches, admission),
                         this one routed, its rows up: the device idle */
    MVM_LAP_ASK,      /* the assign module and the requests (evictions for room) */
    MVM_LAP_COPIES,   /* waiting for the copies a round needs */
    MVM_LAP_CPU,      /* the assign module's experts on the CPU */
    MVM_LAP_N
};

/* What the laps add up, for decode tokens and for prompt batches apart. */
struct lap_sums {
    double t[MVM_LAP_N];        /* summed over the batches that ran */
    double cpu_plan;
    uint64_t syncs, batches, rows;
    uint64_t space[3];          /* the growth of the space's evict_ns, remap_ns, bytes_moved */
    uint64_t resid[3];          /* and of the residency's accesses, hits, zerocopy_runs */
};

struct cuda_laps {
    int on;                     /* this batch is host-routed and timed */
    int prefill;                /* ... and of more than one row (sums[1]) */
    double at;                  /* the last mark */
    double cur[MVM_LAP_N];      /* this batch's phases, seconds */
    uint64_t cur_syncs;
    double cur_cpu_plan;        /* what the cost model gave this batch's CPU experts, s */
    uint32_t cur_rows;
    uint64_t space0[3], resid0[3]; /* the space's and the residency's counters at its start */
    struct lap_sums sums[2];    /* decode tokens, prompt batches */
};

/* MOEVM_DEVICE_ROUTING, as f->route_mode holds it (its choices in reverse). */
enum { MVM_ROUTE_OFF, MVM_ROUTE_LAUNCHES, MVM_ROUTE_GRAPH };

/* Layers of a prompt batch routed on the device whose stage is down at once
 * (forward_cuda_prompt.c): the host replays one while the device computes the next ones. */
#define MVM_PROMPT_RING 4u

/* A prompt batch routed on the device (forward_cuda_prompt.c). */
struct cuda_prompt {
    mvm_dptr stage;             /* [MVM_PROMPT_RING] slots of [n_batch][E + D + 2K] floats
                                   (0: never routed here): a layer's logits, router input,
                                   choice (int32) and weights, n tokens of each, as they are
                                   made, then down to ... */
    float *ring;                /* ... the same here, pinned (made at the first such batch),
                                   for the layer's replay */
    int on;                     /* this batch's MoE steps route on the device */
    const uint32_t *pos;        /* its positions (NULL: 0 ..) */
    uint32_t n, queued, replayed; /* its tokens, its layers queued and replayed */
    uint64_t batches, tokens;   /* for the log at the end, and the host's time in them, s: */
    double queue, replay, wait; /*   queueing, replaying the policies, waiting for the device
                                     (a layer's stage) */
    mvm_dptr given;             /* [n_layer][n_batch][2 K]: a replayed trace's choice for the
                                   batch (mvm_cuda_fwd_given) ... */
    int32_t *given_host;        /* ... sent up from here, pinned (made with the ring) */
    int given_on;               /* this batch's choice is given */
};

/* MOEVM_MMQ's and MOEVM_ATTN_MMA's choices, in the options' order (engine_options.c);
 * experts: MOEVM_MMQ's alone (as on, for the experts only) */
enum mvm_cuda_choice { MVM_CUDA_AUTO, MVM_CUDA_OFF, MVM_CUDA_ON, MVM_CUDA_EXPERTS };

/* A dense product of at least this many tokens takes mmq's kernel where its type has one
 * (mvm_cuda_fwd_mmq_takes), fewer the integer kernels, as llama.cpp's mul_mat_vec_q takes
 * up to 8 (MMVQ_MAX_BATCH_SIZE) and its mul_mat_q more. */
#define MVM_CUDA_MMQ_ROWS 9u

/* The output product's rows a pass computes at once: a batch whose every row is wanted
 * (--logits-out, a perplexity) takes its logits this many rows at a time, where a buffer
 * of the whole batch's would take the experts' room: 512 x 151,936 floats, 311 MB, for
 * Qwen3's vocabulary at llama-bench's batch. A chunk more costs a read of the output
 * matrix (not measured on a GPU; only batches wanting more than 64 rows pay it). */
#define MVM_CUDA_LOGIT_ROWS 64u

struct cuda_fwd {
    mvm_gpu *g;
    mvm_model *m;
    mvm_moe *moe;
    int step_open;              /* the last MoE step's kernels may run: ended at the next
                                   sync (forward_cuda.c, moe and cuda_eval) */
    int sum_owed;               /* a device-routed step's expert sum (owed) left to the next
                                   norm of x, which adds it first (mvm_cuda_fwd_norm_input,
                                   mvm_cuda_fwd_rmsnorm; mvm_cuda_fwd_settle_sum where none
                                   follows) */
    mvm_g_expert_sum_args owed;
    int att_act;                /* the attention's kernels left its output in f->act, in the
                                   output product's format too (forward_cuda_attn.c) */
    uint32_t step_tok;          /* its tokens (experts_begin): with one, each expert's row
                                   goes through decode's up (up1), whatever the rounds */
    uint32_t n_ctx, n_batch, q_dim, kv_dim;
    const mvm_kv_layout *kv;    /* the cache's rows and element type (kv_cache.h) */
    uint32_t lat;               /* MLA: kv_lora + rope, a cache row and an absorbed query */
    uint64_t expert_stride;
    struct dev_block *layers;      /* the n_layer MoE blocks */
    struct dev_block *dense;       /* the n_dense dense blocks before them */
    struct dev_weight output;
    mvm_dptr output_norm;
    mvm_dptr kc, vc;            /* [rows][kv_dim] elements (f->kv->type); MLA: kc only, the
                                   latent rows */
    mvm_dptr k, v;              /* [n_batch][kv_dim] floats: the batch's new rows before
                                   they are stored (forward_cuda_attn.c); 0 where none is
                                   (one sequence's F32 cache without rings); MLA: k only */
    struct cuda_run *runs;      /* [n_batch]: the batch's (cuda_eval) */
    uint32_t n_runs;
    mvm_dptr x, xn, q, att, tmp, probs, sh1, sh3, shg; /* [n_batch][...] */
    mvm_dptr logits;            /* [logit_rows][n_vocab]: the output product's rows, a
                                   chunk at a time (forward_cuda_ops.c) */
    uint32_t logit_rows;
    mvm_dptr part; /* attention's split parts (mvm_g_attention_part_bytes) */
    mvm_dptr qa, qlat, olat;    /* MLA: q_a; [n_head][lat] absorbed queries, their outputs */
    mvm_dptr act;               /* [n_batch][act_stride]: a Q or K type's input as Q8_0 or
                                   Q8_K blocks */
    const struct dev_weight *xn_act; /* act holds xn in this weight's format (the norm that
                                   wrote xn quantized it: mvm_cuda_fwd_norm_input) ... */
    int xn_experts;             /* ... or in the MoE layer's experts' format; both cleared by
                                   any other write to xn or act */
    uint64_t act_stride;
    mvm_dptr hact;              /* MLA: [n_batch][n_head][hact_stride], per-head inputs */
    uint64_t hact_stride;
    mvm_dptr h, out;            /* [n_batch * K][h_stride bytes], [n_batch * K + 2][n_embd]:
                                   out's row n_batch * K stays zero (speculate's masked rows,
                                   the CPU's other choices), the next is the CPU's share's
                                   sum (forward_cuda_cpu.c) */
    uint64_t h_stride;
    mvm_dptr hf;                /* with experts: [n_batch * K][n_ff_exp] floats, up's output
                                   before mvm_g_expert_quantize (a K-quant down, or up1) */
    mvm_dptr active;            /* the round's experts */
    mvm_dptr rows;              /* the step's rows (moe_step.h) in one buffer, so one upload
                                   sends them (forward_cuda.c, lay_rows): off, cnt [n_expert],
                                   row_tok, tok_rows, row_w [n_batch * K], then its first
                                   round's list of experts [n_expert] ... */
    mvm_dptr off, cnt, row_tok, tok_rows, row_w, list; /* ... at these places in it */
    uint32_t listed;            /*   the round's experts in list (0: none, each launch sends
                                   its own to active) */
    uint32_t *rows_host;        /* [3 n_expert + 3 n_batch K]: the same, on the host */
    float *host;                /* [n_batch][n_embd], pinned: embeddings up, the router's
                                   input down */
    float *probs_host;          /* [n_batch][n_expert], pinned: the router's logits down */
    int speculates;             /* the predict module is SMoE's speculative one: ... */
    mvm_dptr spec_x, spec_xn, spec_tmp, spec_rows; /* ... its pass (forward_cuda.c,
                                   speculate): [n_batch][n_embd] x3, [n_batch * K] rows;
                                   0 in a context that never speculates */
    uint32_t *spec_rows_host;   /* [n_batch * K] (NULL the same) */
    float *spec_host;           /* [n_batch][n_embd]: its forecast's input, down (the same) */
    uint8_t *row_far;           /* [n_batch * K] scratch: 1 for a row computed elsewhere */
    float *far;                 /* [n_batch][n_embd]: the other ranks' sums (the
                                   distributed mode), gathered while it serves them */
    uint32_t gemm_rows;         /* forward_cuda_gemm.c: the fewest rows a product takes to
                                   the tensor cores; 0: none does */
    enum mvm_cuda_choice mmq;   /* MOEVM_MMQ (mvm_cuda_fwd_mmq: for which layers) */
    enum mvm_cuda_choice attn_mma; /* MOEVM_ATTN_MMA (forward_cuda_attn.c's attend) */
    uint32_t gemm_ch;           /* an expert's channels per chunk there (0: no experts) */
    uint32_t gemm_per;          /* whole experts the scratch holds, batched products for
                                   them (0: an expert goes in chunks of gemm_ch channels) */
    uint32_t max_cols;          /* the widest matrix's row, in elements */
    uint64_t max_f16_bytes;     /* the largest matrix's bytes as F16, the output's aside */
    uint64_t gemm_w16_bytes, gemm_ws_bytes; /* w16's, gemm_ws's */
    mvm_dptr a16x;              /* [n_batch * K][n_embd] F16: a MoE step's rows' inputs for
                                   the tensor cores (forward_cuda_gemm.c), made once a step */
    int a16x_ready;             /*   made for this step (experts_begin clears it) */
    mvm_dptr w16, a16, gu, h16, gemm_ws; /* F16 weights, F16 inputs [n_batch][max_cols], an
                                   expert chunk's gate/up floats [n_batch][2 gemm_ch] and
                                   unit [n_batch][gemm_ch] (F16), cuBLAS's workspace */
    mvm_dptr bgo, bgh, bptr;    /* a batch of experts' (gemm_per): gate/up then down floats
                                   [n_batch * K][max(2 n_ff_exp, n_embd)], unit F16
                                   [n_batch * K][n_ff_exp], its pointer arrays and ids */
    uint32_t *gemm_list;        /* [n_expert]: a round's experts for the tensor cores */
    mvm_dptr att_q16, att_s, att_ptr; /* a prompt's attention by products: its queries in
                                   F16, its scores and weights (att_bytes, in w16's memory:
                                   a layer's attention and its products take turns in the
                                   one stream), [6][n_head] pointers; 0: the attention
                                   kernel takes every batch */
    uint64_t att_bytes;
    mvm_dptr att_kv16;          /* a Q8_0 cache's: the rows a batch's products read, as F16
                                   (keys, then values, n_ctx rows of kv_dim each); 0 else */
    uint64_t *att_ptr_host;     /* [6 n_head] */
    uint64_t *bptr_host;        /* [8 n_expert]: bptr's contents, sent up from here */
    mvm_dptr wptr;              /* [n_expert] uint64: where each expert of a launch is read
                                   (device-view, expert_launch), at its list's offsets */
    uint64_t *wptr_host;        /* the same, pinned */
    int read_view;              /* MOEVM_LOAD_WAIT=device-view (or device in a slot space) */
    uint32_t *active_host;      /* [n_expert], pinned: a round's experts that the kernels take,
                                   at the offsets of their device list (expert_launch) */
    /* Steps routed on the device (forward_cuda_route.c): */
    int load_late;              /* MOEVM_LOAD_WAIT=device-late (forward_cuda.c, experts_begin) */
    int route_here;             /* this batch's MoE steps route on the device */
    int route_mode;             /* MOEVM_DEVICE_ROUTING (enum below) */
    int all_pinned;             /* every expert pinned for them, until the context ends */
    int all_asked;              /* every expert asked resident (once the budget holds all) */
    int budget_routing;         /* MOEVM_BUDGET_ROUTING=in-place, and the device can read the
                                   homes: decode routes here at a budget too ... */
    int route_budget;           /* ... as this batch does: its misses read in place */
    mvm_dptr addr;              /* [n_layer][n_expert] uint64: where its kernels read each
                                   expert, 0 at its own address (resident and landed) ... */
    uint64_t *addr_host;        /* ... sent up from here (pinned) when own changes */
    uint64_t *home_addr;        /* [n_layer * n_expert] the homes' device addresses */
    uint8_t *own;               /* [n_layer * n_expert] read at its own address
                                   (mvm_resid_landed_all), as the batch queued was told */
    uint64_t *slot;             /* [n_layer * n_expert] in a slot space, where an owned
                                   expert is read instead (its slot; NULL elsewhere) */
    struct {                    /* read-through (forward_cuda_fill.c) */
        int on;                 /*   MOEVM_BUDGET_ROUTING=read-through, where it runs */
        uint32_t cap;           /*   the pool's most slabs: a quarter of the budget's */
        uint32_t n;             /*   slabs set aside, at pool_host[0..n); the rest 0 */
        uint64_t *pool_host;    /*   [cap], pinned, sent up before each token to ... */
        mvm_dptr pool;          /*   ... [cap] uint64 */
        mvm_dptr claims;        /*   [1 + cap] uint32: the route kernels' (kernels.h) ... */
        uint32_t *claims_host;  /*   ... down here (pinned) with the token's stage */
        mvm_dptr wstore;        /*   [top_k] uint64: where the expert launch stores */
        int owed;               /*   the last token's claims are not landed yet */
        uint32_t misses;        /*   its choices read at their homes */
        uint32_t *fresh;        /*   [n_layer * n_expert]: experts landed by a fill whose
                                     map may not be done (read at their slabs) ... */
        uint32_t n_fresh;
        uint8_t *is_fresh;      /*   ... and the same as flags */
        uint8_t *read_dev;      /*   [n_layer * n_expert]: read on the device by the batch
                                     queued (own, or at its slab): what its replay places
                                     there (f->own's role without read-through) */
        int late;               /*   the token before's replay runs once this one is queued,
                                     while the device computes (no module evicts as it
                                     observes: mvm_resid_steps_evict, no MoEpic window) */
        int landed;             /*   the pending replay's claims landed before the token
                                     after it was queued: it replays from ran_* */
        int deferred;           /*   a late replay's loads wait for the next token's start */
        uint8_t *ran_own;       /*   [n_layer * n_expert] own and read_dev as the pending */
        uint8_t *ran_read_dev;  /*   replay's token ran with */
        uint8_t *shield;        /*   [n_layer * n_expert] no victim while set: its experts
                                     (the pool's refill), the queued token's (the replay) */
    } fill;
    mvm_dptr stage;             /* [n_layer][stage_floats]: each routed step's logits,
                                   router input, choice and weights (route_stage) ... */
    float *stage_host;          /* ... down to one half of this pinned copy at the batch's
                                   end ([2][n_layer][stage_floats]) */
    uint32_t stage_floats;
    uint32_t stage_half;        /* the half the last batch's stage went to */
    struct {                    /* a batch's replay deferred to the next batch's time on the
                                   device (mvm_cuda_fwd_route_settle) */
        int pending;            /*   one waits, its stage in this half: */
        uint32_t half;
        uint32_t pos;           /*   its token's position */
        int at_budget;          /*   its misses were read in place (own says which) */
        int split;              /*   the CPU took its share (the stage's MVM_STAGE_CPU) */
        mvm_status failed;      /*   a replay run outside a batch failed: the next says so */
    } replay;
    uint64_t routed_tokens;     /* batches routed on the device, for the log at the end */
    struct {                    /* and the host's time in them, seconds summed: queueing */
        double queue, wait;     /*   the layers (graph or launches), waiting for the logits, */
        double policies, between; /* the policies' replay, and from one such token's end to
                                   the next one's start (the caller: sampling, output) */
        double before;          /*   at a budget, of policies: before a token is queued ... */
        double replay, pool;    /*   ... the token before's replay (or read-through's early
                                   landing), read-through's pool (the rest: the table) */
        double last_end;        /*   when the last one ended; 0: the batch before was not */
    } route_time;
    mvm_dptr given;             /* [n_layer][2 K]: a replayed trace's choice for the token,
                                   K experts then K weights (mvm_moe_override) ... */
    int32_t *given_host;        /* ... sent up from here, pinned */
    int route_given;            /* this batch's choice is given (the trace's) */
    struct cuda_cpu_share *cpu_share; /* MOEVM_DEVICE_CPU (forward_cuda_cpu.c); NULL: off */
    int cpu_split;              /* this batch gives the CPU its share (route_choose) */
    struct cuda_laps laps;      /* a host-routed batch's host time */
    struct cuda_prompt prompt;      /* a prompt batch routed on the device */
    mvm_pool *pool;
    mvm_cpu_experts *cpu;              /* the experts the assign module runs on the CPU; made at
                                   the first (many runs have none) */
    float *cpu_rows;            /* [n_batch * K][n_embd], pinned: their rows' outputs, to go
                                   up */
    mvm_dptr *owned;            /* every device allocation, freed at the end */
    size_t n_owned, cap_owned;
    int sizing;                 /* a sizing pass (mvm_cuda_fwd_context_bytes): no device, each
                                   allocation only added to `need` (copies of weights also
                                   to `need_weights`), nothing uploaded; ... */
    int sizing_sm80;            /* ... for a device of compute capability 8.0 or later (the
                                   driver's answer; 0 where it has none): which kernels the
                                   real pass will have (mvm_gpu_would_have) */
    uint64_t need, need_weights;
};

/* ---- forward_cuda_setup.c -------------------------------------------------------------- */

/* The backend's create and destroy (forward_impl.h). */
mvm_status mvm_cuda_fwd_create(mvm_ctx *ctx, void **state);
void mvm_cuda_fwd_destroy(void *state);
mvm_status mvm_cuda_fwd_alloc(struct cuda_fwd *f, size_t bytes, mvm_dptr *out);
/* A device copy of bytes at src; none (0) when src is NULL. */
mvm_status mvm_cuda_fwd_copy(struct cuda_fwd *f, const void *src, size_t bytes, mvm_dptr *out);
mvm_status mvm_cuda_fwd_weight(struct cuda_fwd *f, const mvm_weight *w, struct dev_weight *out);
/* Bytes of a row of n inputs of a Q or K type's product, whatever the type, rounded. */
uint64_t mvm_cuda_fwd_act_bytes(uint32_t n);

/* ---- forward_cuda_gemm.c --------------------------------------------------------------- */

/* The tensor-core path's scratch (none unless a batch can reach MOEVM_GEMM_ROWS). */
mvm_status mvm_cuda_fwd_gemm_alloc(struct cuda_fwd *f);
/* Whether w's product of n rows (*use), or expert e's rows of the current step of layer il,
 * takes the tensor cores; the first that could opens cuBLAS (without it, or if it will not
 * start, the kernels take every product, with a warning). */
mvm_status mvm_cuda_fwd_gemm_wants(struct cuda_fwd *f, const struct dev_weight *w, uint32_t n,
                                   int *use);
mvm_status mvm_cuda_fwd_gemm_wants_expert(struct cuda_fwd *f, uint32_t il, uint32_t e, int *use);
/* Whether a step of several tokens multiplies layer il's experts by the mmq kernels
 * (MOEVM_MMQ: Q8_0, MXFP4 and IQ4_NL experts and the K-quant files' (Q2_K, Q3_K_M to Q6_K,
 * IQ4_XS) by default; a device that has the kernels); none of them then takes cuBLAS. */
int mvm_cuda_fwd_mmq(const struct cuda_fwd *f, uint32_t il);
/* Whether a matrix of weight type `type` takes mmq's product (mvm_g_mmq_matmul) in a batch
 * of MVM_CUDA_MMQ_ROWS tokens or more (fewer: the integer kernels), never cuBLAS's: for
 * mmq's types, on a device that has it, unless MOEVM_MMQ is off or experts. */
int mvm_cuda_fwd_mmq_takes(const struct cuda_fwd *f, int type);
/* mvm_cuda_fwd_matmul_heads's product (H = 1: mvm_cuda_fwd_matmul's) on the tensor cores. */
mvm_status mvm_cuda_fwd_gemm_product(struct cuda_fwd *f, const struct dev_weight *w, uint32_t H,
                                     mvm_dptr in, uint64_t in_pitch, uint32_t n, mvm_dptr y,
                                     uint64_t y_pitch);
/* The rows of experts es[0 .. n) (each wanting the tensor cores) of the current step of
 * layer il into their slots of f->out; reorders es. */
mvm_status mvm_cuda_fwd_gemm_experts(struct cuda_fwd *f, uint32_t il, uint32_t *es, uint32_t n);
/* mvm_g_attention's work for a's queries (*done), by products on the tensor cores where the
 * batch is large enough and the cache is F16 without a ring; else *done = 0, nothing queued. */
mvm_status mvm_cuda_fwd_gemm_attention(struct cuda_fwd *f, const mvm_g_attention_args *a,
                                       int *done);

/* ---- forward_cuda_laps.c --------------------------------------------------------------- */

/* A batch begins: its laps are timed if the host routes it (a decode token at a budget, or
 * any prompt batch). */
void mvm_cuda_fwd_laps_begin(struct cuda_fwd *f, const mvm_fwd_batch *b);
/* The time since the last mark, to `phase`. */
void mvm_cuda_fwd_lap(struct cuda_fwd *f, enum mvm_lap phase);
/* The cost model's time for the CPU experts a step gives the threads (seconds), beside the
 * phase that times them. */
void mvm_cuda_fwd_lap_cpu_plan(struct cuda_fwd *f, double seconds);
/* The batch ended (st: how): the time since the last mark is the last step's end (its
 * policies); a failed batch's phases are not counted. */
void mvm_cuda_fwd_laps_end(struct cuda_fwd *f, mvm_status st);
/* The splits, decode's and the prompts', at MOEVM_LOG=info (the context's end). */
void mvm_cuda_fwd_laps_report(const struct cuda_fwd *f);

/* ---- forward_cuda_route.c -------------------------------------------------------------- */

/* The stage of the device-routed steps, and MOEVM_DEVICE_ROUTING. */
mvm_status mvm_cuda_fwd_route_alloc(struct cuda_fwd *f);
/* Whether batch b's MoE steps route on the device (f->route_here): one token, every expert
 * resident (or f->budget_routing: f->route_budget), and nothing the host decides between
 * the router and the experts. Makes the first of those true by pinning every expert for the
 * rest of the context, and asks every expert resident once the budget holds them all. */
mvm_status mvm_cuda_fwd_route_choose(struct cuda_fwd *f, const mvm_fwd_batch *b);
/* Layer il's router for one token routed on the device, its logits queued into the stage:
 * every expert resident and pinned, or at a budget each read where f->addr says. The
 * router's top-k laid out as the host lays out rows (after lay_rows), and the expert
 * launch's arguments a set for it; the logits, router input, choice and weights left in
 * the layer's stage for the host's policies. */
mvm_status mvm_cuda_fwd_route_token(struct cuda_fwd *f, uint32_t il, mvm_g_expert_args *a);
/* A replayed trace's choice for batch b's n tokens in every layer, where there is one
 * (*on): [n_layer][n][2 K] int32s at host (pinned), K experts then their K weights (floats)
 * a token, sent up to dev; the route kernels then lay it out instead of the router's. */
mvm_status mvm_cuda_fwd_given(struct cuda_fwd *f, const mvm_fwd_batch *b, int32_t *host,
                              mvm_dptr dev, int *on);
/* A routed step's stage holds, one after the other, its logits (E floats), router input
 * (n_embd floats), choice (K int32), weights (K floats) and which of them the CPU computed
 * (K int32, forward_cuda_cpu.c; written only where it takes a share): where `part` starts,
 * in floats from the stage of its layer; and that place on the device for layer il. */
enum { MVM_STAGE_LOGITS, MVM_STAGE_HIDDEN, MVM_STAGE_SEL, MVM_STAGE_W, MVM_STAGE_CPU };
uint64_t mvm_cuda_fwd_stage_at(const struct cuda_fwd *f, int part);
mvm_dptr mvm_cuda_fwd_route_stage(const struct cuda_fwd *f, uint32_t il, int part);
/* The half of f->stage_host that the batch's stage comes down to (the batch queues it):
 * the one a replay still owed does not read. */
float *mvm_cuda_fwd_stage_take(struct cuda_fwd *f);
/* Once a device-routed batch b has run (st: how it went; idle: the stream has been waited
 * for since): its steps are owed to the host's policies (mvm_moe_replay). With idle they
 * wait for the next batch's time on the device (mvm_cuda_fwd_route_settle), which they
 * then take none of; else they are replayed now, after a sync. Returns st, or else the
 * first failure. */
mvm_status mvm_cuda_fwd_route_done(struct cuda_fwd *f, const mvm_fwd_batch *b, mvm_status st,
                                   int idle);
/* The steps owed (mvm_cuda_fwd_route_done), replayed in layer order, and the failure of a
 * replay run by mvm_ctx_settle since the last batch; MVM_OK with none. */
mvm_status mvm_cuda_fwd_route_settle(struct cuda_fwd *f);
/* Before a batch routed on the device at a budget (f->route_budget) is queued, while the
 * device is idle: the steps owed replayed (their admissions and prefetches asked), then
 * where each expert is to be read sent up, from what has landed. Read-through whose
 * replays run late (f->fill.late): only the token before's claims landed here, its replay
 * left for mvm_cuda_fwd_route_settle once this batch is queued. */
mvm_status mvm_cuda_fwd_route_addresses(struct cuda_fwd *f);
/* The loads a late replay asked (left until no token is queued): asked now. */
mvm_status mvm_cuda_fwd_route_loads(struct cuda_fwd *f);
/* The pins of mvm_cuda_fwd_route_choose, let go (the context's end). */
void mvm_cuda_fwd_route_release(struct cuda_fwd *f);

/* ---- forward_cuda_prompt.c: a prompt batch routed on the device --------------------------- */

/* MOEVM_PROMPT_ROUTING=device's buffer on the device, where it can run. */
mvm_status mvm_cuda_fwd_prompt_alloc(struct cuda_fwd *f);
/* Whether a batch of several tokens may route on the device once every expert is pinned:
 * MOEVM_PROMPT_ROUTING=device, MOEVM_DEVICE_ROUTING not off, the experts on the kernels (no
 * layer's on cuBLAS, which takes each expert's row count from the host), and nothing the
 * host decides between the router and the experts. */
int mvm_cuda_fwd_prompt_can(const struct cuda_fwd *f);
/* Batch b (n tokens) begins routed on the device (f->prompt.on); a replayed trace's choice
 * for it sent up. Where the driver refuses the pinned rings the first time, the batch (and
 * every one after) is routed by the host, said once. */
mvm_status mvm_cuda_fwd_prompt_begin(struct cuda_fwd *f, const mvm_fwd_batch *b);
/* Before layer il's MoE step writes its slot of the stage (its FFN norm's copy of the router
 * input is the first): the layer that held it replayed. */
mvm_status mvm_cuda_fwd_prompt_layer(struct cuda_fwd *f, uint32_t il);
/* Where a part of layer il's stage lies on the device (MVM_STAGE_LOGITS, _HIDDEN, _SEL,
 * _W), for the batch's tokens. */
mvm_dptr mvm_cuda_fwd_prompt_stage(const struct cuda_fwd *f, uint32_t il, int part);
/* Layer il's step once its router logits are queued into its stage: its tokens routed and
 * their rows grouped into the layout lay_rows made for n tokens (f->off ..), every expert
 * listed in f->active, and the stage sent down beside the experts' kernels. The expert
 * launch's arguments a then take every expert, n_expert blocks a slice. */
mvm_status mvm_cuda_fwd_prompt_route(struct cuda_fwd *f, uint32_t il, uint32_t n,
                                     mvm_g_expert_args *a);
/* The batch's layers not replayed yet, replayed in order as their stage comes down (once
 * the batch is queued); st: the batch's status so far, which wins. */
mvm_status mvm_cuda_fwd_prompt_settle(struct cuda_fwd *f, mvm_status st);
/* The log line and the ring (the context's end). */
void mvm_cuda_fwd_prompt_release(struct cuda_fwd *f);

/* ---- forward_cuda_fill.c: read-through ------------------------------------------------- */

/* The pool and claims for MOEVM_BUDGET_ROUTING=read-through, with budget routing set up
 * (f->fill.on; none where the budget holds under four experts). */
mvm_status mvm_cuda_fwd_fill_alloc(struct cuda_fwd *f, const mvm_space_info *info);
void mvm_cuda_fwd_fill_free(struct cuda_fwd *f);
/* The last token's slabs taken landed as their experts (before its steps are replayed);
 * those not taken stay in the pool. */
mvm_status mvm_cuda_fwd_fill_land(struct cuda_fwd *f);
/* Before a token: the pool refilled to as many slabs as the last token missed (top_k at
 * least, cap at most), then sent up with claims[0] zeroed. */
mvm_status mvm_cuda_fwd_fill_pool(struct cuda_fwd *f);
/* Every slab set aside given back (before a host-routed batch, at the context's end). */
mvm_status mvm_cuda_fwd_fill_give_back(struct cuda_fwd *f);
/* Where the table sends the kernels for expert x (flat) that the batch owns (f->own): 0,
 * its own address, or in a slot space its slot. */
static inline uint64_t mvm_cuda_fwd_own_addr(const struct cuda_fwd *f, uint64_t x)
{
    return f->slot ? f->slot[x] : 0;
}

/* The table's entries (f->addr_host) of the experts landed by a fill, after f->own is
 * updated: their slab's address while its map is under way, then as any other's. Returns
 * how many changed. */
uint32_t mvm_cuda_fwd_fill_table(struct cuda_fwd *f);

/* ---- forward_cuda_cpu.c: the CPU's share of a routed token ---------------------------- */

/* MOEVM_DEVICE_CPU=on with budget routing set up: the layers' shares in mapped host memory
 * (f->cpu_share; the thread and its pool at the first token); on without it, a warning. */
mvm_status mvm_cuda_fwd_cpu_alloc(struct cuda_fwd *f);
void mvm_cuda_fwd_cpu_free(struct cuda_fwd *f);
/* Before a token that gives the CPU its share (f->cpu_split: routed here at a budget, set
 * by mvm_cuda_fwd_route_choose) is queued: its words (its number, the two per-miss times:
 * kernels.h, mvm_g_cpu_token) written at `words` for its upload, *up grown by their bytes,
 * and the CPU's thread set to serve its layers (started at the first). */
mvm_status mvm_cuda_fwd_cpu_begin(struct cuda_fwd *f, void *words, size_t *up);
/* Layer il's route arguments for the share; nothing without f->cpu_split. */
void mvm_cuda_fwd_cpu_route(const struct cuda_fwd *f, uint32_t il, mvm_g_route_args *r);
/* Layer il's wait for the CPU's rows, queued after its experts; nothing without it. */
mvm_status mvm_cuda_fwd_cpu_wait(struct cuda_fwd *f, uint32_t il);
/* A replayed step's places (mvm_moe.replay_own) with 2 for its choices sel[0..K) that the
 * CPU ran (on_cpu: the stage's MVM_STAGE_CPU part, K int32 as the device wrote them); own:
 * its other places. Returns scratch of the share's, valid until the next call. */
const uint8_t *mvm_cuda_fwd_cpu_places(struct cuda_fwd *f, const uint8_t *own,
                                       const int32_t *sel, const float *on_cpu);
/* Once the token's logits are down (st: how the batch went): the thread done with it (told
 * to stop waiting where st failed), the CPU's measured rate noted; a layer whose wait gave
 * up fails the token. Returns st, or else that failure. */
mvm_status mvm_cuda_fwd_cpu_end(struct cuda_fwd *f, mvm_status st);

/* ---- forward_cuda_ops.c ---------------------------------------------------------------- */

/* x rows (n of `cols` floats, stride floats apart) -> q (rows q_stride bytes apart) in the
 * activation format of weight type t (a Q or K type). */
mvm_status mvm_cuda_fwd_quantize(struct cuda_fwd *f, enum mvm_wtype t, mvm_dptr x,
                                 uint64_t stride, uint32_t cols, uint32_t n, mvm_dptr q,
                                 uint64_t q_stride);
/* y[i] = w . in[i] for n rows: in[i] at in + i * in_stride floats, y[i] at y + i * y_stride
 * floats. The Q and K types read their input quantized, as the CPU's matrix products do;
 * `prev` is the weight of the product just before on the same input, or NULL: when its
 * activation format is w's (Q8_0 for both, or Q8_K), f->act holds the input already. */
mvm_status mvm_cuda_fwd_matmul(struct cuda_fwd *f, const struct dev_weight *w,
                               const struct dev_weight *prev, mvm_dptr in, uint64_t in_stride,
                               uint32_t n, mvm_dptr y, uint64_t y_stride);
/* ys[i] = ws[i] . in for i < k (1 to 3), the products of one input (a layer's q, k and v;
 * an FFN's gate and up), as mvm_cuda_fwd_matmul's with y_strides[i]: those of the first's
 * type and width that the kernels take in the first's launch, the others each their own;
 * prev as mvm_cuda_fwd_matmul's, for the first. */
mvm_status mvm_cuda_fwd_matmul_many(struct cuda_fwd *f, const struct dev_weight *const *ws,
                                    uint32_t k, const struct dev_weight *prev, mvm_dptr in,
                                    uint64_t in_stride, uint32_t n, const mvm_dptr *ys,
                                    const uint64_t *y_strides);
/* x += w . in for n rows of n_embd floats (a residual added: the attention's output, an
 * FFN's down product): in the product's own pass, or after it on the tensor cores. With
 * `ready`, f->act holds in already in w's activation format (the attention's kernels wrote
 * it: f->att_act). */
mvm_status mvm_cuda_fwd_matmul_add(struct cuda_fwd *f, const struct dev_weight *w, mvm_dptr in,
                                   uint64_t in_stride, uint32_t n, mvm_dptr x, int ready);
/* The same per head, for n tokens of H heads: w's rows are H slabs of rows / H, head h's
 * input at in + (i * H + h) * in_pitch floats and its y at y + (i * H + h) * y_pitch. */
mvm_status mvm_cuda_fwd_matmul_heads(struct cuda_fwd *f, const struct dev_weight *w, uint32_t H,
                                     mvm_dptr in, uint64_t in_pitch, uint32_t n, mvm_dptr y,
                                     uint64_t y_pitch);
/* xn = rms(x) of n rows of n_embd floats with the weights `norm`; with t a Q or K type (-1:
 * none), also quantized into act in t's activation format in the same pass, for the product
 * that follows (the caller then sets xn_act or xn_experts); with copy (0: none), also
 * written there. */
mvm_status mvm_cuda_fwd_norm_input(struct cuda_fwd *f, mvm_dptr norm, int t, uint32_t n,
                                   mvm_dptr copy);
/* The same for the product of w that follows: quantized in w's format where its kernels
 * take it from act (then xn_act = w), not where the tensor cores take the floats. */
mvm_status mvm_cuda_fwd_norm_for(struct cuda_fwd *f, mvm_dptr norm, const struct dev_weight *w,
                                 uint32_t n);
/* rows of len floats, stride floats apart, normalised in place or into out (same stride);
 * x's owed expert sum (f->sum_owed) added first where these are its rows, else launched. */
mvm_status mvm_cuda_fwd_rmsnorm(struct cuda_fwd *f, mvm_dptr x, mvm_dptr out, uint64_t stride,
                                mvm_dptr w, uint32_t len, uint32_t rows);
/* The owed expert sum (f->sum_owed), launched; MVM_OK where none is owed. */
mvm_status mvm_cuda_fwd_settle_sum(struct cuda_fwd *f);
/* The output product of xn's rows from .. from + logit_rows - 1 (of nl) into f->logits. */
mvm_status mvm_cuda_fwd_head(struct cuda_fwd *f, uint32_t from, uint32_t nl);
/* b's wanted logits down into `logits`, xn holding rows first .. first + nl - 1 normalised
 * and f->logits their first chunk's products: each further chunk computed as needed. */
mvm_status mvm_cuda_fwd_logits_down(struct cuda_fwd *f, const mvm_fwd_batch *b, uint32_t first,
                                    uint32_t nl, float *logits);
/* x[i] += g(i) * y[i] over rows of len floats (y_stride 0: one row y for all, a bias). */
mvm_status mvm_cuda_fwd_add(struct cuda_fwd *f, mvm_dptr x, mvm_dptr y, uint64_t y_stride,
                            mvm_dptr gate, uint32_t len, uint32_t rows);
/* Heads of n tokens to rotate: token i's n_heads heads of head_dim floats at x + i * stride
 * floats. */
struct cuda_heads {
    mvm_dptr x;
    uint64_t stride;
    uint32_t n_heads, head_dim;
};
/* Where a decode token routed on the device has its position on the device (kernels.h,
 * mvm_g_pos0): the float after its row of x, which its upload writes (forward_cuda.c,
 * eval_batch); 0 for any other batch. */
static inline mvm_dptr mvm_cuda_fwd_pos(const struct cuda_fwd *f)
{
    return f->route_here ? f->x + (uint64_t)f->m->hp.n_embd * sizeof(float) : 0;
}
/* The rotary embedding of n tokens at positions pos0.. of a's heads and b's, in one launch
 * (a layer's queries and keys). */
mvm_status mvm_cuda_fwd_rope(struct cuda_fwd *f, const struct cuda_heads *a,
                             const struct cuda_heads *b, uint32_t n, uint32_t pos0);

/* tmp = w2 . (silu(w1 . xn) * (w3 . xn)), and shg = gate . xn when gated: an FFN's output
 * before it is added (mvm_cuda_fwd_add_ffn); the unit of a shared expert (gated in
 * qwen2moe, not in deepseek2 and glm4moe: gate NULL or none) or of a dense block's FFN. */
mvm_status mvm_cuda_fwd_ffn_out(struct cuda_fwd *f, const struct dev_weight *w1,
                                const struct dev_weight *w3, const struct dev_weight *w2,
                                const struct dev_weight *gate, uint32_t n);
/* x += [sigmoid(shg) *] tmp: mvm_cuda_fwd_ffn_out's result added. */
mvm_status mvm_cuda_fwd_add_ffn(struct cuda_fwd *f, const struct dev_weight *gate, uint32_t n);
/* x += the FFN's output; without a gate, added by its down product itself. */
mvm_status mvm_cuda_fwd_ffn(struct cuda_fwd *f, const struct dev_weight *w1,
                            const struct dev_weight *w3, const struct dev_weight *w2,
                            const struct dev_weight *gate, uint32_t n);
/* A dense block's FFN (deepseek2's and glm4moe's leading blocks), its norm first. */
mvm_status mvm_cuda_fwd_dense_ffn(struct cuda_fwd *f, const struct dev_block *L, uint32_t n);
/* ---- forward_cuda_attn.c --------------------------------------------------------------- */

/* Block L's attention weights (GQA or MLA) to the device. */
mvm_status mvm_cuda_fwd_upload_attention(struct cuda_fwd *f, const mvm_layer *L,
                                         struct dev_block *d);
/* The KV cache of every block and the attention's scratch. */
mvm_status mvm_cuda_fwd_alloc_attention(struct cuda_fwd *f);
/* x += attention(rms(x)) of block L over the batch's n tokens, f->runs' of them; each
 * run's rows of the KV cache are block blk of its sequence; leaves rms(x) nowhere. */
mvm_status mvm_cuda_fwd_attention(struct cuda_fwd *f, const struct dev_block *L, uint32_t blk,
                                  uint32_t n);

#endif
