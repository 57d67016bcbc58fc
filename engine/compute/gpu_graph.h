/*
 * The device's CUDA graphs (engine/compute/gpu.h, mvm_gpu_record): a run of kernel launches
 * and device-to-device copies recorded, then queued as one graph, built node by node (not
 * captured: a capture in the global mode would fail the expert space's own synchronisations
 * on its other streams). Private to engine/compute/gpu.c.
 */
#ifndef MVM_ENGINE_COMPUTE_GPU_GRAPH_H
#define MVM_ENGINE_COMPUTE_GPU_GRAPH_H

#include <cuda.h>

#include "kernels/cuda/kernels.h"
#include "vmm/backend_cuda.h"

typedef struct mvm_gpu_graph mvm_gpu_graph;

/* The graph calls of the driver cu was loaded from, for ctx and stream; MVM_ERR_UNSUPPORTED
 * when it lacks them. pdl: a kernel after a kernel follows it by a programmatic edge
 * (every kernel's PTX waits for the one before at its start: ptx_pdl.h), where the driver
 * takes them. */
mvm_status mvm_gpu_graph_open(const struct cu_api *cu, CUcontext ctx, CUstream stream, int pdl,
                              mvm_gpu_graph **out);
void mvm_gpu_graph_close(mvm_gpu_graph *gr);

/* A new recording (the last one's operations forgotten). */
void mvm_gpu_graph_start(mvm_gpu_graph *gr);
/* Records a launch of f with its one argument struct (bytes long, copied) in shape s; name:
 * the kernel's, for messages. */
mvm_status mvm_gpu_graph_kernel(mvm_gpu_graph *gr, CUfunction f, const void *args,
                                size_t bytes, mvm_g_shape s, const char *name);
/* Records a device-to-device copy of rows rows of width bytes. */
mvm_status mvm_gpu_graph_copy(mvm_gpu_graph *gr, const CUDA_MEMCPY2D *p);
/* Queues the recording as one graph: the one built last when the recording has its kernels
 * and copies in its order (the kernels whose arguments or shape changed updated in it), else
 * a new one. If the driver refuses a graph, the recording is queued launch by launch, the
 * message logged once, and *broken set: graphs are of no use on this driver. */
mvm_status mvm_gpu_graph_launch(mvm_gpu_graph *gr, int *broken);
/* Graphs built, nodes updated in them, and programmatic edges built, since open. */
void mvm_gpu_graph_counts(const mvm_gpu_graph *gr, uint64_t *built, uint64_t *updated,
                          uint64_t *pdl_edges);

#endif
