/*
 * The engine's device: the CUDA driver (loaded as vmm's cuda backend loads it), the device's
 * primary context (the one the expert space's cuda backend maps into), one compute stream,
 * the kernels of kernels/cuda loaded from the PTX embedded at build time, and device memory.
 * The device forward pass is built on it; it is its own unit so that the launch plumbing
 * (names, argument structs, shapes, stream order) is tested on its own over tests/fakecuda
 * with the kernels emulated (tests/test_gpu.c).
 *
 * Every call returns MVM_OK or an error whose message names the driver call or kernel that
 * failed. Launches and copies are queued on the compute stream in call order; a download
 * waits for everything queued before it.
 */
#ifndef MVM_ENGINE_COMPUTE_GPU_H
#define MVM_ENGINE_COMPUTE_GPU_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/compute/blas.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kernels.h"
#include "moevm/moevm.h"

typedef struct mvm_gpu mvm_gpu;

enum mvm_gpu_kernel {
    MVM_GK_QUANTIZE, /* mvm_g_quantize (type-free: the type is an argument) */
    MVM_GK_MATVEC,
    MVM_GK_EXPERT_UP,
    MVM_GK_EXPERT_UP1,
    MVM_GK_EXPERT_DOWN1,
    MVM_GK_EXPERT_UP1_KEEP,
    MVM_GK_EXPERT_DOWN1_KEEP,
    MVM_GK_EXPERT_DOWN,
    MVM_GK_EXPERT_QUANTIZE,
    MVM_GK_EXPERT_MMQ_UP, /* kernels/cuda/mmq.cu's: only where and for the types that
                             mvm_gpu_has says */
    MVM_GK_EXPERT_MMQ_DOWN,
    MVM_GK_MMQ_MATMUL, /* a batch's dense products (kernels/cuda/mmq.cu): as the two above */
    MVM_GK_EXPERT_SUM,
    MVM_GK_ROUTE,
    MVM_GK_ROUTE_ROWS,
    MVM_GK_ROUTE_GROUP,
    MVM_GK_CPU_WAIT,
    MVM_GK_RMSNORM,
    MVM_GK_ROPE,
    MVM_GK_QK_ROPE,
    MVM_GK_ATTENTION,
    MVM_GK_ATTENTION_COMBINE,
    MVM_GK_ATTENTION_MMA, /* kernels/cuda/attention_mma.cu's: only where mvm_gpu_has it */
    MVM_GK_STORE_ROWS,
    MVM_GK_ADD,
    MVM_GK_SWIGLU,
    MVM_GK_DEQUANT, /* the tensor-core path's (kernels/cuda/gemm.cu) */
    MVM_GK_TO_HALF,
    MVM_GK_GLU_HALF,
    MVM_GK_ROWS_OUT,
    MVM_GK_ATTN_SOFTMAX,
    MVM_GK_COUNT
};

/* What mvm_gpu_open's flags ask. PDL: programmatic dependent launch between a decode graph's
 * kernels (MOEVM_PDL: engine/compute/ptx_pdl.c), on a device of compute capability 9.0 or
 * later (elsewhere said at MVM_LOG_INFO and not done). */
enum { MVM_GPU_PDL = 1 };

/* MVM_ERR_UNSUPPORTED when the build has no kernels (no nvcc) or no CUDA toolkit, or the
 * driver or device is missing; MVM_ERR_BACKEND when a module or kernel does not load. */
mvm_status mvm_gpu_open(int device, unsigned flags, mvm_gpu **out);
void mvm_gpu_close(mvm_gpu *g);
/* Makes the device's context the calling thread's: every entry into the device forward
 * pass calls it first, since an engine is free to run on a thread other than the one that
 * opened it (moevm serve's, an embedding program's), where the driver would refuse every
 * call with CUDA_ERROR_INVALID_CONTEXT. */
mvm_status mvm_gpu_use(mvm_gpu *g);
/* The compute stream (a CUstream), for mvm_unpin_after. */
void *mvm_gpu_stream(const mvm_gpu *g);
/* Whether kernel k is there for weight type `type` (ignored by an untyped kernel): the
 * mmq ones need compute capability 8.0 and exist for a few types (kernels/cuda/kernels.h);
 * the others are there whenever mvm_gpu_open succeeded, a type's own (its products,
 * experts and dequantization) loaded at the first launch of one of them, whose failure
 * that launch returns. */
int mvm_gpu_has(const mvm_gpu *g, enum mvm_gpu_kernel k, int type);
/* What mvm_gpu_has would say on a device of compute capability 8.0 or later (sm80) or
 * earlier, without one open: a sizing pass's answer (engine/forward/forward_cuda_setup.c). */
int mvm_gpu_would_have(int sm80, enum mvm_gpu_kernel k, int type);
/* Whether CUDA device `device` has compute capability major.0 or later, asked of the driver
 * without a context; MVM_ERR_UNSUPPORTED without a driver or device. */
mvm_status mvm_gpu_device_cc(int device, int major, int *yes);
/* From now on each launch and copy is timed (engine/compute/gpu_profile.h); the report
 * says where the time went. */
mvm_status mvm_gpu_profile(mvm_gpu *g);
void mvm_gpu_profile_report(const mvm_gpu *g, FILE *f);

mvm_status mvm_gpu_alloc(mvm_gpu *g, size_t bytes, mvm_dptr *out);
void mvm_gpu_free(mvm_gpu *g, mvm_dptr p);
/* Host -> device, in stream order. From pageable memory the bytes are staged before it
 * returns, so src may be reused then; from pinned memory (mvm_gpu_host_alloc) the device
 * reads src when the stream gets there: src must not change until a sync. */
mvm_status mvm_gpu_upload(mvm_gpu *g, mvm_dptr dst, const void *src, size_t bytes);
/* Device -> host, after everything queued before. */
mvm_status mvm_gpu_download(mvm_gpu *g, void *dst, mvm_dptr src, size_t bytes);
/* Device -> host, queued: dst holds the bytes once mvm_gpu_sync returns. With dst from
 * mvm_gpu_host_alloc several go behind one wait (pageable memory makes each its own). */
mvm_status mvm_gpu_download_async(mvm_gpu *g, void *dst, mvm_dptr src, size_t bytes);
/* Host memory pinned for the device's copies (page-aligned); free with mvm_gpu_host_free
 * (NULL is ignored). */
mvm_status mvm_gpu_host_alloc(mvm_gpu *g, size_t bytes, void **out);
void mvm_gpu_host_free(mvm_gpu *g, void *p);
/* The same, also mapped for the device: *dev is where its kernels read and write it (words
 * that the host and the device hand each other while both run). */
mvm_status mvm_gpu_host_map(mvm_gpu *g, size_t bytes, void **out, mvm_dptr *dev);
mvm_status mvm_gpu_copy(mvm_gpu *g, mvm_dptr dst, mvm_dptr src, size_t bytes);
/* bytes of zeros at dst, in stream order (no host buffer to make or keep). */
mvm_status mvm_gpu_zero(mvm_gpu *g, mvm_dptr dst, size_t bytes);
/* Device -> device, `rows` rows of `width` bytes from src (src_pitch bytes apart) to dst
 * (dst_pitch apart). */
mvm_status mvm_gpu_copy_rows(mvm_gpu *g, mvm_dptr dst, size_t dst_pitch, mvm_dptr src,
                             size_t src_pitch, size_t width, size_t rows);
mvm_status mvm_gpu_sync(mvm_gpu *g);
/* Device -> host on a second stream (made at the first call), behind everything queued on
 * the compute stream so far, which goes on meanwhile: the copy overlaps its kernels. src
 * must not be written by what is queued after until the copy is done (mvm_gpu_wait_mark of
 * a mark recorded after it). Not while a graph is recorded. */
mvm_status mvm_gpu_download_aside(mvm_gpu *g, void *dst, mvm_dptr src, size_t bytes);
/* Marks, MVM_GPU_MARKS of them: mvm_gpu_mark(i) records mark i behind everything queued so
 * far on the second stream (mvm_gpu_download_aside's; again: moved there), and
 * mvm_gpu_wait_mark(i) returns once that stream has passed it, so that the host may read
 * what the copies queued before it brought down while the compute stream goes on. */
#define MVM_GPU_MARKS 8
mvm_status mvm_gpu_mark(mvm_gpu *g, unsigned i);
mvm_status mvm_gpu_wait_mark(mvm_gpu *g, unsigned i);

/* The tensor-core products (engine/compute/blas.h), on the compute stream: the first call
 * loads cuBLAS from `lib` (mvm_blas_open) and makes its handle, with `workspace` (ws_bytes of
 * device memory) for it; later ones answer what the first did. MVM_ERR_UNSUPPORTED: no
 * cuBLAS here (the caller then uses the kernels); anything else is a failure. */
mvm_status mvm_gpu_gemm_open(mvm_gpu *g, const char *lib, mvm_dptr workspace, size_t ws_bytes);
/* Once mvm_gpu_gemm_open succeeded: mvm_blas_gemm's product, and mvm_blas_gemm_batched's
 * products. */
mvm_status mvm_gpu_gemm(mvm_gpu *g, uint32_t m, uint32_t n, uint32_t k, mvm_dptr w,
                        uint64_t ldw, mvm_dptr x, uint64_t ldx, mvm_dptr y, uint64_t ldy,
                        float beta);
mvm_status mvm_gpu_gemm_batched(mvm_gpu *g, const mvm_blas_batch *p);

/* Queues kernel k (of weight type `type` where it has one; ignored otherwise) with its
 * argument struct (args_bytes long), in the shape given. */
mvm_status mvm_gpu_launch(mvm_gpu *g, enum mvm_gpu_kernel k, int type, const void *args,
                          size_t args_bytes, mvm_g_shape shape);

/* CUDA graphs (engine/compute/gpu_graph.c): the launches and device-to-device copies made
 * between mvm_gpu_record and mvm_gpu_replay are recorded, not queued, then queued together
 * as one graph. A recording with the same kernels and copies in the same order as the graph
 * built last replays that graph, with the kernels whose arguments or shape changed updated
 * in it (a decode token's position and cache length); any other builds a new one. Between
 * the two, a copy to or from the host, a zeroing, a cuBLAS product or a sync fails.
 * mvm_gpu_graphs: whether to record at all (not with the profile on, nor where the driver
 * has no graphs or refused one, which it logs). */
int mvm_gpu_graphs(mvm_gpu *g);
void mvm_gpu_record(mvm_gpu *g);
mvm_status mvm_gpu_replay(mvm_gpu *g);
/* A recording given up: nothing of it is queued. */
void mvm_gpu_record_drop(mvm_gpu *g);
/* The graphs built, the kernel nodes updated in them and their programmatic edges (MVM_GPU_PDL)
 * so far. */
void mvm_gpu_graph_stats(const mvm_gpu *g, uint64_t *built, uint64_t *updated,
                         uint64_t *pdl_edges);

/* The launches, each in the shape kernels/cuda/kernels.h computes from its arguments. */
#define MVM_GPU_LAUNCHER(fn, kernel, A, shape)                                                 \
    static inline mvm_status fn(mvm_gpu *g, int type, const A *a)                              \
    {                                                                                          \
        return mvm_gpu_launch(g, kernel, type, a, sizeof *a, shape(a));                        \
    }
MVM_GPU_LAUNCHER(mvm_gpu_quantize, MVM_GK_QUANTIZE, mvm_g_quantize_args, mvm_g_quantize_shape)
MVM_GPU_LAUNCHER(mvm_gpu_matvec, MVM_GK_MATVEC, mvm_g_matvec_args, mvm_g_matvec_shape)
MVM_GPU_LAUNCHER(mvm_gpu_expert_up, MVM_GK_EXPERT_UP, mvm_g_expert_args, mvm_g_expert_up_shape)
MVM_GPU_LAUNCHER(mvm_gpu_expert_up1, MVM_GK_EXPERT_UP1, mvm_g_expert_args,
                 mvm_g_expert_up1_shape)
MVM_GPU_LAUNCHER(mvm_gpu_expert_down, MVM_GK_EXPERT_DOWN, mvm_g_expert_args,
                 mvm_g_expert_down_shape)
MVM_GPU_LAUNCHER(mvm_gpu_expert_down1, MVM_GK_EXPERT_DOWN1, mvm_g_expert_args,
                 mvm_g_expert_down1_shape)
MVM_GPU_LAUNCHER(mvm_gpu_expert_up1_keep, MVM_GK_EXPERT_UP1_KEEP, mvm_g_expert_args,
                 mvm_g_expert_up1_shape)
MVM_GPU_LAUNCHER(mvm_gpu_expert_down1_keep, MVM_GK_EXPERT_DOWN1_KEEP, mvm_g_expert_args,
                 mvm_g_expert_down1_keep_shape)
MVM_GPU_LAUNCHER(mvm_gpu_expert_quantize, MVM_GK_EXPERT_QUANTIZE, mvm_g_expert_args,
                 mvm_g_expert_quantize_shape)
MVM_GPU_LAUNCHER(mvm_gpu_expert_mmq_up, MVM_GK_EXPERT_MMQ_UP, mvm_g_expert_args,
                 mvm_g_expert_mmq_up_shape)
MVM_GPU_LAUNCHER(mvm_gpu_expert_mmq_down, MVM_GK_EXPERT_MMQ_DOWN, mvm_g_expert_args,
                 mvm_g_expert_mmq_down_shape)
MVM_GPU_LAUNCHER(mvm_gpu_mmq_matmul, MVM_GK_MMQ_MATMUL, mvm_g_matvec_args,
                 mvm_g_mmq_matmul_shape)
MVM_GPU_LAUNCHER(mvm_gpu_expert_sum, MVM_GK_EXPERT_SUM, mvm_g_expert_sum_args,
                 mvm_g_expert_sum_shape)
MVM_GPU_LAUNCHER(mvm_gpu_route, MVM_GK_ROUTE, mvm_g_route_args, mvm_g_route_shape)
MVM_GPU_LAUNCHER(mvm_gpu_route_rows, MVM_GK_ROUTE_ROWS, mvm_g_route_args,
                 mvm_g_route_rows_shape)
MVM_GPU_LAUNCHER(mvm_gpu_route_group, MVM_GK_ROUTE_GROUP, mvm_g_route_group_args,
                 mvm_g_route_group_shape)
MVM_GPU_LAUNCHER(mvm_gpu_cpu_wait, MVM_GK_CPU_WAIT, mvm_g_cpu_wait_args, mvm_g_cpu_wait_shape)
MVM_GPU_LAUNCHER(mvm_gpu_rmsnorm, MVM_GK_RMSNORM, mvm_g_rmsnorm_args, mvm_g_rmsnorm_shape)
MVM_GPU_LAUNCHER(mvm_gpu_rope, MVM_GK_ROPE, mvm_g_rope_args, mvm_g_rope_shape)
MVM_GPU_LAUNCHER(mvm_gpu_qk_rope, MVM_GK_QK_ROPE, mvm_g_qk_rope_args, mvm_g_qk_rope_shape)
MVM_GPU_LAUNCHER(mvm_gpu_store_rows, MVM_GK_STORE_ROWS, mvm_g_store_rows_args,
                 mvm_g_store_rows_shape)
MVM_GPU_LAUNCHER(mvm_gpu_add, MVM_GK_ADD, mvm_g_add_args, mvm_g_add_shape)
MVM_GPU_LAUNCHER(mvm_gpu_swiglu, MVM_GK_SWIGLU, mvm_g_add_args, mvm_g_add_shape)
MVM_GPU_LAUNCHER(mvm_gpu_dequant, MVM_GK_DEQUANT, mvm_g_dequant_args, mvm_g_dequant_shape)
MVM_GPU_LAUNCHER(mvm_gpu_to_half, MVM_GK_TO_HALF, mvm_g_to_half_args, mvm_g_to_half_shape)
MVM_GPU_LAUNCHER(mvm_gpu_glu_half, MVM_GK_GLU_HALF, mvm_g_glu_half_args, mvm_g_glu_half_shape)
MVM_GPU_LAUNCHER(mvm_gpu_rows_out, MVM_GK_ROWS_OUT, mvm_g_rows_out_args, mvm_g_rows_out_shape)
MVM_GPU_LAUNCHER(mvm_gpu_attn_softmax, MVM_GK_ATTN_SOFTMAX, mvm_g_attn_softmax_args,
                 mvm_g_attn_softmax_shape)
#undef MVM_GPU_LAUNCHER

/* Up of the routed experts of a->active (kernels.h), to h in down's activation format:
 * with a->mmq and several rows by the tensor cores' mmq kernel; with one row an expert
 * (a->one_row) by up1 (its _keep twin with a->wstore: read-through), else by up; their
 * floats then made Q8_K blocks (a K-quant down), or Q8_0 blocks (up1 and a Q type's down). */
static inline mvm_status mvm_gpu_experts_up(mvm_gpu *g, const mvm_g_expert_args *a)
{
    const enum mvm_wtype down = (enum mvm_wtype)a->down;
    const int gu = (int)a->gate_up;
    mvm_status st = a->mmq && !a->one_row ? mvm_gpu_expert_mmq_up(g, gu, a)
                    : a->one_row          ? (a->wstore ? mvm_gpu_expert_up1_keep(g, gu, a)
                                                       : mvm_gpu_expert_up1(g, gu, a))
                                          : mvm_gpu_expert_up(g, gu, a);
    if (st == MVM_OK && (mvm_k_is_k(down) || (a->one_row && mvm_k_block_elems(down) > 1)))
        st = mvm_gpu_expert_quantize(g, 0, a);
    return st;
}

/* Their down, from h: by mmq's with a->mmq and several rows, by down1 (or its _keep twin)
 * with one row an expert, else by down. */
static inline mvm_status mvm_gpu_experts_down(mvm_gpu *g, const mvm_g_expert_args *a)
{
    if (a->mmq && !a->one_row)
        return mvm_gpu_expert_mmq_down(g, (int)a->down, a);
    if (a->one_row && a->wstore)
        return mvm_gpu_expert_down1_keep(g, (int)a->down, a);
    return a->one_row ? mvm_gpu_expert_down1(g, (int)a->down, a)
                      : mvm_gpu_expert_down(g, (int)a->down, a);
}

/* Their up, then their down. */
static inline mvm_status mvm_gpu_experts(mvm_gpu *g, const mvm_g_expert_args *a)
{
    mvm_status st = mvm_gpu_experts_up(g, a);
    return st == MVM_OK ? mvm_gpu_experts_down(g, a) : st;
}

/* Attention: the splits, on the tensor cores with mma (mvm_g_attention_mma; the caller
 * checks that it takes a and that the device has it), then their combination where there
 * are several (kernels.h). With a->pos, in the shape of a->pos0 (which *pos holds when it
 * runs), its arguments without it: the same from token to token. */
static inline mvm_status mvm_gpu_attention_on(mvm_gpu *g, int type, const mvm_g_attention_args *a,
                                              int mma)
{
    mvm_g_attention_args s = *a, b; /* s: the real pos0, for the shapes; b: launched */
    s.mma = (uint32_t)mma;
    b = s;
    b.pos0 = a->pos ? 0 : a->pos0;
    mvm_status st = mma ? mvm_gpu_launch(g, MVM_GK_ATTENTION_MMA, type, &b, sizeof b,
                                         mvm_g_attention_mma_shape(&s))
                        : mvm_gpu_launch(g, MVM_GK_ATTENTION, type, &b, sizeof b,
                                         mvm_g_attention_shape(&s));
    if (st == MVM_OK && mvm_g_attention_splits(&s) > 1)
        st = mvm_gpu_launch(g, MVM_GK_ATTENTION_COMBINE, type, &b, sizeof b,
                            mvm_g_attention_combine_shape(&s));
    return st;
}

/* The same, on the tensor cores wherever they take a (latent rows). */
static inline mvm_status mvm_gpu_attention(mvm_gpu *g, int type, const mvm_g_attention_args *a)
{
    return mvm_gpu_attention_on(
        g, type, a, mvm_g_attention_mma_takes(a) && mvm_gpu_has(g, MVM_GK_ATTENTION_MMA, 0));
}

#endif
