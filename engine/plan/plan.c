/* The one planning step before a model's experts are read (plan.h). */
#include "engine/plan/plan.h"

#include <stdbool.h>
#include <stdio.h>

#include "engine/compute/gpu.h"
#include "engine/forward/engine_options.h"
#include "engine/forward/forward.h"
#include "vmm/error.h"

/* The positions of a context whose caller sizes none (mvm_plan_ctx: the training context up to
 * this many), for the automatic GPU budget and the engine API alike. */
#define MVM_DEFAULT_CTX 4096

mvm_ctx_shape mvm_plan_ctx(const mvm_model *m, const mvm_ctx_shape *ctx, uint32_t n_seq)
{
    const uint32_t train = m->hp.n_ctx_train;
    mvm_ctx_shape s = ctx ? *ctx : (mvm_ctx_shape){0};
    if (!s.n_ctx)
        s.n_ctx = train && train < MVM_DEFAULT_CTX ? train : MVM_DEFAULT_CTX;
    if (!s.n_batch)
        s.n_batch = MVM_DEFAULT_BATCH;
    const uint64_t rows = (uint64_t)s.n_ctx * (n_seq ? n_seq : 1);
    s.n_batch = rows < s.n_batch ? (uint32_t)rows : s.n_batch;
    return s;
}

/* desc->device_reserve for a GPU with an automatic budget: the weights besides the experts,
 * and the caller's reserve or else the KV cache and scratch of ctx. */
static mvm_status size_reserve(mvm_model *m, const mvm_ctx_shape *ctx, mvm_space_desc *desc)
{
    const mvm_ctx_shape s = mvm_plan_ctx(m, ctx, 1);
    uint64_t weights, rest;
    mvm_status st = mvm_ctx_device_bytes(m, s.n_ctx, s.n_batch, s.kv_type, s.predict, &weights,
                                         &rest);
    if (st != MVM_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", mvm_last_error());
        return mvm_fail(st, "%s: sizing the device context: %s", m->path, why);
    }
    desc->device_reserve = weights + (desc->device_reserve ? desc->device_reserve : rest);
    return MVM_OK;
}

/* The space on desc->backend (host or cuda). */
static mvm_status make_space(mvm_model *m, const mvm_ctx_shape *ctx, mvm_space_desc *desc,
                             mvm_space **out)
{
    if (m->cpu_moe && desc->backend == MVM_BACKEND_CUDA) {
        /* llama.cpp's -ngl 99 --cpu-moe: the GPU computes the rest, the CPU every expert.
         * A space holds a page at least: the least it can be, one expert's pages (its
         * share of them all, a hair up against rounding), which nothing loads into. */
        desc->device_budget = 0;
        desc->device_budget_frac = (1 + 1e-9) / ((double)m->hp.n_layer * m->hp.n_expert);
    }
    m->experts_at_home = m->cpu_moe || (desc->backend == MVM_BACKEND_HOST &&
                                        desc->device_budget == MVM_BUDGET_AUTO);
    if (desc->backend == MVM_BACKEND_CUDA && !mvm_ctx_device_available())
        return mvm_fail(MVM_ERR_UNSUPPORTED, "%s: expert space: MOEVM_BACKEND=cuda, but this "
                        "moevm was built without nvcc, so it has no device kernels to compute "
                        "the experts (rebuild with nvcc on PATH, or use MOEVM_BACKEND=host)",
                        m->path);
    m->device = desc->device; /* size_reserve asks it which kernels it has */
    mvm_option_value pack, slots; /* the experts back to back where the budget holds them
                                     all; else read in their slots */
    mvm_status st = mvm_option_read(&mvm_opt_pack, &pack);
    if (st == MVM_OK)
        st = mvm_option_read(&mvm_opt_slots, &slots);
    if (st != MVM_OK)
        return st;
    desc->pack = pack.i == 1 && !(ctx && ctx->keep_pages); /* "off|on" */
    /* (a distributed rank's or calibrate's experts are read at their own addresses; with
     * every expert the CPU's nothing loads, and the one expert's budget may be under a
     * granule) */
    desc->slots = slots.i == 1 && desc->backend == MVM_BACKEND_CUDA && !m->cpu_moe &&
                  !(ctx && ctx->keep_pages);
    if (desc->backend == MVM_BACKEND_CUDA && desc->device_budget == MVM_BUDGET_AUTO &&
        (st = size_reserve(m, ctx, desc)) != MVM_OK)
        return st;
    if ((st = mvm_space_create(desc, out)) != MVM_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", mvm_last_error());
        return mvm_fail(st, "%s: expert space: %s", m->path, why);
    }
    return MVM_OK;
}

mvm_status mvm_plan_space(mvm_model *m, const mvm_ctx_shape *ctx, mvm_space_desc *desc,
                          mvm_space **out)
{
    *out = NULL;
    desc->n_layers = m->hp.n_layer;
    desc->n_experts = m->hp.n_expert;
    desc->expert_bytes = m->expert_bytes;
    /* The backend is decided here, not by the space: an automatic budget means different
     * things on each (room left for the context, or experts read at their homes). The
     * device opened to find out is closed once the space holds the context; the forward
     * pass loads the kernels again (the driver caches their compiled form). */
    const bool auto_gpu = desc->backend == MVM_BACKEND_AUTO;
    mvm_gpu *probe = NULL;
    if (auto_gpu) {
        mvm_status gpu = mvm_ctx_device_usable(desc->device, &probe);
        if (gpu != MVM_OK)
            mvm_log(MVM_LOG_INFO, "computing on the CPU: %s", mvm_last_error());
        desc->backend = gpu == MVM_OK ? MVM_BACKEND_CUDA : MVM_BACKEND_HOST;
    }
    const uint64_t caller_reserve = desc->device_reserve;
    mvm_status st = make_space(m, ctx, desc, out);
    if (st != MVM_OK && auto_gpu && desc->backend == MVM_BACKEND_CUDA &&
        desc->device_budget == MVM_BUDGET_AUTO) {
        mvm_log(MVM_LOG_WARN, "computing on the CPU: the GPU cannot take this model: %s",
                mvm_last_error());
        desc->backend = MVM_BACKEND_HOST;
        desc->device_reserve = caller_reserve;
        st = make_space(m, ctx, desc, out);
    }
    mvm_gpu_close(probe);
    return st;
}

mvm_status mvm_plan_cpu_moe(mvm_model *m, uint32_t n_cpu_moe, mvm_space_desc *desc)
{
    const uint32_t layers = m->hp.n_layer;
    m->cpu_moe = n_cpu_moe >= layers;
    if (n_cpu_moe < layers) {
        /* A fraction of the experts' pages, as a percentage budget: each expert whole pages,
         * so the budget holds exactly the layers' experts. The quotient can round a hair
         * below the product's exact page count; a billionth of a layer more cannot reach
         * another page. */
        double frac = ((double)(layers - n_cpu_moe) + 1e-9) / (double)layers;
        desc->device_budget = 0;
        desc->device_budget_frac = frac < 1 ? frac : 1;
        return MVM_OK;
    }
    desc->device_budget = MVM_BUDGET_AUTO; /* make_space's, on a GPU */
    desc->device_budget_frac = 0;
    return MVM_OK;
}

mvm_status mvm_model_load(const char *path, const mvm_load_args *a, mvm_model **out)
{
    mvm_model *m;
    mvm_space *space;
    mvm_status st = mvm_model_open(path, &m);
    if (st != MVM_OK) {
        *out = NULL;
        return st;
    }
    if (a->cpu_moe)
        st = mvm_plan_cpu_moe(m, a->n_cpu_moe, a->desc);
    if (st == MVM_OK && (st = mvm_plan_space(m, &a->ctx, a->desc, &space)) == MVM_OK)
        st = mvm_model_load_experts(m, space, a->pool, a->held, a->progress, a->progress_ctx);
    if (st != MVM_OK) {
        mvm_model_free(m);
        m = NULL;
    }
    *out = m;
    return st;
}
