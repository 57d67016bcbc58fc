/*
 * One planning step before a model's experts are read: where the model computes
 * (MOEVM_BACKEND=auto resolved), how much device memory its experts may take and what the
 * context must keep beside them, decided once from the model's shape and the context the
 * caller will make; then the expert space made so, which the loader fills
 * (model.h's mvm_model_load_experts). Commands, tests and benchmarks load through here.
 */
#ifndef MVM_ENGINE_PLAN_PLAN_H
#define MVM_ENGINE_PLAN_PLAN_H

#include "engine/model/model.h"

/* Prompt tokens per forward pass when the caller says none (run, chat, serve, bench and the
 * engine API): llama.cpp's micro-batch, 512. The experts' kernels fill with a batch's tokens
 * (an expert unpacks its rows once for up to 64 of them): on the CPU, pp512 at 512 against
 * 256 is +4-7% for Q8_0, +3-5% for Q4_K_M and +14% for IQ3_XXS (docs/perf/cpu.md), for
 * twice the scratch, which grows with min(threads, 4) x batch x top-k x hidden size. */
#define MVM_DEFAULT_BATCH 512

/* The context the caller will make of the model (forward.h's mvm_ctx_create): what an
 * automatic GPU budget leaves room for. n_ctx 0: the model's training context, at most 4096
 * positions; n_batch 0: MVM_DEFAULT_BATCH; kv_type NULL: MOEVM_KV_TYPE; predict NULL:
 * MOEVM_PREDICT's module (SMoE's speculative one has scratch of its own). */
typedef struct mvm_ctx_shape {
    uint32_t n_ctx, n_batch;
    const char *kv_type;
    const char *predict; /* "name" or "name{k=v,...}" */
    int keep_pages;      /* 1: experts in pages even where the budget holds them all (never
                            packed, MOEVM_PACK): the caller moves them itself (`moevm
                            calibrate`), or holds only some (a distributed run's ranks) */
} mvm_ctx_shape;

/* ctx (NULL: every field 0) with its zeros resolved for model m, as above, and the batch
 * never more than the positions of n_seq sequences (0: 1) of n_ctx each: a batch's scratch
 * beyond them (and its device memory) would never be used. */
mvm_ctx_shape mvm_plan_ctx(const mvm_model *m, const mvm_ctx_shape *ctx, uint32_t n_seq);

/*
 * The expert space for opened model m (mvm_model_open), into *out; desc's shape fields
 * (n_layers, n_experts, expert_bytes) are m's. What is decided, in one place:
 * - the backend: auto is the GPU when this build has device kernels that load on a usable
 *   CUDA device (forward.h's mvm_ctx_device_usable), else the CPU; cuda in a build without
 *   device kernels is MVM_ERR_UNSUPPORTED;
 * - on a GPU with an automatic budget, desc->device_reserve: the weights besides the experts
 *   plus the KV cache and scratch of `ctx` (or, when the caller set device_reserve, that),
 *   so the budget leaves room for the context;
 * - on the CPU with an automatic budget, m->experts_at_home: the CPU reads the homes and no
 *   device page is used (a device page there would be a second copy in the same memory);
 * - with m->cpu_moe (mvm_plan_cpu_moe), m->experts_at_home on either backend: on a GPU it
 *   computes the rest and the space is the least it can be, one expert's pages;
 * - a GPU that auto chose but that cannot hold the model beside its context (or whose
 *   pinned homes the host cannot give) leaves the model to the CPU with a warning; a
 *   backend or budget the user gave is theirs, and its failure an error.
 * On return desc is what the space was made from (backend host or cuda).
 */
mvm_status mvm_plan_space(mvm_model *m, const mvm_ctx_shape *ctx, mvm_space_desc *desc,
                          mvm_space **out);

/*
 * llama.cpp's --n-cpu-moe N for opened model m, into desc before mvm_plan_space: the experts
 * of N of its MoE layers stay in host memory. moevm budgets bytes, not layers (the routing
 * decides which experts fill the budget), so N < n_layer is the budget of the other layers'
 * experts: (n_layer - N) / n_layer of their pages, each expert whole pages. N >= n_layer
 * keeps every expert on the CPU (m->cpu_moe), as llama.cpp's -ngl 99 --cpu-moe: the CPU
 * computes them from their homes (m->experts_at_home) and, where the plan takes the GPU
 * (auto on a usable device, or cuda), the GPU computes the rest.
 */
mvm_status mvm_plan_cpu_moe(mvm_model *m, uint32_t n_cpu_moe, mvm_space_desc *desc);

/* What mvm_model_load needs besides the path. */
typedef struct mvm_load_args {
    mvm_space_desc *desc;  /* mvm_plan_space's */
    mvm_ctx_shape ctx;
    mvm_pool *pool;        /* converts the experts */
    const uint8_t *held;   /* mvm_model_load_experts'; NULL: every expert */
    int cpu_moe;           /* nonzero: mvm_plan_cpu_moe(n_cpu_moe) before the plan */
    uint32_t n_cpu_moe;
    mvm_progress_fn progress;
    void *progress_ctx;
} mvm_load_args;

/* mvm_model_open, (mvm_plan_cpu_moe,) mvm_plan_space and mvm_model_load_experts in one
 * call. */
mvm_status mvm_model_load(const char *path, const mvm_load_args *a, mvm_model **out);

#endif
