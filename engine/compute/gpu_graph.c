/*
 * The device's CUDA graphs (gpu_graph.h). A decode token launches a few hundred small
 * kernels; queued one by one, each costs the host a driver call and the device a gap
 * between kernels. Queued as a graph, the token is one call and the device runs the kernels
 * back to back.
 *
 * A token's kernels are the last token's, most of them with the same arguments (those that
 * take the position read it on the device: kernels.h, mvm_g_pos0), so the graph is built
 * once and each recording after it is compared with it operation by operation: the kernels
 * whose arguments or shape changed (attention's splits as its length grows, another
 * sequence's rows of the cache, an F32 cache written in place) are updated in the
 * executable graph (cuGraphExecKernelNodeSetParams), the rest is left as it was. A
 * recording that differs in its sequence (another kernel, a copy, one more or fewer:
 * attention growing a split, another model of batch) builds a new graph. Nodes are chained
 * in recording order, the order the stream would have run them in; with programmatic
 * dependent launch (MOEVM_PDL, ptx_pdl.c says how the kernels take it), a kernel that
 * follows a kernel by a programmatic edge, so that it may start while that one finishes.
 */
#include "engine/compute/gpu_graph.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/error.h"
#include "vmm/options.h"

#define ARGS_MAX 256 /* the largest kernel argument struct (kernels.h), with room */

#define GRAPH_API(X)                                                                           \
    X(Create, "cuGraphCreate", (CUgraph *, unsigned))                                          \
    X(AddKernelNode, "cuGraphAddKernelNode_v2",                                                \
      (CUgraphNode *, CUgraph, const CUgraphNode *, size_t, const CUDA_KERNEL_NODE_PARAMS *))  \
    X(AddMemcpyNode, "cuGraphAddMemcpyNode",                                                   \
      (CUgraphNode *, CUgraph, const CUgraphNode *, size_t, const CUDA_MEMCPY3D *, CUcontext)) \
    X(Instantiate, "cuGraphInstantiateWithFlags", (CUgraphExec *, CUgraph, unsigned long long)) \
    X(ExecKernelNodeSetParams, "cuGraphExecKernelNodeSetParams_v2",                            \
      (CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS *))                             \
    X(Launch, "cuGraphLaunch", (CUgraphExec, CUstream))                                        \
    X(ExecDestroy, "cuGraphExecDestroy", (CUgraphExec))                                        \
    X(Destroy, "cuGraphDestroy", (CUgraph))

struct op {
    int is_kernel;
    CUfunction f;               /* a launch: */
    mvm_g_shape shape;
    uint32_t bytes;
    unsigned char args[ARGS_MAX];
    const char *name;
    CUDA_MEMCPY2D copy;         /* a copy */
};

/* Programmatic edges (CUDA 12.3's drivers on): the kernels' PTX must wait for them (gpu.c). */
typedef CUresult (*add_edges_fn)(CUgraph, const CUgraphNode *, const CUgraphNode *,
                                 const CUgraphEdgeData *, size_t);

struct mvm_gpu_graph {
    struct {
#define FIELD(field, sym, params) CUresult(*field) params;
        GRAPH_API(FIELD)
#undef FIELD
    } api;
    add_edges_fn add_edges; /* cuGraphAddDependencies_v2 where the graph's edges are
                               programmatic between kernels (pdl), else NULL */
    const struct cu_api *cu;
    CUcontext ctx;
    CUstream stream;
    struct op *ops, *built;     /* the recording; what the graph was built or updated from */
    uint32_t n_ops, n_built, cap;
    CUgraphNode *nodes;         /* [n_built] */
    CUgraph graph;
    CUgraphExec exec;
    uint64_t builds, updates, pdl_edges;
};

mvm_status mvm_gpu_graph_open(const struct cu_api *cu, CUcontext ctx, CUstream stream,
                              int pdl, mvm_gpu_graph **out)
{
    *out = NULL;
    mvm_option_value lib;
    mvm_status st = mvm_option_read(&mvm_opt_cuda_library, &lib);
    if (st != MVM_OK)
        return st;
    void *h = dlopen(lib.s, RTLD_NOW | RTLD_NOLOAD); /* the driver cu came from */
    mvm_gpu_graph *gr = calloc(1, sizeof *gr);
    if (!gr)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory for a CUDA graph");
#define LOAD(field, sym, params)                                                               \
    if (!h || !(gr->api.field = (CUresult(*) params)dlsym(h, sym))) {                           \
        free(gr);                                                                              \
        return mvm_fail(MVM_ERR_UNSUPPORTED, "%s lacks %s: no CUDA graphs", lib.s, sym);     \
    }
    GRAPH_API(LOAD)
#undef LOAD
    if (pdl && !(gr->add_edges = (add_edges_fn)dlsym(h, "cuGraphAddDependencies_v2")))
        mvm_log(MVM_LOG_INFO, "MOEVM_PDL: %s lacks cuGraphAddDependencies_v2 (a driver older "
                "than CUDA 12.3): a token's kernels wait for each other in full", lib.s);
    gr->cu = cu, gr->ctx = ctx, gr->stream = stream;
    *out = gr;
    return MVM_OK;
}

static void drop_graph(mvm_gpu_graph *gr)
{
    if (gr->exec)
        gr->api.ExecDestroy(gr->exec);
    if (gr->graph)
        gr->api.Destroy(gr->graph);
    gr->exec = NULL, gr->graph = NULL, gr->n_built = 0;
}

void mvm_gpu_graph_close(mvm_gpu_graph *gr)
{
    if (!gr)
        return;
    drop_graph(gr);
    free(gr->ops);
    free(gr->built);
    free(gr->nodes);
    free(gr);
}

void mvm_gpu_graph_start(mvm_gpu_graph *gr) { gr->n_ops = 0; }

static struct op *next_op(mvm_gpu_graph *gr)
{
    if (gr->n_ops == gr->cap) {
        uint32_t cap = gr->cap ? 2 * gr->cap : 256;
        struct op *ops = realloc(gr->ops, cap * sizeof *ops);
        if (ops)
            gr->ops = ops;
        struct op *built = realloc(gr->built, cap * sizeof *built);
        if (built)
            gr->built = built;
        CUgraphNode *nodes = realloc(gr->nodes, cap * sizeof *nodes);
        if (nodes)
            gr->nodes = nodes;
        if (!ops || !built || !nodes)
            return NULL;
        gr->cap = cap;
    }
    struct op *o = &gr->ops[gr->n_ops++];
    memset(o, 0, sizeof *o);
    return o;
}

mvm_status mvm_gpu_graph_kernel(mvm_gpu_graph *gr, CUfunction f, const void *args,
                                size_t bytes, mvm_g_shape s, const char *name)
{
    if (bytes > ARGS_MAX)
        return mvm_fail(MVM_ERR_RANGE, "%s: %zu bytes of arguments, a graph takes %d", name,
                        bytes, ARGS_MAX);
    struct op *o = next_op(gr);
    if (!o)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory recording a CUDA graph");
    o->is_kernel = 1, o->f = f, o->shape = s, o->bytes = (uint32_t)bytes, o->name = name;
    memcpy(o->args, args, bytes);
    return MVM_OK;
}

mvm_status mvm_gpu_graph_copy(mvm_gpu_graph *gr, const CUDA_MEMCPY2D *p)
{
    struct op *o = next_op(gr);
    if (!o)
        return mvm_fail(MVM_ERR_NOMEM, "out of memory recording a CUDA graph");
    o->copy = *p;
    return MVM_OK;
}

static CUDA_KERNEL_NODE_PARAMS kernel_params(struct op *o, void **params)
{
    params[0] = o->args;
    return (CUDA_KERNEL_NODE_PARAMS){.func = o->f, .gridDimX = o->shape.gx,
                                     .gridDimY = o->shape.gy, .gridDimZ = 1,
                                     .blockDimX = o->shape.block, .blockDimY = 1,
                                     .blockDimZ = 1, .kernelParams = params};
}

static CUDA_MEMCPY3D copy_params(const CUDA_MEMCPY2D *p)
{
    return (CUDA_MEMCPY3D){.srcMemoryType = p->srcMemoryType, .srcDevice = p->srcDevice,
                           .srcPitch = p->srcPitch, .srcHeight = p->Height,
                           .dstMemoryType = p->dstMemoryType, .dstDevice = p->dstDevice,
                           .dstPitch = p->dstPitch, .dstHeight = p->Height,
                           .WidthInBytes = p->WidthInBytes, .Height = p->Height, .Depth = 1};
}

/* Whether the recording is the built graph's sequence: the same kernels and copies. */
static int same_sequence(const mvm_gpu_graph *gr)
{
    if (!gr->exec || gr->n_ops != gr->n_built)
        return 0;
    for (uint32_t i = 0; i < gr->n_ops; i++) {
        const struct op *a = &gr->ops[i], *b = &gr->built[i];
        if (a->is_kernel != b->is_kernel || (a->is_kernel && a->f != b->f) ||
            (!a->is_kernel && memcmp(&a->copy, &b->copy, sizeof a->copy) != 0))
            return 0;
    }
    return 1;
}

static mvm_status update(mvm_gpu_graph *gr)
{
    for (uint32_t i = 0; i < gr->n_ops; i++) {
        struct op *o = &gr->ops[i], *b = &gr->built[i];
        const int same = o->bytes == b->bytes &&
                         memcmp(&o->shape, &b->shape, sizeof o->shape) == 0 &&
                         memcmp(o->args, b->args, o->bytes) == 0;
        if (!o->is_kernel || same)
            continue;
        void *params[1];
        CUDA_KERNEL_NODE_PARAMS p = kernel_params(o, params);
        CUresult r = gr->api.ExecKernelNodeSetParams(gr->exec, gr->nodes[i], &p);
        if (r != CUDA_SUCCESS)
            return mvm_cu_fail(gr->cu, r, "cuGraphExecKernelNodeSetParams");
        *b = *o;
        gr->updates++;
    }
    return MVM_OK;
}

/* The chain's edges, node i - 1 to node i, in one call: programmatic from a kernel to a
 * kernel (it may start once every block of the one before has begun, and waits for it to
 * finish at its start: ptx_pdl.c), full otherwise. */
static CUresult add_chain(mvm_gpu_graph *gr, uint64_t *programmatic)
{
    *programmatic = 0;
    if (gr->n_ops < 2)
        return CUDA_SUCCESS;
    const uint32_t n = gr->n_ops - 1;
    CUgraphEdgeData *edges = calloc(n, sizeof *edges);
    if (!edges)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (uint32_t i = 0; i < n; i++)
        if (gr->ops[i].is_kernel && gr->ops[i + 1].is_kernel) {
            edges[i].from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
            edges[i].type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
            (*programmatic)++;
        }
    const CUresult r = gr->add_edges(gr->graph, gr->nodes, gr->nodes + 1, edges, n);
    free(edges);
    return r;
}

static mvm_status build(mvm_gpu_graph *gr)
{
    drop_graph(gr);
    CUresult r = gr->api.Create(&gr->graph, 0);
    if (r != CUDA_SUCCESS)
        return mvm_cu_fail(gr->cu, r, "cuGraphCreate");
    for (uint32_t i = 0; i < gr->n_ops; i++) {
        struct op *o = &gr->ops[i];
        /* chained here, or all at once after (add_chain) */
        const size_t n_dep = i && !gr->add_edges ? 1 : 0;
        const CUgraphNode *dep = n_dep ? &gr->nodes[i - 1] : NULL;
        if (o->is_kernel) {
            void *params[1];
            CUDA_KERNEL_NODE_PARAMS p = kernel_params(o, params);
            r = gr->api.AddKernelNode(&gr->nodes[i], gr->graph, dep, n_dep, &p);
        } else {
            CUDA_MEMCPY3D p = copy_params(&o->copy);
            r = gr->api.AddMemcpyNode(&gr->nodes[i], gr->graph, dep, n_dep, &p, gr->ctx);
        }
        if (r != CUDA_SUCCESS)
            return mvm_cu_fail(gr->cu, r, o->is_kernel ? "cuGraphAddKernelNode" :
                                                         "cuGraphAddMemcpyNode");
    }
    uint64_t programmatic = 0;
    if (gr->add_edges && (r = add_chain(gr, &programmatic)) != CUDA_SUCCESS) {
        /* the kernels wait at their start either way: the graph without (once) */
        mvm_cu_fail(gr->cu, r, "cuGraphAddDependencies (programmatic edges)");
        mvm_log(MVM_LOG_WARN, "MOEVM_PDL: %s; a token's kernels wait for each other in full",
                mvm_last_error());
        gr->add_edges = NULL;
        return build(gr);
    }
    if ((r = gr->api.Instantiate(&gr->exec, gr->graph, 0)) != CUDA_SUCCESS) {
        gr->exec = NULL;
        return mvm_cu_fail(gr->cu, r, "cuGraphInstantiate");
    }
    memcpy(gr->built, gr->ops, gr->n_ops * sizeof *gr->ops);
    gr->n_built = gr->n_ops;
    gr->builds++;
    gr->pdl_edges += programmatic;
    return MVM_OK;
}

/* The recording queued op by op, as it would have been without a graph. */
static mvm_status launch_each(mvm_gpu_graph *gr)
{
    for (uint32_t i = 0; i < gr->n_ops; i++) {
        struct op *o = &gr->ops[i];
        void *params[] = {o->args};
        CUresult r = o->is_kernel ? gr->cu->LaunchKernel(o->f, o->shape.gx, o->shape.gy, 1,
                                                         o->shape.block, 1, 1, 0, gr->stream,
                                                         params, NULL)
                                  : gr->cu->Memcpy2DAsync(&o->copy, gr->stream);
        if (r != CUDA_SUCCESS)
            return mvm_cu_fail(gr->cu, r, o->is_kernel ? o->name : "cuMemcpy2DAsync");
    }
    return MVM_OK;
}

mvm_status mvm_gpu_graph_launch(mvm_gpu_graph *gr, int *broken)
{
    *broken = 0;
    if (!gr->n_ops)
        return MVM_OK;
    mvm_status st = same_sequence(gr) ? update(gr) : build(gr);
    if (st == MVM_OK) {
        CUresult r = gr->api.Launch(gr->exec, gr->stream);
        if (r == CUDA_SUCCESS)
            return MVM_OK;
        st = mvm_cu_fail(gr->cu, r, "cuGraphLaunch");
    }
    mvm_log(MVM_LOG_WARN, "%s: decode launches its kernels one by one", mvm_last_error());
    drop_graph(gr);
    *broken = 1;
    return launch_each(gr);
}

void mvm_gpu_graph_counts(const mvm_gpu_graph *gr, uint64_t *built, uint64_t *updated,
                          uint64_t *pdl_edges)
{
    *built = gr ? gr->builds : 0;
    *updated = gr ? gr->updates : 0;
    *pdl_edges = gr ? gr->pdl_edges : 0;
}
