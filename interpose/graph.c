/*
 * CUDA graphs: stream capture and graph launches (llama.cpp, vLLM and torch.cuda.graphs
 * replay their decoding steps as graphs).
 *
 * Capture. A kernel launched into a capturing stream does not run; it becomes a node. A
 * miss served then would drain the device, and a synchronisation during a capture
 * invalidates it (in the default, global capture mode, from any thread). So while any
 * stream is being captured, misses are not served (counted as deferred): the pages are
 * read wherever they are, which is correct, and the graph's launch makes them resident.
 *
 * Graph launches. When a graph is instantiated, its kernel nodes (child graphs included)
 * are read back from the driver and their parameters scanned like a launch's; the managed
 * pointers found are kept per executable graph and per node. Updates keep them current:
 * cuGraphExecUpdate rescans the new graph, cuGraphExecKernelNodeSetParams replaces its
 * node's pointers. cuGraphLaunch then makes the objects of all those pointers resident
 * before the graph is queued, as for one big kernel (the objects those pointers resolve to
 * are kept per graph until allocations or objects change). If they do not all fit in the
 * budget, what fits is loaded and the rest is read from its host home.
 *
 * Memcpy and memset nodes are scanned too (their device sides), and so are the changes made
 * by cuGraphExecMemcpyNodeSetParams, cuGraphExecMemsetNodeSetParams and the generic
 * cuGraphExecNodeSetParams. Not covered: device-side graph launches, nodes the driver adds
 * to a graph that is already instantiated (device-updatable nodes), and cuGraphExecUpdate
 * through its CUDA 11 ABI.
 */
#include <stdlib.h>
#include <string.h>

#include "interpose/preload.h"

#define MAX_DEPTH 8 /* child graphs nested deeper are not scanned */

typedef struct node_ptrs {
    CUgraphNode node;
    uint64_t *va;              /* managed pointers in its parameters */
    uint32_t n;
} node_ptrs;

typedef struct gexec {
    CUgraphExec exec;
    node_ptrs *nodes;
    uint32_t n, cap;
    /* The objects all the nodes' pointers resolve to, each once: resolved at the first
     * launch and again only when the heap's layout changed (0: not resolved). A graph is
     * replayed many times over the same tensors, so a launch copies this list instead of
     * resolving every pointer of every node. */
    mvm_obj **objs;
    uint32_t n_objs;
    uint64_t layout;
} gexec;

/* The executable graphs, sorted by handle, and the streams being captured. Lock order:
 * mvm_interposer.lock, then graph_mu. */
static pthread_mutex_t graph_mu = PTHREAD_MUTEX_INITIALIZER;
static gexec **execs;
static uint32_t n_execs, cap_execs;
static uintptr_t *capturing;
static uint32_t n_capturing, cap_capturing;

/* ---- stream capture ---------------------------------------------------------------------- */

/* A capture's key: the stream, or for the per-thread default stream, the thread too. */
static uintptr_t capture_key(CUstream s)
{
    uintptr_t k = (uintptr_t)s;
    if (s == NULL || s == CU_STREAM_PER_THREAD)
        k ^= (uintptr_t)pthread_self() << 2;
    return k;
}

/* A capture is counted before it starts, under the write lock: a miss being served (which
 * drains the device) finishes first, and none is served from then on; pages being
 * prefetched land first, and none is asked for while any capture lasts. */
static bool capture_announce(void)
{
    if (!mvm_interposer_on())
        return false;
    pthread_rwlock_wrlock(&mvm_interposer.lock);
    mvm_prefetch_settle_locked(); /* no drain may come once it has begun */
    atomic_fetch_add(&mvm_interposer.captures, 1);
    pthread_rwlock_unlock(&mvm_interposer.lock);
    return true;
}

static void capture_begun(bool announced, CUresult r, CUstream s)
{
    if (!announced)
        return;
    bool kept = false;
    pthread_mutex_lock(&graph_mu);
    uintptr_t *c = r == CUDA_SUCCESS
                       ? mvm_grow_array(capturing, &cap_capturing, n_capturing + 1, sizeof *c)
                       : NULL;
    if (c) {
        capturing = c;
        capturing[n_capturing++] = capture_key(s);
        kept = true;
    }
    pthread_mutex_unlock(&graph_mu);
    if (!kept) /* failed, or untracked: its end could not be matched */
        atomic_fetch_sub(&mvm_interposer.captures, 1);
}

/* Whatever the result, the capture is over (an invalidated one ends with an error). */
static void capture_ended(CUstream s)
{
    if (!mvm_interposer_on())
        return;
    uintptr_t k = capture_key(s);
    pthread_mutex_lock(&graph_mu);
    for (uint32_t i = 0; i < n_capturing; i++)
        if (capturing[i] == k) {
            capturing[i] = capturing[--n_capturing];
            atomic_fetch_sub(&mvm_interposer.captures, 1);
            break;
        }
    pthread_mutex_unlock(&graph_mu);
}

CUresult hk_cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode)
{
    if (!mvm_real_load() || !mvm_real_fn.cuStreamBeginCapture_v2)
        return CUDA_ERROR_NOT_SUPPORTED;
    bool announced = capture_announce();
    CUresult r = mvm_real_fn.cuStreamBeginCapture_v2(s, mode);
    capture_begun(announced, r, s);
    return r;
}

CUresult hk_cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode)
{
    if (!mvm_real_load() || !mvm_real_fn.cuStreamBeginCapture_v2_ptsz)
        return CUDA_ERROR_NOT_SUPPORTED;
    bool announced = capture_announce();
    CUresult r = mvm_real_fn.cuStreamBeginCapture_v2_ptsz(s, mode);
    capture_begun(announced, r, s);
    return r;
}

CUresult hk_cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode *deps,
                                        const CUgraphEdgeData *edges, size_t n_deps,
                                        CUstreamCaptureMode mode)
{
    if (!mvm_real_load() || !mvm_real_fn.cuStreamBeginCaptureToGraph)
        return CUDA_ERROR_NOT_SUPPORTED;
    bool announced = capture_announce();
    CUresult r = mvm_real_fn.cuStreamBeginCaptureToGraph(s, g, deps, edges, n_deps, mode);
    capture_begun(announced, r, s);
    return r;
}

CUresult hk_cuStreamEndCapture(CUstream s, CUgraph *g)
{
    if (!mvm_real_load() || !mvm_real_fn.cuStreamEndCapture)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = mvm_real_fn.cuStreamEndCapture(s, g);
    capture_ended(s);
    return r;
}

CUresult hk_cuStreamEndCapture_ptsz(CUstream s, CUgraph *g)
{
    if (!mvm_real_load() || !mvm_real_fn.cuStreamEndCapture_ptsz)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = mvm_real_fn.cuStreamEndCapture_ptsz(s, g);
    capture_ended(s);
    return r;
}

/* ---- the pointers of executable graphs ----------------------------------------------------- */

static int64_t exec_index(CUgraphExec e, bool *found)
{
    uint32_t lo = 0, hi = n_execs;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if ((uintptr_t)execs[mid]->exec < (uintptr_t)e)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = lo < n_execs && execs[lo]->exec == e;
    return lo;
}

static void exec_free(gexec *x)
{
    for (uint32_t i = 0; x && i < x->n; i++)
        free(x->nodes[i].va);
    if (x) {
        free(x->nodes);
        free(x->objs);
    }
    free(x);
}

typedef struct ptrs {
    uint64_t *va;
    uint32_t n, cap;
} ptrs;

static void emit_ptr(void *ctx, uint64_t va)
{
    ptrs *p = ctx;
    for (uint32_t i = 0; i < p->n; i++)
        if (p->va[i] == va)
            return;
    uint64_t *v = mvm_grow_array(p->va, &p->cap, p->n + 1, sizeof *v);
    if (v) {
        p->va = v;
        p->va[p->n++] = va;
    }
}

/* The node's managed pointers become `p` (taken over), replacing what it had. */
static void node_set(gexec *x, CUgraphNode node, ptrs *p, bool maybe_known)
{
    x->layout = 0;
    for (uint32_t i = 0; maybe_known && i < x->n; i++)
        if (x->nodes[i].node == node) {
            free(x->nodes[i].va);
            x->nodes[i].va = p->va;
            x->nodes[i].n = p->n;
            return;
        }
    node_ptrs *t = p->n ? mvm_grow_array(x->nodes, &x->cap, x->n + 1, sizeof *t) : NULL;
    if (!t) {
        free(p->va);
        return;
    }
    x->nodes = t;
    x->nodes[x->n++] = (node_ptrs){node, p->va, p->n};
}

static void scan_kernel(gexec *x, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *kp,
                        bool maybe_known)
{
    ptrs p = {0};
    /* A node made from a CUkernel (context-independent loading) names it in `kern`; the
     * driver accepts a CUkernel wherever a CUfunction is expected. */
    CUfunction f = kp->func ? kp->func : (CUfunction)kp->kern;
    if (f)
        mvm_scan_params(f, kp->kernelParams, kp->extra, emit_ptr, &p);
    node_set(x, node, &p, maybe_known);
    atomic_fetch_add_explicit(&mvm_interposer.graph_kernel_nodes, 1, memory_order_relaxed);
}

/* A copy's side that is device memory in the managed range, at the copy's first byte. */
static void emit_side(ptrs *p, CUmemorytype type, CUdeviceptr base, size_t x, size_t y,
                      size_t pitch)
{
    uint64_t va = base + y * pitch + x;
    if (mvm_copy_side_managed(type, va))
        emit_ptr(p, va);
}

/* A memcpy node's managed sides, or a memset node's managed destination. */
static void scan_copy(gexec *x, CUgraphNode node, const CUDA_MEMCPY3D *c,
                      const CUDA_MEMSET_NODE_PARAMS *m, bool maybe_known)
{
    ptrs p = {0};
    if (c) {
        emit_side(&p, c->srcMemoryType, c->srcDevice, c->srcXInBytes,
                  c->srcY + c->srcZ * c->srcHeight, c->srcPitch);
        emit_side(&p, c->dstMemoryType, c->dstDevice, c->dstXInBytes,
                  c->dstY + c->dstZ * c->dstHeight, c->dstPitch);
    }
    if (m && mvm_heap_contains(m->dst))
        emit_ptr(&p, m->dst);
    node_set(x, node, &p, maybe_known);
    atomic_fetch_add_explicit(&mvm_interposer.graph_copy_nodes, 1, memory_order_relaxed);
}

static void scan_node(gexec *x, CUgraphNode node, int depth);

static void scan_graph(gexec *x, CUgraph g, int depth)
{
    size_t n = 0;
    if (depth > MAX_DEPTH || mvm_real_fn.cuGraphGetNodes(g, NULL, &n) != CUDA_SUCCESS || !n)
        return;
    CUgraphNode *nodes = malloc(n * sizeof *nodes);
    if (!nodes || mvm_real_fn.cuGraphGetNodes(g, nodes, &n) != CUDA_SUCCESS) {
        free(nodes);
        return;
    }
    for (size_t i = 0; i < n; i++)
        scan_node(x, nodes[i], depth);
    free(nodes);
}

/* Kernel, memcpy and memset nodes name memory; child graphs are scanned in turn. */
static void scan_node(gexec *x, CUgraphNode node, int depth)
{
    CUgraphNodeType type;
    CUDA_KERNEL_NODE_PARAMS kp;
    CUDA_MEMCPY3D cp;
    CUDA_MEMSET_NODE_PARAMS mp;
    CUgraph child;
    if (mvm_real_fn.cuGraphNodeGetType(node, &type) != CUDA_SUCCESS)
        return;
    if (type == CU_GRAPH_NODE_TYPE_KERNEL &&
        mvm_real_fn.cuGraphKernelNodeGetParams_v2(node, &kp) == CUDA_SUCCESS)
        scan_kernel(x, node, &kp, false);
    else if (type == CU_GRAPH_NODE_TYPE_MEMCPY && mvm_real_fn.cuGraphMemcpyNodeGetParams &&
             mvm_real_fn.cuGraphMemcpyNodeGetParams(node, &cp) == CUDA_SUCCESS)
        scan_copy(x, node, &cp, NULL, false);
    else if (type == CU_GRAPH_NODE_TYPE_MEMSET && mvm_real_fn.cuGraphMemsetNodeGetParams &&
             mvm_real_fn.cuGraphMemsetNodeGetParams(node, &mp) == CUDA_SUCCESS)
        scan_copy(x, node, NULL, &mp, false);
    else if (type == CU_GRAPH_NODE_TYPE_GRAPH && mvm_real_fn.cuGraphChildGraphNodeGetGraph &&
             mvm_real_fn.cuGraphChildGraphNodeGetGraph(node, &child) == CUDA_SUCCESS)
        scan_graph(x, child, depth + 1);
}

static bool can_scan(void)
{
    return mvm_real_fn.cuGraphGetNodes && mvm_real_fn.cuGraphNodeGetType &&
           mvm_real_fn.cuGraphKernelNodeGetParams_v2;
}

/* Records (or, after an update, re-records) what graph g, instantiated as e, points to. */
static void remember(CUgraphExec e, CUgraph g)
{
    if (!mvm_interposer_on() || !can_scan())
        return;
    gexec *x = calloc(1, sizeof *x);
    if (!x)
        return;
    x->exec = e;
    pthread_rwlock_rdlock(&mvm_interposer.lock); /* the managed range, for the scan */
    scan_graph(x, g, 0);
    pthread_rwlock_unlock(&mvm_interposer.lock);
    atomic_fetch_add_explicit(&mvm_interposer.graphs_scanned, 1, memory_order_relaxed);
    pthread_mutex_lock(&graph_mu);
    bool found;
    int64_t at = exec_index(e, &found);
    gexec **t;
    if (found) {
        exec_free(execs[at]);
        execs[at] = x;
    } else if ((t = mvm_grow_array(execs, &cap_execs, n_execs + 1, sizeof *t))) {
        execs = t;
        memmove(execs + at + 1, execs + at, (n_execs - (size_t)at) * sizeof *execs);
        execs[at] = x;
        n_execs++;
    } else {
        exec_free(x);
    }
    pthread_mutex_unlock(&graph_mu);
}

static void forget(CUgraphExec e)
{
    pthread_mutex_lock(&graph_mu);
    bool found;
    int64_t at = exec_index(e, &found);
    if (found) {
        exec_free(execs[at]);
        memmove(execs + at, execs + at + 1, (n_execs - (size_t)at - 1) * sizeof *execs);
        n_execs--;
    }
    pthread_mutex_unlock(&graph_mu);
}

/* What an instantiation or update returned; exec *e remembered as g's when it succeeded. */
static CUresult remembered(CUresult r, const CUgraphExec *e, CUgraph g)
{
    if (r == CUDA_SUCCESS)
        remember(*e, g);
    return r;
}

CUresult hk_cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags)
{
    if (!mvm_real_load() || !mvm_real_fn.cuGraphInstantiateWithFlags)
        return CUDA_ERROR_NOT_SUPPORTED;
    return remembered(mvm_real_fn.cuGraphInstantiateWithFlags(e, g, flags), e, g);
}

CUresult hk_cuGraphInstantiateWithParams(CUgraphExec *e, CUgraph g,
                                         CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    if (!mvm_real_load() || !mvm_real_fn.cuGraphInstantiateWithParams)
        return CUDA_ERROR_NOT_SUPPORTED;
    return remembered(mvm_real_fn.cuGraphInstantiateWithParams(e, g, params), e, g);
}

CUresult hk_cuGraphInstantiateWithParams_ptsz(CUgraphExec *e, CUgraph g,
                                              CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    if (!mvm_real_load() || !mvm_real_fn.cuGraphInstantiateWithParams_ptsz)
        return CUDA_ERROR_NOT_SUPPORTED;
    return remembered(mvm_real_fn.cuGraphInstantiateWithParams_ptsz(e, g, params), e, g);
}

CUresult hk_cuGraphExecUpdate_v2(CUgraphExec e, CUgraph g, CUgraphExecUpdateResultInfo *info)
{
    if (!mvm_real_load() || !mvm_real_fn.cuGraphExecUpdate_v2)
        return CUDA_ERROR_NOT_SUPPORTED;
    return remembered(mvm_real_fn.cuGraphExecUpdate_v2(e, g, info), &e, g);
}

/* One node of e has new parameters: its pointers replace what it had (exactly one of kp,
 * c, m is given). */
static void rescan_node(CUgraphExec e, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *kp,
                        const CUDA_MEMCPY3D *c, const CUDA_MEMSET_NODE_PARAMS *m)
{
    if (!mvm_interposer_on() || (!kp && !c && !m))
        return;
    pthread_rwlock_rdlock(&mvm_interposer.lock);
    pthread_mutex_lock(&graph_mu);
    bool found;
    int64_t at = exec_index(e, &found);
    if (found && kp)
        scan_kernel(execs[at], node, kp, true);
    else if (found)
        scan_copy(execs[at], node, c, m, true);
    pthread_mutex_unlock(&graph_mu);
    pthread_rwlock_unlock(&mvm_interposer.lock);
}

/* What a node setter returned; the node rescanned when it succeeded. */
static CUresult rescanned(CUresult r, CUgraphExec e, CUgraphNode node,
                          const CUDA_KERNEL_NODE_PARAMS *kp, const CUDA_MEMCPY3D *c,
                          const CUDA_MEMSET_NODE_PARAMS *m)
{
    if (r == CUDA_SUCCESS)
        rescan_node(e, node, kp, c, m);
    return r;
}

CUresult hk_cuGraphExecKernelNodeSetParams_v2(CUgraphExec e, CUgraphNode node,
                                              const CUDA_KERNEL_NODE_PARAMS *kp)
{
    if (!mvm_real_load() || !mvm_real_fn.cuGraphExecKernelNodeSetParams_v2)
        return CUDA_ERROR_NOT_SUPPORTED;
    return rescanned(mvm_real_fn.cuGraphExecKernelNodeSetParams_v2(e, node, kp), e, node, kp, NULL, NULL);
}

CUresult hk_cuGraphExecMemcpyNodeSetParams(CUgraphExec e, CUgraphNode node,
                                           const CUDA_MEMCPY3D *c, CUcontext ctx)
{
    if (!mvm_real_load() || !mvm_real_fn.cuGraphExecMemcpyNodeSetParams)
        return CUDA_ERROR_NOT_SUPPORTED;
    return rescanned(mvm_real_fn.cuGraphExecMemcpyNodeSetParams(e, node, c, ctx), e, node, NULL, c, NULL);
}

CUresult hk_cuGraphExecMemsetNodeSetParams(CUgraphExec e, CUgraphNode node,
                                           const CUDA_MEMSET_NODE_PARAMS *m, CUcontext ctx)
{
    if (!mvm_real_load() || !mvm_real_fn.cuGraphExecMemsetNodeSetParams)
        return CUDA_ERROR_NOT_SUPPORTED;
    return rescanned(mvm_real_fn.cuGraphExecMemsetNodeSetParams(e, node, m, ctx), e, node, NULL, NULL, m);
}

/* The generic setter (CUDA 12.2): its kernel, memcpy and memset forms, in the older
 * setters' structures. Other node types name no memory. */
CUresult hk_cuGraphExecNodeSetParams(CUgraphExec e, CUgraphNode node, CUgraphNodeParams *p)
{
    if (!mvm_real_load() || !mvm_real_fn.cuGraphExecNodeSetParams)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = mvm_real_fn.cuGraphExecNodeSetParams(e, node, p);
    if (r != CUDA_SUCCESS || !p)
        return r;
    if (p->type == CU_GRAPH_NODE_TYPE_KERNEL) {
        const CUDA_KERNEL_NODE_PARAMS_v3 *k = &p->kernel;
        CUDA_KERNEL_NODE_PARAMS kp = {
            .func = k->func, .gridDimX = k->gridDimX, .gridDimY = k->gridDimY,
            .gridDimZ = k->gridDimZ, .blockDimX = k->blockDimX, .blockDimY = k->blockDimY,
            .blockDimZ = k->blockDimZ, .sharedMemBytes = k->sharedMemBytes,
            .kernelParams = k->kernelParams, .extra = k->extra, .kern = k->kern};
        rescan_node(e, node, &kp, NULL, NULL);
    } else if (p->type == CU_GRAPH_NODE_TYPE_MEMCPY) {
        rescan_node(e, node, NULL, &p->memcpy.copyParams, NULL);
    } else if (p->type == CU_GRAPH_NODE_TYPE_MEMSET) {
        const CUDA_MEMSET_NODE_PARAMS_v2 *m = &p->memset;
        CUDA_MEMSET_NODE_PARAMS m1 = {m->dst, m->pitch, m->value, m->elementSize, m->width,
                                      m->height};
        rescan_node(e, node, NULL, NULL, &m1);
    }
    return r;
}

CUresult hk_cuGraphExecDestroy(CUgraphExec e)
{
    if (!mvm_real_load() || !mvm_real_fn.cuGraphExecDestroy)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = mvm_real_fn.cuGraphExecDestroy(e);
    if (r == CUDA_SUCCESS && mvm_interposer_on())
        forget(e);
    return r;
}

/* ---- graph launches ------------------------------------------------------------------------ */

static int by_address(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)*(mvm_obj *const *)a, y = (uintptr_t)*(mvm_obj *const *)b;
    return (x > y) - (x < y);
}

static void add_pointers(const gexec *x, mvm_objset *set)
{
    for (uint32_t i = 0; i < x->n; i++)
        for (uint32_t k = 0; k < x->nodes[i].n; k++)
            mvm_objset_add(set, x->nodes[i].va[k]);
}

/* Resolves x's pointers into set, and keeps the objects, each once, in x (read lock). */
static void resolve(gexec *x, mvm_objset *set)
{
    uint32_t from = set->n;
    add_pointers(x, set);
    uint32_t n = set->n - from;
    mvm_obj **objs = malloc(((size_t)n + 1) * sizeof *objs);
    if (!objs)
        return; /* resolved again at the next launch */
    memcpy(objs, set->obj + from, (size_t)n * sizeof *objs);
    qsort(objs, n, sizeof *objs, by_address);
    uint32_t u = 0;
    for (uint32_t i = 0; i < n; i++)
        if (u == 0 || objs[i] != objs[u - 1])
            objs[u++] = objs[i];
    free(x->objs);
    x->objs = objs;
    x->n_objs = u;
    x->layout = mvm_interposer.layout;
}

static void collect_graph(const void *what, mvm_objset *set)
{
    CUgraphExec e = *(const CUgraphExec *)what;
    pthread_mutex_lock(&graph_mu);
    bool found;
    int64_t at = exec_index(e, &found);
    gexec *x = found ? execs[at] : NULL;
    if (x && set->learn) /* the pointers teach slices; the objects kept are left alone */
        add_pointers(x, set);
    else if (x &&
             (x->layout != mvm_interposer.layout || !mvm_objset_append(set, x->objs, x->n_objs)))
        resolve(x, set);
    pthread_mutex_unlock(&graph_mu);
}

CUresult hk_cuGraphLaunch(CUgraphExec e, CUstream s)
{
    if (!mvm_real_load() || !mvm_real_fn.cuGraphLaunch)
        return CUDA_ERROR_NOT_SUPPORTED;
    bool locked = false;
    if (mvm_interposer_on()) {
        mvm_count(&mvm_counts_mine()->graph_launches);
        locked = mvm_launch_prepare(collect_graph, &e);
    }
    return mvm_launch_finish(locked, mvm_real_fn.cuGraphLaunch(e, s));
}

CUresult hk_cuGraphLaunch_ptsz(CUgraphExec e, CUstream s)
{
    if (!mvm_real_load() || !mvm_real_fn.cuGraphLaunch_ptsz)
        return CUDA_ERROR_NOT_SUPPORTED;
    bool locked = false;
    if (mvm_interposer_on()) {
        mvm_count(&mvm_counts_mine()->graph_launches);
        locked = mvm_launch_prepare(collect_graph, &e);
    }
    return mvm_launch_finish(locked, mvm_real_fn.cuGraphLaunch_ptsz(e, s));
}
